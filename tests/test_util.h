// Shared test helpers: random data, a fixture that runs each test once per
// supported target, bitwise and tolerance comparisons that remember the worst
// error seen per kernel (printed at the end of the run).
#ifndef MHA_TESTS_TEST_UTIL_H_
#define MHA_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mha/mha.h"

namespace mha_test {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// `count` floats uniform in [lo, hi), from a fixed seed.
std::vector<float> RandomVector(std::size_t count, std::uint32_t seed,
                                float lo = -1.0f, float hi = 1.0f);

// `values` rounded to precision p (nearest, ties to even) and widened back:
// what the library computes with when it stores them in p.
std::vector<float> RoundedTo(mha::Precision p, std::vector<float> values);

// Normwise error of `got` against `want`: max |got - want| / max(max|want|,
// floor). Records it as the worst for `kernel` if it is, and returns it.
double RelativeError(const std::string& kernel, const float* got,
                     const double* want, std::size_t count,
                     double floor = 1e-3);

// Probabilities judged each against its own magnitude (softmax tails): the
// largest fraction of its allowed error that an entry of `got` uses, an
// entry of `want` at least 2^-126 (float's smallest normal) being allowed
// relative_bound * want, a smaller one 2^-126 (it may come out 0 or
// denormal). Records it as the worst for `kernel` if it is, and returns it:
// above 1, an entry is out of bounds.
double OwnMagnitudeError(const std::string& kernel, const float* got,
                         const double* want, std::size_t count,
                         double relative_bound);

// Like RelativeError, for results where NaN is expected in places (the
// NaN rules): checks that got holds NaN exactly where want does, and returns
// the normwise error of the other entries.
double RelativeErrorWithNaNs(const std::string& kernel, const float* got,
                             const double* want, std::size_t count,
                             double floor = 1e-3);

// Expects call() to throw std::invalid_argument whose message contains
// `fragment`.
template <class Call>
void ExpectInvalid(const std::string& fragment, Call&& call) {
  try {
    call();
    ADD_FAILURE() << "no exception; wanted " << fragment;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << e.what();
  }
}

// A copy of `values` that ends exactly where an inaccessible page begins, so a
// kernel reading or writing one element past the end crashes the test rather
// than passing by luck (as an 8-byte over-read by a vectorized scalar kernel
// once did, only when the heap put A at a page edge).
class GuardedFloats {
 public:
  explicit GuardedFloats(const std::vector<float>& values);
  ~GuardedFloats();
  GuardedFloats(const GuardedFloats&) = delete;
  GuardedFloats& operator=(const GuardedFloats&) = delete;
  float* data() { return data_; }
  float& operator[](std::size_t i) { return data_[i]; }
  std::size_t size() const { return size_; }

 private:
  void* mapping_;
  std::size_t mapping_bytes_;
  float* data_;
  std::size_t size_;
};

// Checks got == want bit for bit.
void ExpectBitwiseEqual(const std::vector<float>& got,
                        const std::vector<float>& want);

// Runs `body` inside a task_arena of `threads` threads.
template <class Body>
void InArena(int threads, Body&& body);

// A test run once per target in mha::supported_targets(), with that target
// forced; checks that the kernels really ran on it.
class PerTarget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { mha::set_target(GetParam()); }
  void TearDown() override { mha::set_target(""); }
  void ExpectRanOnTarget() const {
    EXPECT_EQ(mha::last_kernel_target(), GetParam());
  }
};

std::string TargetTestName(const ::testing::TestParamInfo<std::string>& info);

}  // namespace mha_test

#define MHA_INSTANTIATE_PER_TARGET(suite)                                 \
  INSTANTIATE_TEST_SUITE_P(Targets, suite,                                \
                           ::testing::ValuesIn(mha::supported_targets()), \
                           ::mha_test::TargetTestName)

#include <tbb/task_arena.h>

template <class Body>
void mha_test::InArena(int threads, Body&& body) {
  tbb::task_arena arena(threads);
  arena.execute(body);
}

#endif  // MHA_TESTS_TEST_UTIL_H_
