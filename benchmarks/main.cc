// The benchmark program's main: Google Benchmark's flags, plus
//   --mha_list_targets   print mha::supported_targets(), one per line, and exit
//   --mha_threads=N      cap oneTBB (and so mha) and the peers at N threads
// and the target in force and the cache sizes mha uses recorded in the JSON
// context.
#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "lib/common/cache_sizes.h"
#include "mha/mha.h"
#include "peers.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::unique_ptr<tbb::global_control> thread_cap;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mha_list_targets") == 0) {
      for (const std::string& target : mha::supported_targets())
        std::printf("%s\n", target.c_str());
      return 0;
    }
    if (std::strncmp(argv[i], "--mha_threads=", 14) == 0) {
      const int threads = std::atoi(argv[i] + 14);
      thread_cap = std::make_unique<tbb::global_control>(
          tbb::global_control::max_allowed_parallelism, threads);
      mha_bench::SetThreadBudget(threads);
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("mha_target", mha::active_target());
  // The cache sizes mha blocks for, and where it read them: Google
  // Benchmark's own list comes from sysfs only, which some VMs leave empty.
  benchmark::AddCustomContext("mha_caches",
                              mha::detail::DescribeMachineCaches());
  mha_bench::DescribePeers();
  benchmark::AddCustomContext(
      "mha_threads", std::to_string(tbb::global_control::active_value(
                         tbb::global_control::max_allowed_parallelism)));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
