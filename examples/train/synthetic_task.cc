#include "examples/train/synthetic_task.h"

#include <cstddef>

#include "examples/train/counter_random.h"

namespace train {
namespace {
// Streams of the data seed: one for the teacher, one for the points.
constexpr std::uint64_t kTeacherStream = 1;
constexpr std::uint64_t kPointStream = 2;
}  // namespace

SyntheticTask::SyntheticTask(std::uint64_t seed, int input_dim, int classes)
    : seed_(seed), input_dim_(input_dim), classes_(classes), teacher_(static_cast<std::size_t>(classes) * input_dim) {
  for (std::size_t i = 0; i < teacher_.size(); ++i) teacher_[i] = random_symmetric(seed_, kTeacherStream, i);
}

int SyntheticTask::sample(std::uint64_t index, std::span<float> x) const {
  const auto dim = static_cast<std::uint64_t>(input_dim_);
  for (std::uint64_t i = 0; i < dim; ++i) x[i] = random_symmetric(seed_, kPointStream, index * dim + i);
  int best = 0;
  float best_score = 0.0f;
  for (int k = 0; k < classes_; ++k) {
    float score = 0.0f;
    for (int i = 0; i < input_dim_; ++i) score += teacher_[static_cast<std::size_t>(k) * input_dim_ + i] * x[i];
    if (k == 0 || score > best_score) {
      best = k;
      best_score = score;
    }
  }
  return best;
}

void SyntheticTask::batch(std::uint64_t first, int count, std::vector<float>& x, std::vector<int>& labels) const {
  x.resize(static_cast<std::size_t>(count) * input_dim_);
  labels.resize(static_cast<std::size_t>(count));
  for (int s = 0; s < count; ++s) {
    const std::span<float> point(x.data() + static_cast<std::size_t>(s) * input_dim_, input_dim_);
    labels[s] = sample(first + static_cast<std::uint64_t>(s), point);
  }
}

}  // namespace train
