// The blocked GEMM for B pre-packed in 16 bits (gemm-inl.h's GemmSlices),
// for the element type MHA_PACKED_ELEMENT (BF16 or F16), compiled once per
// Highway target. lib/CMakeLists.txt builds this file once per element type,
// so that the instantiations compile in parallel with gemm.cc's.

#ifndef MHA_PACKED_ELEMENT
#error "MHA_PACKED_ELEMENT (BF16 or F16) must be defined"
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/gemm/gemm_packed16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "lib/gemm/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

template void GemmSlices<detail::MHA_PACKED_ELEMENT>(
    const detail::GemmArgs& g, Sweep sweep, std::size_t stream_c_bytes);

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();
