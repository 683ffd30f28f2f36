// oneDNN (Debian's libdnnl-dev) as a peer in the benchmarks: a row-major
// batched matmul, C[i] = A[i] * op(B[i]), as oneDNN-based attention runs it.
#ifndef MHA_BENCHMARKS_ONEDNN_H_
#define MHA_BENCHMARKS_ONEDNN_H_

#include <cstddef>
#include <dnnl.hpp>
#include <unordered_map>

namespace mha_bench {

class OneDnnMatmul {
 public:
  // batch products of [m, k] x op([k, n]) -> [m, n]; B transposed means it is
  // stored [n, k]. Created once per shape, run many times.
  OneDnnMatmul(std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
               bool trans_b)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dims = dnnl::memory::dims;
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const memory::dim b = batch, M = m, N = n, K = k;
    a_ = memory::desc(dims{b, M, K}, f32, dims{M * K, K, 1});
    b_ = trans_b ? memory::desc(dims{b, K, N}, f32, dims{N * K, 1, K})
                 : memory::desc(dims{b, K, N}, f32, dims{K * N, N, 1});
    c_ = memory::desc(dims{b, M, N}, f32, dims{M * N, N, 1});
    matmul_ = dnnl::matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_, b_, c_), engine_));
  }

  void Run(const float* a, const float* b, float* c) {
    dnnl::memory a_mem(a_, engine_, const_cast<float*>(a));
    dnnl::memory b_mem(b_, engine_, const_cast<float*>(b));
    dnnl::memory c_mem(c_, engine_, c);
    matmul_.execute(stream_, {{DNNL_ARG_SRC, a_mem},
                              {DNNL_ARG_WEIGHTS, b_mem},
                              {DNNL_ARG_DST, c_mem}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory::desc a_, b_, c_;
  dnnl::matmul matmul_;
};

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_ONEDNN_H_
