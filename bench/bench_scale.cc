// bench_scale: the method at its headline size. Writes two synthetic runs of --ranks ranks x --steps steps with a
// Megatron-like call mix per rank and step over four communicators (tensor-parallel AllReduces per layer, pipeline
// Send/Recv, data-parallel ReduceScatter/AllGather buckets, expert AlltoAlls), every call written by the real
// records::RecordWriter; plants one divergence at a random (rank, step) of run B — that rank's input to its calls of
// that step, from there on the outputs of its tensor-parallel group, then every rank's inputs from the next step — and
// times `detnccl diff`'s analysis on the two runs (in a forked child: its own peak RSS). At each --level: `steps`
// (DETNCCL_TRACE=steps: step digests only, no call record) and `hash` (full call records with their step index: diff
// compares the digests first and reads records only from each rank's first differing step). Prints bytes per rank and
// per communicator and step, the time and memory, and per level one line:
// "first divergence: rank R step S (planted R' S') found in T s, read P% of records".
//   bench_scale [--ranks N] [--steps N] [--level steps|hash|both] [--threads N] [--dir PATH] [--seed N] [--keep]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "cli/analysis/parallel.h"
#include "cli/analysis/run_diff.h"
#include "records/record_writer.h"

namespace {

namespace fs = std::filesystem;
using detnccl::records::OpId;

constexpr std::uint32_t kTensorParallel = 8;  // ranks per tensor-parallel group
constexpr std::uint32_t kLayers = 12;         // tensor-parallel AllReduce pairs per step

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Plan {
  std::uint32_t ranks = 2432;
  std::uint64_t steps = 800;
  std::uint32_t planted_rank = 0;
  std::uint64_t planted_step = 0;
};

// Whether rank's call data differ from run A's at this step: its own input at the planted step, its tensor-parallel
// group's outputs there, everything after.
struct Difference {
  bool input = false;
  bool output = false;
};
Difference difference(const Plan& plan, bool run_b, std::uint32_t rank, std::uint64_t step, bool tensor_parallel) {
  if (!run_b || step < plan.planted_step) return {};
  if (step > plan.planted_step) return {true, true};
  const bool same_group = rank / kTensorParallel == plan.planted_rank / kTensorParallel;
  return {rank == plan.planted_rank, same_group && tensor_parallel};
}

// Writes one rank's log; returns the calls folded.
std::uint64_t write_rank(const std::string& dir, const std::string& run, const Plan& plan, std::uint32_t rank,
                         bool run_b, bool calls_written) {
  detnccl::records::LogHeader header;
  header.rank = rank;
  header.world_size = plan.ranks;
  header.pid = 1000 + rank;
  header.nccl_version = 22809;
  header.fingerprint_version = 1;
  header.detnccl_version = 100;
  header.host = "synthetic";
  header.detnccl_version_text = "bench";
  header.run = run;
  header.config_text = "DETNCCL_DIR=" + dir + "\nDETNCCL_RUN=" + run + "\nDETNCCL_TRACE=" +
                       (calls_written ? "hash" : "steps") + "\n";
  detnccl::records::WriterOptions options;
  options.initial_bytes = calls_written ? 8u << 20 : 64u << 10;
  options.write_calls = calls_written;
  auto created =
      detnccl::records::RecordWriter::create({dir, run, detnccl::records::rank_log_file_name(rank)}, header, options);
  if (!created.writer) {
    std::fprintf(stderr, "bench_scale: %s\n", created.error.c_str());
    std::exit(1);
  }
  auto& writer = *created.writer;
  // Communicators: 0 world, 1 tensor-parallel group, 2 pipeline neighbours, 3 data-parallel group.
  const std::uint32_t sizes[] = {plan.ranks, kTensorParallel, 2, plan.ranks / kTensorParallel};
  for (std::uint64_t ordinal = 0; ordinal < 4; ++ordinal) {
    detnccl::records::CommunicatorRecord communicator;
    communicator.ordinal = ordinal;
    communicator.id = mix(ordinal, ordinal == 1 ? rank / kTensorParallel : ordinal == 3 ? rank % kTensorParallel : 0);
    communicator.nranks = sizes[ordinal];
    communicator.rank = ordinal == 1 ? rank % kTensorParallel : ordinal == 3 ? rank / kTensorParallel : rank % 2;
    writer.append(communicator);
  }
  std::uint64_t seq = 0;
  std::uint64_t calls = 0;
  detnccl::records::CallRecord call;
  for (std::uint64_t step = 0; step < plan.steps; ++step) {
    const auto emit = [&](std::uint64_t comm, OpId op, std::uint64_t count, std::int32_t peer, bool tensor_parallel) {
      const Difference d = difference(plan, run_b, rank, step, tensor_parallel);
      call.seq = seq++;
      call.comm_ordinal = comm;
      call.step = step;
      call.op = op;
      call.count = count;
      call.datatype = 9;  // bfloat16
      call.redop = op == OpId::kAllReduce || op == OpId::kReduceScatter ? 0 : -1;
      call.peer = peer;
      call.flags = detnccl::records::kCallInputFingerprint | detnccl::records::kCallOutputFingerprint;
      call.input_fingerprint = mix(rank * 1000003ull + call.seq, d.input ? 1 : 0);
      call.output_fingerprint = mix(call.seq, d.output ? 1 : 0);
      writer.append(call);
      ++calls;
    };
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      emit(1, OpId::kAllReduce, 4u << 20, -1, true);  // attention
      emit(1, OpId::kAllReduce, 4u << 20, -1, true);  // MLP
    }
    emit(2, OpId::kSend, 1u << 20, static_cast<std::int32_t>((rank + 1) % 2), false);
    emit(2, OpId::kRecv, 1u << 20, static_cast<std::int32_t>((rank + 1) % 2), false);
    for (int bucket = 0; bucket < 4; ++bucket) emit(3, OpId::kReduceScatter, 16u << 20, -1, false);
    for (int bucket = 0; bucket < 4; ++bucket) emit(3, OpId::kAllGather, 16u << 20, -1, false);
    emit(0, OpId::kAlltoAll, 1u << 16, -1, false);
    emit(0, OpId::kAllReduce, 1, -1, false);  // the loss
  }
  writer.close();
  return calls;
}

double peak_rss_mib(const struct rusage& usage) { return static_cast<double>(usage.ru_maxrss) / 1024.0; }

// What the analysis child reports.
struct Found {
  long long rank = -1;
  long long step = -1;
  unsigned long long calls_read = 0;
  unsigned long long calls = 0;  // in both runs
};

// Writes both runs at one level and times diff on them; returns whether it found the planted divergence.
bool run_level(const fs::path& dir, const Plan& plan, unsigned threads, bool calls_written) {
  const char* level = calls_written ? "hash" : "steps";
  std::atomic<std::uint64_t> calls{0};
  const auto write_start = std::chrono::steady_clock::now();
  for (const bool run_b : {false, true}) {
    detnccl::analysis::parallel_for(plan.ranks, threads, [&](std::size_t rank) {
      calls += write_rank(dir.string(), run_b ? "b" : "a", plan, static_cast<std::uint32_t>(rank), run_b,
                          calls_written);
    });
  }
  const double write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();
  std::uint64_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  const double per_rank_step = static_cast<double>(bytes) / 2 / plan.ranks / plan.steps;
  std::printf("[%s] two runs of %u ranks x %llu steps, %llu calls (%.0f per rank and step) written in %.1f s\n", level,
              plan.ranks, static_cast<unsigned long long>(plan.steps), static_cast<unsigned long long>(calls.load()),
              static_cast<double>(calls.load()) / 2 / plan.ranks / plan.steps, write_seconds);
  std::printf("[%s] logs: %.1f MiB per run, %.1f bytes per rank and step, %.1f per communicator and step (4 each)\n",
              level, static_cast<double>(bytes) / 2 / (1 << 20), per_rank_step, per_rank_step / 4);
  std::fflush(stdout);

  // The analysis in a child: its time and its own peak RSS.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return false;
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    detnccl::analysis::DiffOptions options;
    options.threads = threads;
    const auto diff = detnccl::analysis::diff_runs(detnccl::analysis::list_run((dir / "a").string()),
                                                   detnccl::analysis::list_run((dir / "b").string()), options);
    Found found;
    if (!diff.error.empty()) {
      std::fprintf(stderr, "bench_scale: diff: %s\n", diff.error.c_str());
    } else if (diff.first) {
      found.rank = diff.first->rank;
      found.step = static_cast<long long>(diff.first->step());
    } else if (diff.first_step) {
      found.rank = diff.first_step->rank;
      found.step = static_cast<long long>(diff.first_step->step);
    }
    for (const auto& rank : diff.ranks) {
      found.calls_read += rank.calls_read;
      found.calls += rank.calls_a + rank.calls_b;
    }
    if (write(pipe_fds[1], &found, sizeof found) != sizeof found) _exit(1);
    _exit(0);
  }
  close(pipe_fds[1]);
  Found found;
  const bool got = read(pipe_fds[0], &found, sizeof found) == sizeof found;
  close(pipe_fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(child, &status, 0, &usage);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[%s] diff: %.2f s, peak RSS %.0f MiB\n", level, seconds, peak_rss_mib(usage));
  const bool correct = got && found.rank == plan.planted_rank && found.step == static_cast<long long>(plan.planted_step);
  // At the steps level there are no call records: the digests are all diff reads.
  const double percent = calls_written && found.calls > 0
                             ? 100.0 * static_cast<double>(found.calls_read) / static_cast<double>(found.calls)
                             : 0.0;
  std::printf("[%s] first divergence: rank %lld step %lld (planted %u %llu) found in %.2f s, read %.2f%% of records%s (%s)\n",
              level, found.rank, found.step, plan.planted_rank, static_cast<unsigned long long>(plan.planted_step),
              seconds, percent, calls_written ? "" : " (no call records at this level: step digests only)",
              correct ? "correct" : "WRONG");
  std::fflush(stdout);
  return correct;
}

}  // namespace

int main(int argc, char** argv) {
  Plan plan;
  unsigned threads = 0;
  std::string base = fs::temp_directory_path().string();
  std::uint64_t seed = 2432;
  std::string level = "both";
  bool keep = false;
  CLI::App app{"The first divergence of a run of thousands of ranks and hundreds of steps"};
  app.add_option("--ranks", plan.ranks, "Ranks per run (a multiple of 8)")->capture_default_str();
  app.add_option("--steps", plan.steps, "Steps")->capture_default_str();
  app.add_option("--level", level, "steps (step digests only), hash (full call records) or both")
      ->check(CLI::IsMember({"steps", "hash", "both"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "Threads (0: the cores available)")->capture_default_str();
  app.add_option("--dir", base, "Where the runs go")->capture_default_str();
  app.add_option("--seed", seed, "Chooses the planted (rank, step)")->capture_default_str();
  app.add_flag("--keep", keep, "Keep the runs");
  CLI11_PARSE(app, argc, argv);
  if (plan.ranks < 16 || plan.ranks % kTensorParallel != 0 || plan.steps < 2) {
    std::fprintf(stderr, "bench_scale: --ranks must be a multiple of 8 from 16, --steps at least 2\n");
    return 2;
  }
  std::mt19937_64 random(seed);
  plan.planted_rank = static_cast<std::uint32_t>(random() % plan.ranks);
  plan.planted_step = random() % plan.steps;

  bool correct = true;
  for (const bool calls_written : {false, true}) {
    if (level != "both" && (level == "hash") != calls_written) continue;
    const fs::path dir = fs::path(base) / ("detnccl-bench-scale-" + std::to_string(getpid()) + "-" +
                                           (calls_written ? "hash" : "steps"));
    fs::create_directories(dir);
    correct = run_level(dir, plan, threads, calls_written) && correct;
    if (!keep) fs::remove_all(dir);
  }
  return correct ? 0 : 1;
}
