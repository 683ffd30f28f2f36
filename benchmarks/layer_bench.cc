// The layer, the API users call: forward at the shapes of issue 8 (S1-S6,
// with separate inputs and as self-attention) and one decode step of
// forward_cached over a long cache (one sequence, or a batch), on 1 and all
// threads, against the compositions users build from the peers in the same
// binary:
//   oneDNN: matmul primitives (weights reordered once, as ours are packed)
//     around a batched matmul, the softmax primitive and a batched matmul;
//   OpenBLAS: cblas_sgemm (and, for one token, cblas_sgemv) around
//     mha::softmax, its calls spread over row blocks and heads on oneTBB.
// PyTorch's own layer is timed beside them by pytorch_bench.cc. The
// AfterGap variants time S1 and S2 each call after an idle gap (TimeCalls).
// Rates: GFLOP/s of the multiply-adds (projections of Q, K, V and the
// output, Q K^T, P V); GB/s of weights and cache read, for decode steps.
// mha's forward at S6 (one query over 2048 keys) runs in the absorbed order
// (lib/layer/absorbed_attention.h), K and V never projected, with 1/120 of
// those multiply-adds: its rate is effective, counting the same work as
// the peers', and only its time compares.
// The BF16 and F16 variants store the weights (and the decode step's cache)
// in 16 bits; their GB/s count the bytes stored.
#include <tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bench_util.h"
#include "layer_shapes.h"
#include "peers.h"

namespace mha_bench {
namespace {

// S4 as self-attention, and S6 (the absorbed order, which reads W_k and
// W_v as stored), for the weights stored in 16 bits.
void SixteenBitForwardShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "q", "kv", "d", "h", "kvh", "self", "t"});
  for (int threads : ThreadCounts()) {
    b->Args({1, 2048, 2048, 1024, 16, 16, 1, threads});
    b->Args({1, 1, 2048, 4096, 32, 32, 0, threads});
  }
}

// How a forward benchmark calls: back to back (timed together, UseRealTime),
// or each call after the calling thread ran state.range(8) microseconds of
// other work (a spin, as an engine's own serial code between two layers),
// each call timed alone (UseManualTime). oneTBB's workers fall asleep after
// about 100 us without work, and the next call's first parallel step waits
// for them to wake; libgomp's threads, which oneDNN runs on, spin for
// longer. Back to back never shows it.
struct BackToBack {};
struct AfterGaps {};

template <class Calls, class Call>
void TimeCalls(benchmark::State& state, Call&& call) {
  if constexpr (std::is_same_v<Calls, BackToBack>) {
    for (auto _ : state) call();
  } else {
    using Clock = std::chrono::steady_clock;
    const std::chrono::microseconds gap(state.range(8));
    for (auto _ : state) {
      const Clock::time_point gap_end = Clock::now() + gap;
      while (Clock::now() < gap_end) {
      }
      const Clock::time_point start = Clock::now();
      call();
      state.SetIterationTime(
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
}

// S1 and S2 (short calls, where a wake-up weighs most) after gaps.
// args: ForwardShapes' and gap_us.
void ForwardAfterGapShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "q", "kv", "d", "h", "kvh", "self", "t", "gap_us"});
  for (int gap_us : {0, 250, 2000}) {
    for (int threads : ThreadCounts()) {
      b->Args({2, 10, 10, 512, 8, 8, 0, threads, gap_us});
      b->Args({1, 128, 128, 512, 8, 8, 0, threads, gap_us});
    }
  }
  // A fixed count: the gaps, not timed, would otherwise multiply the run's
  // length (Google Benchmark's minimum time counts the timed part).
  b->Iterations(300);
}

// forward with the weights stored in `precision`.
template <class Calls = BackToBack>
void Forward(benchmark::State& state, mha::Precision precision) {
  const LayerShape s(state);
  mha::MultiHeadAttention layer({s.d, s.heads, s.kv_heads, false, precision});
  layer.init_random(1);
  Inputs in(s);
  WithThreads(s.threads, [&] {
    TimeCalls<Calls>(state, [&] {
      layer.forward(in.query.data(), in.k(), in.v(), s.batch, s.q_len, s.kv_len,
                    in.out.data());
      benchmark::DoNotOptimize(in.out.data());
    });
  });
  Report(state, s.Flops());
}
void BM_Forward(benchmark::State& state) {
  Forward(state, mha::Precision::F32);
}
void BM_ForwardBF16(benchmark::State& state) {
  Forward(state, mha::Precision::BF16);
}
void BM_ForwardF16(benchmark::State& state) {
  Forward(state, mha::Precision::F16);
}
void BM_ForwardAfterGap(benchmark::State& state) {
  Forward<AfterGaps>(state, mha::Precision::F32);
}
BENCHMARK(BM_Forward)->Apply(ForwardShapes)->UseRealTime();
BENCHMARK(BM_ForwardBF16)->Apply(SixteenBitForwardShapes)->UseRealTime();
BENCHMARK(BM_ForwardF16)->Apply(SixteenBitForwardShapes)->UseRealTime();
BENCHMARK(BM_ForwardAfterGap)->Apply(ForwardAfterGapShapes)->UseManualTime();

#ifdef MHA_HAVE_OPENBLAS
// C[rows, n] = A[rows, k] B[k, n] with single-threaded cblas_sgemm calls,
// blocks of 64 rows (or, for few rows, of 256 columns) in parallel on oneTBB.
void ParallelSgemm(std::size_t rows, std::size_t n, std::size_t k,
                   const float* a, std::size_t lda, const float* b,
                   std::size_t ldb, float* c, std::size_t ldc) {
  constexpr std::size_t kRows = 64, kCols = 256;
  if (rows >= 2 * kRows) {
    tbb::parallel_for(
        std::size_t{0}, (rows + kRows - 1) / kRows, [&](std::size_t i) {
          const std::size_t r0 = i * kRows;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                      std::min(kRows, rows - r0), n, k, 1.0f, a + r0 * lda, lda,
                      b, ldb, 0.0f, c + r0 * ldc, ldc);
        });
    return;
  }
  tbb::parallel_for(std::size_t{0}, (n + kCols - 1) / kCols,
                    [&](std::size_t j) {
                      const std::size_t c0 = j * kCols;
                      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                                  rows, std::min(kCols, n - c0), k, 1.0f, a,
                                  lda, b + c0, ldb, 0.0f, c + c0, ldc);
                    });
}

// Attention per (sequence, head) in parallel: S = scale Q K^T, softmax,
// O = P V, written into the context rows.
void OpenBlasAttention(const LayerShape& s, const float* q, std::size_t ldq,
                       const float* k, const float* v, std::size_t ldkv,
                       float* scores, float* context) {
  const std::size_t hd = s.head_dim(), group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  tbb::parallel_for(std::size_t{0}, s.batch * s.heads, [&](std::size_t bh) {
    const std::size_t b = bh / s.heads, h = bh % s.heads;
    const std::size_t kv_col = h / group * hd;
    float* sc = scores + bh * s.q_len * s.kv_len;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.q_len, s.kv_len, hd,
                scale, q + b * s.q_len * ldq + h * hd, ldq,
                k + b * s.kv_len * ldkv + kv_col, ldkv, 0.0f, sc, s.kv_len);
    mha::softmax(sc, s.kv_len, sc, s.kv_len, s.q_len, s.kv_len);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.q_len, hd,
                s.kv_len, 1.0f, sc, s.kv_len, v + b * s.kv_len * ldkv + kv_col,
                ldkv, 0.0f, context + b * s.q_len * s.d + h * hd, s.d);
  });
}

void BM_ForwardOpenBLAS(benchmark::State& state) {
  const LayerShape s(state);
  const Weights w(s);
  Inputs in(s);
  const std::size_t q_rows = s.batch * s.q_len, kv_rows = s.batch * s.kv_len;
  const std::size_t kv = s.kv_dim();
  std::vector<float> q(q_rows * s.d), k(kv_rows * kv), v(kv_rows * kv);
  std::vector<float> scores(s.batch * s.heads * s.q_len * s.kv_len);
  std::vector<float> context(q_rows * s.d);
  WithThreads(s.threads, [&] {
    SetPeerThreads(1);  // OpenBLAS runs inside oneTBB's tasks, one each
    for (auto _ : state) {
      ParallelSgemm(q_rows, s.d, s.d, in.query.data(), s.d, w.q.data(), s.d,
                    q.data(), s.d);
      ParallelSgemm(kv_rows, kv, s.d, in.k(), s.d, w.k.data(), kv, k.data(),
                    kv);
      ParallelSgemm(kv_rows, kv, s.d, in.v(), s.d, w.v.data(), kv, v.data(),
                    kv);
      OpenBlasAttention(s, q.data(), s.d, k.data(), v.data(), kv, scores.data(),
                        context.data());
      ParallelSgemm(q_rows, s.d, s.d, context.data(), s.d, w.o.data(), s.d,
                    in.out.data(), s.d);
      benchmark::DoNotOptimize(in.out.data());
    }
  });
  Report(state, s.Flops(), 0.0,
         OpenBlasLabel() + " on oneTBB x" + std::to_string(s.threads) +
             " + mha::softmax");
}
BENCHMARK(BM_ForwardOpenBLAS)->Apply(ForwardShapes)->UseRealTime();
#endif

#ifdef MHA_HAVE_ONEDNN
// The layer as oneDNN primitives: matmuls for the projections (weights in
// the layout oneDNN prefers, reordered once), a batched matmul for
// scale * Q K^T over (batch, kv head, group) with K broadcast over the
// group, the softmax primitive, a batched matmul for P V writing the context
// rows, and the output matmul.
class OneDnnLayer {
 public:
  OneDnnLayer(const LayerShape& s, const Weights& w) : s_(s) {
    using dims = dnnl::memory::dims;
    using D = dnnl::memory::dim;
    const D B = s.batch, Lq = s.q_len, Lk = s.kv_len, d = s.d;
    const D hd = s.head_dim(), kvh = s.kv_heads, g = s.heads / s.kv_heads;
    const D kv = s.kv_dim();
    q_ = Projection(B * Lq, d, d, w.q);
    k_ = Projection(B * Lk, kv, d, w.k);
    v_ = Projection(B * Lk, kv, d, w.v);
    o_ = Projection(B * Lq, d, d, w.o);
    // Q [B, Lq, d] as {B, kvh, g, Lq, hd}; K [B, Lk, kv] as {B, kvh, 1, hd,
    // Lk} (transposed by strides); S dense {B, kvh, g, Lq, Lk}.
    const auto f32 = dnnl::memory::data_type::f32;
    q_md_ = dnnl::memory::desc(dims{B, kvh, g, Lq, hd}, f32,
                               dims{Lq * d, g * hd, hd, d, 1});
    kt_md_ = dnnl::memory::desc(dims{B, kvh, 1, hd, Lk}, f32,
                                dims{Lk * kv, hd, hd, 1, kv});
    s_md_ = dnnl::memory::desc(
        dims{B, kvh, g, Lq, Lk}, f32,
        dims{kvh * g * Lq * Lk, g * Lq * Lk, Lq * Lk, Lk, 1});
    v_md_ = dnnl::memory::desc(dims{B, kvh, 1, Lk, hd}, f32,
                               dims{Lk * kv, hd, hd, kv, 1});
    ctx_md_ = q_md_;
    dnnl::primitive_attr scaled;
    scaled.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(hd))});
    const dnnl::engine& engine = OneDnnContext::Get().engine;
    scores_ = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(q_md_, kt_md_, s_md_), scaled, engine));
    context_ = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(s_md_, v_md_, ctx_md_), engine));
    softmax_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, s_md_,
                                    4),
        engine));
    qp_.resize(B * Lq * d);
    kp_.resize(B * Lk * kv);
    vp_.resize(B * Lk * kv);
    sp_.resize(B * s.heads * Lq * Lk);
    cp_.resize(B * Lq * d);
  }

  void Forward(const float* query, const float* key, const float* value,
               float* out) {
    q_.Run(query, qp_.data());
    k_.Run(key, kp_.data());
    v_.Run(value, vp_.data());
    Run(scores_, {{DNNL_ARG_SRC, Memory(q_md_, qp_.data())},
                  {DNNL_ARG_WEIGHTS, Memory(kt_md_, kp_.data())},
                  {DNNL_ARG_DST, Memory(s_md_, sp_.data())}});
    const dnnl::memory scores = Memory(s_md_, sp_.data());
    Run(softmax_, {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}});
    Run(context_, {{DNNL_ARG_SRC, scores},
                   {DNNL_ARG_WEIGHTS, Memory(v_md_, vp_.data())},
                   {DNNL_ARG_DST, Memory(ctx_md_, cp_.data())}});
    o_.Run(cp_.data(), out);
  }

 private:
  // y[rows, n] = x[rows, k] W[k, n], W reordered once into the layout the
  // primitive chose.
  struct Matmul {
    dnnl::matmul primitive;
    dnnl::memory::desc x, y;
    dnnl::memory weights;
    void Run(const float* in, float* out) {
      OneDnnLayer::Run(primitive,
                       {{DNNL_ARG_SRC, Memory(x, const_cast<float*>(in))},
                        {DNNL_ARG_WEIGHTS, weights},
                        {DNNL_ARG_DST, Memory(y, out)}});
    }
  };
  static Matmul Projection(dnnl::memory::dim rows, dnnl::memory::dim n,
                           dnnl::memory::dim k, const std::vector<float>& w) {
    using dims = dnnl::memory::dims;
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    OneDnnContext& context = OneDnnContext::Get();
    Matmul m;
    m.x = dnnl::memory::desc(dims{rows, k}, f32, tag::ab);
    m.y = dnnl::memory::desc(dims{rows, n}, f32, tag::ab);
    const dnnl::memory::desc any(dims{k, n}, f32, tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.x, any, m.y),
                                          context.engine);
    m.primitive = dnnl::matmul(pd);
    m.weights = dnnl::memory(pd.weights_desc(), context.engine);
    dnnl::memory plain(dnnl::memory::desc(dims{k, n}, f32, tag::ab),
                       context.engine, const_cast<float*>(w.data()));
    dnnl::reorder(plain, m.weights).execute(context.stream, plain, m.weights);
    context.stream.wait();
    return m;
  }
  static dnnl::memory Memory(const dnnl::memory::desc& md, float* data) {
    return dnnl::memory(md, OneDnnContext::Get().engine, data);
  }
  static void Run(const dnnl::primitive& p,
                  const std::unordered_map<int, dnnl::memory>& args) {
    OneDnnContext& context = OneDnnContext::Get();
    p.execute(context.stream, args);
    context.stream.wait();
  }

  LayerShape s_;
  Matmul q_, k_, v_, o_;
  dnnl::memory::desc q_md_, kt_md_, s_md_, v_md_, ctx_md_;
  dnnl::matmul scores_, context_;
  dnnl::softmax_forward softmax_;
  std::vector<float> qp_, kp_, vp_, sp_, cp_;
};

template <class Calls>
void ForwardOneDnn(benchmark::State& state) {
  const LayerShape s(state);
  SetPeerThreads(s.threads);  // before the primitives are made
  const Weights w(s);
  Inputs in(s);
  OneDnnLayer layer(s, w);
  WithThreads(s.threads, [&] {
    TimeCalls<Calls>(state, [&] {
      layer.Forward(in.query.data(), in.k(), in.v(), in.out.data());
      benchmark::DoNotOptimize(in.out.data());
    });
  });
  Report(state, s.Flops(), 0.0, OneDnnLabel());
  LetPeerThreadsIdle();
}
void BM_ForwardOneDNN(benchmark::State& state) {
  ForwardOneDnn<BackToBack>(state);
}
void BM_ForwardOneDNNAfterGap(benchmark::State& state) {
  ForwardOneDnn<AfterGaps>(state);
}
BENCHMARK(BM_ForwardOneDNN)->Apply(ForwardShapes)->UseRealTime();
BENCHMARK(BM_ForwardOneDNNAfterGap)
    ->Apply(ForwardAfterGapShapes)
    ->UseManualTime();
#endif

// One decode step: a token against a cache of `context` tokens, d4096 h32,
// 32 or 8 KV heads. args: d_model, heads, kv_heads, context, threads.
void DecodeShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"d", "h", "kvh", "ctx", "t"});
  for (int kv_heads : {32, 8}) {
    for (int threads : ThreadCounts()) {
      b->Args({4096, 32, kv_heads, 2047, threads});
    }
  }
}

// One decode step of a batch of sequences (a serving engine's), a token
// each against its cache of `context` tokens, d4096 h32 with 8 KV heads:
// 4 rows through the weights (the matrix-vector path) and 8 (the blocked
// product). args: batch, then DecodeShapes'.
void BatchedDecodeShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"b", "d", "h", "kvh", "ctx", "t"});
  for (int batch : {4, 8}) {
    for (int threads : ThreadCounts()) {
      b->Args({batch, 4096, 32, 8, 511, threads});
    }
  }
}

struct DecodeShape {
  std::size_t batch, d, heads, kv_heads, context;
  int threads;
  // From DecodeShapes' args, or BatchedDecodeShapes' (batched).
  DecodeShape(const benchmark::State& s, bool batched)
      : batch(batched ? s.range(0) : 1),
        d(s.range(batched + 0)),
        heads(s.range(batched + 1)),
        kv_heads(s.range(batched + 2)),
        context(s.range(batched + 3)),
        threads(static_cast<int>(s.range(batched + 4))) {}
  std::size_t head_dim() const { return d / heads; }
  std::size_t kv_dim() const { return kv_heads * head_dim(); }
  // The bytes a step must read: the four weights and every sequence's
  // whole cache, stored in `element_bytes` each.
  double Bytes(std::size_t element_bytes = sizeof(float)) const {
    return double(element_bytes) * (2.0 * d * d + 2.0 * d * kv_dim() +
                                    2.0 * batch * (context + 1) * kv_dim());
  }
  double Flops() const {
    return batch * (2.0 * (2.0 * d * d + 2.0 * d * kv_dim()) +
                    4.0 * heads * (context + 1) * head_dim());
  }
};

// The cache of `layer` (DecodeStep's: init_random(1)) after a prompt of
// s.context tokens. That prefill (about 200 GFLOP at d_model 4096 and 2047
// tokens) took 75 s of mha-bench --quick's SCALAR pass, 95 s in all, when
// each of Google Benchmark's runs of a step (one iteration, then the timed
// ones) repeated it on the target being timed. It is made once per shape
// and precision (the thread count changes no bit of it), on the best target
// whatever the target in force, which only the step is timed on.
const mha::KVCache& PrefilledCache(const mha::MultiHeadAttention& layer,
                                   const DecodeShape& s,
                                   mha::Precision precision) {
  using Key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t,
                         std::size_t, mha::Precision>;
  static Key filled_for;
  static std::unique_ptr<mha::KVCache> cache;
  const Key key{s.batch, s.d, s.heads, s.kv_heads, s.context, precision};
  if (cache && filled_for == key) return *cache;
  cache = std::make_unique<mha::KVCache>(layer.config(), s.batch, s.context + 1,
                                         precision);
  const auto prompt = RandomVector(s.batch * s.context * s.d, 5);
  std::vector<float> out(prompt.size());
  const std::string timed_target = mha::active_target();
  mha::set_target("");
  layer.forward_cached(prompt.data(), s.batch, s.context, *cache, out.data());
  mha::set_target(timed_target);
  filled_for = key;
  return *cache;
}

// One decode step, weights and cache stored in `precision`.
void DecodeStep(benchmark::State& state, mha::Precision precision,
                bool batched = false) {
  const DecodeShape s(state, batched);
  mha::MultiHeadAttention layer({s.d, s.heads, s.kv_heads, false, precision});
  layer.init_random(1);
  const mha::KVCache& prefilled = PrefilledCache(layer, s, precision);
  const auto token = RandomVector(s.batch * s.d, 6);
  std::vector<float> out(token.size());
  mha::KVCache cache = prefilled;
  WithThreads(s.threads, [&] {
    for (auto _ : state) {
      state.PauseTiming();
      cache = prefilled;  // back to `context` tokens
      EvictCaches();
      state.ResumeTiming();
      layer.forward_cached(token.data(), s.batch, 1, cache, out.data());
    }
  });
  Report(state, s.Flops(), s.Bytes(mha::bytes_per_element(precision)));
}
void BM_DecodeStep(benchmark::State& state) {
  DecodeStep(state, mha::Precision::F32);
}
void BM_DecodeBatch(benchmark::State& state) {
  DecodeStep(state, mha::Precision::F32, true);
}
void BM_DecodeStepBF16(benchmark::State& state) {
  DecodeStep(state, mha::Precision::BF16);
}
void BM_DecodeStepF16(benchmark::State& state) {
  DecodeStep(state, mha::Precision::F16);
}
BENCHMARK(BM_DecodeStep)->Apply(DecodeShapes)->UseRealTime();
BENCHMARK(BM_DecodeStepBF16)->Apply(DecodeShapes)->UseRealTime();
BENCHMARK(BM_DecodeStepF16)->Apply(DecodeShapes)->UseRealTime();
BENCHMARK(BM_DecodeBatch)->Apply(BatchedDecodeShapes)->UseRealTime();

#ifdef MHA_HAVE_OPENBLAS
// y[m, n] = x[m, k] W[k, n] by single-threaded cblas_sgemv (one row) or
// cblas_sgemm on column blocks of W in parallel on oneTBB, each streaming
// its own columns; row i of y at y + i * ldy.
void ParallelProjection(std::size_t m, std::size_t n, std::size_t k,
                        const float* x, const float* w, float* y,
                        std::size_t ldy) {
  constexpr std::size_t kCols = 512;
  tbb::parallel_for(
      std::size_t{0}, (n + kCols - 1) / kCols, [&](std::size_t j) {
        const std::size_t c0 = j * kCols, cols = std::min(kCols, n - c0);
        if (m == 1) {
          cblas_sgemv(CblasRowMajor, CblasTrans, k, cols, 1.0f, w + c0, n, x, 1,
                      0.0f, y + c0, 1);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, cols, k,
                      1.0f, x, k, w + c0, n, 0.0f, y + c0, ldy);
        }
      });
}

// The decode step as OpenBLAS users write it: sgemv projections (sgemm for
// a batch of sequences), the new K and V appended to each sequence's
// [tokens, kv_dim] cache, per sequence and head an sgemv for the scores,
// mha::softmax and an sgemv for the context, an sgemv (sgemm) out.
void DecodeStepOpenBLAS(benchmark::State& state, bool batched) {
  const DecodeShape s(state, batched);
  const std::size_t d = s.d, kv = s.kv_dim(), hd = s.head_dim();
  const std::size_t group = s.heads / s.kv_heads, n = s.context + 1;
  const std::size_t batch = s.batch, cache = n * kv;  // floats per sequence
  const auto wq = RandomVector(d * d, 7), wk = RandomVector(d * kv, 8);
  const auto wv = RandomVector(d * kv, 9), wo = RandomVector(d * d, 10);
  std::vector<float> keys = RandomVector(batch * cache, 11);
  std::vector<float> values = RandomVector(batch * cache, 12);
  const auto tokens = RandomVector(batch * d, 6);
  std::vector<float> q(batch * d), scores(batch * s.heads * n);
  std::vector<float> context(batch * d), out(batch * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  WithThreads(s.threads, [&] {
    SetPeerThreads(1);  // OpenBLAS runs inside oneTBB's tasks, one each
    for (auto _ : state) {
      state.PauseTiming();
      EvictCaches();
      state.ResumeTiming();
      // Each sequence's new K and V straight into its cache's last row.
      const std::size_t newest = s.context * kv;
      ParallelProjection(batch, d, d, tokens.data(), wq.data(), q.data(), d);
      ParallelProjection(batch, kv, d, tokens.data(), wk.data(),
                         keys.data() + newest, cache);
      ParallelProjection(batch, kv, d, tokens.data(), wv.data(),
                         values.data() + newest, cache);
      tbb::parallel_for(std::size_t{0}, batch * s.heads, [&](std::size_t t) {
        const std::size_t seq = t / s.heads, h = t % s.heads;
        const std::size_t column = seq * cache + h / group * hd;
        float* sc = scores.data() + t * n;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, hd, scale,
                    keys.data() + column, kv, q.data() + seq * d + h * hd, 1,
                    0.0f, sc, 1);
        mha::softmax(sc, n, sc, n, 1, n);
        cblas_sgemv(CblasRowMajor, CblasTrans, n, hd, 1.0f,
                    values.data() + column, kv, sc, 1, 0.0f,
                    context.data() + seq * d + h * hd, 1);
      });
      ParallelProjection(batch, d, d, context.data(), wo.data(), out.data(), d);
      benchmark::DoNotOptimize(out.data());
    }
  });
  Report(state, s.Flops(), s.Bytes(),
         OpenBlasLabel() + " on oneTBB x" + std::to_string(s.threads) +
             " + mha::softmax");
}
void BM_DecodeStepOpenBLAS(benchmark::State& state) {
  DecodeStepOpenBLAS(state, false);
}
void BM_DecodeBatchOpenBLAS(benchmark::State& state) {
  DecodeStepOpenBLAS(state, true);
}
BENCHMARK(BM_DecodeStepOpenBLAS)->Apply(DecodeShapes)->UseRealTime();
BENCHMARK(BM_DecodeBatchOpenBLAS)->Apply(BatchedDecodeShapes)->UseRealTime();
#endif

}  // namespace
}  // namespace mha_bench
