// The element types of data stored in 16 bits (weights, keys and values),
// as the kernels name them, and their scalar widening to fp32 (for the rare
// scalar paths; vector code widens in registers, wide_load-inl.h).
#ifndef MHA_LIB_COMMON_STORAGE_H_
#define MHA_LIB_COMMON_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/base.h"
#include "mha/precision.h"

namespace mha::detail {

using BF16 = hwy::bfloat16_t;
using F16 = hwy::float16_t;  // a struct, or the compiler's __fp16 on Arm

inline float ToFloat(float x) { return x; }
inline float ToFloat(BF16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return from_bf16(bits);
}
inline float ToFloat(F16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return from_f16(bits);
}

// to[0, count) = from[0, count) rounded to `to_precision` (nearest, ties to
// even; for F32, a copy). `to` holds elements of that precision.
void StoreRounded(Precision to_precision, const float* from, std::size_t count,
                  void* to);

// Calls f(T()) with T the element type stored in precision p: one switch
// where a run-time precision becomes a compile-time type.
template <class F>
decltype(auto) WithStorageType(Precision p, F&& f) {
  switch (p) {
    case Precision::BF16:
      return f(BF16());
    case Precision::F16:
      return f(F16());
    default:
      return f(float());
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_STORAGE_H_
