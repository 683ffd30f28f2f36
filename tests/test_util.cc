#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace mha_test {
namespace {

struct WorstErrors {
  std::mutex mutex;
  std::map<std::string, double> by_kernel;
};

WorstErrors& Worst() {
  static WorstErrors worst;
  return worst;
}

// Prints the worst error per kernel when the run ends.
class WorstErrorReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [kernel, error] : Worst().by_kernel) {
      std::printf("[ worst error vs double ] %-28s %.3g\n", kernel.c_str(),
                  error);
    }
  }
};

const auto* const kReport =
    ::testing::AddGlobalTestEnvironment(new WorstErrorReport);

}  // namespace

std::vector<float> RandomVector(std::size_t count, std::uint32_t seed, float lo,
                                float hi) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> values(count);
  for (float& x : values) x = uniform(engine);
  return values;
}

double RelativeError(const std::string& kernel, const float* got,
                     const double* want, std::size_t count, double floor) {
  double scale = floor, error = 0.0;
  for (std::size_t i = 0; i < count; ++i)
    scale = std::max(scale, std::fabs(want[i]));
  for (std::size_t i = 0; i < count; ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    // NaN where a number was wanted counts as an infinite error.
    error = std::max(error, std::isnan(diff)
                                ? std::numeric_limits<double>::infinity()
                                : diff / scale);
  }
  std::lock_guard<std::mutex> lock(Worst().mutex);
  double& worst = Worst().by_kernel[kernel];
  worst = std::max(worst, error);
  return error;
}

double RelativeErrorWithNaNs(const std::string& kernel, const float* got,
                             const double* want, std::size_t count,
                             double floor) {
  std::vector<float> got_numbers;
  std::vector<double> want_numbers;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "NaN expected at " << i;
    } else {
      got_numbers.push_back(got[i]);
      want_numbers.push_back(want[i]);
    }
  }
  return RelativeError(kernel, got_numbers.data(), want_numbers.data(),
                       got_numbers.size(), floor);
}

void ExpectBitwiseEqual(const std::vector<float>& got,
                        const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)),
            0);
}

std::string TargetTestName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace mha_test
