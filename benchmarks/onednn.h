// oneDNN (Debian's libdnnl-dev) as a peer in the benchmarks: a row-major
// batched matmul, C[i] = scale * A[i] * op(B[i]), and a row softmax, the
// primitives oneDNN-based attention runs on (all on oneDNN's own threads).
#ifndef MHA_BENCHMARKS_ONEDNN_H_
#define MHA_BENCHMARKS_ONEDNN_H_

#include <cstddef>
#include <dnnl.hpp>

namespace mha_bench {

// One engine and stream for every primitive of the process.
struct OneDnnContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  static OneDnnContext& Get() {
    static OneDnnContext context;
    return context;
  }
};

class OneDnnMatmul {
 public:
  // batch products of [m, k] x op([k, n]) -> [m, n], scaled by `scale`,
  // added to C if `accumulates` (a sum post-op; a binary add of one [m, n]
  // matrix broadcast over the batch ran oneDNN 2.6's reference matmul, at
  // 0.2 GFLOP/s); B transposed means it is stored [n, k]. Created once per
  // shape, run many times.
  OneDnnMatmul(std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
               bool trans_b, float scale = 1.0f, bool accumulates = false) {
    using dims = dnnl::memory::dims;
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const memory::dim b = batch, M = m, N = n, K = k;
    a_ = memory::desc(dims{b, M, K}, f32, dims{M * K, K, 1});
    b_ = trans_b ? memory::desc(dims{b, K, N}, f32, dims{N * K, 1, K})
                 : memory::desc(dims{b, K, N}, f32, dims{K * N, N, 1});
    c_ = memory::desc(dims{b, M, N}, f32, dims{M * N, N, 1});
    dnnl::primitive_attr attr;
    if (scale != 1.0f) attr.set_output_scales(0, {scale});
    if (accumulates) {
      dnnl::post_ops post;
      post.append_sum();
      attr.set_post_ops(post);
    }
    const dnnl::engine& engine = OneDnnContext::Get().engine;
    matmul_ = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(a_, b_, c_), attr, engine));
  }

  void Run(const float* a, const float* b, float* c) {
    OneDnnContext& context = OneDnnContext::Get();
    dnnl::memory a_mem(a_, context.engine, const_cast<float*>(a));
    dnnl::memory b_mem(b_, context.engine, const_cast<float*>(b));
    dnnl::memory c_mem(c_, context.engine, c);
    matmul_.execute(context.stream, {{DNNL_ARG_SRC, a_mem},
                                     {DNNL_ARG_WEIGHTS, b_mem},
                                     {DNNL_ARG_DST, c_mem}});
    context.stream.wait();
  }

 private:
  dnnl::memory::desc a_, b_, c_;
  dnnl::matmul matmul_;
};

// Softmax over the last axis of a [rows, cols] matrix, in place.
class OneDnnSoftmax {
 public:
  OneDnnSoftmax(std::size_t rows, std::size_t cols) {
    using dims = dnnl::memory::dims;
    const dnnl::memory::dim r = rows, c = cols;
    data_ = dnnl::memory::desc(dims{r, c}, dnnl::memory::data_type::f32,
                               dims{c, 1});
    softmax_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, data_,
                                    1),
        OneDnnContext::Get().engine));
  }

  void Run(float* data) {
    OneDnnContext& context = OneDnnContext::Get();
    dnnl::memory memory(data_, context.engine, data);
    softmax_.execute(context.stream,
                     {{DNNL_ARG_SRC, memory}, {DNNL_ARG_DST, memory}});
    context.stream.wait();
  }

 private:
  dnnl::memory::desc data_;
  dnnl::softmax_forward softmax_;
};

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_ONEDNN_H_
