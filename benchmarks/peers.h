// The libraries the benchmarks compare with, when the build found them:
// OpenBLAS (MHA_HAVE_OPENBLAS) and oneDNN (MHA_HAVE_ONEDNN).
#ifndef MHA_BENCHMARKS_PEERS_H_
#define MHA_BENCHMARKS_PEERS_H_

#ifdef MHA_HAVE_OPENBLAS
#include <cblas.h>
#include <tbb/task_arena.h>
#endif
#ifdef MHA_HAVE_ONEDNN
#include "onednn.h"
#endif

#endif  // MHA_BENCHMARKS_PEERS_H_
