// Loads a vector of floats from fp32 or 16-bit storage (BF16, F16), widening
// 16-bit values in registers right after the load: kernels that read stored
// weights or keys and values take the storage type as a template parameter
// and read it through LoadWide, so that no fp32 copy of the data is ever
// made. F16 widens with the target's conversion instruction (F16C on AVX2
// and later, FCVT on Arm), BF16 with a shift (its bits are fp32's upper
// half); fp32 is a plain load.

#if defined(MHA_LIB_COMMON_WIDE_LOAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_LIB_COMMON_WIDE_LOAD_INL_H_
#undef MHA_LIB_COMMON_WIDE_LOAD_INL_H_
#else
#define MHA_LIB_COMMON_WIDE_LOAD_INL_H_
#endif

#include <type_traits>

#include "hwy/highway.h"
#include "lib/common/storage.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) floats from p (unaligned).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_LIB_COMMON_WIDE_LOAD_INL_H_
