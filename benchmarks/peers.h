// The libraries the benchmarks compare with, when the build found them:
// OpenBLAS (MHA_HAVE_OPENBLAS) and oneDNN (MHA_HAVE_ONEDNN), with what each
// runs on, so that every peer row says which kernel and how many threads
// produced it.
#ifndef MHA_BENCHMARKS_PEERS_H_
#define MHA_BENCHMARKS_PEERS_H_

#include <string>

#ifdef MHA_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef MHA_HAVE_ONEDNN
#include "onednn.h"
#endif

namespace mha_bench {

// The threads a benchmark may use: --mha_threads=N, else every core.
int ThreadBudget();
void SetThreadBudget(int threads);

// Sizes the peers' own thread pools (OpenBLAS's pthreads, oneDNN's OpenMP
// threads), as oneTBB's arena sizes mha's. Each peer benchmark sets what it
// runs on: the budget, or 1 where it runs inside a parallel loop of its own.
void SetPeerThreads(int threads);

// Waits until the peers' threads have stopped spinning: OpenBLAS's keep
// busy-waiting for about 2^28 cycles after a call, OpenMP's for its spin
// count, and on a small machine they would take cores from whatever runs
// next (mha's benchmarks, or the other peer's). Every peer benchmark calls it
// after its timing loop.
void LetPeerThreadsIdle();

// "OpenBLAS 0.3.21 Cooperlake x2": version, the kernel family OpenBLAS chose
// for this CPU (OPENBLAS_CORETYPE overrides it), threads.
std::string OpenBlasLabel();
// "oneDNN 2.6.3 avx512_core_bf16 x2": version, the ISA its kernels use,
// threads.
std::string OneDnnLabel();

// Records the peers' labels in the JSON context, and warns on stderr when
// the environment forces OpenBLAS off its best kernel.
void DescribePeers();

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_PEERS_H_
