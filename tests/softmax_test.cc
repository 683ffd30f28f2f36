// softmax against the double reference on every target: ragged widths,
// scales, huge logits, -inf entries and rows, in place, errors.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "reference.h"
#include "test_util.h"

namespace mha_test {
namespace {

class SoftmaxTest : public PerTarget {
 protected:
  // Softmax of rows x cols (leading dimension cols + 2, padding NaN) out of
  // place and in place; padding must stay untouched.
  void Check(const std::vector<float>& values, std::size_t rows,
             std::size_t cols, float scale) {
    const std::size_t ld = cols + 2;
    std::vector<float> x(rows * ld, kNaN), y(rows * ld, kNaN);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t j = 0; j < cols; ++j)
        x[r * ld + j] = values[r * cols + j];
    }
    const std::vector<double> want =
        ReferenceSoftmax(x.data(), ld, rows, cols, scale);
    mha::softmax(x.data(), ld, y.data(), ld, rows, cols, scale);
    ExpectRanOnTarget();
    std::vector<float> in_place = x;
    mha::softmax(in_place.data(), ld, in_place.data(), ld, rows, cols, scale);
    for (const std::vector<float>* out : {&y, &in_place}) {
      std::vector<float> got(rows * cols);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < ld; ++j) {
          if (j < cols)
            got[r * cols + j] = (*out)[r * ld + j];
          else
            ASSERT_TRUE(std::isnan((*out)[r * ld + j]));
        }
      }
      // The header's bound: (cols + 4 + 3 L) 2^-24, L the largest |logit|.
      double largest = 0.0;
      for (float v : values)
        if (std::isfinite(v))
          largest = std::max(largest, std::fabs(double(scale) * v));
      EXPECT_LE(
          RelativeError("softmax", got.data(), want.data(), got.size(), 1.0),
          (cols + 8 + 3 * largest) * 0x1.0p-24)
          << rows << "x" << cols << " scale " << scale;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (want[i] == 0.0)
          ASSERT_EQ(got[i], 0.0f) << "hidden entry not exactly 0";
      }
    }
  }
};

TEST_P(SoftmaxTest, RaggedWidthsAndScales) {
  for (std::size_t cols : {1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1000}) {
    for (float scale : {1.0f, 0.125f, 3.0f}) {
      Check(
          RandomVector(5 * cols, 10 + static_cast<std::uint32_t>(cols), -4, 4),
          5, cols, scale);
    }
  }
}

TEST_P(SoftmaxTest, HugeLogitsDoNotOverflow) {
  std::vector<float> x = RandomVector(3 * 77, 11, -5, 5);
  for (float& v : x) v += 1e4f;  // exp(1e4) overflows a naive softmax
  Check(x, 3, 77, 1.0f);
  Check(RandomVector(2 * 40, 12, -1e30f, 1e30f), 2, 40, 1.0f);
}

// The header's bound holds entry by entry, each against its own magnitude:
// relative (cols + 4 + 3 L) 2^-24, L the row's largest |scale * x|, down to
// 2^-126 (OwnMagnitudeError). Tails reach e^-85 below the row's largest,
// and with scale 1.05 outputs below 2^-126, denormal.
TEST_P(SoftmaxTest, EachEntryWithinItsOwnRelativeBound) {
  const std::size_t rows = 4, cols = 300;
  std::vector<float> x = RandomVector(rows * cols, 14, -85, 0);  // long tails
  for (std::size_t j = 0; j < cols; ++j) {
    x[cols + j] += 1e4f;      // large logits
    x[2 * cols + j] *= 1e3f;  // logits up to 8.5e4 apart
    x[3 * cols + j] -= 3e4f;
  }
  for (float scale : {1.0f, 0.37f, 1.05f}) {
    std::vector<float> y(x.size());
    mha::softmax(x.data(), cols, y.data(), cols, rows, cols, scale);
    const std::vector<double> want =
        ReferenceSoftmax(x.data(), cols, rows, cols, scale);
    for (std::size_t r = 0; r < rows; ++r) {
      double largest = 0.0;
      for (std::size_t j = 0; j < cols; ++j) {
        largest = std::max(largest, std::fabs(double(scale) * x[r * cols + j]));
      }
      const double bound = (cols + 4 + 3 * largest) * 0x1.0p-24;
      ASSERT_LE(OwnMagnitudeError("softmax, x own bound", y.data() + r * cols,
                                  want.data() + r * cols, cols, bound),
                1.0)
          << "row " << r << " scale " << scale;
    }
  }
}

TEST_P(SoftmaxTest, NegativeInfinityEntriesAndRows) {
  const std::size_t cols = 37;
  std::vector<float> x = RandomVector(4 * cols, 13);
  for (std::size_t j = 0; j < cols; j += 3) x[j] = -kInf;  // row 0: some hidden
  for (std::size_t j = 0; j < cols; ++j)
    x[cols + j] = -kInf;  // row 1: all hidden
  for (std::size_t j = 1; j < cols; ++j)
    x[2 * cols + j] = -kInf;  // row 2: one visible
  // A scale <= 0 must not turn a hidden entry into +inf (the row's max) or
  // NaN (0 x -inf).
  for (float scale : {1.0f, -0.5f, 0.0f}) Check(x, 4, cols, scale);
  std::vector<float> y(4 * cols, kNaN);
  mha::softmax(x.data(), cols, y.data(), cols, 4, cols);
  for (std::size_t j = 0; j < cols; ++j) EXPECT_EQ(y[cols + j], 0.0f);
  EXPECT_EQ(y[2 * cols], 1.0f);
}

TEST_P(SoftmaxTest, EmptyDoesNothing) {
  EXPECT_NO_THROW(mha::softmax(nullptr, 0, nullptr, 0, 0, 5));
  EXPECT_NO_THROW(mha::softmax(nullptr, 0, nullptr, 0, 5, 0));
}

MHA_INSTANTIATE_PER_TARGET(SoftmaxTest);

TEST(SoftmaxErrors, BadArgumentsThrowAndWriteNothing) {
  const std::vector<float> x(40, 1.0f);
  std::vector<float> y(40, 7.0f);
  auto expect_throw = [&](const char* name, auto&& call) {
    try {
      call();
      ADD_FAILURE() << "no exception for " << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos)
          << e.what();
    }
    for (float v : y) ASSERT_EQ(v, 7.0f);
  };
  expect_throw("ldx (4)",
               [&] { mha::softmax(x.data(), 4, y.data(), 5, 2, 5); });
  expect_throw("ldy (3)",
               [&] { mha::softmax(x.data(), 5, y.data(), 3, 2, 5); });
  expect_throw("x must not be null",
               [&] { mha::softmax(nullptr, 5, y.data(), 5, 2, 5); });
  expect_throw("y must not be null",
               [&] { mha::softmax(x.data(), 5, nullptr, 5, 2, 5); });
  expect_throw("ldy (6)",
               [&] { mha::softmax(y.data(), 5, y.data(), 6, 2, 5); });
}

}  // namespace
}  // namespace mha_test
