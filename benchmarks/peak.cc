// The machine's limits, measured per target, so that every result can be
// read as a fraction of what the hardware does: the FMA peak (independent
// multiply-adds in registers, 2 flops per lane each, on every thread of the
// arena) and the memory read bandwidth. Compiled once per Highway target,
// like the library; the version matching mha::active_target() runs.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

const char* PeakTargetName() { return hwy::TargetName(HWY_TARGET); }

// Runs `steps` rounds of 16 independent chains (more than latency x pipes
// on any x86 core) and returns the flops done; `sink` keeps them alive.
// With FMA, each step of a chain is one multiply-add (2 flops). Without it,
// MulAdd is a multiply then a dependent add, whose latency would understate
// what GEMM gets by pairing independent multiplies and adds: there, half the
// chains multiply and half add (1 flop each).
double FmaLoop(std::size_t steps, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V mul = hn::Set(d, 0.999999f), add = hn::Set(d, 1e-7f);
  V acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = hn::Set(d, static_cast<float>(i));
  for (std::size_t s = 0; s < steps; ++s) {
#if HWY_NATIVE_FMA
    for (int i = 0; i < 16; ++i) acc[i] = hn::MulAdd(acc[i], mul, add);
#else
    for (int i = 0; i < 8; ++i) acc[i] = hn::Mul(acc[i], mul);
    for (int i = 8; i < 16; ++i) acc[i] = hn::Add(acc[i], add);
#endif
  }
  V total = acc[0];
  for (int i = 1; i < 16; ++i) total = hn::Add(total, acc[i]);
  *sink = hn::GetLane(total);
  const double flops_per_step = HWY_NATIVE_FMA ? 2.0 * 16 : 16.0;
  return flops_per_step * hn::Lanes(d) * static_cast<double>(steps);
}

// Sums `count` floats (reads memory once); returns the sum.
float ReadAll(const float* data, std::size_t count) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  auto a = hn::Zero(d), b = hn::Zero(d), c = hn::Zero(d), e = hn::Zero(d);
  std::size_t i = 0;
  for (; i + 4 * lanes <= count; i += 4 * lanes) {
    a = hn::Add(a, hn::LoadU(d, data + i));
    b = hn::Add(b, hn::LoadU(d, data + i + lanes));
    c = hn::Add(c, hn::LoadU(d, data + i + 2 * lanes));
    e = hn::Add(e, hn::LoadU(d, data + i + 3 * lanes));
  }
  float sum =
      hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a, b), hn::Add(c, e))));
  for (; i < count; ++i) sum += data[i];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstring>
#include <vector>

#include "bench_util.h"

namespace mha_bench {
HWY_EXPORT(PeakTargetName);
HWY_EXPORT(FmaLoop);
HWY_EXPORT(ReadAll);

namespace {

// The table index of the target mha runs on: these functions are compiled
// with the library's target list, so the names line up.
std::size_t IndexOfActiveTarget() {
  const std::string active = mha::active_target();
  for (std::size_t i = 0; i < sizeof(HWY_DISPATCH_TABLE(PeakTargetName)) /
                                  sizeof(HWY_DISPATCH_TABLE(PeakTargetName)[0]);
       ++i) {
    if (i == 0) continue;  // Highway's initializing entry
    const auto name_of = HWY_DISPATCH_TABLE(PeakTargetName)[i];
    if (name_of != nullptr && active == name_of()) return i;
  }
  return 0;
}

void BM_FmaPeak(benchmark::State& state) {
  const std::size_t index = IndexOfActiveTarget();
  if (index == 0) return state.SkipWithError("active target not compiled here");
  const int threads = tbb::this_task_arena::max_concurrency();
  std::vector<float> sinks(threads * 16);
  double flops = 0;
  for (auto _ : state) {
    flops = 0;
    std::vector<double> per_thread(threads);
    tbb::parallel_for(
        0, threads,
        [&](int t) {
          per_thread[t] =
              HWY_DISPATCH_TABLE(FmaLoop)[index](1 << 20, &sinks[t * 16]);
        },
        tbb::static_partitioner());
    for (double f : per_thread) flops += f;
  }
  state.SetLabel(HWY_DISPATCH_TABLE(PeakTargetName)[index]());
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
// Peaks are denominators: mha-bench takes the best of three.
BENCHMARK(BM_FmaPeak)->UseRealTime()->Repetitions(3);

void BM_MemoryRead(benchmark::State& state) {
  const std::size_t index = IndexOfActiveTarget();
  if (index == 0) return state.SkipWithError("active target not compiled here");
  const std::size_t count = std::size_t(state.range(0))
                            << 20;  // MiB of floats * 4
  std::vector<float> data(count, 1.0f);
  const int threads = tbb::this_task_arena::max_concurrency();
  const std::size_t chunk = (count + threads - 1) / threads;
  for (auto _ : state) {
    tbb::parallel_for(
        0, threads,
        [&](int t) {
          const std::size_t begin = std::min(count, t * chunk);
          benchmark::DoNotOptimize(HWY_DISPATCH_TABLE(ReadAll)[index](
              data.data() + begin, std::min(chunk, count - begin)));
        },
        tbb::static_partitioner());
  }
  state.SetLabel(HWY_DISPATCH_TABLE(PeakTargetName)[index]());
  state.counters["GB/s"] = benchmark::Counter(
      4.0 * count * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
// 256 MiB: well past the last-level cache, so this is DRAM bandwidth.
BENCHMARK(BM_MemoryRead)
    ->Arg(64)
    ->ArgName("Mfloats")
    ->UseRealTime()
    ->Repetitions(3);

}  // namespace
}  // namespace mha_bench
#endif  // HWY_ONCE
