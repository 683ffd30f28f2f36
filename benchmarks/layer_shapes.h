// The layer shapes of the forward benchmarks (issue 8's S1-S6), their
// inputs and weights, shared by mha's benchmarks and the peers'.
#ifndef MHA_BENCHMARKS_LAYER_SHAPES_H_
#define MHA_BENCHMARKS_LAYER_SHAPES_H_

#include <cstddef>
#include <vector>

#include "bench_util.h"

namespace mha_bench {

// args: batch, q_len, kv_len, d_model, heads, kv_heads, self, threads
struct LayerShape {
  std::size_t batch, q_len, kv_len, d, heads, kv_heads;
  bool self;
  int threads;

  explicit LayerShape(const benchmark::State& s)
      : batch(s.range(0)),
        q_len(s.range(1)),
        kv_len(s.range(2)),
        d(s.range(3)),
        heads(s.range(4)),
        kv_heads(s.range(5)),
        self(s.range(6) != 0),
        threads(static_cast<int>(s.range(7))) {}
  std::size_t head_dim() const { return d / heads; }
  std::size_t kv_dim() const { return kv_heads * head_dim(); }
  double Flops() const {
    const double q_rows = double(batch) * q_len,
                 kv_rows = double(batch) * kv_len;
    return 2.0 * q_rows * d * d + 2.0 * kv_rows * d * 2 * kv_dim() +
           4.0 * batch * heads * q_len * kv_len * head_dim() +
           2.0 * q_rows * d * d;
  }
};

// S1-S5 with separate inputs and as self-attention, S6, and a short prompt
// through S6's layer (self-attention), on each thread count.
inline void ForwardShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "q", "kv", "d", "h", "kvh", "self", "t"});
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 10, 10, 512, 8, 8},         // S1, the seed documents' example
      {1, 128, 128, 512, 8, 8},       // S2
      {8, 128, 128, 768, 12, 12},     // S3
      {1, 2048, 2048, 1024, 16, 16},  // S4
      {1, 4096, 4096, 512, 8, 8},     // S5
  };
  for (std::vector<int64_t> shape : shapes) {
    for (int self : {0, 1}) {
      for (int threads : ThreadCounts()) {
        std::vector<int64_t> args = shape;
        args.push_back(self);
        args.push_back(threads);
        b->Args(args);
      }
    }
  }
  for (int threads : ThreadCounts()) {  // S6: one query over 2048 keys
    b->Args({1, 1, 2048, 4096, 32, 32, 0, threads});
  }
  // A short prompt (64 tokens) through S6's layer: weights from DRAM, few
  // rows to use each of them.
  for (int threads : ThreadCounts()) {
    b->Args({1, 64, 64, 4096, 32, 32, 1, threads});
  }
}

// The inputs of a forward call: query, key, value (one tensor, three times,
// for self-attention), and the output.
struct Inputs {
  std::vector<float> query, key, value, out;
  const float* k() const { return key.empty() ? query.data() : key.data(); }
  const float* v() const { return value.empty() ? query.data() : value.data(); }
  explicit Inputs(const LayerShape& s)
      : query(RandomVector(s.batch * s.q_len * s.d, 4)),
        out(s.batch * s.q_len * s.d) {
    if (!s.self) {
      key = RandomVector(s.batch * s.kv_len * s.d, 5);
      value = RandomVector(key.size(), 6);
    }
  }
};

// Random [in, out] weights of a layer, as a user holds them.
struct Weights {
  std::vector<float> q, k, v, o;
  explicit Weights(const LayerShape& s)
      : q(RandomVector(s.d * s.d, 7)),
        k(RandomVector(s.d * s.kv_dim(), 8)),
        v(RandomVector(s.d * s.kv_dim(), 9)),
        o(RandomVector(s.d * s.d, 10)) {}
};

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_LAYER_SHAPES_H_
