// Tests of the training example (examples/train): its pieces against independently computed values, then the
// program under hostnccl-run on 4 ranks — learning, bitwise reproducibility in rank order, variation in arrival
// order, resume from a checkpoint, the one-ulp perturbation, bad checkpoints, and its calls as the shim traces them.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "cli/analysis/divergence_magnitude.h"
#include "cli/analysis/run_diff.h"
#include "examples/train/checkpoint.h"
#include "examples/train/gradient_buckets.h"
#include "examples/train/mlp.h"
#include "examples/train/perturbation.h"
#include "examples/train/synthetic_task.h"
#include "records/log_reader.h"

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// Helpers

class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/test_train.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string diagnostics(const RunResult& result) {
  return "exit code " + std::to_string(result.exit_code) + "\n--- stdout:\n" + result.out + "--- stderr:\n" +
         result.err;
}

// Runs `train ARGS` on `ranks` ranks under hostnccl-run, with `environment` (VAR=value ...) set for the job.
// Rank-order reductions unless the environment says otherwise.
RunResult run_train(const std::string& arguments, const std::string& environment = "HOSTNCCL_REDUCE_ORDER=rank",
                    int ranks = 4, const std::string& wrapper = "") {
  const TemporaryDirectory output;
  const std::string out = output / "out";
  const std::string err = output / "err";
  const std::string command = "env HOSTNCCL_TIMEOUT_S=30 " + environment + " " HOSTNCCL_RUN_PATH " -n " +
                              std::to_string(ranks) + " --timeout 60 -- " + wrapper + " " TRAIN_PATH " " + arguments +
                              " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(out);
  result.err = read_file(err);
  return result;
}

// The final summary line of rank 0, parsed.
struct Summary {
  bool found = false;
  bool went_down = false;
  double first_loss = 0;
  double last_loss = 0;
  std::string weights;
  std::string trajectory;
};

// The lines of `text` that start with `prefix`, without it.
std::vector<std::string> lines_after(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line.substr(prefix.size()));
  }
  return found;
}

// The 16 hex digits after `label` in `line`, or "" (std::regex is avoided: GCC 12 warns inside it under ASan).
std::string digest_after(const std::string& line, const std::string& label) {
  const std::size_t at = line.find(label);
  if (at == std::string::npos) return {};
  const std::string digits = line.substr(at + label.size(), 16);
  return digits.size() == 16 && digits.find_first_not_of("0123456789abcdef") == std::string::npos ? digits : "";
}

Summary summary_of(const RunResult& result) {
  Summary summary;
  for (const std::string& line : lines_after(result.out, "[rank 0] loss ")) {
    const bool went_down = line.rfind("went down from ", 0) == 0;
    const bool did_not = line.rfind("did NOT go down from ", 0) == 0;
    if (!went_down && !did_not) continue;
    const std::size_t from = line.find("from ") + 5;
    const std::size_t to = line.find(" to ", from);
    const std::size_t over = line.find(" over ", to);
    if (to == std::string::npos || over == std::string::npos) continue;
    summary.found = true;
    summary.went_down = went_down;
    summary.first_loss = std::stod(line.substr(from, to - from));
    summary.last_loss = std::stod(line.substr(to + 4, over - to - 4));
    summary.weights = digest_after(line, "(final weights fingerprint ");
    summary.trajectory = digest_after(line, ", trajectory ");
    summary.found = !summary.weights.empty() && !summary.trajectory.empty();
  }
  return summary;
}

// Rank 0's "step N  loss X" lines.
std::map<int, double> logged_losses(const RunResult& result) {
  std::map<int, double> losses;
  for (const std::string& line : lines_after(result.out, "[rank 0] step ")) {
    int step = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "%d loss %lf", &step, &loss) == 2) losses[step] = loss;
  }
  return losses;
}

// ---------------------------------------------------------------------------------------------------------------
// The pieces

TEST(GradientBuckets, CoverTheGradientOnceFromItsEnd) {
  const std::vector<train::Bucket> buckets = train::gradient_buckets(5514, 2048);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].offset, 5514u - 2048u);
  EXPECT_EQ(buckets[0].count, 2048u);
  EXPECT_EQ(buckets[1].offset, 5514u - 4096u);
  EXPECT_EQ(buckets[2].offset, 0u);
  EXPECT_EQ(buckets[2].count, 5514u - 4096u);
  std::vector<int> covered(5514, 0);
  for (const train::Bucket& bucket : buckets) {
    for (std::size_t i = bucket.offset; i < bucket.offset + bucket.count; ++i) ++covered[i];
  }
  for (int c : covered) ASSERT_EQ(c, 1);
  EXPECT_EQ(train::gradient_buckets(10, 100).size(), 1u);
  EXPECT_EQ(train::gradient_buckets(10, 1).size(), 10u);
}

TEST(SyntheticTask, SamplesArePureFunctionsOfTheSeedAndIndex) {
  const train::SyntheticTask task(7, 5, 3);
  const train::SyntheticTask same(7, 5, 3);
  const train::SyntheticTask other(8, 5, 3);
  std::vector<float> x, y, z;
  std::vector<int> lx, ly, lz;
  task.batch(100, 4, x, lx);
  same.batch(102, 2, y, ly);  // samples 102 and 103 alone: a shard of the same stream
  other.batch(100, 4, z, lz);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(x[10 + i], y[i]);
  EXPECT_EQ(lx[2], ly[0]);
  EXPECT_NE(x, z);
  for (float v : x) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

// The loss in double precision, written independently of mlp.cc, for a finite-difference check of its gradient.
double reference_loss(const train::MlpShape& shape, const std::vector<double>& p, const std::vector<float>& x,
                      const std::vector<int>& labels) {
  const int in = shape.input_dim, hid = shape.hidden, cls = shape.classes;
  double total = 0;
  for (std::size_t s = 0; s < labels.size(); ++s) {
    std::vector<double> h(hid), logits(cls);
    for (int j = 0; j < hid; ++j) {
      double a = p[shape.b1_offset() + j];
      for (int i = 0; i < in; ++i) a += p[j * in + i] * x[s * in + i];
      h[j] = a > 0 ? a : 0;
    }
    double normaliser = 0;
    for (int k = 0; k < cls; ++k) {
      double a = p[shape.b2_offset() + k];
      for (int j = 0; j < hid; ++j) a += p[shape.w2_offset() + k * hid + j] * h[j];
      logits[k] = a;
      normaliser += std::exp(a);
    }
    total += std::log(normaliser) - logits[labels[s]];
  }
  return total / static_cast<double>(labels.size());
}

TEST(Mlp, GradientMatchesFiniteDifferencesOfAnIndependentLoss) {
  const train::MlpShape shape{4, 6, 3};
  const train::SyntheticTask task(3, shape.input_dim, shape.classes);
  std::vector<float> x;
  std::vector<int> labels;
  task.batch(0, 8, x, labels);
  std::vector<float> parameters = train::initial_parameters(shape, 5);
  for (std::size_t i = shape.b1_offset(); i < shape.w2_offset(); ++i) parameters[i] = 0.05f;  // no ReLU kinks at 0
  std::vector<float> gradient(shape.parameter_count());
  const float loss = train::loss_and_gradient(shape, parameters, x, labels, gradient);

  std::vector<double> p(parameters.begin(), parameters.end());
  EXPECT_NEAR(loss, reference_loss(shape, p, x, labels), 1e-5);
  const double h = 1e-6;
  for (std::size_t i = 0; i < p.size(); ++i) {
    std::vector<double> plus = p, minus = p;
    plus[i] += h;
    minus[i] -= h;
    const double numeric = (reference_loss(shape, plus, x, labels) - reference_loss(shape, minus, x, labels)) / (2 * h);
    EXPECT_NEAR(gradient[i], numeric, 1e-4 + 1e-3 * std::fabs(numeric)) << "parameter " << i;
  }
}

TEST(Mlp, SgdMomentumFollowsTorchOptimSgd) {
  std::vector<float> parameters = {1.0f, -2.0f};
  std::vector<float> velocity = {0.5f, 0.0f};
  const std::vector<float> gradient = {0.25f, 1.0f};
  train::sgd_momentum_step(parameters, velocity, gradient, 0.5f, 0.5f);
  // velocity = 0.5 * velocity + gradient; parameter -= 0.5 * velocity
  EXPECT_EQ(velocity, (std::vector<float>{0.5f, 1.0f}));
  EXPECT_EQ(parameters, (std::vector<float>{0.75f, -2.5f}));
}

TEST(Perturbation, AbsorbedAndVisibleChangesAreToldApart) {
  // 1 + 2^-23 is one ulp above 1; next to 2^25 (whose ulp is 4) both 1 and 1 + 2^-23 round away.
  const float big = 33554432.0f;
  EXPECT_FALSE(train::perturbation_survives_every_order(std::vector<float>{1.0f, big, 0.0f, 0.0f}, 0));
  // Alone (the others are zero), the change is the whole sum and survives any order.
  EXPECT_TRUE(train::perturbation_survives_every_order(std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}, 0));
  // Visible when the big values cancel first, rounded away when 1 meets one of them first (rank order).
  EXPECT_FALSE(train::perturbation_survives_every_order(std::vector<float>{1.0f, big, -big, 0.0f}, 0));
}

TEST(Perturbation, ChosenElementChangesEverySum) {
  const std::vector<std::vector<float>> gradients = {
      {1.0f, 0.5f, 3.0f}, {1e8f, 0.25f, 1e8f}, {-1e8f, -0.25f, 1.0f}, {0.0f, 0.0f, 1.0f}};
  // Rank 0's largest elements, 2 and 0, are swamped by 1e8 in some orders; element 1 dominates every partial sum
  // (0.5 and 0.25 - 0.25), so its one-ulp change always shows.
  const auto element = train::visible_perturbation_element(gradients, 0);
  ASSERT_TRUE(element.has_value());
  EXPECT_EQ(*element, 1u);
}

// Deterministic mode's association tree, written from docs/deterministic.md: the largest prime factor p of n splits
// the ranks into the p classes of equal rank mod p (each in rank order, reduced the same way), combined left to right.
float deterministic_mode_sum(const std::vector<float>& values) {
  const std::size_t n = values.size();
  if (n == 1) return values[0];
  std::size_t p = n, rest = n;
  for (std::size_t f = 2; f * f <= rest; ++f) {
    while (rest % f == 0) {
      p = f;
      rest /= f;
    }
  }
  if (rest > 1) p = rest;
  float sum = 0;
  for (std::size_t residue = 0; residue < p; ++residue) {
    std::vector<float> members;
    for (std::size_t i = residue; i < n; i += p) members.push_back(values[i]);
    sum = residue == 0 ? deterministic_mode_sum(members) : sum + deterministic_mode_sum(members);
  }
  return sum;
}

TEST(Perturbation, AChosenPerturbationAlsoSurvivesDeterministicModesTree) {
  // The demo's runs with DETNCCL_DETERMINISTIC=1 sum in this tree: for any rank count (40 = 2^3 * 5 is neither a
  // power of two nor small enough for every permutation), a perturbation said to survive every order must change
  // it too. Values of wildly different magnitudes make absorption common.
  EXPECT_EQ(deterministic_mode_sum({1, 2, 4, 8, 16, 32}), ((1.0f + 8.0f) + (2.0f + 16.0f)) + (4.0f + 32.0f));
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int survived = 0;
  for (const std::size_t n : {6u, 10u, 12u, 40u}) {
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<float> values(n);
      for (float& v : values) {
        const int exponent = static_cast<int>(next() % 12) - 2;
        v = std::ldexp(1.0f + static_cast<float>(next() % 1024) / 1024.0f, exponent) * ((next() & 1) ? 1.0f : -1.0f);
      }
      const std::size_t rank = next() % n;
      if (!train::perturbation_survives_every_order(values, rank)) continue;
      ++survived;
      std::vector<float> perturbed = values;
      perturbed[rank] = std::nextafter(perturbed[rank], std::numeric_limits<float>::infinity());
      const float before = deterministic_mode_sum(values), after = deterministic_mode_sum(perturbed);
      EXPECT_NE(std::memcmp(&before, &after, sizeof before), 0) << "n=" << n << " trial " << trial << " rank " << rank;
    }
  }
  EXPECT_GT(survived, 50) << "too few cases survive to prove anything";
}

TEST(Checkpoint, RoundTripsAndRejectsDamage) {
  const TemporaryDirectory dir;
  train::Checkpoint written;
  written.next_step = 20;
  written.samples_consumed = 5120;
  written.data_seed = written.model_seed = 9;
  written.input_dim = 32;
  written.hidden = 16;
  written.classes = 10;
  written.world_size = 4;
  written.global_batch = 256;
  written.learning_rate = 0.05f;
  written.momentum = 0.9f;
  written.first_loss = 2.5f;
  written.trajectory = 0x0123456789abcdefull;
  written.parameters = {1.0f, -0.0f, std::numeric_limits<float>::denorm_min()};
  written.velocity = {0.25f, 0.5f, -1.0f};
  const std::string path = dir / train::checkpoint_file_name(20);
  EXPECT_EQ(fs::path(path).filename(), "step-00000020.ckpt");
  std::string error;
  ASSERT_TRUE(train::write_checkpoint(path, written, &error)) << error;
  EXPECT_EQ(fs::file_size(path), 96u + 2 * 3 * 4 + 8);
  for (const auto& entry : fs::directory_iterator(dir.path())) EXPECT_EQ(entry.path(), path);  // no temporary left

  train::Checkpoint read;
  ASSERT_TRUE(train::read_checkpoint(path, &read, &error)) << error;
  EXPECT_EQ(read.next_step, 20u);
  EXPECT_EQ(read.samples_consumed, 5120u);
  EXPECT_EQ(read.hidden, 16u);
  EXPECT_EQ(read.trajectory, written.trajectory);
  EXPECT_EQ(read.first_loss, 2.5f);
  EXPECT_EQ(std::memcmp(read.parameters.data(), written.parameters.data(), 12), 0);
  EXPECT_EQ(read.velocity, written.velocity);

  const std::string bytes = read_file(path);
  auto rejects = [&](std::string damaged, const std::string& expected_message) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    train::Checkpoint ignored;
    std::string why;
    EXPECT_FALSE(train::read_checkpoint(path, &ignored, &why));
    EXPECT_NE(why.find(expected_message), std::string::npos) << why;
  };
  std::string flipped = bytes;
  flipped[100] ^= 0x01;
  rejects(flipped, "checksum mismatch");
  rejects(bytes.substr(0, bytes.size() - 4), "truncated");
  rejects(bytes.substr(0, 40), "too short");
  std::string wrong_magic = bytes;
  wrong_magic[0] = 'X';
  rejects(wrong_magic, "bad magic");
  train::Checkpoint ignored;
  EXPECT_FALSE(train::read_checkpoint(dir / "absent.ckpt", &ignored, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

// ---------------------------------------------------------------------------------------------------------------
// The program under hostnccl-run

TEST(TrainJob, LossGoesDownAndFourRanksFollowOneRank) {
  const RunResult four = run_train("--steps 40 --log-every 1");
  ASSERT_EQ(four.exit_code, 0) << diagnostics(four);
  const Summary summary = summary_of(four);
  ASSERT_TRUE(summary.found) << diagnostics(four);
  EXPECT_TRUE(summary.went_down);
  // A 10-class problem starts near ln(10) and must lose at least half of it in 40 steps.
  EXPECT_GT(summary.first_loss, 0.8 * std::log(10.0));
  EXPECT_LT(summary.last_loss, 0.5 * summary.first_loss);

  // One rank on the whole global batch computes the same mean gradient, summed in another order: the losses agree
  // closely. This checks the sharding (each sample exactly once per step), the division by the world size and the
  // broadcast (without it ranks 1..3 would train from NaN weights).
  const RunResult one = run_train("--steps 40 --log-every 1", "HOSTNCCL_REDUCE_ORDER=rank", 1);
  ASSERT_EQ(one.exit_code, 0) << diagnostics(one);
  const auto losses_four = logged_losses(four);
  const auto losses_one = logged_losses(one);
  ASSERT_EQ(losses_four.size(), 40u);
  ASSERT_EQ(losses_one.size(), 40u);
  for (const auto& [step, loss] : losses_four) EXPECT_NEAR(loss, losses_one.at(step), 1e-3) << "step " << step;
}

TEST(TrainJob, RankOrderRunsAreBitwiseIdentical) {
  const Summary a = summary_of(run_train("--quiet"));
  const Summary b = summary_of(run_train("--quiet"));
  ASSERT_TRUE(a.found && b.found);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.trajectory, b.trajectory);
}

// hostnccl adds in arrival order by default; with 4 processes on any machine the order changes within a few runs.
// Bound: 8 runs (each well under a second). Losing in all 8 would mean arrival order never changed in ~2000 calls.
TEST(TrainJob, ArrivalOrderRunsDifferWithinEightRuns) {
  std::vector<std::string> trajectories;
  bool differed = false;
  for (int run = 0; run < 8 && !differed; ++run) {
    const RunResult result = run_train("--quiet", "HOSTNCCL_REDUCE_ORDER=arrival");
    ASSERT_EQ(result.exit_code, 0) << diagnostics(result);
    const Summary summary = summary_of(result);
    ASSERT_TRUE(summary.found);
    for (const std::string& earlier : trajectories) differed = differed || earlier != summary.trajectory;
    trajectories.push_back(summary.trajectory);
  }
  EXPECT_TRUE(differed) << "8 arrival-order runs gave the same trajectory " << trajectories.front();
}

TEST(TrainJob, ResumeFromCheckpointEqualsTheUninterruptedRun) {
  const TemporaryDirectory dir;
  const RunResult whole = run_train("--quiet --steps 40 --checkpoint-every 20 --checkpoint-dir " + (dir / "a"));
  ASSERT_EQ(whole.exit_code, 0) << diagnostics(whole);
  ASSERT_TRUE(fs::exists(dir / "a/step-00000020.ckpt"));
  ASSERT_TRUE(fs::exists(dir / "a/step-00000040.ckpt"));

  // By file path, writing its own checkpoints elsewhere.
  const RunResult resumed = run_train("--quiet --steps 40 --resume-from " + (dir / "a/step-00000020.ckpt") +
                                      " --checkpoint-every 20 --checkpoint-dir " + (dir / "b"));
  ASSERT_EQ(resumed.exit_code, 0) << diagnostics(resumed);
  const Summary a = summary_of(whole);
  const Summary b = summary_of(resumed);
  ASSERT_TRUE(a.found && b.found) << diagnostics(resumed);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.trajectory, b.trajectory);
  EXPECT_EQ(a.first_loss, b.first_loss);  // carried by the checkpoint
  EXPECT_NE(resumed.out.find("resumed at step 20"), std::string::npos) << resumed.out;
  EXPECT_FALSE(fs::exists(dir / "b/step-00000020.ckpt"));
  // Same state, same bytes: weights, momentum, step, data position and trajectory all match.
  EXPECT_EQ(read_file(dir / "a/step-00000040.ckpt"), read_file(dir / "b/step-00000040.ckpt"));

  // By step number, from --checkpoint-dir; a shorter run ends where the longer one was at its step 30.
  const RunResult by_step = run_train("--quiet --steps 30 --resume-from 20 --checkpoint-dir " + (dir / "a"));
  const RunResult thirty = run_train("--quiet --steps 30");
  ASSERT_EQ(by_step.exit_code, 0) << diagnostics(by_step);
  EXPECT_EQ(summary_of(by_step).weights, summary_of(thirty).weights);
}

TEST(TrainJob, OneUlpPerturbationChangesTheTrajectory) {
  const RunResult base = run_train("--quiet --steps 30");
  const RunResult perturbed = run_train("--quiet --steps 30 --perturb-rank 2 --perturb-step 10");
  ASSERT_EQ(perturbed.exit_code, 0) << diagnostics(perturbed);
  EXPECT_NE(perturbed.out.find("[rank 2] perturbation at step 10: gradient element"), std::string::npos)
      << perturbed.out;
  const Summary a = summary_of(base);
  const Summary b = summary_of(perturbed);
  ASSERT_TRUE(a.found && b.found);
  EXPECT_NE(a.trajectory, b.trajectory);
  // The same perturbation twice is the same run.
  EXPECT_EQ(summary_of(run_train("--quiet --steps 30 --perturb-rank 2 --perturb-step 10")).trajectory, b.trajectory);
}

TEST(TrainJob, BadCheckpointsStopEveryRankWithStatus2) {
  const TemporaryDirectory dir;
  ASSERT_EQ(run_train("--quiet --steps 10 --checkpoint-every 10 --checkpoint-dir " + (dir / "c")).exit_code, 0);
  const std::string good = dir / "c/step-00000010.ckpt";
  std::string bytes = read_file(good);
  bytes[bytes.size() / 2] ^= 0x40;
  const std::string corrupt = dir / "corrupt.ckpt";
  std::ofstream(corrupt, std::ios::binary) << bytes;

  const RunResult damaged = run_train("--quiet --steps 20 --resume-from " + corrupt);
  EXPECT_EQ(damaged.exit_code, 2) << diagnostics(damaged);
  EXPECT_NE(damaged.err.find("is corrupt: checksum mismatch"), std::string::npos) << damaged.err;

  const RunResult missing = run_train("--quiet --steps 20 --resume-from 7 --checkpoint-dir " + (dir / "c"));
  EXPECT_EQ(missing.exit_code, 2) << diagnostics(missing);
  EXPECT_NE(missing.err.find("cannot open checkpoint " + (dir / "c/step-00000007.ckpt")), std::string::npos)
      << missing.err;

  const RunResult other_model = run_train("--quiet --steps 20 --hidden 64 --resume-from " + good);
  EXPECT_EQ(other_model.exit_code, 2) << diagnostics(other_model);
  EXPECT_NE(other_model.err.find("--hidden 128, this run has --hidden 64"), std::string::npos) << other_model.err;

  const RunResult nothing_left = run_train("--quiet --steps 10 --resume-from " + good);
  EXPECT_EQ(nothing_left.exit_code, 2) << diagnostics(nothing_left);
}

TEST(TrainJob, HelpListsTheFlagsAndBadFlagsExit2) {
  const RunResult help = run_train("--help", "", 1);
  EXPECT_EQ(help.exit_code, 0) << diagnostics(help);
  for (const char* flag : {"--steps", "--checkpoint-every", "--checkpoint-dir", "--resume-from", "--perturb-rank",
                           "--perturb-step", "--quiet", "--bucket-elements"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(run_train("--no-such-flag", "", 1).exit_code, 2);
  EXPECT_EQ(run_train("--perturb-rank 1", "", 1).exit_code, 2);  // needs --perturb-step
  EXPECT_EQ(run_train("--global-batch 255").exit_code, 2);       // not a multiple of 4 ranks
}

// Each bad value stops the program at parse time with status 2 and a message that names the flag and says what it
// takes. Before these checks, NaN passed every range (training then failed with status 1), "-1" and values past
// 2^64-1 became 2^64-1, an empty --resume-from meant "start from scratch", an out-of-range step number aborted, and
// the messages for 0 printed DBL_MAX in full.
TEST(TrainJob, BadValuesExit2AtParseTimeWithAReadableMessage) {
  const struct {
    const char* arguments;
    const char* message;
  } cases[] = {
      {"--learning-rate nan", "--learning-rate: 'nan' is not a finite number greater than 0"},
      {"--learning-rate inf", "--learning-rate: 'inf' is not a finite number greater than 0"},
      {"--learning-rate 0", "--learning-rate: '0' is not a finite number greater than 0"},
      {"--learning-rate 1e39", "--learning-rate: '1e39' is outside the range of a 32-bit float"},    // inf as a float
      {"--learning-rate 1e-50", "--learning-rate: '1e-50' is outside the range of a 32-bit float"},  // 0 as a float
      {"--momentum nan", "--momentum: 'nan' is not a number from 0 to 1"},
      {"--momentum 1.5", "--momentum: '1.5' is not a number from 0 to 1"},
      {"--momentum -inf", "--momentum: '-inf' is not a number from 0 to 1"},
      {"--seed -1", "--seed: '-1' is not a whole number, 0 or more"},
      {"--seed 18446744073709551616", "--seed: '18446744073709551616' is too large (at most 18446744073709551615)"},
      {"--seed ''", "--seed: '' is not a whole number, 0 or more"},
      {"--checkpoint-every -1", "--checkpoint-every: '-1' is not a whole number, 0 or more"},
      {"--resume-from ''", "--resume-from: must not be empty"},
      {"--resume-from 99999999999999999999", "--resume-from: step number '99999999999999999999' is too large"},
      {"--checkpoint-dir ''", "--checkpoint-dir: must not be empty"},
      {"--log-every 0", "--log-every: '0' is not a whole number greater than 0"},
      {"--log-every 18446744073709551616", "--log-every: '18446744073709551616' is too large"},
      {"--bucket-elements 0", "--bucket-elements: '0' is not a whole number greater than 0"},
      {"--bucket-elements -1", "--bucket-elements: '-1' is not a whole number greater than 0"},
      {"--steps 1.5", "--steps: '1.5' is not a whole number from 1 to 1073741824"},
      {"--hidden 0", "--hidden: '0' is not a whole number from 1 to 16384"},
      {"--global-batch -4", "--global-batch: '-4' is not a whole number from 1 to 1048576"},
      {"--perturb-rank 0 --perturb-step -1", "--perturb-step: '-1' is not a whole number, 0 or more"},
      {"--perturb-rank 0 --perturb-step 0 --perturb-element -1",
       "--perturb-element: '-1' is not a whole number, 0 or more"},
      {"--perturb-rank -1 --perturb-step 0", "--perturb-rank: '-1' is not a whole number, 0 or more"},
  };
  for (const auto& c : cases) {
    const RunResult result =
        run_train(std::string("--quiet --steps 2 ") + c.arguments, "HOSTNCCL_REDUCE_ORDER=rank", 1);
    EXPECT_EQ(result.exit_code, 2) << c.arguments << "\n" << diagnostics(result);
    EXPECT_NE(result.err.find(c.message), std::string::npos) << c.arguments << "\n" << result.err;
    EXPECT_EQ(result.err.find("17976931348623157"), std::string::npos) << c.arguments << "\n" << result.err;
    EXPECT_FALSE(summary_of(result).found) << c.arguments << ": trained\n" << result.out;
  }
}

// The checks keep every legal value: the bounds themselves, and numbers are read in decimal (CLI11 alone reads
// "010" as octal 8).
TEST(TrainJob, BoundaryValuesAreAcceptedAndNumbersAreDecimal) {
  const RunResult limits =
      run_train("--quiet --steps 3 --seed 18446744073709551615 --momentum 0 --checkpoint-every 0", "", 1);
  EXPECT_EQ(limits.exit_code, 0) << diagnostics(limits);
  EXPECT_TRUE(summary_of(limits).found) << diagnostics(limits);
  EXPECT_EQ(run_train("--quiet --steps 3 --momentum 1", "", 1).err.find("--momentum"), std::string::npos);

  const RunResult decimal = run_train("--steps 010 --log-every 1", "", 1);
  EXPECT_EQ(decimal.exit_code, 0) << diagnostics(decimal);
  const auto losses = logged_losses(decimal);
  EXPECT_EQ(losses.size(), 10u) << decimal.out;
  EXPECT_NE(decimal.out.find("over 10 steps"), std::string::npos) << decimal.out;
}

// A checkpoint directory that cannot be created or written stops the job before it trains, with status 2 and the
// reason; before, the job trained and then failed with status 1 at its first checkpoint.
TEST(TrainJob, UnusableCheckpointDirStopsTheJobBeforeItTrains) {
  const TemporaryDirectory dir;
  const std::string file = dir / "file";
  std::ofstream(file) << "not a directory";
  const struct {
    std::string directory;
    std::string message;
  } cases[] = {
      // No new directories in /proc, even for root.
      {"/proc/x", "train: cannot create --checkpoint-dir /proc/x: "},
      {file, "train: cannot create --checkpoint-dir " + file + ": "},
      {file + "/sub", "train: cannot create --checkpoint-dir " + file + "/sub: "},
      // It exists, but takes no new files.
      {"/proc", "train: cannot write in --checkpoint-dir /proc: "},
  };
  for (const auto& c : cases) {
    const RunResult result = run_train("--steps 4 --checkpoint-every 2 --checkpoint-dir " + c.directory);
    EXPECT_EQ(result.exit_code, 2) << c.directory << "\n" << diagnostics(result);
    EXPECT_NE(result.err.find(c.message), std::string::npos) << result.err;
    EXPECT_TRUE(logged_losses(result).empty()) << c.directory << ": trained\n" << result.out;
  }
  // Without --checkpoint-every the directory is not needed, so it is neither made nor checked.
  const RunResult unused = run_train("--quiet --steps 4 --checkpoint-dir /proc/x");
  EXPECT_EQ(unused.exit_code, 0) << diagnostics(unused);
  // A missing directory, nested, is created.
  const RunResult nested = run_train("--quiet --steps 4 --checkpoint-every 2 --checkpoint-dir " + (dir / "a/b"));
  EXPECT_EQ(nested.exit_code, 0) << diagnostics(nested);
  EXPECT_TRUE(fs::exists(dir / "a/b/step-00000004.ckpt"));
}

// ---------------------------------------------------------------------------------------------------------------
// Under the shim: what `detnccl diff` will see

struct TracedRank {
  std::vector<detnccl::records::CallFields> calls;
  std::unique_ptr<detnccl::records::LogReader> reader;
};

std::vector<TracedRank> traced_run(const TemporaryDirectory& dir, const std::string& run, const std::string& args,
                                   const std::string& environment = "") {
  const RunResult result = run_train(
      args, "HOSTNCCL_REDUCE_ORDER=rank DETNCCL_DIR=" + dir.path().string() + " DETNCCL_RUN=" + run + " " + environment,
      4, "env LD_PRELOAD=" DETNCCL_SHIM_PATH);
  EXPECT_EQ(result.exit_code, 0) << diagnostics(result);
  std::vector<TracedRank> ranks(4);
  for (int rank = 0; rank < 4; ++rank) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.dnc", rank);
    auto opened = detnccl::records::LogReader::open_file(dir / (run + "/" + name));
    EXPECT_TRUE(opened.reader) << opened.error;
    if (!opened.reader) continue;
    detnccl::records::LogRecord record;
    while (opened.reader->next(record)) {
      if (const auto* call = std::get_if<detnccl::records::CallRecord>(&record.record)) {
        ranks[rank].calls.push_back(*call);
      }
    }
    ranks[rank].reader = std::move(opened.reader);
  }
  return ranks;
}

TEST(TrainJob, TracedCallsCarryStepsAndShowThePerturbationAsAnInputDivergence) {
  const TemporaryDirectory dir;
  constexpr int kSteps = 6;
  const auto base = traced_run(dir, "base", "--quiet --steps 6");
  const auto perturbed = traced_run(dir, "perturbed", "--quiet --steps 6 --perturb-rank 1 --perturb-step 3");
  using detnccl::records::OpId;
  for (int rank = 0; rank < 4; ++rank) {
    const auto& calls = base[rank].calls;
    // The setup broadcast, then per step three gradient buckets and the loss.
    ASSERT_EQ(calls.size(), 1u + kSteps * 4u) << "rank " << rank;
    EXPECT_EQ(calls[0].op, OpId::kBroadcast);
    EXPECT_EQ(calls[0].step, 0u);
    for (int step = 0; step < kSteps; ++step) {
      for (int call = 0; call < 4; ++call) {
        const auto& fields = calls[1 + step * 4 + call];
        EXPECT_EQ(fields.op, OpId::kAllReduce);
        EXPECT_EQ(fields.step, static_cast<std::uint64_t>(step));
        EXPECT_EQ(fields.count, call < 2 ? 2048u : call == 2 ? 5514u - 4096u : 1u);
      }
    }
    ASSERT_EQ(perturbed[rank].calls.size(), calls.size());
  }
  // The first call whose fingerprints differ: at step 3, on every rank the same call; its input differs on rank 1
  // only (the origin), its output on every rank (the receivers).
  std::size_t first = 0;
  while (first < base[0].calls.size() &&
         base[0].calls[first].output_fingerprint == perturbed[0].calls[first].output_fingerprint) {
    ++first;
  }
  ASSERT_LT(first, base[0].calls.size());
  EXPECT_EQ(base[0].calls[first].step, 3u);
  for (int rank = 0; rank < 4; ++rank) {
    for (std::size_t i = 0; i < first; ++i) {
      EXPECT_EQ(base[rank].calls[i].input_fingerprint, perturbed[rank].calls[i].input_fingerprint);
      EXPECT_EQ(base[rank].calls[i].output_fingerprint, perturbed[rank].calls[i].output_fingerprint);
    }
    EXPECT_EQ(base[rank].calls[first].input_fingerprint != perturbed[rank].calls[first].input_fingerprint, rank == 1)
        << "rank " << rank;
    EXPECT_NE(base[rank].calls[first].output_fingerprint, perturbed[rank].calls[first].output_fingerprint);
  }
}

// The broad trace (DETNCCL_TRACE=steps: one digest pair per communicator and step, no call records) finds the
// perturbation's rank and step: at step 3 only rank 1's inputs differ (every rank's outputs do).
TEST(TrainJob, AStepsLevelTraceFindsThePerturbationsRankAndStep) {
  const TemporaryDirectory dir;
  const auto base = traced_run(dir, "base", "--quiet --steps 6", "DETNCCL_TRACE=steps");
  const auto perturbed =
      traced_run(dir, "perturbed", "--quiet --steps 6 --perturb-rank 1 --perturb-step 3", "DETNCCL_TRACE=steps");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(base[rank].calls.empty()) << "no call records at the steps level";
    ASSERT_TRUE(base[rank].reader);
    EXPECT_EQ(base[rank].reader->step_digests().size(), 6u) << "one communicator, six steps";
  }
  namespace analysis = detnccl::analysis;
  const analysis::RunDiff diff =
      analysis::diff_runs(analysis::list_run(dir / "base"), analysis::list_run(dir / "perturbed"), {});
  ASSERT_TRUE(diff.error.empty()) << diff.error;
  ASSERT_TRUE(diff.first_step.has_value());
  EXPECT_EQ(diff.first_step->rank, 1u);
  EXPECT_EQ(diff.first_step->step, 3u);
  EXPECT_TRUE(diff.first_step->input_differs);
  EXPECT_EQ(diff.first_step_ranks, (std::vector<std::uint32_t>{0, 1, 2, 3})) << "every rank's outputs differ there";
  EXPECT_EQ(analysis::rerun_settings(diff), "DETNCCL_TRACE=hash DETNCCL_STEPS=3 DETNCCL_RANKS=0-3");
}

TEST(TrainJob, TracedResumedRunMatchesFromItsFirstStep) {
  const TemporaryDirectory dir;
  const auto whole = traced_run(dir, "whole", "--quiet --steps 6 --checkpoint-every 3 --checkpoint-dir " + (dir / "c"));
  const auto resumed = traced_run(dir, "resumed", "--quiet --steps 6 --resume-from 3 --checkpoint-dir " + (dir / "c"));
  for (int rank = 0; rank < 4; ++rank) {
    // The resumed run: its setup broadcast (before any step marker), then steps 3..5 exactly as in the whole run.
    const auto& w = whole[rank].calls;
    const auto& r = resumed[rank].calls;
    ASSERT_EQ(r.size(), 1u + 3u * 4u);
    EXPECT_LT(r[0].step, 3u);
    const std::size_t offset = w.size() - (r.size() - 1);
    EXPECT_EQ(w[offset].step, 3u);
    for (std::size_t i = 1; i < r.size(); ++i) {
      EXPECT_EQ(r[i].step, w[offset + i - 1].step);
      EXPECT_EQ(r[i].input_fingerprint, w[offset + i - 1].input_fingerprint) << "rank " << rank << " call " << i;
      EXPECT_EQ(r[i].output_fingerprint, w[offset + i - 1].output_fingerprint) << "rank " << rank << " call " << i;
    }
  }
}

}  // namespace

namespace {

// With DETNCCL_CAPTURE=1 (issue #18) the perturbation's divergence is measured from the captured gradients, as
// `detnccl diff` measures it: in the bucket that holds the perturbed element (gradient_buckets.h: from the end of the
// 5,514 parameters, reduced in that order after the setup broadcast), one element, one ulp, at its place in the
// bucket; an input divergence has no reordering verdict.
TEST(TrainJob, ACapturedPerturbationIsOneElementOneUlpAtItsPlaceInItsBucket) {
  const TemporaryDirectory dir;
  constexpr std::size_t kElement = 3000;
  traced_run(dir, "base", "--quiet --steps 4", "DETNCCL_CAPTURE=1");
  traced_run(dir, "perturbed",
             "--quiet --steps 4 --perturb-rank 1 --perturb-step 2 --perturb-element " + std::to_string(kElement),
             "DETNCCL_CAPTURE=1");
  const std::vector<train::Bucket> buckets = train::gradient_buckets(5514, 2048);
  std::size_t bucket = 0;
  while (bucket < buckets.size() &&
         !(buckets[bucket].offset <= kElement && kElement < buckets[bucket].offset + buckets[bucket].count)) {
    ++bucket;
  }
  ASSERT_LT(bucket, buckets.size());
  namespace analysis = detnccl::analysis;
  const analysis::RunDiff diff =
      analysis::diff_runs(analysis::list_run(dir / "base"), analysis::list_run(dir / "perturbed"), {});
  ASSERT_TRUE(diff.error.empty()) << diff.error;
  ASSERT_TRUE(diff.first.has_value());
  EXPECT_EQ(diff.first->kind, analysis::DivergenceKind::kInput);
  EXPECT_EQ(diff.first->rank, 1u);
  EXPECT_EQ(diff.first->step(), 2u);
  EXPECT_EQ(diff.first->seq(), 1u + 2u * 4u + bucket);
  analysis::RunCaptures a(dir / "base"), b(dir / "perturbed");
  std::string error;
  const std::optional<analysis::MagnitudeOutcome> outcome =
      analysis::measure_call_divergence(a, b, *diff.first, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->measured) << outcome->not_captured;
  EXPECT_EQ(outcome->side, "inputs");
  const detnccl::numerics::Magnitude& m = outcome->magnitude.magnitude;
  EXPECT_EQ(m.elements_compared, buckets[bucket].count);
  EXPECT_EQ(m.elements_differing, 1u);
  EXPECT_EQ(m.first_index, static_cast<std::int64_t>(kElement - buckets[bucket].offset));
  EXPECT_EQ(m.worst_index, m.first_index);
  EXPECT_EQ(m.max_ulp, 1u);
  EXPECT_FALSE(outcome->magnitude.reordering.has_value());
}

}  // namespace
