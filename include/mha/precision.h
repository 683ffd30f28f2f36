// Storage precisions of weights and of the KV cache, and the conversions
// mha uses for them (exposed so that engines and tests round exactly as the
// library does).
#ifndef MHA_PRECISION_H_
#define MHA_PRECISION_H_

#include <cstddef>
#include <cstdint>

namespace mha {

// How weights or keys and values are stored. Arithmetic, accumulation and
// outputs are fp32 whatever the storage: 16-bit values are widened to fp32
// in registers right after they are loaded.
//   F32   IEEE binary32.
//   BF16  bfloat16: fp32's 8-bit exponent, 8 significant bits (relative
//         rounding error at most 2^-9).
//   F16   IEEE binary16: 5-bit exponent, 11 significant bits (relative
//         rounding error at most 2^-11 for |x| in [6.1e-5, 65504]; smaller
//         values lose bits as subnormals, larger ones become Inf).
enum class Precision { F32, BF16, F16 };

// Bytes of one stored element.
constexpr std::size_t bytes_per_element(Precision p) {
  return p == Precision::F32 ? 4 : 2;
}

// fp32 to 16 bits, rounding to nearest, ties to even. NaN stays NaN (quiet);
// Inf stays Inf; a finite x that rounds past the largest finite value
// becomes Inf: F16 beyond 65504 (|x| >= 65520), BF16 beyond 3.3895e38
// (|x| >= 3.3962e38, the top 0.2% of float's range).
std::uint16_t to_bf16(float x);
std::uint16_t to_f16(float x);
// 16 bits to fp32: exact.
float from_bf16(std::uint16_t bits);
float from_f16(std::uint16_t bits);

}  // namespace mha

#endif  // MHA_PRECISION_H_
