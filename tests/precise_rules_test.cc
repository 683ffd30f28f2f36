// The "Precise rules" of the contract (../shared/API.md) that concern bad
// data and bad arguments, on every target: hidden keys never count, NaN and
// Inf propagate, sizes that overflow throw, outputs that overlap inputs
// throw, scale must be finite. Each case here failed before it was fixed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/absorbed_attention.h"
#include "reference.h"
#include "test_util.h"

namespace mha_test {
namespace {

constexpr std::size_t kHuge = std::size_t{1} << 62;

// Where a test plants a non-finite value.
enum class Poison {
  kPaddingKeys,    // K NaN, V Inf in keys past kv_lengths[b]
  kBiasHiddenKey,  // K and V NaN in a key that a -inf bias hides from all
  kLastKeyValue,   // V NaN in the last key: causal rows before it never see it
  kQueryNaN,       // NaN in one query row
  kQueryInf,       // +Inf in one query row
  kVisibleKeyInf,  // -Inf mid-row in the K of a key every row sees
  kBiasNaN,        // a NaN bias on a key the last query row sees
  kBiasInf,        // a +Inf bias on a key the first query rows see
};

// The bound on attention's normwise error against the double reference.
double AttentionTolerance(std::size_t head_dim) {
  return (head_dim + 64) * 0x1.0p-22;
}

class PreciseRulesTest : public PerTarget {
 protected:
  // Dense [batch, heads, tokens, head_dim] tensors, the mask of all kinds
  // (the bias only if with_bias: it checks the logits it adds to, and would
  // hide a finiteness check of K that missed), one poison; output and
  // weights compared with the double reference, which follows the rules:
  // NaN exactly where it says, close elsewhere.
  void CheckPoison(const mha::AttentionShape& s, Poison poison,
                   bool with_weights, bool with_bias = true) {
    const std::size_t d = s.head_dim;
    std::vector<float> q = RandomVector(s.batch * s.num_heads * s.q_len * d, 1);
    std::vector<float> k =
        RandomVector(s.batch * s.num_kv_heads * s.kv_len * d, 2);
    std::vector<float> v = RandomVector(k.size(), 3);
    const mha::Layout ql{s.num_heads * s.q_len * d, s.q_len * d, d};
    const mha::Layout kl{s.num_kv_heads * s.kv_len * d, s.kv_len * d, d};
    std::vector<std::int32_t> lengths(s.batch,
                                      static_cast<std::int32_t>(s.kv_len - 2));
    std::vector<float> bias = RandomVector(s.q_len * s.kv_len, 4, -1, 1);
    const std::size_t hidden_key = s.kv_len / 2;
    for (std::size_t i = 0; i < s.q_len; ++i)
      bias[i * s.kv_len + hidden_key] = -kInf;
    mha::AttentionMask mask;
    mask.causal = true;
    mask.kv_lengths = lengths.data();
    mask.bias = with_bias ? bias.data() : nullptr;
    auto key_at = [&](std::vector<float>& t, std::size_t b, std::size_t h,
                      std::size_t j) {
      return &t[b * kl.batch + h * kl.head + j * kl.token];
    };
    switch (poison) {
      case Poison::kPaddingKeys:
        for (std::size_t j = s.kv_len - 2; j < s.kv_len; ++j) {
          key_at(k, 0, 0, j)[0] = kNaN;
          key_at(v, s.batch - 1, s.num_kv_heads - 1, j)[d - 1] = kInf;
        }
        break;
      case Poison::kBiasHiddenKey:
        key_at(k, 0, 0, hidden_key)[d / 2] = kNaN;
        key_at(v, 0, 0, hidden_key)[0] = kNaN;
        break;
      case Poison::kLastKeyValue:
        lengths.assign(s.batch, static_cast<std::int32_t>(s.kv_len));
        key_at(v, 0, 0, s.kv_len - 1)[0] = kNaN;
        break;
      case Poison::kQueryNaN:
        q[ql.token * (s.q_len - 1) + d - 1] = kNaN;
        break;
      case Poison::kQueryInf:
        q[ql.head * (s.num_heads - 1)] = kInf;
        break;
      case Poison::kVisibleKeyInf:
        key_at(k, 0, 0, 0)[d / 2] = -kInf;
        break;
      case Poison::kBiasNaN:
        bias[(s.q_len - 1) * s.kv_len + s.kv_len / 3] = kNaN;
        break;
      case Poison::kBiasInf:
        for (std::size_t i = 0; i < std::min<std::size_t>(s.q_len, 3); ++i)
          bias[i * s.kv_len] = kInf;
        break;
    }
    std::vector<float> out(q.size(), 7.0f);
    std::vector<float> weights(
        with_weights ? s.batch * s.num_heads * s.q_len * s.kv_len : 0, 7.0f);
    mha::attention(s, q.data(), ql, k.data(), kl, v.data(), kl, out.data(), ql,
                   mask, 0.0f, with_weights ? weights.data() : nullptr);
    ExpectRanOnTarget();
    const ReferenceAttentionResult want =
        ReferenceAttention(s, q.data(), ql, k.data(), kl, v.data(), kl, mask,
                           1.0 / std::sqrt(double(d)));
    const double tolerance = AttentionTolerance(d);
    SCOPED_TRACE("poison " + std::to_string(int(poison)) + " q_len " +
                 std::to_string(s.q_len) + " kv_len " +
                 std::to_string(s.kv_len) +
                 (with_weights ? " with weights" : " fused") +
                 (with_bias ? "" : " without bias"));
    EXPECT_LE(RelativeErrorWithNaNs("attention", out.data(), want.out.data(),
                                    out.size()),
              tolerance);
    if (with_weights) {
      EXPECT_LE(RelativeErrorWithNaNs("attention weights", weights.data(),
                                      want.weights.data(), weights.size(), 1.0),
                tolerance);
    }
  }
};

TEST_P(PreciseRulesTest, HiddenKeysNeverCountAndNaNPropagates) {
  const mha::AttentionShape shapes[] = {
      {2, 4, 2, 20, 37, 16},   // tiles of query rows
      {1, 4, 4, 1, 40, 64},    // decode rows, head_dim along the lanes
      {1, 2, 1, 1, 1500, 32},  // one task: keys split into merged ranges
      {1, 3, 3, 2, 300, 5},    // ragged head_dim, two key blocks
      // Rows of 3 AVX-512 vectors, which the finiteness checks take two at
      // a time, then one: the poisons at d / 2 and d - 1 fall into each
      // kind on AVX-512, AVX2 and SSE4.
      {1, 2, 2, 20, 30, 48},
      // Several query tiles of one KV head (64 queries a tile on AVX-512),
      // which share the checks of whole key blocks (block_checks.h): a
      // poison in block 0 or 1 is found by one tile and must reach the
      // rows of every tile that sees it; the ragged last block, checked by
      // each tile, holds the padding's.
      {1, 2, 1, 300, 600, 16},
  };
  for (const mha::AttentionShape& s : shapes) {
    for (Poison poison :
         {Poison::kPaddingKeys, Poison::kBiasHiddenKey, Poison::kLastKeyValue,
          Poison::kQueryNaN, Poison::kQueryInf, Poison::kVisibleKeyInf,
          Poison::kBiasNaN, Poison::kBiasInf}) {
      CheckPoison(s, poison, false);
      CheckPoison(s, poison, true);
      const bool in_bias = poison == Poison::kBiasHiddenKey ||
                           poison == Poison::kBiasNaN ||
                           poison == Poison::kBiasInf;
      if (!in_bias) CheckPoison(s, poison, false, false);
    }
  }
}

// The case the robustness probe reported: V = {0.5, NaN}, a bias hiding
// key 1 from both rows. Both rows see key 0 alone: exactly 0.5.
TEST_P(PreciseRulesTest, NaNValueOfABiasHiddenKeyIsNeverRead) {
  const mha::AttentionShape s{1, 1, 1, 2, 2, 1};
  const float q[] = {1.0f, 2.0f}, k[] = {0.5f, -0.25f}, v[] = {0.5f, kNaN};
  const float bias[] = {0.0f, -kInf, 0.0f, -kInf};
  mha::AttentionMask mask;
  mask.bias = bias;
  const mha::Layout l{2, 2, 1};
  for (bool with_weights : {false, true}) {
    float out[2] = {7.0f, 7.0f}, weights[4];
    mha::attention(s, q, l, k, l, v, l, out, l, mask, 0.0f,
                   with_weights ? weights : nullptr);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], 0.5f);
  }
}

// Per-thread scratch carries nothing from one call into the next: the NaN
// that filled every output row of a call (V all NaN) must not reach the
// rows of the next one. One small task, so both calls run it on this thread.
TEST_P(PreciseRulesTest, NaNOfOneCallNeverReachesTheNext) {
  const mha::AttentionShape s{1, 1, 1, 10, 10, 64};
  const std::size_t d = s.head_dim;
  const std::vector<float> q = RandomVector(s.q_len * d, 1),
                           k = RandomVector(s.kv_len * d, 2),
                           v = RandomVector(s.kv_len * d, 3),
                           nan_v(v.size(), kNaN);
  const mha::Layout ql{s.q_len * d, s.q_len * d, d},
      kl{s.kv_len * d, s.kv_len * d, d};
  std::vector<float> out(q.size());
  mha::attention(s, q.data(), ql, k.data(), kl, nan_v.data(), kl, out.data(),
                 ql);
  for (float x : out) ASSERT_TRUE(std::isnan(x));
  mha::attention(s, q.data(), ql, k.data(), kl, v.data(), kl, out.data(), ql);
  const ReferenceAttentionResult want =
      ReferenceAttention(s, q.data(), ql, k.data(), kl, v.data(), kl, {},
                         1.0 / std::sqrt(double(d)));
  EXPECT_LE(RelativeErrorWithNaNs("attention", out.data(), want.out.data(),
                                  out.size()),
            AttentionTolerance(d));
}

TEST_P(PreciseRulesTest, LayerPropagatesNaNOfAQueryRowOnly) {
  mha::MultiHeadAttention layer({32, 4, 2, true});
  layer.init_random(3);
  const std::size_t len = 6;
  std::vector<float> query = RandomVector(len * 32, 5),
                     memory = RandomVector(len * 32, 6);
  query[2 * 32 + 7] = kNaN;  // row 2
  const std::int32_t lengths[] = {4};
  memory[5 * 32 + 1] = kNaN;  // key 5: past kv_lengths, never seen
  mha::AttentionMask mask;
  mask.kv_lengths = lengths;
  std::vector<float> out(len * 32, 7.0f);
  layer.forward(query.data(), memory.data(), memory.data(), 1, len, len,
                out.data(), mask);
  for (std::size_t i = 0; i < len; ++i) {
    for (std::size_t c = 0; c < 32; ++c) {
      EXPECT_EQ(std::isnan(out[i * 32 + c]), i == 2)
          << "row " << i << " column " << c;
    }
  }
}

// The layer's absorbed order (a few queries over many keys, heads of whole
// panels: lib/layer/absorbed_attention.h) reads the layer's key and value
// inputs, not projected K and V, and must never read the rows a query
// position does not see, even to multiply them by 0. Sequence 0: NaN in
// key and value row 39, which causal query position 0 does not see and 1
// does; sequence 1: NaN past kv_lengths; sequence 2 sees no key and
// outputs b_o. Rows that never see the NaN equal, bit for bit, those of a
// call without it.
TEST_P(PreciseRulesTest, AbsorbedOrderNeverReadsHiddenInputRows) {
  const std::size_t nr =
      mha::detail::PanelCols(mha::detail::ChosenTargetIndex());
  const std::size_t hd = std::max<std::size_t>(2 * nr, 16), d = 4 * hd;
  const std::size_t batch = 3, q_len = 2, kv_len = 40;
  mha::MultiHeadAttention layer({d, 4, 2, true});
  layer.init_random(9);
  const std::int32_t lengths[] = {40, 30, 0};
  mha::AttentionMask mask;
  mask.causal = true;
  mask.kv_lengths = lengths;
  ASSERT_TRUE(mha::detail::PrefersAbsorbedOrder(layer.config(), nr, q_len,
                                                kv_len, mask));
  const std::vector<float> query = RandomVector(batch * q_len * d, 10),
                           key = RandomVector(batch * kv_len * d, 11),
                           value = RandomVector(key.size(), 12);
  std::vector<float> bad_key = key, bad_value = value;
  const auto row = [&](std::size_t b, std::size_t j) {
    return (b * kv_len + j) * d;
  };
  bad_key[row(0, 39) + 1] = kNaN;
  bad_value[row(0, 39) + 2] = kNaN;
  for (std::size_t j = 30; j < kv_len; ++j) {
    bad_key[row(1, j)] = kInf;
    bad_value[row(1, j) + 3] = kNaN;
  }
  for (std::size_t j = 0; j < kv_len; ++j) bad_value[row(2, j)] = kNaN;
  std::vector<float> clean(batch * q_len * d), out(clean.size());
  layer.forward(query.data(), key.data(), value.data(), batch, q_len, kv_len,
                clean.data(), mask);
  layer.forward(query.data(), bad_key.data(), bad_value.data(), batch, q_len,
                kv_len, out.data(), mask);
  std::vector<float> zero_context(d, 0.0f), b_o(d);
  layer.forward(zero_context.data(), nullptr, nullptr, 1, 1, 0, b_o.data());
  for (std::size_t r = 0; r < batch * q_len; ++r) {
    for (std::size_t c = 0; c < d; ++c) {
      const std::size_t at = r * d + c;
      if (r == 1) {  // sequence 0, position 1 sees key 39
        EXPECT_TRUE(std::isnan(out[at])) << "column " << c;
      } else {
        EXPECT_EQ(out[at], clean[at]) << "row " << r << " column " << c;
      }
      if (r >= 4) EXPECT_EQ(out[at], b_o[c]) << "row " << r;
    }
  }
}

// In the absorbed order a key's logit is x_j . (W_k q): +Inf or -Inf in a
// key's input row the row sees may come out as a logit of -inf, which must
// poison the row (NaN outputs, NaN weights where it sees a key, 0 where it
// does not), not hide the key. The case the fuzzer found.
TEST_P(PreciseRulesTest, AbsorbedOrderPropagatesInfOfASeenKeyRow) {
  const std::size_t nr =
      mha::detail::PanelCols(mha::detail::ChosenTargetIndex());
  const std::size_t hd = std::max<std::size_t>(2 * nr, 16), d = 4 * hd;
  const std::size_t q_len = 2, kv_len = 40, heads = 4;
  mha::MultiHeadAttention layer({d, heads, 0, false});
  layer.init_random(13);
  mha::AttentionMask mask;
  mask.causal = true;  // position 0 sees keys 0-38, position 1 all
  ASSERT_TRUE(mha::detail::PrefersAbsorbedOrder(layer.config(), nr, q_len,
                                                kv_len, mask));
  const std::vector<float> query = RandomVector(q_len * d, 14);
  for (float inf : {kInf, -kInf}) {
    for (std::size_t key_row : {std::size_t{5}, kv_len - 1}) {
      std::vector<float> memory = RandomVector(kv_len * d, 15);
      memory[key_row * d + 1] = inf;
      std::vector<float> out(q_len * d), weights(heads * q_len * kv_len, 7.0f);
      layer.forward(query.data(), memory.data(), memory.data(), 1, q_len,
                    kv_len, out.data(), mask, weights.data());
      for (std::size_t i = 0; i < q_len; ++i) {
        const bool sees = key_row < kv_len - 1 || i == 1;
        for (std::size_t c = 0; c < d; ++c) {
          EXPECT_EQ(std::isnan(out[i * d + c]), sees)
              << "Inf " << inf << " in key " << key_row << ", row " << i;
        }
        for (std::size_t h = 0; h < heads; ++h) {
          const float* row = weights.data() + (h * q_len + i) * kv_len;
          EXPECT_EQ(std::isnan(row[0]), sees) << "head " << h << " row " << i;
          if (i == 0) EXPECT_EQ(row[kv_len - 1], 0.0f);  // hidden: exactly 0
        }
      }
    }
  }
}

TEST_P(PreciseRulesTest, SoftmaxRowsWithNaNOrInfinityAreNaN) {
  std::vector<float> x = RandomVector(3 * 20, 7);
  x[5] = kNaN;        // row 0
  x[20 + 19] = kInf;  // row 1
  x[40 + 3] = -kInf;  // row 2: a hidden entry, row stays finite
  std::vector<float> y(x.size());
  mha::softmax(x.data(), 20, y.data(), 20, 3, 20);
  ExpectRanOnTarget();
  for (std::size_t j = 0; j < 20; ++j) {
    EXPECT_TRUE(std::isnan(y[j]));
    EXPECT_TRUE(std::isnan(y[20 + j]));
    EXPECT_TRUE(std::isfinite(y[40 + j]));
  }
  EXPECT_EQ(y[40 + 3], 0.0f);
}

MHA_INSTANTIATE_PER_TARGET(PreciseRulesTest);

// Argument checks run before any kernel: once, not per target.

TEST(PreciseRules, SgemmOutputOverlappingAnInputThrows) {
  std::vector<float> buffer(64, 1.0f);
  const std::vector<float> before = buffer;
  using mha::Transpose;
  ExpectInvalid("c (16 floats) must not overlap a", [&] {
    mha::sgemm(Transpose::No, Transpose::No, 4, 4, 4, 1.0f, buffer.data(), 4,
               buffer.data() + 32, 4, 0.0f, buffer.data() + 2, 4);
  });
  ExpectInvalid("must not overlap b", [&] {
    mha::sgemm(Transpose::No, Transpose::Yes, 4, 4, 4, 1.0f, buffer.data(), 4,
               buffer.data() + 32, 4, 0.0f, buffer.data() + 40, 4);
  });
  EXPECT_EQ(buffer, before);
  // Adjacent but disjoint is fine.
  mha::sgemm(Transpose::No, Transpose::No, 4, 4, 4, 1.0f, buffer.data(), 4,
             buffer.data() + 16, 4, 0.0f, buffer.data() + 32, 4);
}

TEST(PreciseRules, SoftmaxOverlapOtherThanInPlaceThrows) {
  std::vector<float> buffer(40, 1.0f);
  const std::vector<float> before = buffer;
  ExpectInvalid("y (15 floats) must not overlap x", [&] {
    mha::softmax(buffer.data(), 5, buffer.data() + 3, 5, 3, 5);
  });
  EXPECT_EQ(buffer, before);
  EXPECT_NO_THROW(mha::softmax(buffer.data(), 5, buffer.data(), 5, 3, 5));
}

TEST(PreciseRules, AttentionOutputsOverlappingInputsThrow) {
  const mha::AttentionShape s{1, 2, 2, 3, 3, 4};
  const mha::Layout l{24, 12, 4};
  std::vector<float> buffer(200, 0.5f);
  const std::vector<float> before = buffer;
  float* b = buffer.data();
  ExpectInvalid("out (24 floats) must not overlap q", [&] {
    mha::attention(s, b, l, b + 50, l, b + 100, l, b + 23, l);
  });
  ExpectInvalid("must not overlap k", [&] {
    mha::attention(s, b, l, b + 50, l, b + 100, l, b + 60, l);
  });
  ExpectInvalid("must not overlap v", [&] {
    mha::attention(s, b, l, b + 50, l, b + 100, l, b + 110, l);
  });
  ExpectInvalid("weights (18 floats) must not overlap out", [&] {
    mha::attention(s, b, l, b + 50, l, b + 100, l, b + 130, l, {}, 0.0f,
                   b + 150);
  });
  mha::AttentionMask mask;
  mask.bias = b + 130;
  ExpectInvalid("out (24 floats) must not overlap mask.bias", [&] {
    mha::attention(s, b, l, b + 50, l, b + 100, l, b + 130, l, mask);
  });
  EXPECT_EQ(buffer, before);
  // Inputs may overlap one another (K and V from one buffer).
  EXPECT_NO_THROW(mha::attention(s, b, l, b + 50, l, b + 50, l, b + 130, l));
}

TEST(PreciseRules, LayerOutputsOverlappingInputsThrow) {
  mha::MultiHeadAttention layer(16, 2);
  std::vector<float> buffer(4 * 16 * 4, 0.5f);
  const std::vector<float> before = buffer;
  float* b = buffer.data();
  ExpectInvalid("output (32 floats) must not overlap query",
                [&] { layer.forward(b, b + 64, b + 64, 1, 2, 2, b + 16); });
  ExpectInvalid("output (32 floats) must not overlap value",
                [&] { layer.forward(b, b + 64, b + 100, 1, 2, 2, b + 130); });
  ExpectInvalid("attention_weights (8 floats) must not overlap output", [&] {
    layer.forward(b, b + 64, b + 64, 1, 2, 2, b + 128, {}, b + 150);
  });
  mha::KVCache cache(layer.config(), 1, 4);
  ExpectInvalid("output (32 floats) must not overlap x",
                [&] { layer.forward_cached(b, 1, 2, cache, b + 31); });
  EXPECT_EQ(cache.length(), 0u);
  EXPECT_EQ(buffer, before);
}

TEST(PreciseRules, ScaleMustBeFinite) {
  const mha::AttentionShape s{1, 1, 1, 2, 2, 4};
  const std::vector<float> in(8, 0.5f);
  std::vector<float> out(8, 7.0f);
  const mha::Layout l{8, 8, 4};
  for (float scale : {kNaN, kInf, -kInf}) {
    ExpectInvalid("scale (", [&] {
      mha::attention(s, in.data(), l, in.data(), l, in.data(), l, out.data(), l,
                     {}, scale);
    });
    ExpectInvalid("must be finite", [&] {
      mha::softmax(in.data(), 4, out.data(), 4, 2, 4, scale);
    });
  }
  for (float x : out) EXPECT_EQ(x, 7.0f);
}

TEST(PreciseRules, SizesThatOverflowThrowBeforeAllocating) {
  const mha::MultiHeadAttentionConfig config{4, 1, 0, false};
  ExpectInvalid("mha::KVCache: the size of the cache",
                [&] { mha::KVCache(config, 1, kHuge + 1); });
  ExpectInvalid("overflows", [&] { mha::KVCache(config, kHuge, 4); });

  const mha::MultiHeadAttention layer(config);
  std::vector<float> x(64, 0.5f), out(64, 7.0f);
  ExpectInvalid("forward: the size of query and output", [&] {
    layer.forward(x.data(), x.data(), x.data(), kHuge / 2, 1, 1, out.data());
  });
  ExpectInvalid("the size of key and value", [&] {
    layer.forward(x.data(), x.data(), x.data(), 1, 1, kHuge * 2, out.data());
  });
  mha::KVCache cache(config, 1, 2);
  ExpectInvalid("exceeds the cache's room", [&] {
    layer.forward_cached(x.data(), 1, kHuge, cache, out.data());
  });

  const mha::Layout l{16, 16, 4};
  ExpectInvalid("attention: the size of the query rows", [&] {
    mha::attention({kHuge, 1, 1, 1, 1, 4}, x.data(), l, x.data(), l, x.data(),
                   l, out.data(), l);
  });
  ExpectInvalid("the size of the keys", [&] {
    mha::attention({1, 1, 1, 1, std::size_t{1} << 63, 4}, x.data(), l, x.data(),
                   {0, 0, 0}, x.data(), {0, 0, 0}, out.data(), l);
  });
  ExpectInvalid("the size of k", [&] {
    mha::attention({1, 1, 1, 1, kHuge / 4, 4}, x.data(), l, x.data(), l,
                   x.data(), l, out.data(), l);
  });
  std::vector<float> weights(4, 7.0f);
  ExpectInvalid("the size of weights", [&] {
    mha::attention({4, 4, 4, 1 << 30, 1 << 30, 4}, x.data(), {0, 0, 0},
                   x.data(), {0, 0, 0}, x.data(), {0, 0, 0}, out.data(),
                   {0, 0, 0}, {}, 0.0f, weights.data());
  });
  ExpectInvalid("mha::sgemm: the size of C", [&] {
    mha::sgemm(mha::Transpose::No, mha::Transpose::No, kHuge, 4, 4, 1.0f,
               x.data(), 4, x.data(), 4, 0.0f, out.data(), 4);
  });
  ExpectInvalid("mha::softmax: the size of x",
                [&] { mha::softmax(x.data(), kHuge, out.data(), 4, 8, 4); });
  for (float value : out) EXPECT_EQ(value, 7.0f);
  for (float value : weights) EXPECT_EQ(value, 7.0f);
}

}  // namespace
}  // namespace mha_test
