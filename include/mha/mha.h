// mha: SIMD and multi-threaded CPU kernels for multi-head attention.
//
// Umbrella header: everything in the public contract (API.md).
#ifndef MHA_MHA_H_
#define MHA_MHA_H_

#include "mha/attention.h"
#include "mha/gemm.h"
#include "mha/layer.h"
#include "mha/memory.h"
#include "mha/precision.h"
#include "mha/softmax.h"
#include "mha/targets.h"

#endif  // MHA_MHA_H_
