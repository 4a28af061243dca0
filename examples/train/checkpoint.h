// Checkpoints of the training example: everything a resumed run needs to continue bit for bit as if it had never
// stopped (parameters, momentum, the step counter and the position in the data stream), in one file with a
// checksum. The byte layout is in docs/train-example.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train {

// "DNCTRAIN": the first 8 bytes of every checkpoint.
inline constexpr char kCheckpointMagic[8] = {'D', 'N', 'C', 'T', 'R', 'A', 'I', 'N'};
inline constexpr std::uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  std::uint64_t next_step = 0;         // steps completed: the resumed run starts at this step
  std::uint64_t samples_consumed = 0;  // index of the next sample of the synthetic stream
  std::uint64_t data_seed = 0;
  std::uint64_t model_seed = 0;
  std::uint32_t input_dim = 0;
  std::uint32_t hidden = 0;
  std::uint32_t classes = 0;
  std::uint32_t world_size = 0;  // of the run that wrote it
  std::uint32_t global_batch = 0;
  float learning_rate = 0.0f;
  float momentum = 0.0f;
  float first_loss = 0.0f;       // the loss of step 0, for the final report of a resumed run
  std::uint64_t trajectory = 0;  // digest of every step's reduced gradient and loss so far (train_main.cc)
  std::vector<float> parameters;
  std::vector<float> velocity;  // momentum buffers, same length as parameters
};

// The file name of the checkpoint written after `steps` steps: "step-00000040.ckpt".
std::string checkpoint_file_name(std::uint64_t steps);

// Writes `checkpoint` to `path` atomically: a temporary file in the same directory, fsync, rename, fsync of the
// directory; a reader sees the old file or the new one, never a partial one. Returns false with a message in
// *error when the file cannot be written.
bool write_checkpoint(const std::string& path, const Checkpoint& checkpoint, std::string* error);

// Reads and validates the checkpoint at `path` (size, magic, version, lengths, checksum). Returns false with a
// message naming the file and what is wrong in *error when it is missing, unreadable or corrupt.
bool read_checkpoint(const std::string& path, Checkpoint* checkpoint, std::string* error);

}  // namespace train
