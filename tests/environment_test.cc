// MHA_TARGET, read on first use. ctest runs this binary with MHA_TARGET set
// and MHA_EXPECT saying what should happen: "invalid" or a target's name.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace mha_test {
namespace {

std::string Expected() {
  const char* expect = std::getenv("MHA_EXPECT");
  return expect ? expect : "";
}

TEST(Environment, MhaTargetIsAppliedOnFirstUse) {
  const std::string expected = Expected();
  if (expected.empty())
    GTEST_SKIP() << "run by ctest with MHA_TARGET and MHA_EXPECT";
  const std::vector<float> a(16, 1.0f);
  std::vector<float> c(16, 7.0f);
  auto run = [&] {
    mha::sgemm(mha::Transpose::No, mha::Transpose::No, 4, 4, 4, 1.0f, a.data(),
               4, a.data(), 4, 0.0f, c.data(), 4);
  };
  if (expected != "invalid") {
    EXPECT_EQ(mha::active_target(), expected);
    run();
    EXPECT_EQ(mha::last_kernel_target(), expected);
    return;
  }
  EXPECT_FALSE(mha::supported_targets().empty());  // still answers
  for (int i = 0; i < 2; ++i) {  // every call throws, not just the first
    try {
      run();
      ADD_FAILURE() << "an unknown MHA_TARGET must make kernels throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("MHA_TARGET"), std::string::npos)
          << e.what();
    }
    for (float x : c) ASSERT_EQ(x, 7.0f);
  }
  EXPECT_THROW(mha::active_target(), std::invalid_argument);
  mha::set_target("");  // a choice made in code replaces the bad variable
  run();
  EXPECT_EQ(c[0], 4.0f);
}

}  // namespace
}  // namespace mha_test
