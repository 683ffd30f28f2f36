// Every call gives bitwise-identical results on 1 thread and on 2, on every
// target: no reduction depends on how the work is split.
#include <thread>
#include <vector>

#include "test_util.h"

namespace mha_test {
namespace {

class DeterminismTest : public PerTarget {
 protected:
  // Runs `call(output)` in arenas of 1 and 2 threads and compares.
  template <class Call>
  void ExpectSameOnOneAndTwoThreads(std::size_t size, Call&& call) {
    std::vector<float> one(size, 0.0f), two(size, 0.0f);
    InArena(1, [&] { call(one.data()); });
    InArena(2, [&] { call(two.data()); });
    ExpectBitwiseEqual(one, two);
  }
};

TEST_P(DeterminismTest, Sgemm) {
  const std::size_t m = 333, n = 301, k = 517;
  const std::vector<float> a = RandomVector(m * k, 1),
                           b = RandomVector(k * n, 2);
  ExpectSameOnOneAndTwoThreads(m * n, [&](float* c) {
    mha::sgemm(mha::Transpose::No, mha::Transpose::Yes, m, n, k, 1.0f, a.data(),
               k, b.data(), k, 0.0f, c, n);
  });
}

TEST_P(DeterminismTest, SgemmMatrixVectorWithSplitDepth) {
  const std::size_t n = 100, k = 5000;
  const std::vector<float> a = RandomVector(k, 11), b = RandomVector(k * n, 12);
  ExpectSameOnOneAndTwoThreads(n, [&](float* c) {
    mha::sgemm(mha::Transpose::No, mha::Transpose::No, 1, n, k, 1.0f, a.data(),
               k, b.data(), n, 0.0f, c, n);
  });
}

TEST_P(DeterminismTest, Softmax) {
  const std::vector<float> x = RandomVector(300 * 999, 3, -10, 10);
  ExpectSameOnOneAndTwoThreads(x.size(), [&](float* y) {
    mha::softmax(x.data(), 999, y, 999, 300, 999, 0.3f);
  });
}

TEST_P(DeterminismTest, AttentionFusedAndWithWeights) {
  const mha::AttentionShape s{2, 8, 2, 67, 301, 64};
  const std::vector<float> q = RandomVector(2 * 8 * 67 * 64, 4);
  const std::vector<float> kv = RandomVector(2 * 2 * 301 * 64, 5);
  const mha::Layout ql{8 * 67 * 64, 67 * 64, 64},
      kvl{2 * 301 * 64, 301 * 64, 64};
  mha::AttentionMask mask;
  mask.causal = true;
  ExpectSameOnOneAndTwoThreads(q.size(), [&](float* out) {
    mha::attention(s, q.data(), ql, kv.data(), kvl, kv.data(), kvl, out, ql,
                   mask);
  });
  std::vector<float> weights(2 * 8 * 67 * 301);
  ExpectSameOnOneAndTwoThreads(q.size(), [&](float* out) {
    mha::attention(s, q.data(), ql, kv.data(), kvl, kv.data(), kvl, out, ql,
                   mask, 0.0f, weights.data());
  });
}

TEST_P(DeterminismTest, AttentionDecodeWithSplitKeys) {
  // Decode tasks take one KV head each ([head, token, head_dim] caches) and
  // split the keys when there are fewer than 8 of them: MQA (8 ranges), 2 KV
  // heads (4 ranges each), 12 KV heads (none); [token, kv_dim] caches take
  // all heads in a task.
  const mha::AttentionShape shapes[] = {
      {1, 8, 1, 1, 5000, 128}, {1, 8, 2, 2, 3000, 64}, {1, 12, 12, 1, 700, 64}};
  for (const mha::AttentionShape& s : shapes) {
    for (const bool token_major : {false, true}) {
      const std::size_t kv_dim = s.num_kv_heads * s.head_dim;
      const std::vector<float> q = RandomVector(
                                   s.num_heads * s.q_len * s.head_dim, 7),
                               kv = RandomVector(s.kv_len * kv_dim, 8);
      const mha::Layout ql{s.num_heads * s.q_len * s.head_dim,
                           s.q_len * s.head_dim, s.head_dim};
      const mha::Layout kvl =
          token_major ? mha::Layout{s.kv_len * kv_dim, s.head_dim, kv_dim}
                      : mha::Layout{s.kv_len * kv_dim, s.kv_len * s.head_dim,
                                    s.head_dim};
      ExpectSameOnOneAndTwoThreads(q.size(), [&](float* out) {
        mha::attention(s, q.data(), ql, kv.data(), kvl, kv.data(), kvl, out,
                       ql);
      });
    }
  }
}

TEST_P(DeterminismTest, ForwardAndForwardCached) {
  const mha::MultiHeadAttention layer(256, 4);
  const std::vector<float> x = RandomVector(2 * 50 * 256, 6);
  ExpectSameOnOneAndTwoThreads(x.size(), [&](float* out) {
    layer.forward(x.data(), x.data(), x.data(), 2, 50, 50, out);
  });
  ExpectSameOnOneAndTwoThreads(x.size(), [&](float* out) {
    mha::KVCache cache(layer.config(), 2, 50);
    layer.forward_cached(x.data(), 2, 50, cache, out);
  });
  // Two queries over 50 keys: the absorbed order (lib/layer/).
  ExpectSameOnOneAndTwoThreads(2 * 2 * 256, [&](float* out) {
    layer.forward(x.data(), x.data(), x.data(), 2, 2, 50, out);
  });
}

MHA_INSTANTIATE_PER_TARGET(DeterminismTest);

// const members may run concurrently on one object: two threads calling
// forward (and forward_cached on their own caches) on one layer get what a
// lone call gets, bit for bit.
TEST(Concurrency, ConstCallsOnOneLayerFromTwoThreads) {
  const mha::MultiHeadAttention layer({128, 4, 2, true});
  const std::vector<float> x = RandomVector(2 * 40 * 128, 9);
  std::vector<float> alone(x.size()), cached_alone(x.size());
  layer.forward(x.data(), x.data(), x.data(), 2, 40, 40, alone.data());
  mha::KVCache cache(layer.config(), 2, 40);
  layer.forward_cached(x.data(), 2, 40, cache, cached_alone.data());
  std::vector<std::vector<float>> outs(2, std::vector<float>(x.size()));
  std::vector<std::vector<float>> cached(2, std::vector<float>(x.size()));
  auto work = [&](int t) {
    for (int repeat = 0; repeat < 20; ++repeat) {
      layer.forward(x.data(), x.data(), x.data(), 2, 40, 40, outs[t].data());
      mha::KVCache own(layer.config(), 2, 40);
      layer.forward_cached(x.data(), 2, 40, own, cached[t].data());
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  for (int t = 0; t < 2; ++t) {
    ExpectBitwiseEqual(outs[t], alone);
    ExpectBitwiseEqual(cached[t], cached_alone);
  }
}

}  // namespace
}  // namespace mha_test
