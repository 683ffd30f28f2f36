// Steady-state forward and forward_cached allocate nothing: after a first
// call (which sizes the per-thread scratch, the buffer pool and oneTBB's
// task pools), further calls of the same shapes make no call to malloc, on
// one thread and on two. And fused attention's memory stays O(threads x
// tile): a long causal prefill's first call holds at most 16 MiB beyond its
// inputs and outputs. Its own executable: it replaces malloc, free and their
// kin for the whole process (the library's buffers, Highway's aligned
// allocations, std::vector, oneTBB), counting calls while `counting` is on
// and the bytes held while `weighing` is on.
#include <gtest/gtest.h>
#include <malloc.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <thread>
#include <vector>

#include "mha/mha.h"

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* pointer, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
void __libc_free(void* pointer);
}

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
// While weighing: bytes allocated minus bytes freed since it began (blocks
// as malloc_usable_size measures them), and the most that ever was.
std::atomic<bool> weighing{false};
std::atomic<long long> held_bytes{0}, peak_held_bytes{0};

void Weigh(void* pointer, long long sign) {
  if (pointer == nullptr || !weighing.load(std::memory_order_relaxed)) return;
  const long long bytes =
      sign * static_cast<long long>(malloc_usable_size(pointer));
  const long long held = held_bytes.fetch_add(bytes) + bytes;
  long long peak = peak_held_bytes.load();
  while (held > peak && !peak_held_bytes.compare_exchange_weak(peak, held)) {
  }
}
void* Allocated(void* pointer) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  Weigh(pointer, +1);
  return pointer;
}
}  // namespace

extern "C" {
void* malloc(std::size_t size) { return Allocated(__libc_malloc(size)); }
void* calloc(std::size_t count, std::size_t size) {
  return Allocated(__libc_calloc(count, size));
}
void* realloc(void* pointer, std::size_t size) {
  Weigh(pointer, -1);
  return Allocated(__libc_realloc(pointer, size));
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  return Allocated(__libc_memalign(alignment, size));
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  *out = Allocated(__libc_memalign(alignment, size));
  return *out ? 0 : 12;  // ENOMEM
}
void free(void* pointer) {
  Weigh(pointer, -1);
  __libc_free(pointer);
}
}

namespace {

// Runs call() on a worker thread of the current arena: the caller spins
// outside oneTBB until a worker has taken the call, which then runs a part
// of every parallel loop in it (oneTBB's caller always runs the first piece
// of its range) and so sizes that worker's scratch for every kind of task.
template <class Call>
void CallOnAWorker(Call& call) {
  std::atomic<bool> started{false};
  tbb::task_group group;
  group.run([&] {
    started = true;
    call();
  });
  // (A machine without a spare worker runs it on the caller after 5 s.)
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!started.load() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  group.wait();
}

// Warms up (call() on a worker, when there are several threads, then on
// the caller until ten calls in a row made no allocation), then counts the
// allocations of `repeats` more calls. The quiet calls alone were not
// enough on a loaded machine: the worker could sleep through them, the
// caller running every task, and size its scratch inside the counted calls.
template <class Call>
long AllocationsInSteadyState(int threads, Call&& call, int repeats = 10) {
  long counted = 0;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    counting = true;
    if (threads > 1) CallOnAWorker(call);
    for (int calls = 0, quiet = 0; quiet < 10 && calls < 400; ++calls) {
      allocations = 0;
      call();
      quiet = allocations == 0 ? quiet + 1 : 0;
    }
    allocations = 0;
    for (int i = 0; i < repeats; ++i) call();
    counting = false;
    counted = allocations.load();
  });
  return counted;
}

TEST(SteadyState, ForwardAllocatesNothing) {
  mha::MultiHeadAttention layer({512, 8, 2, true});
  layer.init_random(1);
  std::vector<float> x(2 * 300 * 512, 0.25f), out(x.size());
  for (int threads : {1, 2}) {
    for (std::size_t len : {10, 300}) {  // the seed's shape; key blocks
      EXPECT_EQ(AllocationsInSteadyState(threads,
                                         [&] {
                                           layer.forward(x.data(), x.data(),
                                                         x.data(), 2, len, len,
                                                         out.data());
                                         }),
                0)
          << "threads " << threads << " len " << len;
    }
    // Two queries over 300 keys: the absorbed order (lib/layer/).
    EXPECT_EQ(AllocationsInSteadyState(threads,
                                       [&] {
                                         layer.forward(x.data(), x.data(),
                                                       x.data(), 2, 2, 300,
                                                       out.data());
                                       }),
              0)
        << "threads " << threads << ", absorbed order";
  }
}

TEST(SteadyState, ForwardCachedAllocatesNothing) {
  const mha::MultiHeadAttentionConfig config{512, 8, 2, false};
  mha::MultiHeadAttention layer(config);
  layer.init_random(2);
  // The cache grows a token a call; decode splits its keys in a range per
  // 256, and a new range (at 1280 keys) would legitimately grow the buffer
  // of their states: start well inside the span of 4 ranges.
  mha::KVCache cache(config, 1, 2048);
  std::vector<float> prompt(1030 * 512, 0.5f), token(512, 0.5f),
      out(prompt.size());
  layer.forward_cached(prompt.data(), 1, 1030, cache, out.data());
  for (int threads : {1, 2}) {
    EXPECT_EQ(AllocationsInSteadyState(
                  threads,
                  [&] {
                    layer.forward_cached(token.data(), 1, 1, cache, out.data());
                  }),
              0)
        << "threads " << threads;
  }
}

// The counter itself works: a vector's allocation is seen.
TEST(SteadyState, TheCounterSeesAnAllocation) {
  static float* volatile sink;
  EXPECT_GT(AllocationsInSteadyState(1,
                                     [] {
                                       std::vector<float> v(1000);
                                       sink = v.data();
                                     }),
            0);
}

// The most bytes call() holds at once beyond what was held before it.
template <class Call>
long long PeakBytesHeldBy(Call&& call) {
  held_bytes = 0;
  peak_held_bytes = 0;
  weighing = true;
  call();
  weighing = false;
  return peak_held_bytes.load();
}

// Fused attention never materializes the scores (API.md: O(threads x tile)
// extra memory, not O(q_len x kv_len)): at L16384, 8 heads, they would take
// 8 GiB. The first call, which sizes every thread's scratch, holds at most
// 16 MiB beyond the inputs and output, on all the threads of the machine.
TEST(FusedAttentionMemory, LongCausalPrefillHoldsLittleMemory) {
  constexpr std::size_t kLen = 16384, kHeads = 8, kDim = 64;
  const mha::AttentionShape shape{1, kHeads, kHeads, kLen, kLen, kDim};
  const mha::Layout layout{kHeads * kLen * kDim, kLen * kDim, kDim};
  // Q, K and V: one tensor of 0.5, so that every output is 0.5.
  const std::vector<float> qkv(kHeads * kLen * kDim, 0.5f);
  std::vector<float> out(qkv.size(), 0.0f);
  mha::AttentionMask mask;
  mask.causal = true;
  const long long peak = PeakBytesHeldBy([&] {
    mha::attention(shape, qkv.data(), layout, qkv.data(), layout, qkv.data(),
                   layout, out.data(), layout, mask);
  });
  // 1.2 MB on 2 Sapphire Rapids threads (with P^T's slivers, 147 KB each).
  EXPECT_LT(peak, 16ll << 20) << "bytes";
  EXPECT_EQ(out.front(), 0.5f);
  EXPECT_NEAR(out.back(), 0.5f, 1e-6f);
}

// The scale itself works: a vector held during the call is seen.
TEST(FusedAttentionMemory, TheScaleSeesHeldBytes) {
  static float* volatile sink;
  EXPECT_GE(PeakBytesHeldBy([] {
              std::vector<float> v(std::size_t{8} << 20);
              sink = v.data();
            }),
            32ll << 20);
}

}  // namespace
