// The exponential the softmax kernels use (exp2-inl.h), on the target of
// ChosenTargetIndex(), for tests that measure its error.
#ifndef MHA_LIB_SOFTMAX_EXP2_FOR_TEST_H_
#define MHA_LIB_SOFTMAX_EXP2_FOR_TEST_H_

#include <cstddef>

namespace mha::detail {

// y[i] = 2^x[i] as Exp2OfNonPositive computes it, for x[i] <= 0 (or -inf).
void Exp2OfNonPositiveForTest(const float* x, float* y, std::size_t n);

}  // namespace mha::detail

#endif  // MHA_LIB_SOFTMAX_EXP2_FOR_TEST_H_
