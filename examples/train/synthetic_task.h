// The training example's task: classify points of [-1, 1)^d into the class a fixed random linear "teacher" scores
// highest. Sample i of the stream is a pure function of (seed, i), so every run sees the same data and each rank
// can generate its own shard of a global batch directly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace train {

class SyntheticTask {
 public:
  // The task of `classes` classes over `input_dim`-dimensional points, drawn from `seed`.
  SyntheticTask(std::uint64_t seed, int input_dim, int classes);

  int input_dim() const { return input_dim_; }
  int classes() const { return classes_; }

  // Writes sample `index`'s point into `x` (input_dim floats) and returns its class.
  int sample(std::uint64_t index, std::span<float> x) const;

  // Fills `x` (count * input_dim floats, row-major) and `labels` (count) with samples first .. first + count - 1.
  void batch(std::uint64_t first, int count, std::vector<float>& x, std::vector<int>& labels) const;

 private:
  std::uint64_t seed_;
  int input_dim_;
  int classes_;
  std::vector<float> teacher_;  // classes x input_dim, row-major
};

}  // namespace train
