// Per-thread scratch memory, reused across calls, so that kernels need
// O(threads x tile) extra memory and allocate nothing in steady state.
#ifndef MHA_LIB_COMMON_SCRATCH_H_
#define MHA_LIB_COMMON_SCRATCH_H_

#include <cstddef>

namespace mha::detail {

// Buffers a leaf task may hold at once; each slot is a distinct buffer.
enum class ScratchSlot {
  kGemmB,        // a packed B block of the GEMM
  kQueryPanels,  // an attention task's queries, scaled (Q^T panels)
  kScoresT,      // its logits of one key block (S^T)
  kProbSlivers,  // their probabilities, in slivers of the P V tile's rows
  kOutputRows,   // its unnormalized outputs (O)
  kValuePanels,  // a key block's V packed into panels (ragged head_dim)
  kRowState,     // its rows' softmax state (max, sum, corrections)
  kKeyBlock,     // a key block's K widened to fp32 (16-bit storage)
  kValueBlock,   // a key block's V widened to fp32 (16-bit storage)
  kValueSums,    // a decode block's P V sums, before they join O
  kBiasRows,     // the mask bias of a prefill task's rows for a key block
  kCount
};

// A 64-byte-aligned buffer of at least `count` floats that belongs to the
// calling thread and stays valid until the same thread asks for the same slot
// again. Only leaf tasks (which never wait on other tasks) may use it.
float* ThreadScratch(ScratchSlot slot, std::size_t count);

}  // namespace mha::detail

#endif  // MHA_LIB_COMMON_SCRATCH_H_
