// Run-time choice of the Highway target. Each public entry point resolves the
// target once, with ChosenTargetIndex(), and calls that target's static code
// through the table HWY_EXPORT made: everything below runs on one target.
#ifndef MHA_LIB_DISPATCH_DISPATCH_H_
#define MHA_LIB_DISPATCH_DISPATCH_H_

#include <cstddef>
#include <cstdint>

namespace mha::detail {

// Index into HWY_EXPORT tables of the target in force: the one set_target
// forced, else MHA_TARGET's (read on first use), else the best supported.
// Throws std::invalid_argument while an unknown MHA_TARGET is in force, or a
// malformed MHA_CACHES (lib/common/cache_sizes.h).
std::size_t ChosenTargetIndex();

// ChosenTargetIndex(), or the best supported target's while an unknown
// MHA_TARGET is in force: for work that prepares data (packing weights)
// rather than run a kernel, which must not throw for it (nor for MHA_CACHES:
// the panels do not depend on the caches).
std::size_t PreferredTargetIndex();

// Each target's kernel entry calls this with its own HWY_TARGET, so that
// last_kernel_target() reports what really ran.
void NoteKernelTarget(std::int64_t target);

}  // namespace mha::detail

// Calls the version of an HWY_EXPORTed function for a resolved target index.
#define MHA_CALL_TARGET(index, function) \
  (*(HWY_DISPATCH_TABLE(function)[index]))

#endif  // MHA_LIB_DISPATCH_DISPATCH_H_
