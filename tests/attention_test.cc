// attention against the double reference on every target: shapes with
// ragged head_dim, GQA/MQA, q_len != kv_len, every mask and combination,
// fully masked rows, returned weights, strided views with gaps, errors.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/gemm/gemm_args.h"
#include "reference.h"
#include "test_util.h"

namespace mha_test {
namespace {

// A [batch, heads, tokens, head_dim] view with gaps (NaN) after every row,
// head and batch, so reading or writing outside the view is caught; or,
// token-major, [batch, tokens, heads, head_dim] with gaps after every head's
// row, token and batch.
struct StridedTensor {
  mha::Layout layout;
  std::vector<float> data;

  StridedTensor(std::size_t batch, std::size_t heads, std::size_t tokens,
                std::size_t head_dim, std::uint32_t seed,
                bool token_major = false) {
    if (token_major) {
      layout.head = head_dim + 3;
      layout.token = heads * layout.head + 5;
      layout.batch = tokens * layout.token + 7;
    } else {
      layout.token = head_dim + 3;
      layout.head = tokens * layout.token + 5;
      layout.batch = heads * layout.head + 7;
    }
    data.assign(batch * layout.batch + 1, kNaN);
    const std::vector<float> values =
        RandomVector(batch * heads * tokens * head_dim, seed);
    std::size_t next = 0;
    ForEach(batch, heads, tokens, head_dim,
            [&](std::size_t at) { data[at] = values[next++]; });
  }
  template <class F>
  void ForEach(std::size_t batch, std::size_t heads, std::size_t tokens,
               std::size_t head_dim, F&& f) const {
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t t = 0; t < tokens; ++t)
          for (std::size_t c = 0; c < head_dim; ++c)
            f(b * layout.batch + h * layout.head + t * layout.token + c);
  }
};

enum MaskKind { kNone = 0, kCausal = 1, kLengths = 2, kBias = 4 };

class AttentionTest : public PerTarget {
 protected:
  // Runs one problem and compares output (and weights) with the reference.
  // With 16-bit K and V (kv_precision BF16 or F16), the 16-bit overload
  // reads them rounded (the gaps' NaN stays NaN) and the reference computes
  // on the same rounded values, widened: the fp32 bound must then hold.
  void Check(const mha::AttentionShape& s, int masks, bool with_weights,
             float scale = 0.0f,
             mha::Precision kv_precision = mha::Precision::F32) {
    StridedTensor q(s.batch, s.num_heads, s.q_len, s.head_dim, 21);
    StridedTensor k(s.batch, s.num_kv_heads, s.kv_len, s.head_dim, 22,
                    kv_token_major_);
    StridedTensor v(s.batch, s.num_kv_heads, s.kv_len, s.head_dim, 23,
                    kv_token_major_);
    const std::vector<std::uint16_t> k16 = Stored(k.data, kv_precision),
                                     v16 = Stored(v.data, kv_precision);
    if (kv_precision != mha::Precision::F32) {
      k.data = Widened(k16, kv_precision);
      v.data = Widened(v16, kv_precision);
    }
    StridedTensor out(s.batch, s.num_heads, s.q_len, s.head_dim, 24);
    std::fill(out.data.begin(), out.data.end(), kNaN);
    std::vector<std::int32_t> lengths(s.batch);
    for (std::size_t b = 0; b < s.batch; ++b) {
      lengths[b] =
          static_cast<std::int32_t>((s.kv_len * (b + 1)) / (s.batch + 1));
    }
    std::vector<float> bias = RandomVector(s.q_len * s.kv_len, 25, -2, 2);
    for (std::size_t i = 0; i < bias.size(); i += 7) bias[i] = -kInf;
    mha::AttentionMask mask;
    mask.causal = masks & kCausal;
    if (masks & kLengths) mask.kv_lengths = lengths.data();
    if (masks & kBias) mask.bias = bias.data();
    std::vector<float> weights(
        with_weights ? s.batch * s.num_heads * s.q_len * s.kv_len : 0, kNaN);

    float* w = with_weights ? weights.data() : nullptr;
    if (kv_precision == mha::Precision::F32) {
      mha::attention(s, q.data.data(), q.layout, k.data.data(), k.layout,
                     v.data.data(), v.layout, out.data.data(), out.layout, mask,
                     scale, w);
    } else {
      mha::attention(s, q.data.data(), q.layout, k16.data(), k.layout,
                     v16.data(), v.layout, kv_precision, out.data.data(),
                     out.layout, mask, scale, w);
    }
    ExpectRanOnTarget();

    const double used_scale =
        scale != 0.0f ? scale : 1.0 / std::sqrt(double(s.head_dim));
    const ReferenceAttentionResult want =
        ReferenceAttention(s, q.data.data(), q.layout, k.data.data(), k.layout,
                           v.data.data(), v.layout, mask, used_scale);
    std::vector<float> got;
    std::vector<bool> in_view(out.data.size(), false);
    out.ForEach(s.batch, s.num_heads, s.q_len, s.head_dim, [&](std::size_t at) {
      got.push_back(out.data[at]);
      in_view[at] = true;
    });
    for (std::size_t i = 0; i < out.data.size(); ++i) {
      if (!in_view[i])
        ASSERT_TRUE(std::isnan(out.data[i])) << "wrote outside the view";
    }
    const std::string what =
        Describe(s, masks, with_weights) + " kv " + Name(kv_precision);
    const double tolerance = (s.head_dim + 64) * 0x1.0p-22;
    EXPECT_LE(
        RelativeError("attention", got.data(), want.out.data(), got.size()),
        tolerance)
        << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (want.out[i] == 0.0)
        ASSERT_EQ(got[i], 0.0f) << "row with no key not zero; " << what;
    }
    if (!with_weights) return;
    EXPECT_LE(RelativeError("attention weights", weights.data(),
                            want.weights.data(), weights.size(), 1.0),
              tolerance)
        << what;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (want.weights[i] == 0.0)
        ASSERT_EQ(weights[i], 0.0f) << "hidden key weight; " << what;
    }
    ExpectWeightsWithinTheirOwnBound(s, want, weights, what);
  }

  // attention.h's bound, weight by weight, each against its own magnitude
  // (the tails of a row as much as its largest weights): relative
  // (2 (head_dim + 5) S + 10 L + 2 kv_len + 12) 2^-24, S and L the row's
  // (ReferenceAttentionResult). Where it comes from: a logit carries
  // (head_dim + 5) S 2^-24 (its dot product, scale and log2(e) folded into
  // Q, the bias), a weight twice that (its own logit and the sum's); the
  // subtraction of the max 2 L, the bias 8 L at most; the sum kv_len
  // roundings and a rescale per key block; 2^x 2.2 ulp twice, 1 / sum and
  // the product 2 roundings.
  static void ExpectWeightsWithinTheirOwnBound(
      const mha::AttentionShape& s, const ReferenceAttentionResult& want,
      const std::vector<float>& weights, const std::string& what) {
    for (std::size_t row = 0; row < want.abs_products.size(); ++row) {
      const double* p = want.weights.data() + row * s.kv_len;
      if (std::any_of(p, p + s.kv_len, [](double x) { return std::isnan(x); }))
        continue;  // poisoned rows: precise_rules_test.cc
      const double bound = (2.0 * (s.head_dim + 5) * want.abs_products[row] +
                            10.0 * want.abs_logits[row] + 2.0 * s.kv_len + 12) *
                           0x1.0p-24;
      ASSERT_LE(OwnMagnitudeError("attention weights, x own bound",
                                  weights.data() + row * s.kv_len, p, s.kv_len,
                                  bound),
                1.0)
          << "row " << row << "; " << what;
    }
  }

  // K and V laid out [batch, tokens, heads, head_dim] (Check).
  bool kv_token_major_ = false;

  // The 16-bit bit patterns of `values` rounded to p (empty for F32).
  static std::vector<std::uint16_t> Stored(const std::vector<float>& values,
                                           mha::Precision p) {
    std::vector<std::uint16_t> bits;
    if (p == mha::Precision::F32) return bits;
    for (float x : values) {
      bits.push_back(p == mha::Precision::BF16 ? mha::to_bf16(x)
                                               : mha::to_f16(x));
    }
    return bits;
  }
  static std::vector<float> Widened(const std::vector<std::uint16_t>& bits,
                                    mha::Precision p) {
    std::vector<float> values;
    for (std::uint16_t b : bits) {
      values.push_back(p == mha::Precision::BF16 ? mha::from_bf16(b)
                                                 : mha::from_f16(b));
    }
    return values;
  }
  static std::string Name(mha::Precision p) {
    return p == mha::Precision::F32    ? "F32"
           : p == mha::Precision::BF16 ? "BF16"
                                       : "F16";
  }

  // Query lengths around the prefill tile (128 rows) against kv_lens, one
  // and two query heads per KV head, causal, with kv_lengths too.
  void CheckTileEdges(std::initializer_list<std::size_t> kv_lens) {
    for (const std::size_t q_len : {127, 128, 129}) {
      for (const std::size_t kv_len : kv_lens) {
        for (const std::size_t group : {1, 2}) {
          const mha::AttentionShape s{2, 2 * group, 2, q_len, kv_len, 64};
          Check(s, kCausal, false);
          Check(s, kCausal | kLengths, group == 1);
        }
      }
    }
  }

  static std::string Describe(const mha::AttentionShape& s, int masks, bool w) {
    return "shape {" + std::to_string(s.batch) + "," +
           std::to_string(s.num_heads) + "," + std::to_string(s.num_kv_heads) +
           "," + std::to_string(s.q_len) + "," + std::to_string(s.kv_len) +
           "," + std::to_string(s.head_dim) + "} masks " +
           std::to_string(masks) + (w ? " with weights" : " fused");
  }
};

TEST_P(AttentionTest, ShapesMasksAndWeights) {
  const mha::AttentionShape shapes[] = {
      {1, 1, 1, 1, 1, 1},
      {2, 4, 4, 10, 10, 64},
      {1, 8, 2, 7, 300, 15},
      {2, 4, 1, 13, 517, 128},
      {1, 2, 2, 50, 3, 64},
      {1, 3, 3, 1, 1000, 64},
      {3, 6, 3, 33, 33, 16},
      {1, 16, 1, 2, 40, 32},
      // Decode shapes with few tasks: the keys are split into ranges.
      {1, 4, 1, 1, 2100, 64},
      {1, 2, 2, 3, 1500, 24},
  };
  for (const mha::AttentionShape& s : shapes) {
    for (int masks : {int{kNone}, int{kCausal}, int{kLengths}, int{kBias},
                      kCausal | kLengths | kBias}) {
      Check(s, masks, false);
      Check(s, masks, true);
    }
  }
}

// K and V stored in BF16 and F16 (the 16-bit overload): decode shapes (read
// in 16 bits by the decode path, split key ranges included), prefill shapes
// (widened a key block at a time; ragged head_dim, GQA, MQA), every mask,
// with and without weights.
TEST_P(AttentionTest, SixteenBitKeysAndValues) {
  const mha::AttentionShape shapes[] = {
      {2, 8, 2, 1, 300, 64},   // decode, GQA
      {1, 4, 1, 1, 2100, 64},  // decode, split key ranges
      {1, 3, 3, 3, 90, 32},    // decode, a short chunk
      {1, 8, 2, 37, 300, 15},  // prefill, ragged head_dim
      {2, 4, 1, 13, 517, 128},
  };
  for (mha::Precision p : {mha::Precision::BF16, mha::Precision::F16}) {
    for (const mha::AttentionShape& s : shapes) {
      for (int masks : {int{kNone}, kCausal | kLengths | kBias}) {
        Check(s, masks, false, 0.0f, p);
        Check(s, masks, true, 0.0f, p);
      }
    }
  }
}

TEST_P(AttentionTest, CustomScaleAndLargeLogits) {
  Check({2, 2, 2, 9, 70, 32}, kNone, false, 0.5f);
  Check({2, 2, 2, 9, 70, 32}, kCausal, true, 300.0f);  // logits in the hundreds
  // Weights spread from 1 down to e^-80 and less: long tails, each judged
  // against its own magnitude, over two key blocks.
  Check({1, 4, 2, 17, 300, 40}, kCausal | kBias, true, 12.0f);
}

// A prefill task whose rows (query heads of one KV head x positions) fit in
// one vector packs Q^T in panels one vector wide; one row more takes two.
// Rows at the target's vector width and past it, one query head per KV head
// and two (even rows only: lanes + 2 past it), without masks, causal, and
// with every mask at once.
TEST_P(AttentionTest, QueryPanelsOfOneVectorAndOfTwo) {
  const std::size_t lanes = mha::detail::GemmShapeParamsForTest().tile_cols / 2;
  for (const std::size_t rows : {lanes, lanes + 1}) {
    const mha::AttentionShape shapes[] = {
        {2, 2, 2, rows, 45, 64},
        {1, 4, 2, (rows + 1) / 2, 45, 24},
    };
    for (const mha::AttentionShape& s : shapes) {
      for (int masks : {int{kNone}, int{kCausal}, kCausal | kLengths | kBias}) {
        Check(s, masks, false);
        Check(s, masks, true);
      }
    }
  }
}

// Around the prefill tile's edges (prefill_tile-inl.h: 128 query rows a
// task, shared by the query heads of one KV head; 256 keys a block): one
// query or key short of an edge, on it and one past it, causal (the
// diagonal crossing tiles and key blocks, where hidden tiles are skipped),
// with q_len < kv_len (a chunk after cached keys) and q_len > kv_len (rows
// that see nothing), with kv_lengths too, one and two query heads per KV
// head. Two tests of about equal cost, keys within one block and past it,
// that run in parallel: under emulation (scripts/run-tests-arm.sh) each
// takes 10-14 s at every vector length.
TEST_P(AttentionTest, TileEdgesWithinOneKeyBlock) {
  CheckTileEdges({127, 255, 256});
}

TEST_P(AttentionTest, TileEdgesAcrossKeyBlocks) {
  CheckTileEdges({257, 384});
  Check({1, 2, 1, 129, 257, 24}, kCausal | kBias, true);  // ragged head_dim
}

// Decoding over key blocks (decode-inl.h: up to 256 keys a block, fewer
// when a block of every head of a token-major cache would not fit in L2):
// one key short of a block, on it and one past it, a key range split in
// blocks with a short last one, one query and a short chunk, GQA, every
// mask. K and V head-major (each head walked alone, V summed in strips),
// then token-major with 12 KV heads of 96 (4.5 KiB a token: all heads
// walked together, V summed in memory order) and with 4 (V in strips).
TEST_P(AttentionTest, DecodeKeyBlockEdges) {
  const mha::AttentionShape shapes[] = {
      {1, 4, 2, 1, 255, 32}, {1, 4, 2, 1, 256, 32},   {2, 4, 2, 1, 257, 32},
      {1, 4, 1, 3, 513, 32}, {1, 12, 12, 1, 700, 96}, {1, 8, 4, 2, 2100, 64},
  };
  for (const bool token_major : {false, true}) {
    kv_token_major_ = token_major;
    for (const mha::AttentionShape& s : shapes) {
      for (int masks : {int{kNone}, kCausal | kLengths | kBias}) {
        Check(s, masks, false);
      }
    }
    Check({1, 12, 12, 1, 300, 96}, kCausal | kBias, false, 0.0f,
          mha::Precision::BF16);
  }
}

TEST_P(AttentionTest, RowsThatSeeNoKeyAreZero) {
  // Causal with q_len > kv_len: the first q_len - kv_len rows see nothing;
  // kv_lengths of 0 hides a whole sequence; Check asserts exact zeros.
  Check({2, 2, 1, 9, 4, 8}, kCausal | kLengths, true);
  Check({2, 2, 1, 9, 4, 8}, kCausal | kLengths, false);
  // kv_len == 0: every row sees nothing; k and v may be null.
  const mha::AttentionShape s{1, 2, 2, 3, 0, 4};
  std::vector<float> q(24, 1.0f), out(24, kNaN);
  const mha::Layout l{12, 12, 4};  // not a real view of q: heads share rows
  mha::attention(s, q.data(), {24, 12, 4}, nullptr, l, nullptr, l, out.data(),
                 {24, 12, 4});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST_P(AttentionTest, EmptyBatchOrQueriesDoNothing) {
  EXPECT_NO_THROW(mha::attention({0, 0, 0, 5, 5, 0}, nullptr, {}, nullptr, {},
                                 nullptr, {}, nullptr, {}));
  EXPECT_NO_THROW(mha::attention({2, 0, 0, 0, 5, 0}, nullptr, {}, nullptr, {},
                                 nullptr, {}, nullptr, {}));
}

MHA_INSTANTIATE_PER_TARGET(AttentionTest);

TEST(AttentionErrors, BadArgumentsThrowAndWriteNothing) {
  const mha::AttentionShape good{2, 4, 2, 3, 5, 8};
  const std::vector<float> data(2 * 4 * 5 * 8, 0.5f);
  std::vector<float> out(2 * 4 * 3 * 8, 7.0f), weights(2 * 4 * 3 * 5, 7.0f);
  const mha::Layout q_l{4 * 3 * 8, 3 * 8, 8}, kv_l{2 * 5 * 8, 5 * 8, 8};
  const std::int32_t bad_lengths[][2] = {{5, 6}, {-1, 2}};
  auto expect_throw = [&](const std::string& name, mha::AttentionShape s,
                          const float* q, const float* k, const float* v,
                          float* o, const std::int32_t* lengths) {
    mha::AttentionMask mask;
    mask.kv_lengths = lengths;
    try {
      mha::attention(s, q, q_l, k, kv_l, v, kv_l, o, q_l, mask, 0.0f,
                     weights.data());
      ADD_FAILURE() << "no exception for " << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos)
          << e.what();
    }
    for (float x : out) ASSERT_EQ(x, 7.0f);
    for (float x : weights) ASSERT_EQ(x, 7.0f);
  };
  const float* d = data.data();
  auto with = [good](auto field, std::size_t value) {
    mha::AttentionShape s = good;
    s.*field = value;
    return s;
  };
  expect_throw("num_heads (0)", with(&mha::AttentionShape::num_heads, 0), d, d,
               d, out.data(), nullptr);
  expect_throw("num_kv_heads (0)", with(&mha::AttentionShape::num_kv_heads, 0),
               d, d, d, out.data(), nullptr);
  expect_throw("head_dim (0)", with(&mha::AttentionShape::head_dim, 0), d, d, d,
               out.data(), nullptr);
  expect_throw("num_kv_heads (3) must divide",
               with(&mha::AttentionShape::num_kv_heads, 3), d, d, d, out.data(),
               nullptr);
  expect_throw("q must not be null", good, nullptr, d, d, out.data(), nullptr);
  expect_throw("k must not be null", good, d, nullptr, d, out.data(), nullptr);
  expect_throw("v must not be null", good, d, d, nullptr, out.data(), nullptr);
  expect_throw("out must not be null", good, d, d, d, nullptr, nullptr);
  expect_throw("kv_lengths[1] (6)", good, d, d, d, out.data(), bad_lengths[0]);
  expect_throw("kv_lengths[0] (-1)", good, d, d, d, out.data(), bad_lengths[1]);
}

// Rows of out laid over one another would be written by several tasks in
// any order: such layouts throw, naming out_layout, and write nothing. Rows
// that interleave without sharing an element, inputs read several times
// (a K shared by every KV head) and strides of single rows are fine.
TEST(AttentionErrors, OutRowsMustNotOverlapEachOther) {
  const mha::AttentionShape s{2, 4, 2, 3, 5, 8};
  const std::vector<float> q(2 * 4 * 3 * 8, 0.5f), kv(2 * 5 * 8, 0.25f);
  const mha::Layout q_l{4 * 3 * 8, 3 * 8, 8}, kv_shared{5 * 8, 0, 8};
  std::vector<float> out(2 * 4 * 3 * 8 + 64, 7.0f);
  const mha::Layout overlapping[] = {
      {4 * 3 * 8, 3 * 8, 4},      // tokens 4 apart, rows of 8
      {4 * 3 * 8, 0, 8},          // every head on the same rows
      {3 * 8, 3 * 8, 8},          // sequence 1 over sequence 0's heads 1-3
      {4 * 3 * 8, 2 * 8 + 4, 8},  // a head's rows over the next one's
  };
  for (const mha::Layout& bad : overlapping) {
    ExpectInvalid("out_layout", [&] {
      mha::attention(s, q.data(), q_l, kv.data(), kv_shared, kv.data(),
                     kv_shared, out.data(), bad);
    });
    for (float x : out) ASSERT_EQ(x, 7.0f);
  }
  const mha::Layout fine[] = {
      {4 * 3 * 8, 8, 4 * 8},  // token-major: heads interleaved in a token
      {3 * 8, 2 * 3 * 8, 8},  // sequences interleaved between heads
  };
  for (const mha::Layout& layout : fine) {
    mha::attention(s, q.data(), q_l, kv.data(), kv_shared, kv.data(), kv_shared,
                   out.data(), layout);
    for (std::size_t i = 0; i < 2 * 4 * 3 * 8; ++i) {
      ASSERT_FLOAT_EQ(out[i], 0.25f);  // every value row is 0.25
    }
    std::fill(out.begin(), out.end(), 7.0f);
  }
  const mha::AttentionShape one_sequence{1, 4, 2, 3, 5, 8};
  EXPECT_NO_THROW(mha::attention(one_sequence, q.data(), q_l, kv.data(),
                                 kv_shared, kv.data(), kv_shared, out.data(),
                                 {0, 3 * 8, 8}));
}

}  // namespace
}  // namespace mha_test
