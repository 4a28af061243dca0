// unmarked_job: a data-parallel training job that never marks its steps, for the tests of step inference
// (tests/test_steps_job.cc). Under hostnccl-run every rank trains a vector of parameters:
//   set-up     two Broadcasts of the parameters from rank 0 (as DDP does at construction);
//   iteration  three gradient AllReduce buckets of different sizes, a Send/Recv ring exchange (one group), a
//              logging AllReduce of the loss every third iteration (0, 3, 6, ...) and an evaluation AllGather every
//              fourth (3, 7, 11, ...); then the parameters are updated from the reduced gradients.
// Every result feeds the next iteration, so a perturbation reaches every later call.
//   unmarked_job [--iterations N] [--perturb-rank R --perturb-iteration K] [--mark-steps] [--plan PREFIX]
//                [--die-rank R --die-iteration K]
//   --perturb-rank R --perturb-iteration K
//                 rank R adds one ulp to element 0 of bucket 0's gradient at iteration K
//   --mark-steps  marks each iteration with detnccl_set_step(iteration), as a job that marks its steps does
//   --die-rank R --die-iteration K
//                 rank R kills itself with SIGKILL at the start of iteration K, before any call of it (a crash)
//   --plan PREFIX each rank writes PREFIX.RANK: one line per NCCL call, in call order, "ITERATION OP" (the set-up
//                 calls are iteration 0): what the records' steps must say
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/job_support.h"

namespace {

struct Options {
  int iterations = 10;
  int perturb_rank = -1;
  int perturb_iteration = -1;
  bool mark_steps = false;
  std::string plan;
  int die_rank = -1;
  int die_iteration = -1;
};

bool parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--iterations" && has_value) {
      options.iterations = std::atoi(argv[++i]);
    } else if (arg == "--perturb-rank" && has_value) {
      options.perturb_rank = std::atoi(argv[++i]);
    } else if (arg == "--perturb-iteration" && has_value) {
      options.perturb_iteration = std::atoi(argv[++i]);
    } else if (arg == "--die-rank" && has_value) {
      options.die_rank = std::atoi(argv[++i]);
    } else if (arg == "--die-iteration" && has_value) {
      options.die_iteration = std::atoi(argv[++i]);
    } else if (arg == "--mark-steps") {
      options.mark_steps = true;
    } else if (arg == "--plan" && has_value) {
      options.plan = argv[++i];
    } else {
      std::fprintf(stderr, "unmarked_job: unknown or incomplete argument '%s'\n", arg.c_str());
      return false;
    }
  }
  return options.iterations > 0;
}

constexpr std::size_t kBuckets[] = {4096, 1024, 300};  // gradient buckets of different sizes (elements)
constexpr std::size_t kRing = 64;                      // elements sent to the next rank
constexpr std::size_t kEval = 8;                       // elements each rank contributes to the evaluation

class Job {
 public:
  Job(const Options& options, detnccl::test::JobRank job, ncclComm_t comm)
      : options_(options), job_(job), comm_(comm), set_step_(detnccl::test::find_set_step()) {
    for (std::size_t size : kBuckets) parameters_.emplace_back(size, 0.0f);
    if (job_.rank == 0) {
      for (auto& bucket : parameters_) {
        for (std::size_t i = 0; i < bucket.size(); ++i) bucket[i] = std::sin(0.01f * static_cast<float>(i + 1));
      }
    }
    if (!options.plan.empty()) plan_.open(options.plan + "." + std::to_string(job_.rank));
  }

  bool run() {
    // Set-up: rank 0's parameters go to every rank (the first two buckets; the third starts at zero everywhere).
    for (int b = 0; b < 2; ++b) {
      if (!call(0, "Broadcast",
                ncclBroadcast(parameters_[b].data(), parameters_[b].data(), parameters_[b].size(), ncclFloat32, 0,
                              comm_, nullptr))) {
        return false;
      }
    }
    for (int iteration = 0; iteration < options_.iterations; ++iteration) {
      if (job_.rank == options_.die_rank && iteration == options_.die_iteration) {
        if (plan_.is_open()) plan_.flush();
        raise(SIGKILL);
      }
      if (options_.mark_steps && set_step_ != nullptr) set_step_(static_cast<std::uint64_t>(iteration));
      if (!train(iteration)) return false;
    }
    return true;
  }

 private:
  bool call(int iteration, const char* op, ncclResult_t result) {
    if (plan_.is_open()) plan_ << iteration << ' ' << op << '\n';
    if (result == ncclSuccess) return true;
    std::fprintf(stderr, "rank %d: %s failed: %s\n", job_.rank, op, ncclGetErrorString(result));
    return false;
  }

  bool train(int iteration) {
    float loss = 0.0f;
    std::vector<std::vector<float>> gradients;
    for (std::size_t b = 0; b < parameters_.size(); ++b) {
      std::vector<float>& gradient = gradients.emplace_back(parameters_[b].size());
      for (std::size_t i = 0; i < gradient.size(); ++i) {
        gradient[i] =
            std::cos(parameters_[b][i] * static_cast<float>(job_.rank + 1) + 0.1f * static_cast<float>(i % 7)) /
            static_cast<float>(iteration + 1);
        loss += gradient[i] * gradient[i];
      }
      if (b == 0 && job_.rank == options_.perturb_rank && iteration == options_.perturb_iteration) {
        gradient[0] = std::nextafter(gradient[0], INFINITY);
      }
      if (!call(
              iteration, "AllReduce",
              ncclAllReduce(gradient.data(), gradient.data(), gradient.size(), ncclFloat32, ncclSum, comm_, nullptr))) {
        return false;
      }
    }
    // Ring exchange: the first elements of bucket 0 go to the next rank.
    std::vector<float> received(kRing);
    const int next = (job_.rank + 1) % job_.nranks;
    const int previous = (job_.rank + job_.nranks - 1) % job_.nranks;
    if (ncclGroupStart() != ncclSuccess) return false;
    const bool sent = call(iteration, "Send", ncclSend(gradients[0].data(), kRing, ncclFloat32, next, comm_, nullptr));
    const bool got = call(iteration, "Recv", ncclRecv(received.data(), kRing, ncclFloat32, previous, comm_, nullptr));
    if (ncclGroupEnd() != ncclSuccess || !sent || !got) return false;  // not a call of its own: no record
    if (iteration % 3 == 0) {                                          // the logging AllReduce
      if (!call(iteration, "AllReduce", ncclAllReduce(&loss, &loss, 1, ncclFloat32, ncclSum, comm_, nullptr))) {
        return false;
      }
    }
    if (iteration % 4 == 3) {  // the evaluation
      std::vector<float> mine(kEval, loss + static_cast<float>(job_.rank));
      std::vector<float> all(kEval * static_cast<std::size_t>(job_.nranks));
      if (!call(iteration, "AllGather", ncclAllGather(mine.data(), all.data(), kEval, ncclFloat32, comm_, nullptr))) {
        return false;
      }
    }
    for (std::size_t b = 0; b < parameters_.size(); ++b) {
      for (std::size_t i = 0; i < parameters_[b].size(); ++i) {
        parameters_[b][i] -= 0.01f * gradients[b][i] / static_cast<float>(job_.nranks);
      }
    }
    for (std::size_t i = 0; i < kRing; ++i) parameters_[0][i] += 0.001f * received[i];
    return true;
  }

  const Options& options_;
  detnccl::test::JobRank job_;
  ncclComm_t comm_;
  detnccl::test::SetStepFunction set_step_;
  std::vector<std::vector<float>> parameters_;
  std::ofstream plan_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) return 2;
  const detnccl::test::JobRank job = detnccl::test::job_rank_from_environment();
  ncclComm_t comm = detnccl::test::init_job_communicator(job);
  if (comm == nullptr) return 1;
  const bool ok = Job(options, job, comm).run();
  ncclCommDestroy(comm);
  return ok ? 0 : 1;
}
