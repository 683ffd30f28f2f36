// The machine's limits, measured per target, so that every result can be
// read as a fraction of what the hardware does: the FMA peak (independent
// multiply-adds in registers, 2 flops per lane each, on every thread of the
// arena), the rate of the GEMM's register tiles fed from L1, and the memory
// read bandwidth. Compiled once per Highway target,
// like the library; the version matching mha::active_target() runs.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <algorithm>
#include <cstddef>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "lib/gemm/microkernel-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

const char* PeakTargetName() { return hwy::TargetName(HWY_TARGET); }

// The FMA peak probe: enough independent chains to cover the FMA latency
// times the FMA pipes of any core we know (4 cycles x 2 pipes = 8 on Intel
// and AMD alike; the probe keeps more, as no kernel can do better), and few
// enough that the chains and the two constants stay in registers: a probe
// that spills measures the spills (with 16 chains on the 16 ymm registers of
// AVX2 it read 71 GFLOP/s on Zen 5, whose ymm peak is about 130 per core, and
// our AVX2 SGEMM "beat" it at 146%). 32 vector registers (AVX-512, NEON, SVE)
// hold 24 chains, 16 (AVX2, SSE) hold 12.
#if (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) || HWY_TARGET == HWY_SCALAR || \
    HWY_TARGET == HWY_EMU128
constexpr int kChains = 12;
#else
constexpr int kChains = 24;
#endif

// One step of chain i: a multiply-add with FMA. Without FMA, MulAdd would be a
// multiply and a dependent add, whose latency would understate what GEMM gets
// by pairing independent multiplies and adds: there, even chains multiply and
// odd ones add (1 flop each), so both kinds of pipes work.
template <int kIndex, class V>
HWY_INLINE V Step(V acc, V mul, V add) {
#if HWY_NATIVE_FMA
  return hn::MulAdd(acc, mul, add);
#else
  return kIndex % 2 == 0 ? hn::Mul(acc, mul) : hn::Add(acc, add);
#endif
}

// Runs `steps` rounds of the chains and returns the flops done; `sink` keeps
// them alive. The chains are named variables, not an array: arrays of vectors
// do not exist on targets whose vectors are sizeless (SVE).
double FmaLoop(std::size_t steps, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V mul = hn::Set(d, 0.999999f), add = hn::Set(d, 1e-7f);
#define MHA_PEAK_CHAINS(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define MHA_PEAK_MORE_CHAINS(X) \
  X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define MHA_PEAK_DECLARE(i) V acc##i = hn::Set(d, static_cast<float>(i));
#define MHA_PEAK_STEP(i) acc##i = Step<i>(acc##i, mul, add);
#define MHA_PEAK_SUM(i) total = hn::Add(total, acc##i);
  MHA_PEAK_CHAINS(MHA_PEAK_DECLARE)
  if constexpr (kChains == 24) {
    MHA_PEAK_MORE_CHAINS(MHA_PEAK_DECLARE)
    for (std::size_t s = 0; s < steps; ++s) {
      MHA_PEAK_CHAINS(MHA_PEAK_STEP)
      MHA_PEAK_MORE_CHAINS(MHA_PEAK_STEP)
    }
    V total = hn::Zero(d);
    MHA_PEAK_CHAINS(MHA_PEAK_SUM)
    MHA_PEAK_MORE_CHAINS(MHA_PEAK_SUM)
    *sink = hn::GetLane(total);
  } else {
    for (std::size_t s = 0; s < steps; ++s) {
      MHA_PEAK_CHAINS(MHA_PEAK_STEP)
    }
    V total = hn::Zero(d);
    MHA_PEAK_CHAINS(MHA_PEAK_SUM)
    *sink = hn::GetLane(total);
  }
#undef MHA_PEAK_CHAINS
#undef MHA_PEAK_MORE_CHAINS
#undef MHA_PEAK_DECLARE
#undef MHA_PEAK_STEP
#undef MHA_PEAK_SUM
  const double flops_per_chain_step = HWY_NATIVE_FMA ? 2.0 : 1.0;
  return flops_per_chain_step * kChains * hn::Lanes(d) *
         static_cast<double>(steps);
}

// The ceiling of any product built on the register tile: the micro-kernel
// on operands that stay in L1 (an A sliver of kRows x kTileDepth floats and
// kPanels B panels of kTileDepth steps: on AVX-512 6 KiB of A and 16 KiB of
// B for the 12 x 2 tile, 3 KiB and 32 KiB for the 6 x 4),
// its tile handed to an epilogue every kTileDepth steps as in a GEMM. Runs
// `tiles` tiles and returns the flops done. Where the FMA peak counts
// multiply-adds alone, this counts them with the loads that feed them.
// Sapphire Rapids VM, 1 thread: the 12 x 2 tile 85% of the FMA peak, the
// 6 x 4 90% (2 threads: 85% and 86-90%); a loop of 24 independent FMAs in
// registers ran at 90% with 12 broadcasts from L1 beside them, 89% with 4
// vector loads, 79% with 8: loads take issue slots the FMAs want there, and
// no kernel fed from memory reaches the FMA peak.
namespace kernel = mha::HWY_NAMESPACE;
constexpr std::size_t kTileDepth = 128;
template <std::size_t kRows, std::size_t kPanels>
double TileLoop(std::size_t tiles, float* sink) {
  const kernel::FloatTag d;
  const std::size_t cols = kernel::TileCols();
  const std::size_t a_size = kRows * kTileDepth;
  const std::size_t b_size = kPanels * cols * kTileDepth;
  const hwy::AlignedFreeUniquePtr<float[]> a =
      hwy::AllocateAligned<float>(a_size);
  const hwy::AlignedFreeUniquePtr<float[]> b =
      hwy::AllocateAligned<float>(b_size);
  std::fill(a.get(), a.get() + a_size, 1e-3f);
  std::fill(b.get(), b.get() + b_size, 0.5f);
  kernel::FloatVec total = hn::Zero(d);
  for (std::size_t t = 0; t < tiles; ++t) {
    kernel::MultiplyPanels<kRows, kPanels>(
        kTileDepth, kernel::StepsA{a.get(), kRows}, b.get(),
        /*panel_stride=*/cols * kTileDepth, /*b_stride=*/cols,
        [&](std::size_t, std::size_t, kernel::FloatVec v0,
            kernel::FloatVec v1) { total = hn::Add(total, hn::Add(v0, v1)); });
  }
  *sink = hn::GetLane(total);
  return 2.0 * kRows * kPanels * cols * kTileDepth * static_cast<double>(tiles);
}
// The two tiles the GEMM runs: 12 x 2 vectors and the wide 6 x 4 (on
// AVX-512; kTileRows x 2 and kWideTileRows x 4 elsewhere).
double NarrowTileLoop(std::size_t tiles, float* sink) {
  return TileLoop<kernel::kTileRows, 1>(tiles, sink);
}
double WideTileLoop(std::size_t tiles, float* sink) {
  return TileLoop<kernel::kWideTileRows, 2>(tiles, sink);
}

// Sums `count` floats (reads memory once); returns the sum. The quarters of
// the range are read side by side, four streams: one core reads DRAM faster
// that way (Zen 5, 1 thread: 37.7 GB/s with one stream, 43.5 with two or
// four; 2 threads: 45 with one, 51-53 with two or four), and the probe must
// find the machine's limit, not one loop's.
float ReadAll(const float* data, std::size_t count) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const std::size_t quarter = count / (4 * lanes) * lanes;
  const float* q1 = data + quarter;
  const float* q2 = q1 + quarter;
  const float* q3 = q2 + quarter;
  auto a = hn::Zero(d), b = hn::Zero(d), c = hn::Zero(d), e = hn::Zero(d);
  for (std::size_t i = 0; i < quarter; i += lanes) {
    a = hn::Add(a, hn::LoadU(d, data + i));
    b = hn::Add(b, hn::LoadU(d, q1 + i));
    c = hn::Add(c, hn::LoadU(d, q2 + i));
    e = hn::Add(e, hn::LoadU(d, q3 + i));
  }
  float sum =
      hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a, b), hn::Add(c, e))));
  for (std::size_t i = 4 * quarter; i < count; ++i) sum += data[i];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench_util.h"
#include "mha/detail/huge_pages.h"

namespace mha_bench {
HWY_EXPORT(PeakTargetName);
HWY_EXPORT(FmaLoop);
HWY_EXPORT(NarrowTileLoop);
HWY_EXPORT(WideTileLoop);
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

// Runs per_thread(t) on each of `threads` threads at once, one each.
template <class PerThread>
void OnEveryThread(int threads, PerThread&& per_thread) {
  tbb::parallel_for(0, threads, per_thread, tbb::static_partitioner());
}

// Runs loop(work, sink) on each of `threads` threads at once per
// iteration and reports the flops they return as GFLOP/s.
void ReportFlopsOnEveryThread(benchmark::State& state, std::size_t index,
                              double (*loop)(std::size_t, float*),
                              std::size_t work, int threads) {
  std::vector<float> sinks(threads * 16);
  std::vector<double> flops(threads);
  WithThreads(threads, [&] {
    for (auto _ : state) {
      OnEveryThread(threads,
                    [&](int t) { flops[t] = loop(work, &sinks[t * 16]); });
    }
  });
  double total = 0;
  for (double f : flops) total += f;
  state.SetLabel(HWY_DISPATCH_TABLE(PeakTargetName)[index]());
  state.counters["GFLOP/s"] = benchmark::Counter(
      total * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// args: threads
void BM_FmaPeak(benchmark::State& state) {
  const std::size_t index = IndexOfActiveTarget();
  if (index == 0) return state.SkipWithError("active target not compiled here");
  ReportFlopsOnEveryThread(state, index, HWY_DISPATCH_TABLE(FmaLoop)[index],
                           1 << 20, state.range(0));
}
// Peaks are denominators: the tables take the best of three.
BENCHMARK(BM_FmaPeak)
    ->ArgName("t")
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int threads : ThreadCounts()) b->Arg(threads);
    })
    ->UseRealTime()
    ->Repetitions(3);

// args: wide (0: the 12 x 2 tile, 1: the 6 x 4), threads
void BM_TilePeak(benchmark::State& state) {
  const std::size_t index = IndexOfActiveTarget();
  if (index == 0) return state.SkipWithError("active target not compiled here");
  ReportFlopsOnEveryThread(state, index,
                           state.range(0)
                               ? HWY_DISPATCH_TABLE(WideTileLoop)[index]
                               : HWY_DISPATCH_TABLE(NarrowTileLoop)[index],
                           1 << 12, state.range(1));
}
BENCHMARK(BM_TilePeak)
    ->ArgNames({"wide", "t"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int threads : ThreadCounts()) {
        b->Args({0, threads});
        b->Args({1, threads});
      }
    })
    ->UseRealTime()
    ->Repetitions(3);

// args: Mfloats, threads
void BM_MemoryRead(benchmark::State& state) {
  const std::size_t index = IndexOfActiveTarget();
  if (index == 0) return state.SkipWithError("active target not compiled here");
  const std::size_t count = std::size_t(state.range(0))
                            << 20;  // MiB of floats * 4
  // Aligned: a std::vector's 16-byte aligned data makes every 64-byte load
  // straddle two cache lines: measured 35-37 GB/s on one Zen 5 core against
  // 40-41 aligned. On huge pages, as mha's weights and KV caches are, so the
  // probe finds the machine's limit: on 4 KiB pages a read loop ran 0.81-0.87x
  // as fast on Zen 4 (THP "madvise", one process alternating the two).
  const mha::detail::HugePagesArray<float> buffer =
      mha::detail::AllocateHugePagesArray<float>(count);
  float* data = buffer.get();
  std::fill(data, data + count, 1.0f);
  const int threads = state.range(1);
  const std::size_t chunk = (count + threads - 1) / threads;
  WithThreads(threads, [&] {
    for (auto _ : state) {
      OnEveryThread(threads, [&](int t) {
        const std::size_t begin = std::min(count, t * chunk);
        benchmark::DoNotOptimize(HWY_DISPATCH_TABLE(ReadAll)[index](
            data + begin, std::min(chunk, count - begin)));
      });
    }
  });
  state.SetLabel(HWY_DISPATCH_TABLE(PeakTargetName)[index]());
  state.counters["GB/s"] = benchmark::Counter(
      4.0 * count * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
// 256 MiB: well past the last-level cache, so this is DRAM bandwidth.
BENCHMARK(BM_MemoryRead)
    ->ArgNames({"Mfloats", "t"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int threads : ThreadCounts()) b->Args({64, threads});
    })
    ->UseRealTime()
    ->Repetitions(3);

}  // namespace
}  // namespace mha_bench
#endif  // HWY_ONCE
