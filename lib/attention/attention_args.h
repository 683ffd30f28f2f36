// The arguments of one attention call, as the kernels of every target take
// them, and the checks shared by mha::attention and the layer.
#ifndef MHA_LIB_ATTENTION_ATTENTION_ARGS_H_
#define MHA_LIB_ATTENTION_ATTENTION_ARGS_H_

#include <cstddef>

#include "mha/attention.h"
#include "mha/precision.h"

namespace mha::detail {

struct AttentionArgs {
  AttentionShape shape;
  const float* q;
  Layout q_layout;
  const void* k;  // elements of kv_precision (float, or 16-bit storage)
  Layout k_layout;
  const void* v;
  Layout v_layout;
  float* out;
  Layout out_layout;
  AttentionMask mask;
  float scale;     // resolved: never 0
  float* weights;  // optional [batch, num_heads, q_len, kv_len]
  Precision kv_precision = Precision::F32;
};

// The element offset of (batch b, head h, token t) in a view with this
// layout.
inline std::size_t ElementOffset(const Layout& layout, std::size_t b,
                                 std::size_t h, std::size_t t) {
  return b * layout.batch + h * layout.head + t * layout.token;
}

// Throws std::invalid_argument, prefixed with `where`, unless each
// kv_lengths[b] lies in [0, kv_len].
void CheckMask(const char* where, const AttentionMask& mask, std::size_t batch,
               std::size_t kv_len);

// Elements spanned by a [batch, heads, tokens, head_dim] view with this
// layout (0 if any size is 0); throws, naming `name`, if that overflows.
std::size_t ViewExtent(const char* where, const char* name, Layout layout,
                       std::size_t batch, std::size_t heads, std::size_t tokens,
                       std::size_t head_dim);

// Runs a validated call with work to do on the target of ChosenTargetIndex().
void RunAttention(std::size_t target_index, const AttentionArgs& args);

}  // namespace mha::detail

#endif  // MHA_LIB_ATTENTION_ATTENTION_ARGS_H_
