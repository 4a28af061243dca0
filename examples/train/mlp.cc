#include "examples/train/mlp.h"

#include <algorithm>
#include <cmath>

#include "examples/train/counter_random.h"

namespace train {

std::size_t MlpShape::b1_offset() const { return static_cast<std::size_t>(hidden) * input_dim; }
std::size_t MlpShape::w2_offset() const { return b1_offset() + static_cast<std::size_t>(hidden); }
std::size_t MlpShape::b2_offset() const { return w2_offset() + static_cast<std::size_t>(classes) * hidden; }
std::size_t MlpShape::parameter_count() const { return b2_offset() + static_cast<std::size_t>(classes); }

std::vector<float> initial_parameters(const MlpShape& shape, std::uint64_t seed) {
  // Streams of the model seed (kept apart from the data seed's streams by using a different seed value).
  constexpr std::uint64_t kW1Stream = 11;
  constexpr std::uint64_t kW2Stream = 12;
  std::vector<float> parameters(shape.parameter_count(), 0.0f);
  const float w1_limit = std::sqrt(6.0f / static_cast<float>(shape.input_dim));
  const float w2_limit = std::sqrt(6.0f / static_cast<float>(shape.hidden + shape.classes));
  for (std::size_t i = 0; i < shape.b1_offset(); ++i) parameters[i] = w1_limit * random_symmetric(seed, kW1Stream, i);
  for (std::size_t i = shape.w2_offset(); i < shape.b2_offset(); ++i) {
    parameters[i] = w2_limit * random_symmetric(seed, kW2Stream, i - shape.w2_offset());
  }
  return parameters;
}

float loss_and_gradient(const MlpShape& shape, std::span<const float> parameters, std::span<const float> x,
                        std::span<const int> labels, std::span<float> gradient) {
  const auto in = static_cast<std::size_t>(shape.input_dim);
  const auto hid = static_cast<std::size_t>(shape.hidden);
  const auto cls = static_cast<std::size_t>(shape.classes);
  const float* w1 = parameters.data() + shape.w1_offset();
  const float* b1 = parameters.data() + shape.b1_offset();
  const float* w2 = parameters.data() + shape.w2_offset();
  const float* b2 = parameters.data() + shape.b2_offset();
  float* gw1 = gradient.data() + shape.w1_offset();
  float* gb1 = gradient.data() + shape.b1_offset();
  float* gw2 = gradient.data() + shape.w2_offset();
  float* gb2 = gradient.data() + shape.b2_offset();
  std::fill(gradient.begin(), gradient.end(), 0.0f);

  const std::size_t count = labels.size();
  const float inverse_count = 1.0f / static_cast<float>(count);
  std::vector<float> pre(hid), hidden(hid), logits(cls), dlogits(cls), dpre(hid);
  double loss_sum = 0.0;
  for (std::size_t s = 0; s < count; ++s) {
    const float* xs = x.data() + s * in;
    for (std::size_t j = 0; j < hid; ++j) {
      float acc = b1[j];
      for (std::size_t i = 0; i < in; ++i) acc += w1[j * in + i] * xs[i];
      pre[j] = acc;
      hidden[j] = std::max(acc, 0.0f);
    }
    float max_logit = 0.0f;
    for (std::size_t k = 0; k < cls; ++k) {
      float acc = b2[k];
      for (std::size_t j = 0; j < hid; ++j) acc += w2[k * hid + j] * hidden[j];
      logits[k] = acc;
      max_logit = k == 0 ? acc : std::max(max_logit, acc);
    }
    // Softmax relative to the largest logit, so exp never overflows.
    float normaliser = 0.0f;
    for (std::size_t k = 0; k < cls; ++k) normaliser += std::exp(logits[k] - max_logit);
    const auto label = static_cast<std::size_t>(labels[s]);
    loss_sum += static_cast<double>(std::log(normaliser) + max_logit - logits[label]);

    for (std::size_t k = 0; k < cls; ++k) {
      const float probability = std::exp(logits[k] - max_logit) / normaliser;
      dlogits[k] = (probability - (k == label ? 1.0f : 0.0f)) * inverse_count;
      gb2[k] += dlogits[k];
      for (std::size_t j = 0; j < hid; ++j) gw2[k * hid + j] += dlogits[k] * hidden[j];
    }
    for (std::size_t j = 0; j < hid; ++j) {
      float dh = 0.0f;
      for (std::size_t k = 0; k < cls; ++k) dh += w2[k * hid + j] * dlogits[k];
      dpre[j] = pre[j] > 0.0f ? dh : 0.0f;
      gb1[j] += dpre[j];
      for (std::size_t i = 0; i < in; ++i) gw1[j * in + i] += dpre[j] * xs[i];
    }
  }
  return static_cast<float>(loss_sum / static_cast<double>(count));
}

void sgd_momentum_step(std::span<float> parameters, std::span<float> velocity, std::span<const float> gradient,
                       float learning_rate, float momentum) {
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    velocity[i] = momentum * velocity[i] + gradient[i];
    parameters[i] -= learning_rate * velocity[i];
  }
}

}  // namespace train
