// The attention problems of the core's benchmarks (mha::attention's
// shapes, inputs and work), shared by mha's benchmarks and the peers'.
#ifndef MHA_BENCHMARKS_ATTENTION_PROBLEM_H_
#define MHA_BENCHMARKS_ATTENTION_PROBLEM_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.h"

namespace mha_bench {

// args: batch, heads, kv_heads, q_len, kv_len, head_dim, causal, threads
inline void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "h", "kvh", "q", "kv", "d", "causal", "t"});
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 8, 8, 10, 10, 64, 0},        // the seed's shape
      {8, 12, 12, 128, 128, 64, 0},    // the attention core of S3
      {1, 25, 25, 1024, 1024, 64, 0},  // PyTorch flash-attention RFC shape
      {1, 25, 25, 1024, 1024, 64, 1},
      {1, 8, 8, 4096, 4096, 64, 0},  // the prefill core of S5
      {1, 8, 8, 4096, 4096, 64, 1},
      {4, 16, 16, 512, 512, 64, 1},  // batched causal prefill
      {1, 32, 32, 1, 2048, 128, 0},  // the decode core of d4096 h32
      {1, 32, 8, 1, 4096, 128, 0},   // GQA decode, long context
      {8, 32, 32, 1, 2048, 128, 0},  // batched decode
      {4, 32, 8, 16, 2048, 128, 1},  // a 16-token chunk over a GQA cache
  };
  for (std::vector<int64_t> shape : shapes) {
    for (int threads : ThreadCounts()) {
      shape.push_back(threads);
      b->Args(shape);
      shape.pop_back();
    }
  }
}

// The prefill cores of Shapes that an additive bias (mask.bias) is
// benchmarked on: S3's, the flash-attention RFC's, S5's.
inline void BiasShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "h", "kvh", "q", "kv", "d", "causal", "t"});
  for (int threads : ThreadCounts()) {
    b->Args({8, 12, 12, 128, 128, 64, 0, threads});
    b->Args({1, 25, 25, 1024, 1024, 64, 0, threads});
    b->Args({1, 8, 8, 4096, 4096, 64, 0, threads});
  }
}

// Q, K and V of one shape, head-major ([batch, heads, tokens, head_dim]).
struct Problem {
  mha::AttentionShape shape;
  mha::AttentionMask mask;
  std::vector<float> q, k, v, out, bias;
  std::vector<std::uint16_t> k16, v16;  // K and V in 16 bits, when asked
  mha::Layout q_layout, kv_layout;

  explicit Problem(const benchmark::State& state)
      : shape{std::size_t(state.range(0)), std::size_t(state.range(1)),
              std::size_t(state.range(2)), std::size_t(state.range(3)),
              std::size_t(state.range(4)), std::size_t(state.range(5))} {
    const auto& s = shape;
    mask.causal = state.range(6) != 0;
    q = RandomVector(s.batch * s.num_heads * s.q_len * s.head_dim, 1);
    k = RandomVector(s.batch * s.num_kv_heads * s.kv_len * s.head_dim, 2);
    v = RandomVector(k.size(), 3);
    out.resize(q.size());
    q_layout = {s.num_heads * s.q_len * s.head_dim, s.q_len * s.head_dim,
                s.head_dim};
    kv_layout = {s.num_kv_heads * s.kv_len * s.head_dim, s.kv_len * s.head_dim,
                 s.head_dim};
  }
  // An additive bias over [q_len, kv_len], ALiBi's for one head (-|i - j|
  // / 16), as mask.bias.
  void UseBias() {
    const auto& s = shape;
    bias.resize(s.q_len * s.kv_len);
    for (std::size_t i = 0; i < s.q_len; ++i) {
      for (std::size_t j = 0; j < s.kv_len; ++j) {
        bias[i * s.kv_len + j] = -std::abs(double(i) - double(j)) / 16.0;
      }
    }
    mask.bias = bias.data();
  }
  double Flops() const {
    return 4.0 * shape.batch * shape.num_heads * shape.head_dim *
           VisiblePairs(shape.q_len, shape.kv_len, mask.causal);
  }
  // K and V read once (in `kv_bytes` an element), Q read and out written
  // once.
  double Bytes(std::size_t kv_bytes = sizeof(float)) const {
    return 4.0 * 2 * q.size() + double(kv_bytes) * 2 * k.size();
  }
  void Run(float* weights = nullptr) {
    mha::attention(shape, q.data(), q_layout, k.data(), kv_layout, v.data(),
                   kv_layout, out.data(), q_layout, mask, 0.0f, weights);
  }
  // K and V stored in precision p (BF16 or F16), for Run16.
  void Store16(mha::Precision p) {
    auto round = [p](float x) {
      return p == mha::Precision::BF16 ? mha::to_bf16(x) : mha::to_f16(x);
    };
    for (float x : k) k16.push_back(round(x));
    for (float x : v) v16.push_back(round(x));
  }
  void Run16(mha::Precision p) {
    mha::attention(shape, q.data(), q_layout, k16.data(), kv_layout, v16.data(),
                   kv_layout, p, out.data(), q_layout, mask);
  }
};

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_ATTENTION_PROBLEM_H_
