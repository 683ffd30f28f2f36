// GemmSlices for B of type detail::F16, in its own object (gemm_slices-inl.h).
#define MHA_SLICES_ELEMENT detail::F16
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/gemm/gemm_slices-inl.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "lib/gemm/gemm_slices-inl.h"
