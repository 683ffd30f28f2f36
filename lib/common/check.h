// Argument checks that throw std::invalid_argument with a message naming the
// function, the parameter and the offending value, as the contract requires.
// Every public entry point runs all its checks before it writes anything.
#ifndef MHA_LIB_COMMON_CHECK_H_
#define MHA_LIB_COMMON_CHECK_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>

#include "mha/precision.h"

namespace mha::detail {

template <class... Parts>
[[noreturn]] void Fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw std::invalid_argument(message.str());
}

inline void CheckNotNull(const char* function, const char* name,
                         const void* pointer) {
  if (pointer == nullptr) Fail(function, ": ", name, " must not be null");
}

inline void CheckPositive(const char* function, const char* name,
                          std::size_t value) {
  if (value == 0) Fail(function, ": ", name, " (0) must be positive");
}

inline void CheckFinite(const char* function, const char* name, float value) {
  if (!std::isfinite(value)) {
    Fail(function, ": ", name, " (", value, ") must be finite");
  }
}

// A leading dimension strides over rows of `width` elements.
inline void CheckLeadingDim(const char* function, const char* name,
                            std::size_t leading_dim, std::size_t width) {
  if (leading_dim < width) {
    Fail(function, ": ", name, " (", leading_dim,
         ") must be at least the row width (", width, ")");
  }
}

// No array holds more floats than this: its size in bytes must fit
// std::ptrdiff_t, or pointer arithmetic over it is undefined. Every size and
// size product of a call is held to it, so that no index computed inside the
// kernels (signed ones included) can overflow.
constexpr std::size_t kMaxElements = PTRDIFF_MAX / sizeof(float);

// Sizes and products of sizes, checked against kMaxElements: the first that
// exceeds it throws, naming `what` (an extent, a buffer) and the factors.
class SizeCheck {
 public:
  SizeCheck(const char* function, const char* what)
      : function_(function), what_(what) {}

  std::size_t Product(std::size_t a, std::size_t b) const {
    if (a != 0 && b > kMaxElements / a) Overflow(a, " x ", b);
    return a * b;
  }
  std::size_t Product(std::size_t a, std::size_t b, std::size_t c) const {
    return Product(Product(a, b), c);
  }
  std::size_t Sum(std::size_t a, std::size_t b) const {
    if (a > kMaxElements || b > kMaxElements - a) Overflow(a, " + ", b);
    return a + b;
  }
  // Elements spanned by `rows` rows of `cols` elements, `ld` apart.
  std::size_t Matrix(std::size_t rows, std::size_t cols, std::size_t ld) const {
    if (rows == 0 || cols == 0) return 0;
    return Sum(Product(rows - 1, ld), cols);
  }

 private:
  [[noreturn]] void Overflow(std::size_t a, const char* op,
                             std::size_t b) const {
    Fail(function_, ": the size of ", what_, " (", a, op, b,
         " elements) overflows: at most ", kMaxElements, " are addressable");
  }
  const char* function_;
  const char* what_;
};

// Throws unless p is one of the Precision values.
inline void CheckPrecision(const char* function, const char* name,
                           Precision p) {
  if (p != Precision::F32 && p != Precision::BF16 && p != Precision::F16) {
    Fail(function, ": ", name, " (", static_cast<int>(p),
         ") must be Precision::F32, BF16 or F16");
  }
}

// The memory of `count` elements of `element_bytes` each from `begin`, for
// overlap checks.
struct Span {
  const void* begin;
  std::size_t count;
  std::size_t element_bytes = sizeof(float);
};

// Throws unless the two spans are disjoint (empty spans never overlap).
inline void CheckDisjoint(const char* function, const char* output_name,
                          const Span& output, const char* input_name,
                          const Span& input) {
  if (output.count == 0 || input.count == 0) return;
  const auto out_begin = reinterpret_cast<std::uintptr_t>(output.begin);
  const auto in_begin = reinterpret_cast<std::uintptr_t>(input.begin);
  const std::uintptr_t out_end =
      out_begin + output.count * output.element_bytes;
  const std::uintptr_t in_end = in_begin + input.count * input.element_bytes;
  if (out_begin < in_end && in_begin < out_end) {
    auto unit = [](const Span& span) {
      return span.element_bytes == sizeof(float) ? " floats" : " elements";
    };
    Fail(function, ": ", output_name, " (", output.count, unit(output),
         ") must not overlap ", input_name, " (", input.count, unit(input),
         ")");
  }
}

// A function's argument and the memory it spans. The span by reference (a
// local of the caller or a temporary of the call's braced list, either of
// which lives until the check returns): a copy, built by 8-byte stores and
// moved by 16-byte loads, stalled store forwarding three times in each
// mha::sgemm call. sgemm's checks alone, one process alternating: 16 ns
// against 23-28 ns a call (of about 200 for a 6 x 32 x 8 product).
struct NamedSpan {
  const char* name;
  const Span& span;
};

// Throws unless every output is disjoint from every input and from the
// outputs after it.
inline void CheckOutputsDisjoint(const char* function,
                                 std::initializer_list<NamedSpan> outputs,
                                 std::initializer_list<NamedSpan> inputs) {
  for (auto output = outputs.begin(); output != outputs.end(); ++output) {
    for (const NamedSpan& input : inputs) {
      CheckDisjoint(function, output->name, output->span, input.name,
                    input.span);
    }
    for (auto other = output + 1; other != outputs.end(); ++other) {
      CheckDisjoint(function, other->name, other->span, output->name,
                    output->span);
    }
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_CHECK_H_
