// Softmax of rows already validated, on a resolved target: mha::softmax's
// kernel, for the library's own callers (the layer's absorbed attention).
#ifndef MHA_LIB_SOFTMAX_SOFTMAX_ROWS_H_
#define MHA_LIB_SOFTMAX_SOFTMAX_ROWS_H_

#include <cstddef>

namespace mha::detail {

// y[r][:cols] = softmax of scale * x[r][:cols], as mha::softmax (in place
// allowed), on the target of a ChosenTargetIndex().
void RunSoftmax(std::size_t target_index, const float* x, std::size_t ldx,
                float* y, std::size_t ldy, std::size_t rows, std::size_t cols,
                float scale);

}  // namespace mha::detail

#endif  // MHA_LIB_SOFTMAX_SOFTMAX_ROWS_H_
