#include "peers.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#ifdef MHA_HAVE_ONEDNN
#include <omp.h>
#endif

namespace mha_bench {
namespace {

#ifdef MHA_HAVE_ONEDNN
const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
#endif

int thread_budget = 0;  // 0: every core

}  // namespace

int ThreadBudget() {
  return thread_budget > 0
             ? thread_budget
             : static_cast<int>(std::thread::hardware_concurrency());
}

void SetThreadBudget(int threads) { thread_budget = threads; }

void SetPeerThreads(int threads) {
#ifdef MHA_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#endif
#ifdef MHA_HAVE_ONEDNN
  omp_set_num_threads(threads);
#endif
  (void)threads;
}

void LetPeerThreadsIdle() {
  // 2^28 cycles at 2-5 GHz: 50-130 ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

std::string OpenBlasLabel() {
#ifdef MHA_HAVE_OPENBLAS
  // openblas_get_config() starts with "OpenBLAS 0.3.21 ..."; keep two words.
  std::string config = openblas_get_config();
  const std::size_t second_space = config.find(' ', config.find(' ') + 1);
  return config.substr(0, second_space) + " " + openblas_get_corename() + " x" +
         std::to_string(openblas_get_num_threads());
#else
  return "";
#endif
}

std::string OneDnnLabel() {
#ifdef MHA_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
         "." + std::to_string(v->patch) + " " +
         IsaName(dnnl::get_effective_cpu_isa()) + " x" +
         std::to_string(omp_get_max_threads());
#else
  return "";
#endif
}

void DescribePeers() {
#ifdef MHA_HAVE_OPENBLAS
  benchmark::AddCustomContext("peer_openblas", OpenBlasLabel());
  for (const char* forcing : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}) {
    if (const char* value = std::getenv(forcing)) {
      std::fprintf(
          stderr,
          "mha_benchmarks: %s=%s holds OpenBLAS to %s; where OpenBLAS "
          "knows this CPU, unset it to time OpenBLAS at its own choice "
          "(peer_table.py and mha-bench name a kernel only where it "
          "falls back to Prescott)\n",
          forcing, value, OpenBlasLabel().c_str());
    }
  }
#endif
#ifdef MHA_HAVE_ONEDNN
  benchmark::AddCustomContext("peer_onednn", OneDnnLabel());
#endif
}

}  // namespace mha_bench
