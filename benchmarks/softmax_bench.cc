// Row softmax: bandwidth-bound for short rows, exp-bound for long ones.
#include "bench_util.h"

namespace mha_bench {
namespace {

void BM_Softmax(benchmark::State& state) {
  const std::size_t rows = state.range(0), cols = state.range(1);
  auto x = RandomVector(rows * cols, 3);
  WithThreads(state.range(2), [&] {
    for (auto _ : state) {
      mha::softmax(x.data(), cols, x.data(), cols, rows, cols);
      benchmark::DoNotOptimize(x.data());
    }
  });
  // max, exp-and-sum, scale: about 4 flops per element besides the exp
  Report(state, 4.0 * rows * cols, 8.0 * rows * cols);
}
BENCHMARK(BM_Softmax)
    ->Apply([](benchmark::internal::Benchmark* b) {
      const int shapes[][2] = {
          {1024, 10}, {1024, 1024}, {64, 32768}, {4096, 4096}};
      for (const auto& shape : shapes) {
        for (int threads : ThreadCounts()) {
          b->Args({shape[0], shape[1], threads});
        }
      }
    })
    ->ArgNames({"rows", "cols", "t"})
    ->UseRealTime();

}  // namespace
}  // namespace mha_bench
