// The layer: forward at the seed's shape and at model sizes, and one decode
// step of forward_cached against a long cache.
#include "bench_util.h"

namespace mha_bench {
namespace {

// A layer config from the benchmark's first three arguments.
mha::MultiHeadAttentionConfig ConfigOf(const benchmark::State& state) {
  return {std::size_t(state.range(0)), std::size_t(state.range(1)),
          std::size_t(state.range(2)), false};
}

double LayerFlops(const mha::MultiHeadAttentionConfig& c, std::size_t rows,
                  double attention_pairs) {
  const double d = c.d_model, kv = c.num_kv_heads * (d / c.num_heads);
  return 2.0 * rows * d * (d + 2 * kv) + 2.0 * rows * d * d +
         4.0 * attention_pairs * d;
}

// args: d_model, heads, kv_heads, batch, seq
void BM_Forward(benchmark::State& state) {
  const mha::MultiHeadAttentionConfig c = ConfigOf(state);
  const std::size_t batch = state.range(3), seq = state.range(4);
  mha::MultiHeadAttention layer(c);
  layer.init_random(1);
  const auto x = RandomVector(batch * seq * c.d_model, 4);
  std::vector<float> out(x.size());
  WithThreads(state.range(5), [&] {
    for (auto _ : state) {
      layer.forward(x.data(), x.data(), x.data(), batch, seq, seq, out.data());
      benchmark::DoNotOptimize(out.data());
    }
  });
  Report(state, LayerFlops(c, batch * seq, double(batch) * seq * seq));
}
// args: d_model, heads, kv_heads, batch, seq (or context), threads
void LayerShapes(benchmark::internal::Benchmark* b,
                 const std::vector<std::vector<int64_t>>& shapes) {
  for (std::vector<int64_t> shape : shapes) {
    for (int threads : ThreadCounts()) {
      shape.push_back(threads);
      b->Args(shape);
      shape.pop_back();
    }
  }
}

BENCHMARK(BM_Forward)
    ->ArgNames({"d", "h", "kvh", "b", "seq", "t"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      LayerShapes(b, {{512, 8, 8, 2, 10},  // the seed documents' example
                      {1024, 16, 16, 1, 512},
                      {2048, 16, 4, 4, 256}});
    })
    ->UseRealTime();

// One token per sequence against a cache holding `context` tokens.
void BM_DecodeStep(benchmark::State& state) {
  const mha::MultiHeadAttentionConfig c = ConfigOf(state);
  const std::size_t batch = state.range(3), context = state.range(4);
  mha::MultiHeadAttention layer(c);
  layer.init_random(1);
  mha::KVCache prefilled(c, batch, context + 1);
  const auto prompt = RandomVector(batch * context * c.d_model, 5);
  std::vector<float> out(prompt.size());
  layer.forward_cached(prompt.data(), batch, context, prefilled, out.data());
  const auto token = RandomVector(batch * c.d_model, 6);
  mha::KVCache cache = prefilled;
  WithThreads(state.range(5), [&] {
    for (auto _ : state) {
      state.PauseTiming();
      cache = prefilled;
      state.ResumeTiming();
      layer.forward_cached(token.data(), batch, 1, cache, out.data());
    }
  });
  const double kv = c.num_kv_heads * (c.d_model / c.num_heads);
  const double weight_bytes = 4.0 * c.d_model * (2 * c.d_model + 2 * kv);
  const double cache_bytes = 4.0 * 2 * batch * (context + 1) * kv;
  Report(state, LayerFlops(c, batch, double(batch) * (context + 1)),
         weight_bytes + cache_bytes);
}
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"d", "h", "kvh", "b", "ctx", "t"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      LayerShapes(b, {{1024, 16, 4, 1, 2048},
                      {4096, 32, 8, 1, 4096},
                      {2048, 16, 16, 8, 1024}});
    })
    ->UseRealTime();

}  // namespace
}  // namespace mha_bench
