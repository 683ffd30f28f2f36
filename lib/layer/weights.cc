// MultiHeadAttention's construction and weights: validation, packing from
// either layout into the GEMM's panels (layer_weights.cc), and random
// initialization.

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "lib/common/check.h"
#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/config.h"
#include "lib/layer/layer_weights.h"
#include "mha/layer.h"

namespace mha {
namespace {

constexpr const char* kWhere = "mha::MultiHeadAttention";

// Standard normal numbers from a generator whose sequence the C++ standard
// fixes, by Box-Muller, so a seed gives the same weights everywhere.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : engine_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double u1 = Uniform(), u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    spare_ = radius * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return radius * std::cos(kTwoPi * u2);
  }

 private:
  double Uniform() {  // in (0, 1]
    return (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
  }
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config)
    : config_(detail::ResolveConfig(kWhere, config)) {
  const std::size_t d = config_.d_model;
  const std::vector<float> zeros(d * d);
  MultiHeadAttentionWeights weights{zeros.data(), zeros.data(), zeros.data(),
                                    zeros.data()};
  if (config_.bias) {
    weights.b_q = weights.b_k = weights.b_v = weights.b_o = zeros.data();
  }
  set_weights(weights);
}

MultiHeadAttention::MultiHeadAttention(std::size_t d_model,
                                       std::size_t num_heads)
    : MultiHeadAttention(
          MultiHeadAttentionConfig{d_model, num_heads, 0, false}) {
  init_random(0);
}

const MultiHeadAttentionConfig& MultiHeadAttention::config() const {
  return config_;
}

void MultiHeadAttention::set_weights(const MultiHeadAttentionWeights& w) {
  constexpr const char* kSet = "mha::MultiHeadAttention::set_weights";
  detail::CheckNotNull(kSet, "weights.w_q", w.w_q);
  detail::CheckNotNull(kSet, "weights.w_k", w.w_k);
  detail::CheckNotNull(kSet, "weights.w_v", w.w_v);
  detail::CheckNotNull(kSet, "weights.w_o", w.w_o);
  const float* biases[] = {w.b_q, w.b_k, w.b_v, w.b_o};
  const char* names[] = {"weights.b_q", "weights.b_k", "weights.b_v",
                         "weights.b_o"};
  for (int i = 0; i < 4; ++i) {
    if (config_.bias && biases[i] == nullptr) {
      detail::Fail(kSet, ": ", names[i],
                   " must be given when config.bias is true");
    }
    if (!config_.bias && biases[i] != nullptr) {
      detail::Fail(kSet, ": ", names[i],
                   " must be null when config.bias is false");
    }
  }
  const std::size_t target = detail::PreferredTargetIndex();
  weights_ = std::make_shared<const detail::LayerWeights>(
      config_, w, target, detail::PanelCols(target));
}

void MultiHeadAttention::init_random(std::uint64_t seed) {
  const std::size_t d = config_.d_model, kv = detail::KvDim(config_);
  const double stddev = std::sqrt(2.0 / static_cast<double>(d));
  Normal normal(seed);
  auto draw = [&](std::size_t count) {
    std::vector<float> values(count);
    for (float& x : values) x = static_cast<float>(normal() * stddev);
    return values;
  };
  // Drawn in the order of the seed script: W_q, W_k, W_v, W_o, each [in, out].
  const std::vector<float> w_q = draw(d * d), w_k = draw(d * kv),
                           w_v = draw(d * kv), w_o = draw(d * d);
  const std::vector<float> b_q(config_.bias ? d : 0),
      b_kv(config_.bias ? kv : 0);
  MultiHeadAttentionWeights weights{w_q.data(), w_k.data(), w_v.data(),
                                    w_o.data()};
  if (config_.bias) {
    weights.b_q = weights.b_o = b_q.data();
    weights.b_k = weights.b_v = b_kv.data();
  }
  set_weights(weights);
}

}  // namespace mha
