#include "test_util.h"

#include <sys/mman.h>
#include <unistd.h>

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

// The worst error seen by `kernel`, if `error` is worse.
void Record(const std::string& kernel, double error) {
  std::lock_guard<std::mutex> lock(Worst().mutex);
  double& worst = Worst().by_kernel[kernel];
  worst = std::max(worst, error);
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
  Record(kernel, error);
  return error;
}

double OwnMagnitudeError(const std::string& kernel, const float* got,
                         const double* want, std::size_t count,
                         double relative_bound) {
  constexpr double kSmallestNormal = 0x1.0p-126;
  double error = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    const double allowed =
        want[i] >= kSmallestNormal ? relative_bound * want[i] : kSmallestNormal;
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    error = std::max(error, std::isnan(diff)
                                ? std::numeric_limits<double>::infinity()
                                : diff / allowed);
  }
  Record(kernel, error);
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

std::vector<float> RoundedTo(mha::Precision p, std::vector<float> values) {
  for (float& x : values) {
    if (p == mha::Precision::BF16) x = mha::from_bf16(mha::to_bf16(x));
    if (p == mha::Precision::F16) x = mha::from_f16(mha::to_f16(x));
  }
  return values;
}

GuardedFloats::GuardedFloats(const std::vector<float>& values)
    : size_(values.size()) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t data_pages = (size_ * sizeof(float) + page - 1) / page;
  mapping_bytes_ = (data_pages + 1) * page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) throw std::runtime_error("mmap failed");
  char* guard = static_cast<char*>(mapping_) + data_pages * page;
  if (mprotect(guard, page, PROT_NONE) != 0)
    throw std::runtime_error("mprotect failed");
  data_ = reinterpret_cast<float*>(guard) - size_;
  std::copy(values.begin(), values.end(), data_);
}

GuardedFloats::~GuardedFloats() { munmap(mapping_, mapping_bytes_); }

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
