// Helpers shared by the benchmark suites: random inputs, and counters that
// report GFLOP/s (or GB/s) and label each run with the target it ran on.
#ifndef MHA_BENCHMARKS_BENCH_UTIL_H_
#define MHA_BENCHMARKS_BENCH_UTIL_H_

#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "mha/mha.h"
#include "peers.h"

namespace mha_bench {

// The thread counts every suite runs at (the benchmark argument "t"): one
// core, and all of them (capped by --mha_threads).
inline std::vector<int> ThreadCounts() {
  const int all = ThreadBudget();
  return all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
}

// Runs body() -- the benchmark's timing loop -- with mha on `threads`
// threads (inside a task_arena of that size, as an engine would call it)
// and the peers' own thread pools sized to match.
template <class Body>
void WithThreads(int threads, Body&& body) {
  SetPeerThreads(threads);
  tbb::task_arena arena(threads);
  arena.execute(body);
}

inline std::vector<float> RandomVector(std::size_t count, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& x : values) x = uniform(engine);
  return values;
}

// Labels the run with the target the kernels reported (or `peer` for a
// library we compare with) and sets the rate counters: GFLOP/s, and GB/s
// when `bytes` is given.
inline void Report(benchmark::State& state, double flops, double bytes = 0.0,
                   const std::string& peer = "") {
  state.SetLabel(peer.empty() ? mha::last_kernel_target() : peer);
  using benchmark::Counter;
  if (flops > 0) {
    state.counters["GFLOP/s"] =
        Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
  }
  if (bytes > 0) {
    state.counters["GB/s"] =
        Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
  }
}

// Reads one float per 64-byte line of a 256 MiB buffer, so that the next
// timed iteration finds nothing of its own in any cache and pays no
// write-back for lines an untimed setup dirtied, as a decode step does when
// a model's other layers ran in between. 256 MiB is over twice the largest
// last-level cache of the servers mha targets (Sapphire Rapids: 105 MiB;
// Zen 5: 32 MiB per CCD), a constant because VMs misreport it (this
// project's Zen 5 VM: sysconf says 508 MiB, /sys has no L3).
inline void EvictCaches() {
  constexpr std::size_t kBytes = std::size_t{256} << 20, kLine = 64;
  static const std::vector<float> buffer(kBytes / sizeof(float), 1.0f);
  float sum = 0.0f;
  for (std::size_t i = 0; i < buffer.size(); i += kLine / sizeof(float)) {
    sum += buffer[i];
  }
  benchmark::DoNotOptimize(sum);
}

// Multiply-adds in causal attention: query i sees min(kv, i + kv - q + 1) keys.
inline double VisiblePairs(std::size_t q_len, std::size_t kv_len, bool causal) {
  if (!causal) return static_cast<double>(q_len) * kv_len;
  double pairs = 0;
  for (std::size_t i = 0; i < q_len; ++i) {
    const long long seen =
        static_cast<long long>(i + kv_len) - static_cast<long long>(q_len) + 1;
    pairs +=
        seen < 0 ? 0 : (seen > static_cast<long long>(kv_len) ? kv_len : seen);
  }
  return pairs;
}

}  // namespace mha_bench

#endif  // MHA_BENCHMARKS_BENCH_UTIL_H_
