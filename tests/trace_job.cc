// trace_job: the job the shim's end-to-end tests trace. Under hostnccl-run, every rank makes the calls of
// trace_job_script.h for each step (every collective, a group with an in-place AllReduce and a Send/Recv ring,
// in-place calls) and checks each output against the script. It marks steps through detnccl_set_step when the shim
// is loaded (looked up with dlsym, so the job runs without the shim too).
//   trace_job [--steps N] [--first-step K] [--die-at-step K] [--perturb-rank R --perturb-step K [--perturb-element E]]
//             [--wide-allreduce [--allreduce-dtype fp32|bf16]]
//   --first-step K    start at step K, like a job resumed from a checkpoint taken before step K
//   --die-at-step K   rank 1 kills itself with SIGKILL at that step, once every other rank has finished step K-1
//                     (they say so with a file in DETNCCL_DIR; without DETNCCL_DIR it waits 300 ms instead)
//   --perturb-rank R --perturb-step K
//                     rank R changes element 0 of every input of step K by one ulp (float; +1 for int32), as a compute
//                     bug before the step's first AllReduce would; outputs of step K are then not checked
//   --perturb-element E  the element changed (default 0; an input shorter than E+1 elements is left alone)
//   --wide-allreduce  instead of the script, one fp32 AllReduce per step of values spanning 40 orders of magnitude
//                     (their sum depends on the order of addition); outputs are not checked
//                     (fp32, with --perturb-rank/--perturb-step: that rank's element E one ulp up at that step)
//   --allreduce-dtype bf16  with --wide-allreduce: the same values rounded to bfloat16, reduced as ncclBfloat16
//                     (neither --wide-grouped nor the perturbation apply to it)
//   --nonblocking     create the communicator with ncclConfig_t.blocking = 0 (its init may return ncclInProgress)
//   --keep-going      a wrong output is printed and the job goes on to its end (exit 0): RATIONALE: a rank that
//                     exits at a HOSTNCCL_CORRUPT fault makes hostnccl-run stop the others, whose logs then lack
//                     the records their shim had not written yet (under load, whole steps); a test that diffs the
//                     faulty run's logs needs them all
//   --group-init      create the communicator inside ncclGroupStart/ncclGroupEnd (NCCL creates it at the end)
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/job_support.h"
#include "tests/trace_job_calls.h"
#include "tests/trace_job_script.h"

namespace {

using detnccl::records::OpId;
using detnccl::test::ScriptCall;

// With --nonblocking, the communicator whose calls may return ncclInProgress: the job then polls
// ncclCommGetAsyncError until the call is enqueued, as NCCL requires before the next call.
ncclComm_t g_non_blocking_comm = nullptr;

bool ok(ncclResult_t result, const char* what) {
  while (result == ncclInProgress && g_non_blocking_comm != nullptr) {
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(g_non_blocking_comm, &state) != ncclSuccess) break;
    result = state;
    if (state == ncclInProgress) sched_yield();
  }
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "%s failed: %s (%s)\n", what, ncclGetErrorString(result), ncclGetLastError(nullptr));
  return false;
}

using detnccl::test::Buffers;

// One ulp more at element `element` of the call's input (float32) or one more (int32).
void perturb_input(ScriptCall& call, std::size_t element) {
  // Both types are 4 bytes wide.
  if (call.input.size() < (element + 1) * 4) return;
  std::byte* at = call.input.data() + element * 4;
  if (call.datatype == ncclFloat32) {
    float value;
    std::memcpy(&value, at, sizeof value);
    value = std::nextafter(value, INFINITY);
    std::memcpy(at, &value, sizeof value);
  } else {
    std::int32_t value;
    std::memcpy(&value, at, sizeof value);
    ++value;
    std::memcpy(at, &value, sizeof value);
  }
}

}  // namespace

namespace {

// --die-at-step K: rank 1 kills itself at step K once every other rank has finished (and recorded) step K-1; the
// others say so with an empty file DETNCCL_DIR/.trace_job-RUN-step-K-rank-R and go on into step K, whose first
// collective then blocks until the launcher stops them.
// RATIONALE: the tests expect exactly steps 0..K-1 recorded on every rank, and the launcher stops the others when a
// rank dies, so dying before a slow peer (a loaded machine, a sanitizer build) recorded its last call of step K-1
// would cut it; a fixed wait was not always enough under ASan. The files are not collectives: no record is added.
void die_after_the_others_finished_the_step_before(int step, int rank, int nranks) {
  const char* dir = std::getenv("DETNCCL_DIR");
  const auto marker = [&](int of_rank) {
    const char* run = std::getenv("DETNCCL_RUN");  // two runs in one directory never share a marker
    return std::string(dir) + "/.trace_job-" + (run != nullptr ? run : "") + "-step-" + std::to_string(step) +
           "-rank-" + std::to_string(of_rank);
  };
  const int dying = 1 % nranks;
  if (rank != dying) {
    if (dir != nullptr) {
      const int fd = open(marker(rank).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      if (fd >= 0) close(fd);
    }
    return;
  }
  if (dir == nullptr) {
    usleep(300000);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int other = 0; other < nranks; ++other) {
      while (other != dying && access(marker(other).c_str(), F_OK) != 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
  std::fflush(nullptr);
  kill(getpid(), SIGKILL);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 2;
  int first_step = 0;
  int die_at_step = -1;
  int perturb_rank = -1;
  int perturb_step = -1;
  std::size_t perturb_element = 0;
  bool wide_allreduce = false;
  bool wide_bf16 = false;
  bool wide_grouped = false;
  bool nonblocking = false;
  bool unknown_op = false;
  bool group_init = false;
  bool reduce_in_init_group = false;
  bool simulated_group = false;
  bool keep_going = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--first-step" && i + 1 < argc) {
      first_step = std::atoi(argv[++i]);
    } else if (arg == "--die-at-step" && i + 1 < argc) {
      die_at_step = std::atoi(argv[++i]);
    } else if (arg == "--perturb-rank" && i + 1 < argc) {
      perturb_rank = std::atoi(argv[++i]);
    } else if (arg == "--perturb-step" && i + 1 < argc) {
      perturb_step = std::atoi(argv[++i]);
    } else if (arg == "--perturb-element" && i + 1 < argc) {
      perturb_element = static_cast<std::size_t>(std::strtoull(argv[++i], nullptr, 10));
    } else if (arg == "--wide-allreduce") {
      wide_allreduce = true;
    } else if (arg == "--allreduce-dtype" && i + 1 < argc &&
               (argv[i + 1] == std::string("fp32") || argv[i + 1] == std::string("bf16"))) {
      wide_bf16 = argv[++i] == std::string("bf16");
    } else if (arg == "--wide-grouped") {  // with --wide-allreduce: a second one per step, inside a group
      wide_grouped = true;
    } else if (arg == "--nonblocking") {  // create the communicator with ncclConfig_t.blocking = 0
      nonblocking = true;
    } else if (arg == "--group-init") {
      group_init = true;
    } else if (arg == "--reduce-in-init-group") {  // with --group-init: an AllReduce inside that group (printed)
      reduce_in_init_group = true;
    } else if (arg == "--simulated-group") {  // an empty group ended by ncclGroupSimulateEnd, before the steps
      simulated_group = true;
    } else if (arg == "--keep-going") {
      keep_going = true;
    } else if (arg == "--unknown-op") {  // reductions NCCL must refuse (unknown operator, datatype, root)
      unknown_op = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps N] [--first-step K] [--die-at-step K] [--perturb-rank R --perturb-step K] "
                   "[--perturb-element E] [--allreduce-dtype fp32|bf16] "
                   "[--wide-allreduce [--wide-grouped]] [--nonblocking] [--group-init [--reduce-in-init-group]] "
                   "[--simulated-group] [--unknown-op] [--keep-going]\n",
                   argv[0]);
      return 2;
    }
  }
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  const int rank = job.rank;
  const int nranks = job.nranks;
  const auto set_step = detnccl::test::find_set_step();

  ncclComm_t comm = nullptr;
  if (nonblocking || group_init) {
    ncclUniqueId id;
    if (!detnccl::test::share_job_unique_id(rank, &id)) return 1;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = nonblocking ? 0 : 1;
    if (group_init && !ok(ncclGroupStart(), "ncclGroupStart")) return 1;
    ncclResult_t result = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (group_init && reduce_in_init_group && result == ncclSuccess) {
      // A reduction on the communicator inside the group that creates it: NCCL refuses it (not created yet).
      float value = 1, output = -7;
      const ncclResult_t early = ncclAllReduce(&value, &output, 1, ncclFloat32, ncclSum, comm, nullptr);
      std::printf("[rank %d] AllReduce inside the creating group returned %d\n", rank, static_cast<int>(early));
    }
    if (group_init && result == ncclSuccess) result = ncclGroupEnd();
    if (result != ncclSuccess && result != ncclInProgress) return ok(result, "ncclCommInitRankConfig") ? 0 : 1;
    if (nonblocking) g_non_blocking_comm = comm;
    if (!ok(result, "ncclCommInitRankConfig")) return 1;
  } else if ((comm = detnccl::test::init_job_communicator(job)) == nullptr) {
    return 1;
  }

  if (simulated_group) {
    ncclSimInfo_t estimate = NCCL_SIM_INFO_INITIALIZER;
    if (!ok(ncclGroupStart(), "ncclGroupStart") || !ok(ncclGroupSimulateEnd(&estimate), "ncclGroupSimulateEnd")) {
      return 1;
    }
  }

  if (unknown_op) {
    // Each must come back as NCCL's own ncclInvalidArgument with NCCL's own ncclGetLastError text, and leave the
    // output alone. The PreMulSum case uses an operator destroyed just before.
    float value = 1, output = -7;
    std::int32_t integer = 1, integer_output = -7;
    ncclRedOp_t destroyed = ncclSum;
    float scalar = 2;
    if (!ok(ncclRedOpCreatePreMulSum(&destroyed, &scalar, ncclFloat32, ncclScalarHostImmediate, comm),
            "ncclRedOpCreatePreMulSum") ||
        !ok(ncclRedOpDestroy(destroyed, comm), "ncclRedOpDestroy")) {
      return 1;
    }
    const auto unknown = static_cast<ncclRedOp_t>(ncclNumOps + 7);
    // The call runs first; then its result, NCCL's last error and the output are checked.
    const auto refused = [&](const char* what, auto&& call) {
      const ncclResult_t result = call();
      const char* text = ncclGetLastError(comm);
      const bool untouched = output == -7 && integer_output == -7;
      if (result == ncclInvalidArgument && text != nullptr && text[0] != '\0' && untouched) return true;
      std::fprintf(stderr, "%s returned %d (expected ncclInvalidArgument), last error '%s', output %s\n", what,
                   static_cast<int>(result), text == nullptr ? "(null)" : text, untouched ? "untouched" : "written");
      return false;
    };
    const auto bad_type = static_cast<ncclDataType_t>(ncclNumTypes);
    if (!refused("fp32 AllReduce, unknown operator",
                 [&] { return ncclAllReduce(&value, &output, 1, ncclFloat32, unknown, comm, nullptr); }) ||
        !refused("int32 AllReduce, unknown operator",
                 [&] { return ncclAllReduce(&integer, &integer_output, 1, ncclInt32, unknown, comm, nullptr); }) ||
        !refused("AllReduce, datatype ncclNumTypes",
                 [&] { return ncclAllReduce(&value, &output, 1, bad_type, ncclSum, comm, nullptr); }) ||
        !refused("fp32 Reduce, root nranks",
                 [&] { return ncclReduce(&value, &output, 1, ncclFloat32, ncclSum, nranks, comm, nullptr); }) ||
        !refused("fp32 AllReduce, destroyed PreMulSum",
                 [&] { return ncclAllReduce(&value, &output, 1, ncclFloat32, destroyed, comm, nullptr); })) {
      return 1;
    }
  }

  for (int step = first_step; step < steps; ++step) {
    if (set_step != nullptr) set_step(static_cast<std::uint64_t>(step));
    if (step == die_at_step) die_after_the_others_finished_the_step_before(step, rank, nranks);
    if (wide_allreduce && wide_bf16) {
      const std::vector<std::uint16_t> input = detnccl::test::wide_magnitude_bf16(rank, step, 4096);
      std::vector<std::uint16_t> output(input.size());
      if (!ok(ncclAllReduce(input.data(), output.data(), input.size(), ncclBfloat16, ncclSum, comm, nullptr),
              "ncclAllReduce (bf16)")) {
        return 1;
      }
      continue;
    }
    if (wide_allreduce) {
      std::vector<float> input = detnccl::test::wide_magnitude_values(rank, step, 4096);
      if (step == perturb_step && rank == perturb_rank && perturb_element < input.size()) {
        input[perturb_element] = std::nextafter(input[perturb_element], INFINITY);
      }
      std::vector<float> output(input.size());
      if (!ok(ncclAllReduce(input.data(), output.data(), input.size(), ncclFloat32, ncclSum, comm, nullptr),
              "ncclAllReduce")) {
        return 1;
      }
      if (wide_grouped) {
        // With a Broadcast that NCCL runs itself: in deterministic mode the AllReduce then runs after the group, and
        // on a non-blocking communicator only once NCCL has enqueued the Broadcast.
        std::vector<float> grouped(input.size());
        std::int32_t token = rank == 0 ? step + 1 : -1;
        ncclGroupStart();
        const ncclResult_t issued =
            ncclAllReduce(input.data(), grouped.data(), input.size(), ncclFloat32, ncclSum, comm, nullptr);
        const ncclResult_t broadcast = ncclBroadcast(&token, &token, 1, ncclInt32, 0, comm, nullptr);
        if (!ok(issued, "grouped ncclAllReduce") || !ok(broadcast, "grouped ncclBroadcast") ||
            !ok(ncclGroupEnd(), "ncclGroupEnd")) {
          return 1;
        }
        if (token != step + 1) {
          std::fprintf(stderr, "rank %d step %d: grouped Broadcast gave %d\n", rank, step, static_cast<int>(token));
          return 1;
        }
      }
      continue;
    }
    std::vector<ScriptCall> calls = detnccl::test::script_step(rank, nranks, static_cast<std::uint64_t>(step));
    const bool perturbed_step = step == perturb_step;
    if (perturbed_step && rank == perturb_rank) {
      for (ScriptCall& call : calls) perturb_input(call, perturb_element);
    }
    std::vector<Buffers> buffers(calls.size());
    bool in_group = false;
    for (std::size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].grouped && !in_group) {
        if (!ok(ncclGroupStart(), "ncclGroupStart")) return 1;
        in_group = true;
      }
      if (!ok(detnccl::test::issue_script_call(calls[c], buffers[c], rank, nranks, comm), "a traced call")) return 1;
      const bool group_ends = in_group && (c + 1 == calls.size() || !calls[c + 1].grouped);
      if (group_ends) {
        if (!ok(ncclGroupEnd(), "ncclGroupEnd")) return 1;
        in_group = false;
      }
    }
    for (std::size_t c = 0; c < calls.size() && !perturbed_step; ++c) {
      if (calls[c].has_output && buffers[c].output != calls[c].output) {
        std::fprintf(stderr, "rank %d step %d call %zu (%s): wrong output\n", rank, step, c,
                     std::string(detnccl::records::op_name(calls[c].op)).c_str());
        if (!keep_going) return 1;
      }
    }
  }
  if (!ok(ncclCommDestroy(comm), "ncclCommDestroy")) return 1;
  if (rank == 0) {
    // The perturbed step's outputs are not checked (the script's expectations hold for unperturbed inputs only).
    std::printf("trace_job: %d steps on %d ranks, %s\n", steps - first_step, nranks,
                wide_allreduce      ? "one unchecked wide-magnitude AllReduce per step"
                : perturb_step >= 0 ? "outputs checked except at the perturbed step"
                                    : "every output as expected");
  }
  return 0;
}
