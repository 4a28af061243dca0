#include "examples/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hash/fingerprint.h"
#include "posix/io.h"

namespace train {
namespace {

// RATIONALE: the fields are written in the host's byte order and the format says little-endian; every machine
// this example targets (x86-64, aarch64 Linux) is little-endian, and refusing to build elsewhere beats silently
// writing files other machines misread.
static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

constexpr std::size_t kHeaderBytes = 96;
constexpr std::size_t kChecksumBytes = 8;

// Writes fields one after the other into a buffer sized up front.
class ByteWriter {
 public:
  explicit ByteWriter(std::size_t size) : data_(size) {}
  template <typename T>
  void put(const T& value) {
    append(&value, sizeof(T));
  }
  void put_floats(const std::vector<float>& values) { append(values.data(), values.size() * sizeof(float)); }
  const std::vector<char>& data() const { return data_; }
  std::size_t written() const { return offset_; }

 private:
  void append(const void* bytes, std::size_t size) {
    std::memcpy(data_.data() + offset_, bytes, std::min(size, data_.size() - offset_));
    offset_ += size;
  }
  std::vector<char> data_;
  std::size_t offset_ = 0;
};

class ByteReader {
 public:
  explicit ByteReader(const std::vector<char>& data) : data_(data) {}
  void skip(std::size_t bytes) { offset_ += bytes; }
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, data_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  void get_floats(std::vector<float>& values, std::size_t count) {
    values.resize(count);
    std::memcpy(values.data(), data_.data() + offset_, count * sizeof(float));
    offset_ += count * sizeof(float);
  }

 private:
  const std::vector<char>& data_;
  std::size_t offset_ = 0;
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string checkpoint_file_name(std::uint64_t steps) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08llu.ckpt", static_cast<unsigned long long>(steps));
  return name;
}

bool write_checkpoint(const std::string& path, const Checkpoint& checkpoint, std::string* error) {
  const std::size_t parameter_bytes = checkpoint.parameters.size() * sizeof(float);
  if (checkpoint.velocity.size() != checkpoint.parameters.size()) {
    *error = "internal error: momentum and parameters differ in length";
    return false;
  }
  ByteWriter out(kHeaderBytes + 2 * parameter_bytes + kChecksumBytes);
  out.put(kCheckpointMagic);
  out.put(kCheckpointVersion);
  out.put(static_cast<std::uint32_t>(kHeaderBytes));
  out.put(checkpoint.next_step);
  out.put(checkpoint.samples_consumed);
  out.put(checkpoint.data_seed);
  out.put(checkpoint.model_seed);
  out.put(checkpoint.input_dim);
  out.put(checkpoint.hidden);
  out.put(checkpoint.classes);
  out.put(checkpoint.world_size);
  out.put(checkpoint.global_batch);
  out.put(checkpoint.learning_rate);
  out.put(checkpoint.momentum);
  out.put(checkpoint.first_loss);
  out.put(checkpoint.trajectory);
  out.put(static_cast<std::uint64_t>(checkpoint.parameters.size()));
  if (out.written() != kHeaderBytes) {
    *error = "internal error: checkpoint header layout";
    return false;
  }
  out.put_floats(checkpoint.parameters);
  out.put_floats(checkpoint.velocity);
  out.put(detnccl::hash::fingerprint(out.data().data(), out.written()));

  // The rename itself is durable only once the directory is synced.
  return detnccl::posix::replace_file(path, out.data().data(), out.data().size(), error,
                                      {.mode = 0644, .exclusive = false, .sync_directory = true});
}

bool read_checkpoint(const std::string& path, Checkpoint* checkpoint, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open checkpoint " + path + ": " + errno_text();
    return false;
  }
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string where = "checkpoint " + path + " ";
  if (data.size() < kHeaderBytes + kChecksumBytes) {
    *error = where + "is too short (" + std::to_string(data.size()) + " bytes) to be a checkpoint";
    return false;
  }
  if (std::memcmp(data.data(), kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
    *error = where + "is not a checkpoint of this program (bad magic)";
    return false;
  }
  ByteReader reader(data);
  reader.skip(sizeof kCheckpointMagic);
  const auto version = reader.get<std::uint32_t>();
  const auto header_bytes = reader.get<std::uint32_t>();
  if (version != kCheckpointVersion || header_bytes != kHeaderBytes) {
    *error = where + "has format version " + std::to_string(version) + "; this program reads version " +
             std::to_string(kCheckpointVersion);
    return false;
  }
  checkpoint->next_step = reader.get<std::uint64_t>();
  checkpoint->samples_consumed = reader.get<std::uint64_t>();
  checkpoint->data_seed = reader.get<std::uint64_t>();
  checkpoint->model_seed = reader.get<std::uint64_t>();
  checkpoint->input_dim = reader.get<std::uint32_t>();
  checkpoint->hidden = reader.get<std::uint32_t>();
  checkpoint->classes = reader.get<std::uint32_t>();
  checkpoint->world_size = reader.get<std::uint32_t>();
  checkpoint->global_batch = reader.get<std::uint32_t>();
  checkpoint->learning_rate = reader.get<float>();
  checkpoint->momentum = reader.get<float>();
  checkpoint->first_loss = reader.get<float>();
  checkpoint->trajectory = reader.get<std::uint64_t>();
  const auto count = reader.get<std::uint64_t>();
  // Checked before any arithmetic on count, so a damaged count cannot overflow the expected size.
  const std::uint64_t payload = data.size() - kHeaderBytes - kChecksumBytes;
  if (count > payload / (2 * sizeof(float)) || count * 2 * sizeof(float) != payload) {
    *error = where + "is corrupt or truncated: it is " + std::to_string(data.size()) + " bytes but says it holds " +
             std::to_string(count) + " parameters";
    return false;
  }
  std::uint64_t stored_checksum = 0;
  std::memcpy(&stored_checksum, data.data() + data.size() - kChecksumBytes, kChecksumBytes);
  const std::uint64_t computed = detnccl::hash::fingerprint(data.data(), data.size() - kChecksumBytes);
  if (stored_checksum != computed) {
    *error = where + "is corrupt: checksum mismatch (stored " + detnccl::hash::format_digest(stored_checksum) +
             ", computed " + detnccl::hash::format_digest(computed) + ")";
    return false;
  }
  reader.get_floats(checkpoint->parameters, count);
  reader.get_floats(checkpoint->velocity, count);
  return true;
}

}  // namespace train
