// Attention: the fused kernel, the same call returning weights, and an
// unfused composition (GEMM, softmax, GEMM per head) built from our own
// public kernels and, when found, OpenBLAS and oneDNN: the way BLAS-based
// attention runs (PyTorch's: pytorch_bench.cc). All in one run, so the
// ratios compare like with like.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "attention_problem.h"
#include "bench_util.h"
#include "peers.h"

namespace mha_bench {
namespace {

// The decode cores of Shapes, for K and V stored in 16 bits.
void DecodeCoreShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "h", "kvh", "q", "kv", "d", "causal", "t"});
  for (int threads : ThreadCounts()) {
    b->Args({1, 32, 32, 1, 2048, 128, 0, threads});
    b->Args({1, 32, 8, 1, 4096, 128, 0, threads});
  }
}

void BM_AttentionFused(benchmark::State& state) {
  Problem p(state);
  WithThreads(state.range(7), [&] {
    for (auto _ : state) p.Run();
  });
  Report(state, p.Flops(), p.Bytes());
}
BENCHMARK(BM_AttentionFused)->Apply(Shapes)->UseRealTime();

// The fused kernel over K and V stored in 16 bits; GB/s of the bytes stored.
void AttentionFused16(benchmark::State& state, mha::Precision precision) {
  Problem p(state);
  p.Store16(precision);
  WithThreads(state.range(7), [&] {
    for (auto _ : state) p.Run16(precision);
  });
  Report(state, p.Flops(), p.Bytes(mha::bytes_per_element(precision)));
}
void BM_AttentionFusedBF16(benchmark::State& state) {
  AttentionFused16(state, mha::Precision::BF16);
}
void BM_AttentionFusedF16(benchmark::State& state) {
  AttentionFused16(state, mha::Precision::F16);
}
BENCHMARK(BM_AttentionFusedBF16)->Apply(DecodeCoreShapes)->UseRealTime();
BENCHMARK(BM_AttentionFusedF16)->Apply(DecodeCoreShapes)->UseRealTime();

void BM_AttentionWithWeights(benchmark::State& state) {
  Problem p(state);
  std::vector<float> weights(p.shape.batch * p.shape.num_heads * p.shape.q_len *
                             p.shape.kv_len);
  WithThreads(state.range(7), [&] {
    for (auto _ : state) p.Run(weights.data());
  });
  Report(state, p.Flops(), p.Bytes() + 4.0 * weights.size());
}
BENCHMARK(BM_AttentionWithWeights)->Apply(Shapes)->UseRealTime();

// With an additive bias (ALiBi's), shapes of BiasShapes.
void BM_AttentionBiasFused(benchmark::State& state) {
  Problem p(state);
  p.UseBias();
  WithThreads(state.range(7), [&] {
    for (auto _ : state) p.Run();
  });
  Report(state, p.Flops(), p.Bytes() + 4.0 * p.bias.size());
}
BENCHMARK(BM_AttentionBiasFused)->Apply(BiasShapes)->UseRealTime();

// scores = Q K^T (+ the bias), softmax, out = P V for each (batch, head),
// heads in parallel, with GEMM and softmax from `Gemm` (ours or a BLAS):
// gemm(trans_b, m, n, k, alpha, a, b, beta, c). The bias is added as users
// of a BLAS add it, copied into the scores that the product then adds to
// (beta 1).
template <class Gemm>
void RunComposed(Problem& p, std::vector<float>& scores, Gemm&& gemm) {
  const auto& s = p.shape;
  const std::size_t group = s.num_heads / s.num_kv_heads,
                    qk = s.q_len * s.kv_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  tbb::parallel_for(std::size_t{0}, s.batch * s.num_heads, [&](std::size_t bh) {
    const std::size_t b = bh / s.num_heads, h = bh % s.num_heads;
    const float* q = p.q.data() + b * p.q_layout.batch + h * p.q_layout.head;
    const std::size_t kv_offset =
        b * p.kv_layout.batch + h / group * p.kv_layout.head;
    float* sc = scores.data() + bh * qk;
    if (p.mask.bias) std::copy(p.bias.begin(), p.bias.end(), sc);
    gemm(true, s.q_len, s.kv_len, s.head_dim, scale, q, p.k.data() + kv_offset,
         p.mask.bias ? 1.0f : 0.0f, sc);
    mha::softmax(sc, s.kv_len, sc, s.kv_len, s.q_len, s.kv_len);
    gemm(false, s.q_len, s.head_dim, s.kv_len, 1.0f, sc, p.v.data() + kv_offset,
         0.0f, p.out.data() + b * p.q_layout.batch + h * p.q_layout.head);
  });
}

void ComposedArgs(benchmark::internal::Benchmark* b) { Shapes(b); }

void BM_AttentionComposedMha(benchmark::State& state) {
  Problem p(state);
  if (p.mask.causal) return state.SkipWithError("composition is unmasked");
  std::vector<float> scores(p.shape.batch * p.shape.num_heads * p.shape.q_len *
                            p.shape.kv_len);
  auto gemm = [](bool tb, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, const float* a, const float* b, float beta,
                 float* c) {
    mha::sgemm(mha::Transpose::No,
               tb ? mha::Transpose::Yes : mha::Transpose::No, m, n, k, alpha, a,
               k, b, tb ? k : n, beta, c, n);
  };
  WithThreads(state.range(7), [&] {
    for (auto _ : state) RunComposed(p, scores, gemm);
  });
  Report(state, p.Flops(), p.Bytes());
}
BENCHMARK(BM_AttentionComposedMha)->Apply(ComposedArgs)->UseRealTime();

#ifdef MHA_HAVE_OPENBLAS
// The OpenBLAS composition, with the bias when `bias`.
void ComposedOpenBLAS(benchmark::State& state, bool bias) {
  Problem p(state);
  if (p.mask.causal) return state.SkipWithError("composition is unmasked");
  if (bias) p.UseBias();
  std::vector<float> scores(p.shape.batch * p.shape.num_heads * p.shape.q_len *
                            p.shape.kv_len);
  auto gemm = [](bool tb, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, const float* a, const float* b, float beta,
                 float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, a, k, b, tb ? k : n, beta, c, n);
  };
  WithThreads(state.range(7), [&] {
    SetPeerThreads(1);  // heads run in parallel on oneTBB: OpenBLAS on one
    for (auto _ : state) RunComposed(p, scores, gemm);
  });
  Report(state, p.Flops(), p.Bytes() + 4.0 * p.bias.size(),
         OpenBlasLabel() + " per head, heads on oneTBB x" +
             std::to_string(state.range(7)) + " + mha::softmax");
}
void BM_AttentionComposedOpenBLAS(benchmark::State& state) {
  ComposedOpenBLAS(state, false);
}
void BM_AttentionBiasComposedOpenBLAS(benchmark::State& state) {
  ComposedOpenBLAS(state, true);
}
BENCHMARK(BM_AttentionComposedOpenBLAS)->Apply(ComposedArgs)->UseRealTime();
BENCHMARK(BM_AttentionBiasComposedOpenBLAS)->Apply(BiasShapes)->UseRealTime();
#endif

#ifdef MHA_HAVE_ONEDNN
// As PyTorch's unfused CPU attention: one batched matmul over all heads for
// scale * Q K^T, a softmax, one batched matmul for P V, all oneDNN
// primitives on oneDNN's own threads (no oneTBB beside them).
// With the bias when `bias`, copied into every head's scores, which the
// first matmul adds to (a sum post-op), as the BLAS compositions do.
void ComposedOneDNN(benchmark::State& state, bool bias) {
  Problem p(state);
  const auto& s = p.shape;
  if (p.mask.causal || s.num_kv_heads != s.num_heads) {
    return state.SkipWithError("composition is unmasked, without GQA");
  }
  if (bias) p.UseBias();
  SetPeerThreads(state.range(7));  // before the primitives are made
  const std::size_t heads = s.batch * s.num_heads;
  std::vector<float> scores(heads * s.q_len * s.kv_len);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  OneDnnMatmul qk(heads, s.q_len, s.kv_len, s.head_dim, true, scale, bias);
  OneDnnSoftmax softmax(heads * s.q_len, s.kv_len);
  OneDnnMatmul pv(heads, s.q_len, s.head_dim, s.kv_len, false);
  WithThreads(state.range(7), [&] {
    for (auto _ : state) {
      if (bias) {  // on the benchmark's threads, as the other compositions
        tbb::parallel_for(std::size_t{0}, heads, [&](std::size_t h) {
          std::copy(p.bias.begin(), p.bias.end(),
                    scores.begin() + h * p.bias.size());
        });
      }
      qk.Run(p.q.data(), p.k.data(), scores.data());
      softmax.Run(scores.data());
      pv.Run(scores.data(), p.v.data(), p.out.data());
    }
  });
  Report(state, p.Flops(), p.Bytes() + 4.0 * p.bias.size(), OneDnnLabel());
  LetPeerThreadsIdle();
}
void BM_AttentionComposedOneDNN(benchmark::State& state) {
  ComposedOneDNN(state, false);
}
void BM_AttentionBiasComposedOneDNN(benchmark::State& state) {
  ComposedOneDNN(state, true);
}
BENCHMARK(BM_AttentionComposedOneDNN)->Apply(ComposedArgs)->UseRealTime();
BENCHMARK(BM_AttentionBiasComposedOneDNN)->Apply(BiasShapes)->UseRealTime();
#endif

}  // namespace
}  // namespace mha_bench
