// Argument checks that throw std::invalid_argument with a message naming the
// function, the parameter and the offending value, as the contract requires.
// Every public entry point runs all its checks before it writes anything.
#ifndef MHA_LIB_COMMON_CHECK_H_
#define MHA_LIB_COMMON_CHECK_H_

#include <cstddef>
#include <sstream>
#include <stdexcept>

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

// A leading dimension strides over rows of `width` elements.
inline void CheckLeadingDim(const char* function, const char* name,
                            std::size_t leading_dim, std::size_t width) {
  if (leading_dim < width) {
    Fail(function, ": ", name, " (", leading_dim,
         ") must be at least the row width (", width, ")");
  }
}

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_CHECK_H_
