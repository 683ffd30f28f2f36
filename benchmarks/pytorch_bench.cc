// PyTorch's layer as a peer of mha's forward (MHA_HAVE_TORCH: Debian's
// libtorch-dev, found by benchmarks/CMakeLists.txt), at the shapes of
// BM_Forward, what torch.nn.MultiheadAttention runs in inference:
//   its fast path, at::_native_multi_head_attention, where query, key and
//     value have the same shape: projections of Q, K and V (one fused
//     product for self-attention), scaled dot-product attention per head,
//     the output projection;
//   else (S6: one query over 2048 keys) its general path,
//     F.multi_head_attention_forward: the same steps as ATen operators
//     (linear, bmm, softmax, bmm, linear).
// The same multiply-adds as mha, plus zero biases (nn.MultiheadAttention
// always has them). And PyTorch's attention alone as a peer of
// mha::attention: at::_scaled_dot_product_attention (on the CPU in 1.13, its
// math path: matmul, softmax, matmul).
//
// Threads: Debian's build runs ATen's own loops (softmax, bias, copies) on
// OpenMP and its matrix products on OpenBLAS, each with a pool of its own.
// With t > 1 cores, OpenBLAS gets t threads and ATen t or 1, whichever runs
// the shape faster (timed before the benchmark): both at t, as
// torch.set_num_threads(t) leaves them, made S2 slower on 2 cores than on 1
// here, the pools' spinning threads taking each other's cores.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "attention_problem.h"
#include "bench_util.h"
#include "layer_shapes.h"
#include "peers.h"

namespace mha_bench {
namespace {

// A tensor of `sizes` holding a copy of `values`.
at::Tensor TensorOf(const std::vector<float>& values, at::IntArrayRef sizes) {
  return at::from_blob(const_cast<float*>(values.data()), sizes).clone();
}

// mha's [in, out] weight as the [out, in] weight of torch.nn.Linear.
at::Tensor LinearWeight(const std::vector<float>& w, std::size_t in,
                        std::size_t out) {
  return TensorOf(w, {static_cast<int64_t>(in), static_cast<int64_t>(out)})
      .t()
      .contiguous();
}

// "PyTorch 1.13.0 ATen x1, OpenBLAS 0.3.21 Cooperlake x2": its version, the
// threads of its own loops, and the BLAS of its matrix products (Debian's
// libblas.so.3: OpenBLAS where libopenblas0 provides it, which a build with
// libopenblas-dev can name and size).
std::string PyTorchLabel(int aten_threads) {
  const std::string label = std::string("PyTorch ") + TORCH_VERSION +
                            " ATen x" + std::to_string(aten_threads);
#ifdef MHA_HAVE_OPENBLAS
  return label + ", " + OpenBlasLabel();
#else
  return label + ", BLAS of libblas.so.3";
#endif
}

// The fastest time of `runs` calls of f.
template <class F>
double FastestRun(int runs, F&& f) {
  double fastest = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    fastest = std::min(fastest, std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
  }
  return fastest;
}

// F.multi_head_attention_forward's steps for batch-first inputs [B, L, d].
at::Tensor GeneralPathForward(const LayerShape& s, const at::Tensor& query,
                              const at::Tensor& key, const at::Tensor& value,
                              const at::Tensor& qkv_weight,
                              const at::Tensor& qkv_bias,
                              const at::Tensor& out_weight,
                              const at::Tensor& out_bias) {
  const int64_t batch = s.batch, q_len = s.q_len, heads = s.heads,
                hd = s.head_dim(), d = s.d;
  const std::vector<at::Tensor> w = qkv_weight.chunk(3), b = qkv_bias.chunk(3);
  // [B, L, d] -> [B * heads, L, head_dim]
  const auto by_head = [&](const at::Tensor& x) {
    const int64_t len = x.size(1);
    return x.view({batch, len, heads, hd})
        .transpose(1, 2)
        .reshape({batch * heads, len, hd});
  };
  const at::Tensor q = by_head(at::linear(query, w[0], b[0])) /
                       std::sqrt(static_cast<double>(hd));
  const at::Tensor k = by_head(at::linear(key, w[1], b[1]));
  const at::Tensor v = by_head(at::linear(value, w[2], b[2]));
  const at::Tensor p = at::softmax(at::bmm(q, k.transpose(1, 2)), -1);
  const at::Tensor context = at::bmm(p, v)
                                 .view({batch, heads, q_len, hd})
                                 .transpose(1, 2)
                                 .reshape({batch, q_len, d});
  return at::linear(context, out_weight, out_bias);
}

// ||theirs - ours|| / ||ours||: the check that a peer computes what mha
// does (the same layer on the same weights, the same attention).
double RelativeDifference(const at::Tensor& theirs,
                          const std::vector<float>& ours) {
  const float* t = theirs.contiguous().data_ptr<float>();
  double difference = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    difference += (double(t[i]) - ours[i]) * (double(t[i]) - ours[i]);
    norm += double(ours[i]) * ours[i];
  }
  return std::sqrt(difference / norm);
}
// fp32 results of a different order of sums: 4e-7 to 7e-6 measured at
// S1-S3 and the attention cores of 128 queries and of one.
constexpr double kSameResult = 1e-4;

// Runs the timing loop of `call` on `threads` cores: OpenBLAS on all, ATen
// on all or on one, whichever was faster over a few calls. Returns ATen's.
template <class F>
int TimeOnFasterThreads(benchmark::State& state, int threads, F&& call) {
  int aten_threads = threads;
  WithThreads(threads, [&] {  // OpenBLAS (and OpenMP) on `threads`
    if (threads > 1) {
      constexpr int kCalibrationRuns = 5;
      at::set_num_threads(1);
      const double alone = FastestRun(kCalibrationRuns, call);
      at::set_num_threads(threads);
      if (alone < FastestRun(kCalibrationRuns, call)) aten_threads = 1;
    }
    at::set_num_threads(aten_threads);
    for (auto _ : state) call();
  });
  return aten_threads;
}

void BM_ForwardPyTorch(benchmark::State& state) {
  const LayerShape s(state);
  if (s.kv_heads != s.heads) {
    return state.SkipWithError("torch.nn.MultiheadAttention has no GQA");
  }
  c10::InferenceMode inference;
  const Weights w(s);
  const Inputs in(s);
  const int64_t batch = s.batch, q_len = s.q_len, kv_len = s.kv_len, d = s.d;
  const at::Tensor query = TensorOf(in.query, {batch, q_len, d});
  const at::Tensor key = s.self ? query : TensorOf(in.key, {batch, kv_len, d});
  const at::Tensor value =
      s.self ? query : TensorOf(in.value, {batch, kv_len, d});
  const at::Tensor qkv_weight =
      at::cat({LinearWeight(w.q, s.d, s.d), LinearWeight(w.k, s.d, s.d),
               LinearWeight(w.v, s.d, s.d)});
  const at::Tensor out_weight = LinearWeight(w.o, s.d, s.d);
  const at::Tensor qkv_bias = at::zeros({3 * d}), out_bias = at::zeros({d});
  const bool fast_path = s.q_len == s.kv_len;
  const auto run = [&] {
    return fast_path ? std::get<0>(at::_native_multi_head_attention(
                           query, key, value, d, s.heads, qkv_weight, qkv_bias,
                           out_weight, out_bias, {}, /*need_weights=*/false))
                     : GeneralPathForward(s, query, key, value, qkv_weight,
                                          qkv_bias, out_weight, out_bias);
  };
  mha::MultiHeadAttention layer({s.d, s.heads, s.kv_heads});
  layer.set_weights({w.q.data(), w.k.data(), w.v.data(), w.o.data()});
  std::vector<float> ours(in.out.size());
  layer.forward(in.query.data(), in.k(), in.v(), s.batch, s.q_len, s.kv_len,
                ours.data());
  if (RelativeDifference(run(), ours) > kSameResult) {
    return state.SkipWithError("PyTorch's layer differs from mha's");
  }
  const auto forward = [&] {
    benchmark::DoNotOptimize(run().data_ptr<float>());
  };
  const int aten_threads = TimeOnFasterThreads(state, s.threads, forward);
  Report(state, s.Flops(), 0.0, PyTorchLabel(aten_threads));
  LetPeerThreadsIdle();
}
BENCHMARK(BM_ForwardPyTorch)->Apply(ForwardShapes)->UseRealTime();

void BM_AttentionComposedPyTorch(benchmark::State& state) {
  Problem p(state);
  const auto& s = p.shape;
  if (s.num_kv_heads != s.num_heads) {
    return state.SkipWithError("PyTorch 1.13's attention has no GQA");
  }
  c10::InferenceMode inference;
  const auto heads = [&](const std::vector<float>& x, std::size_t len) {
    return TensorOf(
        x, {static_cast<int64_t>(s.batch), static_cast<int64_t>(s.num_heads),
            static_cast<int64_t>(len), static_cast<int64_t>(s.head_dim)});
  };
  const at::Tensor q = heads(p.q, s.q_len), k = heads(p.k, s.kv_len),
                   v = heads(p.v, s.kv_len);
  const auto run = [&] {
    return std::get<0>(at::_scaled_dot_product_attention(
        q, k, v, {}, 0.0, /*need_attn_weights=*/false, p.mask.causal));
  };
  p.Run();  // mha's, into p.out
  if (RelativeDifference(run(), p.out) > kSameResult) {
    return state.SkipWithError("PyTorch's attention differs from mha's");
  }
  const auto attend = [&] {
    benchmark::DoNotOptimize(run().data_ptr<float>());
  };
  const int aten_threads =
      TimeOnFasterThreads(state, static_cast<int>(state.range(7)), attend);
  Report(state, p.Flops(), p.Bytes(), PyTorchLabel(aten_threads));
  LetPeerThreadsIdle();
}
BENCHMARK(BM_AttentionComposedPyTorch)->Apply(Shapes)->UseRealTime();

}  // namespace
}  // namespace mha_bench
