// MHA_TARGET and MHA_CACHES, read on first use. ctest runs this binary with
// one of them set and MHA_EXPECT saying what should happen: for MHA_TARGET,
// "invalid", "best" or a target's name; for MHA_CACHES, "invalid_caches".
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace mha_test {
namespace {

constexpr const char* kInvalidCaches = "invalid_caches";

std::string Expected() {
  const char* expect = std::getenv("MHA_EXPECT");
  return expect ? expect : "";
}

// A 4 x 4 x 4 product of ones into c, which holds 7 until a run succeeds.
struct TinyProduct {
  std::vector<float> a = std::vector<float>(16, 1.0f);
  std::vector<float> c = std::vector<float>(16, 7.0f);
  void Run() {
    mha::sgemm(mha::Transpose::No, mha::Transpose::No, 4, 4, 4, 1.0f, a.data(),
               4, a.data(), 4, 0.0f, c.data(), 4);
  }
  // Every run throws std::invalid_argument naming `variable`, not just the
  // first, and writes nothing.
  void ExpectEveryRunThrowsNaming(const std::string& variable) {
    for (int i = 0; i < 2; ++i) {
      try {
        Run();
        ADD_FAILURE() << "a bad " << variable << " must make kernels throw";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(variable), std::string::npos)
            << e.what();
      }
      for (float x : c) ASSERT_EQ(x, 7.0f);
    }
  }
};

TEST(Environment, MhaTargetIsAppliedOnFirstUse) {
  const std::string expected = Expected();
  if (expected.empty() || expected == kInvalidCaches) {
    GTEST_SKIP() << "run by ctest with MHA_TARGET and MHA_EXPECT";
  }
  TinyProduct product;
  if (expected != "invalid") {
    const std::string target =
        expected == "best" ? mha::supported_targets().front() : expected;
    EXPECT_EQ(mha::active_target(), target);
    product.Run();
    EXPECT_EQ(mha::last_kernel_target(), target);
    return;
  }
  EXPECT_FALSE(mha::supported_targets().empty());  // still answers
  product.ExpectEveryRunThrowsNaming("MHA_TARGET");
  EXPECT_THROW(mha::active_target(), std::invalid_argument);
  mha::set_target("");  // a choice made in code replaces the bad variable
  product.Run();
  EXPECT_EQ(product.c[0], 4.0f);
}

// A malformed MHA_CACHES makes every kernel throw before it writes, but
// neither constructing a layer nor setting its weights: the panels do not
// depend on the caches.
TEST(Environment, MalformedMhaCachesMakesKernelsThrow) {
  if (Expected() != kInvalidCaches) {
    GTEST_SKIP() << "run by ctest with a malformed MHA_CACHES";
  }
  TinyProduct product;
  product.ExpectEveryRunThrowsNaming("MHA_CACHES");
  mha::MultiHeadAttentionConfig config;
  config.d_model = 16;
  config.num_heads = 2;
  mha::MultiHeadAttention layer(config);
  layer.init_random(1);
  const std::vector<float> x = RandomVector(2 * 16, 2);
  std::vector<float> out(2 * 16, 7.0f);
  EXPECT_THROW(layer.forward(x.data(), x.data(), x.data(), 1, 2, 2, out.data()),
               std::invalid_argument);
  for (float y : out) ASSERT_EQ(y, 7.0f);
}

}  // namespace
}  // namespace mha_test
