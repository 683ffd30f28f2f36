// Steady-state forward and forward_cached allocate nothing: after a first
// call (which sizes the per-thread scratch, the buffer pool and oneTBB's
// task pools), further calls of the same shapes make no call to malloc, on
// one thread and on two. Its own executable: it replaces malloc and its kin
// for the whole process (the library's buffers, Highway's aligned
// allocations, std::vector, oneTBB), counting them while `counting` is on.
#include <gtest/gtest.h>
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
}

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
void Count() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
}
}  // namespace

extern "C" {
void* malloc(std::size_t size) {
  Count();
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) {
  Count();
  return __libc_calloc(count, size);
}
void* realloc(void* pointer, std::size_t size) {
  Count();
  return __libc_realloc(pointer, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  Count();
  *out = __libc_memalign(alignment, size);
  return *out ? 0 : 12;  // ENOMEM
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

}  // namespace
