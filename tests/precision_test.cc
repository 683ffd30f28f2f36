// Reduced precision: the fp32 <-> BF16 / F16 conversions (every 16-bit
// value, ties, subnormals, overflow, NaN; against the CPU's own F16C
// conversion where it has one), the end-to-end error of a decode step with
// 16-bit weights and cache against fp32, and the errors of the API.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "test_util.h"

namespace mha_test {
namespace {

using mha::Precision;

float FloatOf(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The 16-bit value nearest to x, ties to the even one, found by search over
// the neighbours of a candidate, in double: the definition, not the
// library's bit manipulation.
std::uint16_t NearestBySearch(float x, Precision p) {
  auto value = [p](std::uint32_t bits) {
    return static_cast<double>(p == Precision::BF16
                                   ? mha::from_bf16(std::uint16_t(bits))
                                   : mha::from_f16(std::uint16_t(bits)));
  };
  const std::uint32_t sign = std::signbit(x) ? 0x8000u : 0;
  const std::uint32_t inf = p == Precision::BF16 ? 0x7F80u : 0x7C00u;
  const double target = std::fabs(static_cast<double>(x));
  // The largest finite magnitude, and where rounding goes to Inf: half an
  // ulp above it.
  const double largest = value(inf - 1);
  const double overflow = largest + (largest - value(inf - 2)) / 2;
  if (target >= overflow) return static_cast<std::uint16_t>(sign | inf);
  std::uint32_t lo = 0, hi = inf - 1;  // binary search: value(lo) <= target
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi + 1) / 2;
    if (value(mid) <= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  std::uint32_t best = lo;
  if (lo + 1 <= inf - 1 || target > largest) {
    const double below = target - value(lo), above = value(lo + 1) - target;
    if (above < below || (above == below && (lo & 1))) best = lo + 1;
  }
  return static_cast<std::uint16_t>(sign | best);
}

// Random floats over the whole range, and the hard ones: halfway cases,
// the edges of the subnormals and of overflow.
std::vector<float> TrickyFloats() {
  std::vector<float> values;
  std::mt19937 engine(7);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = engine();
    const float x = FloatOf(bits);
    if (std::isfinite(x)) values.push_back(x);
  }
  for (int e = -30; e <= 17; ++e) {  // around powers of two, F16's range
    for (float m : {1.0f, 1.0009765625f, 1.00048828125f, 1.99951171875f}) {
      const float x = std::ldexp(m, e);
      values.insert(values.end(),
                    {x, -x, std::nextafter(x, 0.0f), std::nextafter(x, 1e30f)});
    }
  }
  for (float x : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 0x1.0p-24f,
                  0x1.0p-25f, 0x1.8p-25f, 0x1.0p-26f, 3.4028235e38f,
                  0x1.fffffep127f, 1e-45f, 0.0f, -0.0f}) {
    values.push_back(x);
    values.push_back(-x);
  }
  return values;
}

TEST(Conversions, EveryBitPatternWidensAndRoundsBackToItself) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const std::uint16_t h = static_cast<std::uint16_t>(bits);
    const float bf = mha::from_bf16(h), f = mha::from_f16(h);
    if (std::isnan(bf)) {
      EXPECT_TRUE(std::isnan(mha::from_bf16(mha::to_bf16(bf)))) << bits;
    } else {
      ASSERT_EQ(mha::to_bf16(bf), h) << bits;
    }
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(mha::from_f16(mha::to_f16(f)))) << bits;
    } else {
      ASSERT_EQ(mha::to_f16(f), h) << bits;
    }
  }
}

TEST(Conversions, RoundToNearestEvenAsTheDefinitionSays) {
  for (float x : TrickyFloats()) {
    ASSERT_EQ(mha::to_bf16(x), NearestBySearch(x, Precision::BF16)) << x;
    ASSERT_EQ(mha::to_f16(x), NearestBySearch(x, Precision::F16)) << x;
  }
  EXPECT_EQ(mha::to_f16(65520.0f), 0x7C00);    // halfway to 65536: Inf
  EXPECT_EQ(mha::to_f16(65519.99f), 0x7BFF);   // 65504
  EXPECT_EQ(mha::to_f16(0x1.0p-25f), 0x0000);  // halfway to 2^-24: even, 0
  EXPECT_EQ(mha::to_f16(0x1.8p-25f), 0x0001);
  EXPECT_TRUE(std::isinf(mha::from_bf16(mha::to_bf16(3.4028235e38f))));
  EXPECT_EQ(mha::to_bf16(FloatOf(0x7F7F8000u)), 0x7F80);   // halfway: Inf
  EXPECT_EQ(mha::to_bf16(FloatOf(0x7F7F7FFFu)), 0x7F7F);   // 3.3895e38
  EXPECT_EQ(mha::to_bf16(-FloatOf(0x7F7F8000u)), 0xFF80);  // -Inf
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(mha::from_bf16(mha::to_bf16(nan))));
  EXPECT_TRUE(std::isnan(mha::from_f16(mha::to_f16(-nan))));
  // A signaling NaN whose payload lies below the kept bits stays NaN.
  EXPECT_TRUE(std::isnan(mha::from_bf16(mha::to_bf16(FloatOf(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(mha::from_f16(mha::to_f16(FloatOf(0x7F800001u)))));
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("f16c"))) std::uint16_t HardwareF16(float x) {
  return static_cast<std::uint16_t>(
      _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float HardwareWiden(std::uint16_t h) {
  return _cvtsh_ss(h);
}

// CPUID leaf 1, ECX bit 29. Not __builtin_cpu_supports("f16c"): clang 14
// rejects that feature name.
bool CpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

TEST(Conversions, F16AgreesWithTheCpusF16c) {
  if (!CpuHasF16c()) GTEST_SKIP() << "no F16C";
  for (float x : TrickyFloats()) ASSERT_EQ(mha::to_f16(x), HardwareF16(x)) << x;
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float want = HardwareWiden(static_cast<std::uint16_t>(bits));
    const float got = mha::from_f16(static_cast<std::uint16_t>(bits));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << bits;
    } else {
      ASSERT_EQ(got, want) << bits;
    }
  }
}
#endif

// A decode step (one token over a cache) with 16-bit weights and cache
// against the same step in fp32: N(0,1)-like inputs, init_random weights,
// d512 h8 with 2 KV heads over 300 cached tokens.
double DecodeErrorAgainstF32(Precision p) {
  const std::size_t d = 512, prompt = 300;
  std::vector<float> x(prompt * d), token(d);
  std::mt19937 engine(11);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(engine);
  for (float& v : token) v = normal(engine);
  auto step = [&](Precision precision) {
    const mha::MultiHeadAttentionConfig c{d, 8, 2, false, precision};
    mha::MultiHeadAttention layer(c);
    layer.init_random(3);
    mha::KVCache cache(c, 1, prompt + 1, precision);
    std::vector<float> out(prompt * d);
    layer.forward_cached(x.data(), 1, prompt, cache, out.data());
    layer.forward_cached(token.data(), 1, 1, cache, out.data());
    out.resize(d);
    return out;
  };
  const std::vector<float> want_f = step(Precision::F32);
  const std::vector<float> got = step(p);
  const std::vector<double> want(want_f.begin(), want_f.end());
  return RelativeError(
      p == Precision::BF16 ? "decode bf16 vs f32" : "decode f16 vs f32",
      got.data(), want.data(), got.size());
}

TEST(ReducedPrecision, DecodeStepStaysNearF32) {
  EXPECT_LE(DecodeErrorAgainstF32(Precision::BF16), 2e-2);
  EXPECT_LE(DecodeErrorAgainstF32(Precision::F16), 2e-3);
}

TEST(ReducedPrecision, BadPrecisionsThrowAndWriteNothing) {
  const Precision bad = static_cast<Precision>(7);
  ExpectInvalid("weight_precision (7)", [&] {
    mha::MultiHeadAttention({64, 4, 0, false, bad});
  });
  ExpectInvalid("kv_precision (7)", [&] {
    mha::KVCache({64, 4, 0, false}, 1, 8, bad);
  });
  const mha::AttentionShape s{1, 2, 2, 3, 5, 8};
  const std::vector<float> q(2 * 3 * 8, 0.5f);
  const std::vector<std::uint16_t> kv(2 * 5 * 8, 0x3C00);
  std::vector<float> out(q.size(), 7.0f);
  const mha::Layout ql{48, 24, 8}, kvl{80, 40, 8};
  for (Precision p : {Precision::F32, bad}) {
    ExpectInvalid("kv_precision", [&] {
      mha::attention(s, q.data(), ql, kv.data(), kvl, kv.data(), kvl, p,
                     out.data(), ql);
    });
  }
  for (float x : out) ASSERT_EQ(x, 7.0f);
  // 16-bit K and V are checked for overlap with the outputs in bytes.
  std::vector<std::uint16_t> shared(200, 0x3C00);
  ExpectInvalid("out (48 floats) must not overlap k (80 elements)", [&] {
    mha::attention(s, q.data(), ql, shared.data(), kvl, kv.data(), kvl,
                   Precision::F16, reinterpret_cast<float*>(shared.data()), ql);
  });
}

}  // namespace
}  // namespace mha_test
