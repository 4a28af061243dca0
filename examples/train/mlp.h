// The training example's model: a two-layer perceptron (input -> hidden with ReLU -> class logits) trained with
// softmax cross-entropy and SGD with momentum, all in fp32 on the CPU, single-threaded so that its bits depend only
// on its inputs.
//
// Parameters live in one flat vector, in this order: W1 (hidden x input, row-major), b1 (hidden), W2 (classes x
// hidden, row-major), b2 (classes). Gradients use the same layout, so a bucket is a slice of the vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace train {

struct MlpShape {
  int input_dim = 32;
  int hidden = 128;
  int classes = 10;

  // Number of floats in the flat parameter vector.
  std::size_t parameter_count() const;
  // Offsets of each tensor in the flat vector.
  std::size_t w1_offset() const { return 0; }
  std::size_t b1_offset() const;
  std::size_t w2_offset() const;
  std::size_t b2_offset() const;
};

// Fresh parameters drawn from `seed`: He-uniform W1, Glorot-uniform W2, zero biases.
std::vector<float> initial_parameters(const MlpShape& shape, std::uint64_t seed);

// Mean cross-entropy loss of the model on `count` samples (x: count x input_dim, row-major; labels: count), and its
// gradient with respect to every parameter, written into `gradient` (overwritten, same layout as `parameters`).
float loss_and_gradient(const MlpShape& shape, std::span<const float> parameters, std::span<const float> x,
                        std::span<const int> labels, std::span<float> gradient);

// One SGD step with momentum, as torch.optim.SGD does it: velocity = momentum * velocity + gradient;
// parameters -= learning_rate * velocity.
void sgd_momentum_step(std::span<float> parameters, std::span<float> velocity, std::span<const float> gradient,
                       float learning_rate, float momentum);

}  // namespace train
