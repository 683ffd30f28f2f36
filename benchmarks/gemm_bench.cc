// SGEMM and GEMV at the shapes attention layers run (projections of few or
// many tokens, Q K^T and P V of one head, the decode projection), on 1 and
// all threads, against OpenBLAS (cblas_sgemm, and cblas_sgemv for M = 1) and
// oneDNN's matmul in the same binary.
#include <algorithm>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hwy/aligned_allocator.h"
#include "peers.h"

namespace mha_bench {
namespace {

// args: m, n, k, B transposed, threads
void GemmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "bt", "t"});
  const std::vector<std::vector<int>> shapes = {
      {64, 64, 64, 0},     {128, 128, 128, 0},    {256, 256, 256, 0},
      {512, 512, 512, 0},  {1024, 1024, 1024, 0}, {2048, 2048, 2048, 0},
      {20, 512, 512, 0},    // the seed's projection: 2 x 10 tokens
      {128, 512, 512, 0},   // a short prompt's projection
      {64, 4096, 4096, 0},  // a short prompt's, d_model 4096 (B from DRAM)
      {16, 4096, 4096, 0}, {96, 4096, 4096, 0},  // fewer and more tokens
      {64, 1024, 1024, 0},  // a short prompt's, d_model 1024 (B from L3)
      {128, 2304, 768, 0},  // Q, K and V projected at once, d_model 768
      {32, 2304, 768, 0},   // the same for a batch of 32 tokens
      {1024, 768, 768, 0}, {2048, 1024, 1024, 0}, {4096, 512, 512, 0},
      {1, 4096, 4096, 0},   // the decode projection (GEMV), from DRAM
      {1, 4096, 4096, 1},   // the same, weights stored [out, in] (nn.Linear)
      {1, 4096, 1024, 0},   // a decode projection from L3
      {2048, 2048, 64, 1},  // Q K^T of one head (K stored [kv, head_dim])
      {2048, 64, 2048, 0},  // P V of one head
  };
  for (const std::vector<int>& shape : shapes) {
    for (int threads : ThreadCounts()) {
      b->Args({shape[0], shape[1], shape[2], shape[3], threads});
    }
  }
}

// Times multiply(m, n, k, a, b, c) computing C = A op(B) (row-major; B is
// stored [n, k] when transposed) for the benchmark's shape. Rates: GFLOP/s,
// and GB/s of the operands read and written once. Labels the run with the
// target mha ran on; a peer's benchmark relabels it with the peer's name.
template <class Multiply>
void TimeGemm(benchmark::State& state, Multiply&& multiply) {
  const std::size_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool trans_b = state.range(3) != 0;
  const auto a = RandomVector(m * k, 1), b = RandomVector(k * n, 2);
  // C on 64-byte boundaries, as the tensor allocators of PyTorch and oneDNN
  // give it: mha streams a large C past the caches (epilogue-inl.h) only
  // where its rows are vector-aligned, which std::vector's 16 bytes are not.
  // Every library times the same buffer.
  const hwy::AlignedFreeUniquePtr<float[]> c =
      hwy::AllocateAligned<float>(m * n);
  std::fill(c.get(), c.get() + m * n, 0.0f);
  WithThreads(state.range(4), [&] {
    for (auto _ : state) {
      multiply(m, n, k, trans_b, a.data(), b.data(), c.get());
      benchmark::DoNotOptimize(c.get());
    }
  });
  Report(state, 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n));
}

void BM_Sgemm(benchmark::State& state) {
  TimeGemm(state, [](std::size_t m, std::size_t n, std::size_t k, bool trans_b,
                     const float* a, const float* b, float* c) {
    mha::sgemm(mha::Transpose::No,
               trans_b ? mha::Transpose::Yes : mha::Transpose::No, m, n, k,
               1.0f, a, k, b, trans_b ? k : n, 0.0f, c, n);
  });
}
BENCHMARK(BM_Sgemm)->Apply(GemmShapes)->UseRealTime();

#ifdef MHA_HAVE_OPENBLAS
// cblas_sgemm; for M = 1, cblas_sgemv (y = B^T x), OpenBLAS's own GEMV.
void BM_SgemmOpenBLAS(benchmark::State& state) {
  TimeGemm(state, [](std::size_t m, std::size_t n, std::size_t k, bool trans_b,
                     const float* a, const float* b, float* c) {
    if (m == 1) {
      trans_b ? cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, k, a, 1,
                            0.0f, c, 1)
              : cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, b, n, a, 1,
                            0.0f, c, 1);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, k, b,
                trans_b ? k : n, 0.0f, c, n);
  });
  state.SetLabel(OpenBlasLabel());
  LetPeerThreadsIdle();
}
BENCHMARK(BM_SgemmOpenBLAS)->Apply(GemmShapes)->UseRealTime();
#endif

#ifdef MHA_HAVE_ONEDNN
void BM_SgemmOneDNN(benchmark::State& state) {
  SetPeerThreads(state.range(4));  // before the primitive is made
  OneDnnMatmul matmul(1, state.range(0), state.range(1), state.range(2),
                      state.range(3) != 0);
  TimeGemm(state, [&matmul](std::size_t, std::size_t, std::size_t, bool,
                            const float* a, const float* b,
                            float* c) { matmul.Run(a, b, c); });
  state.SetLabel(OneDnnLabel());
  LetPeerThreadsIdle();
}
BENCHMARK(BM_SgemmOneDNN)->Apply(GemmShapes)->UseRealTime();
#endif

}  // namespace
}  // namespace mha_bench
