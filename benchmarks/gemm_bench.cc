// SGEMM: square sizes and the shapes attention layers use (head_dim-sized
// k or n, projections with many rows), against OpenBLAS when found.
#include <string>

#include "bench_util.h"
#include "peers.h"

namespace mha_bench {
namespace {

void GemmArgs(benchmark::internal::Benchmark* b) {
  for (int n : {64, 128, 256, 512, 1024, 2048}) b->Args({n, n, n});
  b->Args({512, 512, 64});      // Q K^T of one head
  b->Args({512, 64, 512});      // P V of one head
  b->Args({1024, 3072, 1024});  // fused QKV projection of 1024 tokens
  b->Args({1, 4096, 1024});     // decode projection (GEMV), weights in L3
  b->Args({1, 8192, 4096});     // decode projection, weights past L3 (DRAM)
  b->Args({16, 4096, 1024});    // small-batch decode projection
}

// Times multiply(m, n, k, a, b, c) computing C = A B (row-major) for the
// benchmark's shape; `peer` labels a library we compare with.
template <class Multiply>
void TimeGemm(benchmark::State& state, const std::string& peer,
              Multiply&& multiply) {
  const std::size_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto a = RandomVector(m * k, 1), b = RandomVector(k * n, 2);
  std::vector<float> c(m * n);
  for (auto _ : state) {
    multiply(m, n, k, a.data(), b.data(), c.data());
    benchmark::DoNotOptimize(c.data());
  }
  Report(state, 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n), peer);
}

void BM_Sgemm(benchmark::State& state) {
  TimeGemm(state, "",
           [](std::size_t m, std::size_t n, std::size_t k, const float* a,
              const float* b, float* c) {
             mha::sgemm(mha::Transpose::No, mha::Transpose::No, m, n, k, 1.0f,
                        a, k, b, n, 0.0f, c, n);
           });
}
BENCHMARK(BM_Sgemm)->Apply(GemmArgs)->ArgNames({"m", "n", "k"})->UseRealTime();

#ifdef MHA_HAVE_OPENBLAS
void BM_SgemmOpenBLAS(benchmark::State& state) {
  openblas_set_num_threads(tbb::this_task_arena::max_concurrency());
  TimeGemm(state, "OpenBLAS",
           [](std::size_t m, std::size_t n, std::size_t k, const float* a,
              const float* b, float* c) {
             cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k,
                         1.0f, a, k, b, n, 0.0f, c, n);
           });
}
BENCHMARK(BM_SgemmOpenBLAS)
    ->Apply(GemmArgs)
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime();
#endif

#ifdef MHA_HAVE_ONEDNN
void BM_SgemmOneDNN(benchmark::State& state) {
  OneDnnMatmul matmul(1, state.range(0), state.range(1), state.range(2), false);
  TimeGemm(state, "oneDNN",
           [&matmul](std::size_t, std::size_t, std::size_t, const float* a,
                     const float* b, float* c) { matmul.Run(a, b, c); });
}
BENCHMARK(BM_SgemmOneDNN)
    ->Apply(GemmArgs)
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime();
#endif

}  // namespace
}  // namespace mha_bench
