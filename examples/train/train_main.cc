// train: a small data-parallel training job over the NCCL API, the job detnccl's demo traces and diffs.
//
// A two-layer perceptron learns a fixed synthetic classification task (synthetic_task.h, mlp.h). Each rank computes
// the gradient on its shard of every global batch; the gradient is summed over the ranks with one ncclAllReduce per
// bucket (gradient_buckets.h) and divided by the world size; the loss is all-reduced for the log; initial weights
// are broadcast from rank 0. Checkpoints (checkpoint.h) let a run resume bit for bit. Run it under hostnccl-run:
//
//   hostnccl-run -n 4 build/<dir>/examples/train --steps 60
//
// See docs/train-example.md for the flags, the model and the checkpoint format.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "examples/train/checkpoint.h"
#include "examples/train/data_parallel_group.h"
#include "examples/train/gradient_buckets.h"
#include "examples/train/mlp.h"
#include "examples/train/perturbation.h"
#include "examples/train/synthetic_task.h"
#include "hash/fingerprint.h"
#include "launcher/bootstrap.h"

namespace {

// Exit statuses: 1 for a failed run (NCCL error, loss that did not go down), 2 for a bad command line or checkpoint.
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Options {
  std::uint64_t steps = 60;
  std::uint64_t checkpoint_every = 0;
  std::string checkpoint_dir = "checkpoints";
  std::string resume_from;
  std::optional<int> perturb_rank;
  std::optional<std::uint64_t> perturb_step;
  std::optional<std::uint64_t> perturb_element;
  bool quiet = false;
  std::uint64_t log_every = 10;
  std::uint64_t bucket_elements = 2048;
  std::uint32_t global_batch = 256;
  int hidden = 128;
  float learning_rate = 0.05f;
  float momentum = 0.9f;
  std::uint64_t seed = 1;
};

constexpr int kInputDim = 32;
constexpr int kClasses = 10;

int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// The shim's step marker, when libdetnccl.so is preloaded; null otherwise. Looked up at run time so that the
// program runs, unchanged, with and without the shim.
using SetStepFunction = void (*)(std::uint64_t);
SetStepFunction find_step_marker() {
  return reinterpret_cast<SetStepFunction>(dlsym(RTLD_DEFAULT, "detnccl_set_step"));
}

// The trajectory digest after one more step: a fingerprint of (the digest so far, the fingerprint of the step's
// averaged gradient, the bits of its loss). Two runs share it only if every AllReduce output of every step matched;
// the final weights alone can hide a difference that rounding in later weight updates absorbed.
std::uint64_t extend_trajectory(std::uint64_t trajectory, std::span<const float> gradient, float loss) {
  std::uint32_t loss_bits = 0;
  std::memcpy(&loss_bits, &loss, sizeof loss_bits);
  const std::uint64_t fields[3] = {trajectory, detnccl::hash::fingerprint(gradient.data(), gradient.size_bytes()),
                                   loss_bits};
  return detnccl::hash::fingerprint(fields, sizeof fields);
}

// Whether --resume-from's value is a step number rather than a file.
bool is_step_number(const std::string& value) {
  return !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
}

// --resume-from takes a file, or a step number meaning that step's checkpoint in --checkpoint-dir (the command line
// check has made sure that the number fits).
std::string resolve_checkpoint_path(const Options& options) {
  const std::string& value = options.resume_from;
  if (is_step_number(value)) {
    std::uint64_t step = 0;
    std::from_chars(value.data(), value.data() + value.size(), step);
    return (std::filesystem::path(options.checkpoint_dir) / train::checkpoint_file_name(step)).string();
  }
  return value;
}

// Creates the checkpoint directory if missing and checks that a file can be created in it, so that a run that
// could not write its checkpoints stops before it trains instead of at its first checkpoint. Empty when it can;
// otherwise why not.
std::string prepare_checkpoint_directory(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return std::string("cannot create --checkpoint-dir ") + directory + ": " + error.message();
  if (!std::filesystem::is_directory(directory, error)) {
    return std::string("--checkpoint-dir ") + directory + " is not a directory";
  }
  // RATIONALE: a probe file, not access(2): it also catches what permission bits do not tell (root on a file
  // system that refuses new files, such as /proc), and it is what write_checkpoint will do.
  std::string probe = (std::filesystem::path(directory) / ".train-write-check.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::string("cannot write in --checkpoint-dir ") + directory + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

// Empty when the checkpoint can continue this run; otherwise why not.
std::string incompatibility(const train::Checkpoint& checkpoint, const Options& options, const train::MlpShape& shape,
                            std::size_t parameter_count) {
  auto differs = [](const char* flag, auto theirs, auto ours) {
    return std::string("it was written with ") + flag + " " + std::to_string(theirs) + ", this run has " + flag + " " +
           std::to_string(ours);
  };
  if (checkpoint.data_seed != options.seed || checkpoint.model_seed != options.seed) {
    return differs("--seed", checkpoint.data_seed, options.seed);
  }
  if (checkpoint.hidden != static_cast<std::uint32_t>(shape.hidden)) {
    return differs("--hidden", checkpoint.hidden, shape.hidden);
  }
  if (checkpoint.global_batch != options.global_batch) {
    return differs("--global-batch", checkpoint.global_batch, options.global_batch);
  }
  if (checkpoint.input_dim != static_cast<std::uint32_t>(shape.input_dim) ||
      checkpoint.classes != static_cast<std::uint32_t>(shape.classes) ||
      checkpoint.parameters.size() != parameter_count) {
    return "its model shape differs from this program's";
  }
  if (checkpoint.next_step >= options.steps) {
    return "it is at step " + std::to_string(checkpoint.next_step) + " and --steps " + std::to_string(options.steps) +
           " leaves nothing to run";
  }
  return {};
}

// Where a run starts: fresh, or from a checkpoint.
struct StartState {
  std::uint64_t step = 0;
  std::uint64_t samples_consumed = 0;
  float first_loss = std::numeric_limits<float>::quiet_NaN();
  std::uint64_t trajectory = 0;
  std::vector<float> parameters;
  std::vector<float> velocity;
};

// Command-line checks. RATIONALE: CLI11's own conversions let bad values through: unsigned options go through
// strtoull, which wraps "-1" to 2^64-1, saturates values past 2^64-1 and reads "010" as octal; floats accept "nan"
// (every comparison with it is false, so no range rejects it), and values such as 1e39 that become inf as a float;
// an empty string is a valid string. Its ranges also print their bounds with %f, which turns DBL_MAX into 309
// digits. These checks run before CLI11 converts the value and rewrite it canonically, so the value CLI11 then
// converts is exactly the one checked.

// A whole number in decimal digits, from `min` to `max`.
template <typename T>
CLI::Validator whole_number(T min, T max) {
  static_assert(std::is_integral_v<T>);
  const bool bounded = max != std::numeric_limits<T>::max();
  const std::string description = bounded ? "a whole number from " + std::to_string(min) + " to " + std::to_string(max)
                                  : min == 0 ? std::string("a whole number, 0 or more")
                                  : min == 1 ? std::string("a whole number greater than 0")
                                             : "a whole number, at least " + std::to_string(min);
  return CLI::Validator(
      [min, max, description](std::string& input) {
        T value{};
        const char* const end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, value);
        const bool negative = !input.empty() && input[0] == '-';
        if (error == std::errc::result_out_of_range && !negative && stop == end) {
          return "'" + input + "' is too large (at most " + std::to_string(max) + ")";
        }
        if (error != std::errc() || stop != end || value < min) return "'" + input + "' is not " + description;
        if (value > max) return "'" + input + "' is too large (at most " + std::to_string(max) + ")";
        input = std::to_string(value);
        return std::string();
      },
      description);
}

// A number from `min` to `max` that a float holds, greater than `min` unless `min_allowed`.
CLI::Validator float_number(float min, float max, bool min_allowed, const std::string& description) {
  return CLI::Validator(
      [min, max, min_allowed, description](std::string& input) {
        float value = 0;
        const char* const end = input.data() + input.size();
        const auto [stop, error] = std::from_chars(input.data(), end, value);
        if (error == std::errc::result_out_of_range && stop == end) {
          return "'" + input + "' is outside the range of a 32-bit float; it must be " + description;
        }
        if (error != std::errc() || stop != end || !std::isfinite(value) || value < min || value > max ||
            (value == min && !min_allowed)) {
          return "'" + input + "' is not " + description;
        }
        char canonical[32];
        std::snprintf(canonical, sizeof canonical, "%.9g", static_cast<double>(value));  // round-trips a float
        input = canonical;
        return std::string();
      },
      description);
}

// A string that is not empty.
CLI::Validator not_empty() {
  return CLI::Validator(
      [](std::string& input) { return input.empty() ? std::string("must not be empty") : std::string(); }, "");
}

// --resume-from: a file, or a step number that fits in 64 bits.
CLI::Validator checkpoint_or_step() {
  return CLI::Validator(
      [](std::string& input) {
        if (input.empty()) return std::string("must not be empty: give a checkpoint file or a step number");
        std::uint64_t step = 0;
        if (is_step_number(input) &&
            std::from_chars(input.data(), input.data() + input.size(), step).ec != std::errc()) {
          return "step number '" + input + "' is too large (at most " +
                 std::to_string(std::numeric_limits<std::uint64_t>::max()) + ")";
        }
        return std::string();
      },
      "");
}

// Parses the command line into *options; returns -1 to go on, else the exit status (0 after --help).
int parse_command_line(int argc, char** argv, Options* options) {
  CLI::App app{"Data-parallel training of a small MLP over the NCCL API (run it under hostnccl-run)", "train"};
  app.option_defaults()->always_capture_default();
  constexpr std::uint64_t kMost64 = std::numeric_limits<std::uint64_t>::max();
  app.add_option("--steps", options->steps, "Steps to train (step numbers 0 .. N-1)")
      ->transform(whole_number<std::uint64_t>(1, 1 << 30));
  app.add_option("--checkpoint-every", options->checkpoint_every,
                 "Write a checkpoint after every K steps (rank 0; 0: never)")
      ->transform(whole_number<std::uint64_t>(0, kMost64));
  app.add_option("--checkpoint-dir", options->checkpoint_dir, "Directory of the checkpoints (created if missing)")
      ->transform(not_empty());
  app.add_option("--resume-from", options->resume_from,
                 "Continue from a checkpoint: a file, or a step number K meaning --checkpoint-dir/" +
                     train::checkpoint_file_name(0).replace(5, 8, "<K, 8 digits>"))
      ->transform(checkpoint_or_step());
  auto* perturb_rank = app.add_option("--perturb-rank", options->perturb_rank,
                                      "Rank whose gradient gets a one-ulp perturbation (with --perturb-step)")
                           ->transform(whole_number<int>(0, std::numeric_limits<int>::max()));
  auto* perturb_step = app.add_option("--perturb-step", options->perturb_step,
                                      "Step at which the perturbation is added, before the gradient AllReduce")
                           ->transform(whole_number<std::uint64_t>(0, kMost64));
  app.add_option(
         "--perturb-element", options->perturb_element,
         "Element of the flat gradient to perturb (default: the largest on that rank whose change no summation order "
         "rounds away)")
      ->transform(whole_number<std::uint64_t>(0, kMost64));
  perturb_rank->needs(perturb_step);
  perturb_step->needs(perturb_rank);
  app.add_flag("--quiet", options->quiet, "Print only the final summary line");
  app.add_option("--log-every", options->log_every, "Print the loss every N steps (rank 0)")
      ->transform(whole_number<std::uint64_t>(1, kMost64));
  app.add_option("--bucket-elements", options->bucket_elements, "Floats per gradient AllReduce bucket")
      ->transform(whole_number<std::uint64_t>(1, kMost64));
  app.add_option("--global-batch", options->global_batch, "Samples per step over all ranks (a multiple of the ranks)")
      ->transform(whole_number<std::uint32_t>(1, 1 << 20));
  app.add_option("--hidden", options->hidden, "Hidden units of the MLP")->transform(whole_number<int>(1, 1 << 14));
  app.add_option("--learning-rate", options->learning_rate, "SGD learning rate")
      ->transform(float_number(0.0f, std::numeric_limits<float>::max(), false, "a finite number greater than 0"));
  app.add_option("--momentum", options->momentum, "SGD momentum")
      ->transform(float_number(0.0f, 1.0f, true, "a number from 0 to 1"));
  app.add_option("--seed", options->seed, "Seed of the data and of the initial weights")
      ->transform(whole_number<std::uint64_t>(0, kMost64));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    app.exit(error);
    return kExitUsage;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int status = parse_command_line(argc, argv, &options); status >= 0) return status;
  const int rank = environment_int("RANK", 0);
  const int world_size = environment_int("WORLD_SIZE", 1);
  const int local_rank = environment_int("LOCAL_RANK", rank);
  const bool leader = rank == 0;
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    std::fprintf(stderr, "train: RANK=%d and WORLD_SIZE=%d make no sense (run under hostnccl-run)\n", rank, world_size);
    return kExitUsage;
  }
  if (options.global_batch % static_cast<std::uint32_t>(world_size) != 0) {
    std::fprintf(stderr, "train: --global-batch %u is not a multiple of the %d ranks\n", options.global_batch,
                 world_size);
    return kExitUsage;
  }
  if (options.perturb_rank && (*options.perturb_rank < 0 || *options.perturb_rank >= world_size)) {
    std::fprintf(stderr, "train: --perturb-rank %d is not a rank of this job (0 .. %d)\n", *options.perturb_rank,
                 world_size - 1);
    return kExitUsage;
  }

  if (options.perturb_step && *options.perturb_step >= options.steps) {
    std::fprintf(stderr, "train: --perturb-step %llu is not a step of this run (0 .. %llu)\n",
                 static_cast<unsigned long long>(*options.perturb_step),
                 static_cast<unsigned long long>(options.steps - 1));
    return kExitUsage;
  }

  const train::MlpShape shape{kInputDim, options.hidden, kClasses};
  const std::size_t parameter_count = shape.parameter_count();
  if (options.perturb_element && *options.perturb_element >= parameter_count) {
    std::fprintf(stderr, "train: --perturb-element %llu is past the gradient's %zu elements\n",
                 static_cast<unsigned long long>(*options.perturb_element), parameter_count);
    return kExitUsage;
  }
  const train::SyntheticTask task(options.seed, shape.input_dim, shape.classes);

  // Every rank reads the checkpoint itself, before joining the job, so that a bad one stops every rank with the
  // same message and status instead of leaving the others waiting for rank 0.
  StartState start;
  if (!options.resume_from.empty()) {
    const std::string path = resolve_checkpoint_path(options);
    train::Checkpoint checkpoint;
    std::string error;
    if (!train::read_checkpoint(path, &checkpoint, &error)) {
      std::fprintf(stderr, "train: %s\n", error.c_str());
      return kExitUsage;
    }
    if (const std::string why = incompatibility(checkpoint, options, shape, parameter_count); !why.empty()) {
      std::fprintf(stderr, "train: cannot resume from %s: %s\n", path.c_str(), why.c_str());
      return kExitUsage;
    }
    if (leader && checkpoint.world_size != static_cast<std::uint32_t>(world_size)) {
      std::fprintf(stderr,
                   "train: note: %s was written by %u ranks and this run has %d: the run goes on, but it "
                   "cannot match the uninterrupted one bit for bit\n",
                   path.c_str(), checkpoint.world_size, world_size);
    }
    start.step = checkpoint.next_step;
    start.samples_consumed = checkpoint.samples_consumed;
    start.first_loss = checkpoint.first_loss;
    start.trajectory = checkpoint.trajectory;
    start.parameters = std::move(checkpoint.parameters);
    start.velocity = std::move(checkpoint.velocity);
  } else {
    // Only rank 0 makes the initial weights; the others hold NaN until the broadcast, so a missing or broken
    // broadcast cannot go unnoticed (the loss would be NaN).
    start.parameters = leader ? train::initial_parameters(shape, options.seed)
                              : std::vector<float>(parameter_count, std::numeric_limits<float>::quiet_NaN());
    start.velocity.assign(parameter_count, 0.0f);
  }
  // Only rank 0 writes checkpoints, so only it needs the directory; if it stops here, hostnccl-run stops the
  // others (they are still waiting for its unique id) and exits with its status.
  if (options.checkpoint_every > 0 && leader) {
    if (const std::string why = prepare_checkpoint_directory(options.checkpoint_dir); !why.empty()) {
      std::fprintf(stderr, "train: %s\n", why.c_str());
      return kExitUsage;
    }
  }

  ncclUniqueId id;
  std::string error;
  if (!detnccl::share_unique_id(rank, &id, &error)) {
    std::fprintf(stderr, "train: cannot share the NCCL unique id: %s\n", error.c_str());
    return kExitFailure;
  }
  std::unique_ptr<train::DataParallelGroup> group =
      train::join_data_parallel_group(id, world_size, rank, local_rank, &error);
  if (!group) {
    std::fprintf(stderr, "train: %s\n", error.c_str());
    return kExitFailure;
  }
  const SetStepFunction mark_step = find_step_marker();
  const std::vector<train::Bucket> buckets = train::gradient_buckets(parameter_count, options.bucket_elements);
  if (leader && !options.quiet) {
    std::printf(
        "training a %d-%d-%d MLP (%zu parameters) on %d rank(s), %s: steps %llu..%llu, global batch %u, "
        "%zu gradient bucket(s) of up to %llu floats, detnccl step markers %s\n",
        shape.input_dim, shape.hidden, shape.classes, parameter_count, world_size, group->buffer_kind(),
        static_cast<unsigned long long>(start.step), static_cast<unsigned long long>(options.steps - 1),
        options.global_batch, buckets.size(), static_cast<unsigned long long>(options.bucket_elements),
        mark_step != nullptr ? "on" : "off (shim not loaded)");
  }

  std::vector<float> parameters = std::move(start.parameters);
  std::vector<float> velocity = std::move(start.velocity);
  // Setup, as DDP's constructor does it: every rank starts from rank 0's weights. It runs before the first step
  // marker, so a resumed run's setup never falls inside `detnccl diff --from-step <its first step>`.
  if (!group->broadcast(parameters, 0, &error)) {
    std::fprintf(stderr, "train: %s\n", error.c_str());
    return kExitFailure;
  }

  const int local_batch = static_cast<int>(options.global_batch) / world_size;
  const float inverse_world = 1.0f / static_cast<float>(world_size);
  std::vector<float> gradient(parameter_count);
  std::vector<float> x;
  std::vector<int> labels;
  std::uint64_t samples_consumed = start.samples_consumed;
  float first_loss = start.first_loss;
  float last_loss = first_loss;
  std::uint64_t trajectory = start.trajectory;
  for (std::uint64_t step = start.step; step < options.steps; ++step) {
    if (mark_step != nullptr) mark_step(step);
    task.batch(samples_consumed + static_cast<std::uint64_t>(rank) * static_cast<std::uint64_t>(local_batch),
               local_batch, x, labels);
    const float local_loss = train::loss_and_gradient(shape, parameters, x, labels, gradient);

    if (options.perturb_rank == rank && options.perturb_step == step) {
      std::optional<std::size_t> element = options.perturb_element;
      if (!element) {
        // Recompute every rank's contribution (same weights, seeded data: the same bits those ranks compute) to
        // pick an element whose one-ulp change no summation order can round away.
        std::vector<std::vector<float>> local_gradients(static_cast<std::size_t>(world_size));
        std::vector<float> other_x;
        std::vector<int> other_labels;
        for (int r = 0; r < world_size; ++r) {
          auto& local = local_gradients[static_cast<std::size_t>(r)];
          if (r == rank) {
            local = gradient;
            continue;
          }
          local.resize(parameter_count);
          task.batch(samples_consumed + static_cast<std::uint64_t>(r) * static_cast<std::uint64_t>(local_batch),
                     local_batch, other_x, other_labels);
          train::loss_and_gradient(shape, parameters, other_x, other_labels, local);
        }
        element = train::visible_perturbation_element(local_gradients, static_cast<std::size_t>(rank));
        if (!element) {
          element = 0;
          std::printf(
              "note: no gradient element's one-ulp change survives every summation order at this step; "
              "perturbing element 0, which the AllReduce may round away\n");
        }
      }
      const float before = gradient[*element];
      gradient[*element] = std::nextafter(before, std::numeric_limits<float>::infinity());
      std::printf("perturbation at step %llu: gradient element %zu %.9g -> %.9g (one ulp), before its AllReduce\n",
                  static_cast<unsigned long long>(step), *element, static_cast<double>(before),
                  static_cast<double>(gradient[*element]));
    }

    for (const train::Bucket& bucket : buckets) {
      if (!group->all_reduce_sum(std::span<float>(gradient).subspan(bucket.offset, bucket.count), &error)) {
        std::fprintf(stderr, "train: step %llu: %s\n", static_cast<unsigned long long>(step), error.c_str());
        return kExitFailure;
      }
    }
    for (float& g : gradient) g *= inverse_world;

    float loss = local_loss;
    if (!group->all_reduce_sum(std::span<float>(&loss, 1), &error)) {
      std::fprintf(stderr, "train: step %llu: %s\n", static_cast<unsigned long long>(step), error.c_str());
      return kExitFailure;
    }
    loss *= inverse_world;
    if (step == 0) first_loss = loss;
    trajectory = extend_trajectory(trajectory, gradient, loss);
    last_loss = loss;

    train::sgd_momentum_step(parameters, velocity, gradient, options.learning_rate, options.momentum);
    samples_consumed += options.global_batch;

    const bool last = step + 1 == options.steps;
    if (leader && !options.quiet && (step % options.log_every == 0 || last)) {
      std::printf("step %5llu  loss %.6f\n", static_cast<unsigned long long>(step), static_cast<double>(loss));
    }
    if (leader && options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0) {
      train::Checkpoint checkpoint;
      checkpoint.next_step = step + 1;
      checkpoint.samples_consumed = samples_consumed;
      checkpoint.data_seed = options.seed;
      checkpoint.model_seed = options.seed;
      checkpoint.input_dim = static_cast<std::uint32_t>(shape.input_dim);
      checkpoint.hidden = static_cast<std::uint32_t>(shape.hidden);
      checkpoint.classes = static_cast<std::uint32_t>(shape.classes);
      checkpoint.world_size = static_cast<std::uint32_t>(world_size);
      checkpoint.global_batch = options.global_batch;
      checkpoint.learning_rate = options.learning_rate;
      checkpoint.momentum = options.momentum;
      checkpoint.first_loss = first_loss;
      checkpoint.trajectory = trajectory;
      checkpoint.parameters = parameters;
      checkpoint.velocity = velocity;
      const std::string path =
          (std::filesystem::path(options.checkpoint_dir) / train::checkpoint_file_name(step + 1)).string();
      if (!train::write_checkpoint(path, checkpoint, &error)) {
        std::fprintf(stderr, "train: %s\n", error.c_str());
        return kExitFailure;
      }
      if (!options.quiet) std::printf("checkpoint %s written\n", path.c_str());
    }
  }
  group.reset();

  const std::string fingerprint =
      detnccl::hash::format_digest(detnccl::hash::fingerprint(parameters.data(), parameters.size() * sizeof(float)));
  const bool went_down = std::isfinite(first_loss) && std::isfinite(last_loss) && last_loss < first_loss;
  if (leader) {
    const std::string resumed = start.step > 0 ? ", resumed at step " + std::to_string(start.step) : std::string();
    std::printf("loss %s from %.6f to %.6f over %llu steps%s (final weights fingerprint %s, trajectory %s)\n",
                went_down ? "went down" : "did NOT go down", static_cast<double>(first_loss),
                static_cast<double>(last_loss), static_cast<unsigned long long>(options.steps), resumed.c_str(),
                fingerprint.c_str(), detnccl::hash::format_digest(trajectory).c_str());
  }
  return went_down ? 0 : kExitFailure;
}
