// The blocked GEMM (gemm-inl.h's GemmSlices) instantiated for B of element
// type MHA_SLICES_ELEMENT (float, or BF16 or F16 pre-packed), once per
// Highway target. Each element type has its own file (gemm_slices_f32.cc,
// gemm_slices_bf16.cc, gemm_slices_f16.cc), so that a parallel build
// compiles them beside gemm.cc and attention.cc: with the fp32 instantiation
// in it, gemm.cc took 531 s of one core in clang's ASan + UBSan build
// (scripts/run-sanitizers.sh, Zen 5), 250 s after every other file of the
// library had been compiled (lib/CMakeLists.txt orders them).

#if defined(MHA_LIB_GEMM_GEMM_SLICES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_GEMM_GEMM_SLICES_INL_H_
#undef MHA_LIB_GEMM_GEMM_SLICES_INL_H_
#else
#define MHA_LIB_GEMM_GEMM_SLICES_INL_H_
#endif

#ifndef MHA_SLICES_ELEMENT
#error "MHA_SLICES_ELEMENT (float, detail::BF16 or detail::F16) must be defined"
#endif

#include "hwy/highway.h"
#include "lib/gemm/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

template void GemmSlices<MHA_SLICES_ELEMENT>(const detail::GemmArgs& g,
                                             Sweep sweep,
                                             std::size_t stream_c_bytes);

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_GEMM_GEMM_SLICES_INL_H_
