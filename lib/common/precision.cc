// The scalar conversions between fp32 and the 16-bit storage formats: used
// where values are stored (weights at set_weights, keys and values appended
// to a cache), never in a kernel's inner loop, which widens in registers.
#include "mha/precision.h"

#include <cstring>

#include "lib/common/storage.h"

namespace mha {
namespace {

std::uint32_t BitsOf(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float FloatOf(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// value >> shift (1 <= shift <= 31), rounded to nearest, ties to even.
std::uint32_t ShiftRoundingToEven(std::uint32_t value, unsigned shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)));
}

}  // namespace

std::uint16_t to_bf16(float x) {
  const std::uint32_t bits = BitsOf(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep it, quiet
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // A carry out of the significand bumps the exponent, up to Inf: as IEEE.
  return static_cast<std::uint16_t>(ShiftRoundingToEven(bits, 16));
}

std::uint16_t to_f16(float x) {
  const std::uint32_t bits = BitsOf(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: quiet, the payload's top bits kept
    return static_cast<std::uint16_t>(sign | 0x7E00u | (magnitude >> 13));
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent >= 16) return static_cast<std::uint16_t>(sign | 0x7C00u);  // Inf
  const std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  if (exponent >= -14) {  // a normal f16, unless rounding carries up to Inf
    const std::uint32_t rebased =
        (static_cast<std::uint32_t>(exponent + 15) << 23) |
        (magnitude & 0x7FFFFFu);
    return static_cast<std::uint16_t>(sign | ShiftRoundingToEven(rebased, 13));
  }
  // A subnormal f16 (units of 2^-24), or 0: the 24-bit significand, worth
  // significand * 2^(exponent - 23), shifted right by -(exponent + 1).
  const unsigned shift = static_cast<unsigned>(-(exponent + 1));
  if (shift > 24) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign |
                                    ShiftRoundingToEven(significand, shift));
}

float from_bf16(std::uint16_t bits) {
  return FloatOf(static_cast<std::uint32_t>(bits) << 16);
}

float from_f16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return FloatOf(sign | 0x7F800000u | (mantissa << 13));
  return FloatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

namespace detail {

void StoreRounded(Precision to_precision, const float* from, std::size_t count,
                  void* to) {
  if (to_precision == Precision::F32) {
    std::memcpy(to, from, count * sizeof(float));
    return;
  }
  std::uint16_t* out = static_cast<std::uint16_t*>(to);
  if (to_precision == Precision::BF16) {
    for (std::size_t i = 0; i < count; ++i) out[i] = to_bf16(from[i]);
  } else {
    for (std::size_t i = 0; i < count; ++i) out[i] = to_f16(from[i]);
  }
}

}  // namespace detail
}  // namespace mha
