// Row softmax: bandwidth-bound for short rows, exp-bound for long ones.
#include "bench_util.h"

namespace mha_bench {
namespace {

void BM_Softmax(benchmark::State& state) {
  const std::size_t rows = state.range(0), cols = state.range(1);
  auto x = RandomVector(rows * cols, 3);
  for (auto _ : state) {
    mha::softmax(x.data(), cols, x.data(), cols, rows, cols);
    benchmark::DoNotOptimize(x.data());
  }
  // max, exp-and-sum, scale: about 4 flops per element besides the exp
  Report(state, 4.0 * rows * cols, 8.0 * rows * cols);
}
BENCHMARK(BM_Softmax)
    ->Args({1024, 10})
    ->Args({1024, 1024})
    ->Args({64, 32768})
    ->Args({4096, 4096})
    ->ArgNames({"rows", "cols"})
    ->UseRealTime();

}  // namespace
}  // namespace mha_bench
