// Which SIMD instruction set (Highway "target") the kernels run on.
//
// Every kernel is compiled once per Highway target of the build architecture
// (on x86: AVX3_DL, AVX3, AVX2, SSE4, SSSE3 and the portable fallback, which is
// SCALAR with GCC 12 and EMU128 with clang). Each public call picks the target
// once, at its entry, and runs everything below it on that target.
//
// The kernels size their blocks from the data caches the machine reports
// (Linux sysfs, else sysconf, else typical sizes). The environment variable
// MHA_CACHES, read on first use, replaces the sizes it names, for a VM that
// reports them wrongly: "l1d=32K,ways=8,line=64,l2=512K,l3=8M", any of the
// five, sizes in bytes with an optional K or M. While it is malformed or
// implausible, every call that runs a kernel throws std::invalid_argument
// naming MHA_CACHES (constructing a layer and set_weights do not). Results
// are bitwise the same whatever the thread count, but the caches choose the
// depth of k's slices, so they may differ in the last bits between caches.
#ifndef MHA_TARGETS_H_
#define MHA_TARGETS_H_

#include <string>
#include <vector>

namespace mha {

// Targets compiled into this library AND supported by this CPU, best first,
// with Highway's names, e.g. {"AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3",
// "SCALAR"}. Never empty.
std::vector<std::string> supported_targets();

// The target the kernels run on now. Throws std::invalid_argument while an
// unknown MHA_TARGET is in force (see set_target).
std::string active_target();

// Forces one of supported_targets() for every later call in this process;
// "" restores the automatic choice (the best). Any other name throws
// std::invalid_argument and changes nothing. The environment variable
// MHA_TARGET, when set and non-empty, is applied as set_target on first use;
// if it names no supported target, every call that runs a kernel throws
// std::invalid_argument naming MHA_TARGET until set_target is called.
// Not synchronized with calls running concurrently on other threads: call it
// between calls.
void set_target(const std::string& name);

// Addition to the contract: the target on which the most recent kernel call
// made by this thread actually ran, as reported by the kernel's own code
// (empty before the first call). Tests and benchmark labels use it to prove
// that a forced target really ran.
std::string last_kernel_target();

}  // namespace mha

#endif  // MHA_TARGETS_H_
