// MultiHeadAttention and KVCache against the double reference on every
// target: the seed's shape, cross-attention, GQA/MQA, both weight layouts,
// biases, masks, returned weights, the cache in random chunks, value
// semantics and every error of the contract.
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lib/dispatch/dispatch.h"
#include "lib/gemm/gemm_args.h"
#include "lib/layer/absorbed_attention.h"
#include "reference.h"
#include "test_util.h"

namespace mha_test {
namespace {

// Random weights for a config, in [in, out] form, and the layer holding them
// (given in `layout`). With 16-bit weights the layer gets the fp32 weights
// and rounds them itself; `w` (the reference's) holds them rounded, so that
// the fp32 accuracy bound must hold against the reference.
struct Model {
  mha::MultiHeadAttentionConfig config;
  ReferenceWeights w;
  mha::MultiHeadAttention layer;

  Model(mha::MultiHeadAttentionConfig c, mha::WeightLayout layout,
        std::uint32_t seed)
      : config(c), layer(c) {
    const std::size_t d = c.d_model,
                      kv = (c.num_kv_heads ? c.num_kv_heads : c.num_heads) *
                           (d / c.num_heads);
    const float range = 1.0f / std::sqrt(static_cast<float>(d));
    w.w_q = RandomVector(d * d, seed, -range, range);
    w.w_k = RandomVector(d * kv, seed + 1, -range, range);
    w.w_v = RandomVector(d * kv, seed + 2, -range, range);
    w.w_o = RandomVector(d * d, seed + 3, -range, range);
    if (c.bias) {
      w.b_q = RandomVector(d, seed + 4);
      w.b_k = RandomVector(kv, seed + 5);
      w.b_v = RandomVector(kv, seed + 6);
      w.b_o = RandomVector(d, seed + 7);
    }
    std::vector<float> q = w.w_q, k = w.w_k, v = w.w_v, o = w.w_o;
    if (layout == mha::WeightLayout::OutIn) {
      q = Transposed(w.w_q, d, d);
      k = Transposed(w.w_k, d, kv);
      v = Transposed(w.w_v, d, kv);
      o = Transposed(w.w_o, d, d);
    }
    mha::MultiHeadAttentionWeights weights{q.data(), k.data(), v.data(),
                                           o.data()};
    if (c.bias) {
      weights.b_q = w.b_q.data();
      weights.b_k = w.b_k.data();
      weights.b_v = w.b_v.data();
      weights.b_o = w.b_o.data();
    }
    weights.layout = layout;
    layer.set_weights(weights);
    for (std::vector<float>* m : {&w.w_q, &w.w_k, &w.w_v, &w.w_o}) {
      *m = RoundedTo(c.weight_precision, *m);
    }
  }

  static std::vector<float> Transposed(const std::vector<float>& m,
                                       std::size_t rows, std::size_t cols) {
    std::vector<float> t(m.size());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
    return t;
  }
};

constexpr double kLayerTolerance = 2e-5;

class LayerTest : public PerTarget {
 protected:
  // forward() on (query, key, value) — `self` passes one tensor three times,
  // `shared_kv` one tensor as key and value — against the reference.
  void Check(const mha::MultiHeadAttentionConfig& c, mha::WeightLayout layout,
             std::size_t batch, std::size_t q_len, std::size_t kv_len,
             bool self, bool shared_kv, int masks, bool with_weights) {
    Model model(c, layout, 31);
    const std::size_t d = c.d_model;
    const std::vector<float> query = RandomVector(batch * q_len * d, 32);
    const std::vector<float> key =
        self ? query : RandomVector(batch * kv_len * d, 33);
    const std::vector<float> value =
        self || shared_kv ? key : RandomVector(batch * kv_len * d, 34);
    const float* k = self ? query.data() : key.data();
    const float* v = self        ? query.data()
                     : shared_kv ? key.data()
                                 : value.data();
    std::vector<std::int32_t> lengths(batch);
    for (std::size_t b = 0; b < batch; ++b)
      lengths[b] = static_cast<std::int32_t>(kv_len - b % (kv_len + 1));
    std::vector<float> bias = RandomVector(q_len * kv_len, 35);
    mha::AttentionMask mask;
    mask.causal = masks & 1;
    if (masks & 2) mask.kv_lengths = lengths.data();
    if (masks & 4) mask.bias = bias.data();
    std::vector<float> out(batch * q_len * d, kNaN);
    std::vector<float> weights(
        with_weights ? batch * c.num_heads * q_len * kv_len : 0, kNaN);
    model.layer.forward(query.data(), k, v, batch, q_len, kv_len, out.data(),
                        mask, with_weights ? weights.data() : nullptr);
    ExpectRanOnTarget();
    std::vector<double> want_weights;
    const std::vector<double> want =
        ReferenceForward(c, model.w, query.data(), k, v, batch, q_len, kv_len,
                         mask, &want_weights);
    EXPECT_LE(RelativeError("forward", out.data(), want.data(), out.size()),
              kLayerTolerance)
        << "d_model " << d << " heads " << c.num_heads << "/" << c.num_kv_heads
        << " q_len " << q_len << " kv_len " << kv_len << " masks " << masks;
    if (with_weights) {
      EXPECT_LE(RelativeError("forward weights", weights.data(),
                              want_weights.data(), weights.size(), 1.0),
                kLayerTolerance);
    }
  }

  // The normwise error of forward_cached fed a sequence in random chunks
  // into a cache of `kv_precision`, against one causal forward(x, x, x)
  // over it; the last chunk also goes to a copy of the cache, which must
  // give the same outputs and leave the cache as it was.
  double CachedAgainstCausalForward(const mha::MultiHeadAttentionConfig& c,
                                    mha::Precision kv_precision,
                                    std::size_t len, std::uint32_t seed) {
    Model model(c, mha::WeightLayout::InOut, seed);
    const std::size_t batch = 2, d = c.d_model;
    const std::vector<float> x = RandomVector(batch * len * d, seed + 1);
    std::vector<float> whole(batch * len * d);
    mha::AttentionMask causal;
    causal.causal = true;
    model.layer.forward(x.data(), x.data(), x.data(), batch, len, len,
                        whole.data(), causal);
    mha::KVCache cache(c, batch, len, kv_precision);
    EXPECT_EQ(cache.precision(), kv_precision);
    std::vector<float> got(whole.size());
    std::mt19937 engine(seed + 2);
    for (std::size_t t = 0; t < len;) {
      const std::size_t chunk =
          std::min<std::size_t>(len - t, 1 + engine() % 9);
      std::vector<float> in(batch * chunk * d), out(batch * chunk * d, kNaN);
      for (std::size_t b = 0; b < batch; ++b)
        std::copy_n(x.data() + (b * len + t) * d, chunk * d,
                    in.data() + b * chunk * d);
      if (t + chunk == len) {
        mha::KVCache copy = cache;
        std::vector<float> copied(out.size());
        model.layer.forward_cached(in.data(), batch, chunk, copy,
                                   copied.data());
        EXPECT_EQ(copy.length(), len);
        EXPECT_EQ(cache.length(), t);
        model.layer.forward_cached(in.data(), batch, chunk, cache, out.data());
        ExpectBitwiseEqual(copied, out);
      } else {
        model.layer.forward_cached(in.data(), batch, chunk, cache, out.data());
      }
      EXPECT_EQ(cache.length(), t + chunk);
      for (std::size_t b = 0; b < batch; ++b)
        std::copy_n(out.data() + b * chunk * d, chunk * d,
                    got.data() + (b * len + t) * d);
      t += chunk;
    }
    cache.clear();
    EXPECT_EQ(cache.length(), 0u);
    const std::vector<double> want(whole.begin(), whole.end());
    const char* kernel = kv_precision == mha::Precision::F32 ? "forward_cached"
                         : kv_precision == mha::Precision::BF16
                             ? "forward_cached, bf16 cache"
                             : "forward_cached, f16 cache";
    return RelativeError(kernel, got.data(), want.data(), want.size());
  }
};

TEST_P(LayerTest, SeedShapeSelfAttention) {
  Check({512, 8, 0, false}, mha::WeightLayout::InOut, 2, 10, 10, true, false, 0,
        true);
}

TEST_P(LayerTest, CrossAttentionBothLayoutsAndBiases) {
  for (auto layout : {mha::WeightLayout::InOut, mha::WeightLayout::OutIn}) {
    for (bool bias : {false, true}) {
      Check({48, 4, 0, bias}, layout, 2, 7, 19, false, false, 0, false);
      Check({48, 4, 0, bias}, layout, 2, 7, 19, false, true, 0, true);
    }
  }
}

TEST_P(LayerTest, GroupedAndMultiQueryWithMasks) {
  for (std::size_t kv_heads : {2, 1}) {
    for (int masks : {1, 2, 4, 7}) {
      Check({64, 8, kv_heads, true}, mha::WeightLayout::OutIn, 3, 13, 13, true,
            false, masks, masks == 7);
      Check({60, 4, kv_heads, false}, mha::WeightLayout::InOut, 2, 5, 9, false,
            true, masks, false);
    }
  }
}

TEST_P(LayerTest, RowsThatSeeNoKeyOutputTheOutputBias) {
  Model model({16, 2, 0, true}, mha::WeightLayout::InOut, 41);
  const std::vector<float> x = RandomVector(2 * 3 * 16, 42);
  const std::int32_t lengths[] = {0, 3};
  mha::AttentionMask mask;
  mask.kv_lengths = lengths;
  std::vector<float> out(2 * 3 * 16, kNaN);
  model.layer.forward(x.data(), x.data(), x.data(), 2, 3, 3, out.data(), mask);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t c = 0; c < 16; ++c)
      EXPECT_EQ(out[i * 16 + c], model.w.b_o[c]);
  std::vector<float> empty(3 * 16,
                           kNaN);  // kv_len == 0: key and value may be null
  model.layer.forward(x.data(), nullptr, nullptr, 1, 3, 0, empty.data());
  for (std::size_t i = 0; i < empty.size(); ++i)
    EXPECT_EQ(empty[i], model.w.b_o[i % 16]);
}

TEST_P(LayerTest, CacheInRandomChunksEqualsCausalForward) {
  for (const mha::MultiHeadAttentionConfig& c :
       {mha::MultiHeadAttentionConfig{32, 4, 0, true},
        mha::MultiHeadAttentionConfig{64, 8, 2, false}}) {
    EXPECT_LE(CachedAgainstCausalForward(c, mha::Precision::F32, 37, 51), 1e-5);
  }
}

TEST_P(LayerTest, SeedConstructorIsDeterministicAndCopiesAreIndependent) {
  mha::MultiHeadAttention a(64, 4), b(64, 4);
  const std::vector<float> x = RandomVector(5 * 64, 61);
  std::vector<float> out_a(5 * 64), out_b(5 * 64), out_c(5 * 64);
  a.forward(x.data(), x.data(), x.data(), 1, 5, 5, out_a.data());
  b.forward(x.data(), x.data(), x.data(), 1, 5, 5, out_b.data());
  ExpectBitwiseEqual(out_a, out_b);
  mha::MultiHeadAttention copy = a;
  copy.init_random(7);
  a.forward(x.data(), x.data(), x.data(), 1, 5, 5, out_c.data());
  ExpectBitwiseEqual(out_c, out_a);  // the original did not change
  copy.forward(x.data(), x.data(), x.data(), 1, 5, 5, out_c.data());
  EXPECT_NE(out_c, out_a);
  mha::MultiHeadAttention moved = std::move(copy);
  EXPECT_EQ(moved.config().d_model, 64u);
}

// d_model past the depth of a GEMM slice (kc) and past a task's columns,
// with biases, so that every projection's epilogue adds the bias on the
// first slice only and the later slices accumulate: head_dim 97, whose
// projections are token-major, and a multiple of the panel width, whose
// projections are head-major (grouped and separate K and V, and fused Q, K
// and V).
TEST_P(LayerTest, BiasesWithDModelBeyondTheDepthBlock) {
  const mha::detail::GemmShapeParams p = mha::detail::GemmShapeParamsForTest();
  const std::size_t d = (p.kc + 8 + 7) / 8 * 8;
  Check({d, 8, 2, true}, mha::WeightLayout::OutIn, 1, 3, 5, false, false, 1,
        false);
  Check({d, 8, 0, true}, mha::WeightLayout::InOut, 1, 4, 4, true, false, 0,
        false);
  const std::size_t panels = p.kc / 4 / p.tile_cols + 1;
  const std::size_t head_major_d = 4 * panels * p.tile_cols;
  Check({head_major_d, 4, 2, true}, mha::WeightLayout::OutIn, 2, 3, 5, false,
        false, 1, false);
  Check({head_major_d, 4, 0, true}, mha::WeightLayout::InOut, 1, 4, 4, true,
        false, 0, false);
}

// Weights stored in BF16 and F16 through every projection path: the seed's
// shape (blocked GEMM), cross-attention with separate K and V, and d_model
// past the depth block with biases (decode rows: the next test).
TEST_P(LayerTest, SixteenBitWeightsOnEveryProjectionPath) {
  const std::size_t kc = mha::detail::GemmShapeParamsForTest().kc;
  const std::size_t wide = (kc + 8 + 7) / 8 * 8;
  for (mha::Precision p : {mha::Precision::BF16, mha::Precision::F16}) {
    Check({512, 8, 0, false, p}, mha::WeightLayout::InOut, 2, 10, 10, true,
          false, 0, true);
    Check({64, 8, 2, true, p}, mha::WeightLayout::OutIn, 2, 7, 19, false, false,
          7, false);
    Check({wide, 8, 2, true, p}, mha::WeightLayout::OutIn, 1, 3, 5, false,
          false, 1, false);
    Check({wide, 8, 0, true, p}, mha::WeightLayout::InOut, 1, 40, 40, true,
          false, 0, false);
  }
}

// Decode rows (the GEMV path, M = 1 to 4), whose panels are read two at a
// time, at every way they pair up: d_model 48, 80 and 112 make a pair with a
// ragged second panel, a pair and a ragged single, and two pairs on 32-column
// panels (AVX-512), and odd counts on 16- and 8-column ones; 45 adds an odd
// depth. Every precision.
TEST_P(LayerTest, DecodeRowsOnEveryPanelPairing) {
  const std::pair<std::size_t, std::size_t> models[] = {
      {48, 4}, {80, 4}, {112, 4}, {45, 5}};  // d_model, heads
  for (mha::Precision p :
       {mha::Precision::F32, mha::Precision::BF16, mha::Precision::F16}) {
    for (const auto& [d, heads] : models) {
      for (std::size_t batch : {1, 2, 3, 4}) {
        Check({d, heads, 1, true, p}, mha::WeightLayout::InOut, batch, 1, 9,
              false, true, 0, false);
      }
    }
  }
}

// A 16-bit cache fed in random chunks against a causal forward over fp32
// K and V: they differ only by the rounding of K and V (about 2^-9
// relative for BF16, 2^-12 for F16, per element).
TEST_P(LayerTest, SixteenBitCacheInChunksNearTheCausalForward) {
  const mha::MultiHeadAttentionConfig c{64, 8, 2, true};
  EXPECT_LE(CachedAgainstCausalForward(c, mha::Precision::BF16, 40, 71), 4e-3);
  EXPECT_LE(CachedAgainstCausalForward(c, mha::Precision::F16, 40, 71), 5e-4);
}

// A few queries over many keys with heads of whole panels: forward attends
// in the absorbed order (lib/layer/absorbed_attention.h), K and V never
// projected. Every mask (the causal one gives each query position its own
// keys), biases, both layouts, grouped heads, K and V shared or not, the
// returned weights, keys past a GEMM slice's depth, and 16-bit weights.
TEST_P(LayerTest, FewQueriesOverManyKeysInTheAbsorbedOrder) {
  const std::size_t nr =
      mha::detail::PanelCols(mha::detail::ChosenTargetIndex());
  // Two panels a head (16 columns at least: the absorbed order pays only
  // when head_dim is not tiny against kv_len).
  const std::size_t hd = std::max<std::size_t>(2 * nr, 16), d = 4 * hd;
  const std::size_t q_len = 3;
  const std::size_t kv_lens[] = {61,
                                 mha::detail::GemmShapeParamsForTest().kc + 9};
  for (std::size_t kv_len : kv_lens) {
    for (std::size_t kv_heads : {4, 2}) {
      for (int masks : {0, 1, 2, 4, 7}) {
        const bool bias = masks % 2 == 0;
        const mha::MultiHeadAttentionConfig c{d, 4, kv_heads, bias};
        ASSERT_TRUE(mha::detail::PrefersAbsorbedOrder(c, nr, q_len, kv_len, {}))
            << "kv_len " << kv_len << " kv_heads " << kv_heads;
        Check(c, bias ? mha::WeightLayout::OutIn : mha::WeightLayout::InOut, 2,
              q_len, kv_len, false, masks == 2, masks,
              masks == 0 || masks == 7);
      }
    }
  }
  // Weights stored in 16 bits, W_k and W_v read as stored.
  for (mha::Precision p : {mha::Precision::BF16, mha::Precision::F16}) {
    const mha::MultiHeadAttentionConfig c{d, 4, 2, true, p};
    ASSERT_TRUE(mha::detail::PrefersAbsorbedOrder(c, nr, q_len, 61, {}));
    Check(c, mha::WeightLayout::OutIn, 2, q_len, 61, false, false, 7, true);
  }
  // The query absorption's blocking (absorb_queries.cc): heads of three and
  // four panels (a pass over a pair of panels, then a lone one or a second
  // pair), six query positions (groups of four and two), and d_model past
  // the 512 rows of a block and the 1024 of a task. Panels of 8 columns at
  // least: narrower heads would not take the absorbed order.
  for (std::size_t panels : {3, 4}) {
    const std::size_t head_dim = panels * std::max<std::size_t>(nr, 8);
    const std::size_t heads = 1040 / head_dim + 1;
    const mha::MultiHeadAttentionConfig c{heads * head_dim, heads, heads, true};
    ASSERT_TRUE(mha::detail::PrefersAbsorbedOrder(c, nr, 6, 61, {}));
    Check(c, mha::WeightLayout::InOut, 1, 6, 61, false, false, 1, false);
  }
}

MHA_INSTANTIATE_PER_TARGET(LayerTest);

// One layer, its weights packed for the target in force at set_weights,
// then run on every target in turn (each re-packs from the first packing on
// first use) and back: every output against the double reference.
TEST(LayerPacking, SetTargetBetweenCallsRepacksTheWeights) {
  const mha::MultiHeadAttentionConfig c{96, 4, 2, true};
  Model model(c, mha::WeightLayout::OutIn, 91);
  const std::vector<float> x = RandomVector(2 * 7 * 96, 92);
  const std::vector<double> want = ReferenceForward(
      c, model.w, x.data(), x.data(), x.data(), 2, 7, 7, mha::AttentionMask{});
  std::vector<std::string> order = mha::supported_targets();
  order.push_back(order.front());  // back to the first packing
  for (const std::string& target : order) {
    mha::set_target(target);
    std::vector<float> out(x.size(), kNaN);
    model.layer.forward(x.data(), x.data(), x.data(), 2, 7, 7, out.data());
    EXPECT_EQ(mha::last_kernel_target(), target);
    EXPECT_LE(RelativeError("forward", out.data(), want.data(), out.size()),
              kLayerTolerance)
        << target;
    mha::KVCache cache(c, 2, 7);
    model.layer.forward_cached(x.data(), 2, 7, cache, out.data());
    EXPECT_EQ(cache.length(), 7u);
  }
  mha::set_target("");
}

TEST(LayerErrors, InvalidConfigs) {
  ExpectInvalid("d_model (510) must be divisible by num_heads (8)", [] {
    mha::MultiHeadAttention({510, 8, 0, false});
  });
  ExpectInvalid("d_model (0)", [] {
    mha::MultiHeadAttention({0, 8, 0, false});
  });
  ExpectInvalid("num_heads (0)", [] { mha::MultiHeadAttention(64, 0); });
  ExpectInvalid("num_kv_heads (3) must divide num_heads (8)", [] {
    mha::MultiHeadAttention({64, 8, 3, false});
  });
  ExpectInvalid("num_kv_heads (16)", [] {
    mha::KVCache({64, 8, 16, false}, 1, 4);
  });
  const mha::MultiHeadAttention layer({64, 8, 2, false});
  EXPECT_EQ(layer.config().num_kv_heads, 2u);
  EXPECT_EQ(mha::MultiHeadAttention({64, 8, 0, false}).config().num_kv_heads,
            8u);
}

TEST(LayerErrors, SetWeightsChecksBiasesAndKeepsOldWeights) {
  Model model({16, 2, 0, false}, mha::WeightLayout::InOut, 71);
  const std::vector<float> x = RandomVector(4 * 16, 72), bias(16, 1.0f);
  std::vector<float> before(4 * 16), after(4 * 16);
  model.layer.forward(x.data(), x.data(), x.data(), 1, 4, 4, before.data());
  const std::vector<float> other(16 * 16, 0.25f);
  mha::MultiHeadAttentionWeights w{other.data(), other.data(), other.data(),
                                   other.data()};
  w.b_k = bias.data();
  ExpectInvalid("b_k must be null", [&] { model.layer.set_weights(w); });
  w.b_k = nullptr;
  w.w_v = nullptr;
  ExpectInvalid("w_v must not be null", [&] { model.layer.set_weights(w); });
  model.layer.forward(x.data(), x.data(), x.data(), 1, 4, 4, after.data());
  ExpectBitwiseEqual(after, before);

  Model biased({16, 2, 0, true}, mha::WeightLayout::InOut, 73);
  mha::MultiHeadAttentionWeights missing{
      other.data(), other.data(), other.data(), other.data(),
      bias.data(),  bias.data(),  bias.data(),  nullptr};
  ExpectInvalid("b_o must be given",
                [&] { biased.layer.set_weights(missing); });
}

TEST(LayerErrors, ForwardAndCacheErrorsWriteNothing) {
  Model model({16, 4, 2, false}, mha::WeightLayout::InOut, 81);
  const std::vector<float> x = RandomVector(2 * 3 * 16, 82);
  std::vector<float> out(2 * 3 * 16, 7.0f);
  const std::int32_t lengths[] = {1, 4};
  mha::AttentionMask mask;
  mask.kv_lengths = lengths;
  auto untouched = [&] {
    for (float v : out) ASSERT_EQ(v, 7.0f);
  };
  ExpectInvalid("kv_lengths[1] (4)", [&] {
    model.layer.forward(x.data(), x.data(), x.data(), 2, 3, 3, out.data(),
                        mask);
  });
  untouched();
  ExpectInvalid("query must not be null", [&] {
    model.layer.forward(nullptr, x.data(), x.data(), 2, 3, 3, out.data());
  });
  ExpectInvalid("key must not be null", [&] {
    model.layer.forward(x.data(), nullptr, x.data(), 2, 3, 3, out.data());
  });
  untouched();

  mha::KVCache cache({16, 4, 2, false}, 2, 4);
  model.layer.forward_cached(x.data(), 2, 1, cache, out.data());
  ASSERT_EQ(cache.length(), 1u);
  std::fill(out.begin(), out.end(), 7.0f);
  ExpectInvalid("new_len (4) exceeds", [&] {
    model.layer.forward_cached(x.data(), 2, 4, cache, out.data());
  });
  ExpectInvalid("batch (1) does not match", [&] {
    model.layer.forward_cached(x.data(), 1, 1, cache, out.data());
  });
  mha::KVCache other({16, 4, 4, false}, 2, 4);
  ExpectInvalid("does not match the layer's", [&] {
    model.layer.forward_cached(x.data(), 2, 1, other, out.data());
  });
  untouched();
  EXPECT_EQ(cache.length(), 1u);
  EXPECT_EQ(other.length(), 0u);
  EXPECT_NO_THROW(model.layer.forward_cached(nullptr, 2, 0, cache, nullptr));
  EXPECT_EQ(cache.length(), 1u);
  mha::KVCache copy = cache;  // an independent copy
  model.layer.forward_cached(x.data(), 2, 1, copy, out.data());
  EXPECT_EQ(copy.length(), 2u);
  EXPECT_EQ(cache.length(), 1u);
  EXPECT_EQ(cache.capacity(), 4u);
}

}  // namespace
}  // namespace mha_test
