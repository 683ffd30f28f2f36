// The exponential of the softmax kernels (lib/softmax/exp2-inl.h) against
// double exp2, on every target: its error in ulp over [-126, 0], sampled
// every 61st float (about 18 million of them) plus the ends, and its exact
// values at 0, -inf and below the normal range.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "lib/softmax/exp2_for_test.h"
#include "test_util.h"

namespace mha_test {
namespace {

float FromBits(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// The distance from got to the exact value in units of the last place of
// the float nearest the exact value.
double UlpError(float got, double exact) {
  const float nearest = static_cast<float>(exact);
  const double ulp =
      std::nextafter(nearest, std::numeric_limits<float>::infinity()) -
      static_cast<double>(nearest);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

class Exp2Test : public PerTarget {};

TEST_P(Exp2Test, WithinTwoAndAHalfUlp) {
  // Negative floats from -0 down to -126: bit patterns 0x80000000 up to
  // that of -126, every 61st (a stride prime to the mantissa's powers of 2).
  const std::uint32_t last = 0xC2FC0000u;  // -126.0f
  std::vector<float> x;
  for (std::uint32_t bits = 0x80000000u; bits <= last; bits += 61) {
    x.push_back(FromBits(bits));
  }
  x.push_back(-126.0f);
  x.push_back(0.0f);
  std::vector<float> y(x.size());
  mha::detail::Exp2OfNonPositiveForTest(x.data(), y.data(), x.size());
  ExpectRanOnTarget();
  const std::string target = GetParam();
  double worst = 0.0;
  float worst_x = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double error = UlpError(y[i], std::exp2(static_cast<double>(x[i])));
    if (error > worst) worst = error, worst_x = x[i];
  }
  std::printf("[ exp2 on %s ] worst %.2f ulp at %.9g\n", target.c_str(), worst,
              worst_x);
  // Measured: 2.02 ulp with FMA, 2.19 without (a degree-4 polynomial
  // would be 40).
  EXPECT_LE(worst, 2.5) << "at x = " << worst_x;
}

TEST_P(Exp2Test, ExactValuesAndTheRangeEnds) {
  const float x[] = {0.0f,    -0.0f,   -1.0f,  -2.0f, -126.0f,
                     -127.0f, -150.0f, -1e30f, -kInf};
  float y[9];
  mha::detail::Exp2OfNonPositiveForTest(x, y, 9);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_NEAR(y[2], 0.5f, 0x1.0p-24f);
  EXPECT_NEAR(y[3], 0.25f, 0x1.0p-25f);
  EXPECT_NEAR(y[4], 0x1.0p-126f, 0x1.0p-148f);
  EXPECT_EQ(y[5], 0.0f);  // below float precision of 1, and never denormal
  EXPECT_EQ(y[6], 0.0f);
  EXPECT_EQ(y[7], 0.0f);
  EXPECT_EQ(y[8], 0.0f);  // a hidden key weighs exactly nothing
}

// Every result is 0 or a normal float: denormals cost Intel cores a
// microcode assist where they are made and again where P V reads them.
// Every float of [-150, -125] (down to where 2^x is below the smallest
// denormal): exactly 0 below -126, at least 2^-126 from there up.
TEST_P(Exp2Test, ZeroBelowTheSmallestNormalNeverDenormal) {
  std::vector<float> x;
  for (float v = -125.0f; v >= -150.0f; v = std::nextafter(v, -200.0f)) {
    x.push_back(v);
  }
  std::vector<float> y(x.size());
  mha::detail::Exp2OfNonPositiveForTest(x.data(), y.data(), x.size());
  ExpectRanOnTarget();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -126.0f) {
      ASSERT_EQ(y[i], 0.0f) << "at x = " << x[i];
    } else {
      ASSERT_GE(y[i], 0x1.0p-126f) << "at x = " << x[i];
    }
  }
}

MHA_INSTANTIATE_PER_TARGET(Exp2Test);

}  // namespace
}  // namespace mha_test
