// supported_targets, active_target, set_target, and proof that a forced
// target's own code runs (each kernel reports HWY_TARGET).
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace mha_test {
namespace {

TEST(Targets, SupportedListEndsWithThePortableFallback) {
  const std::vector<std::string> targets = mha::supported_targets();
  ASSERT_FALSE(targets.empty());
  const std::string& fallback = targets.back();
  EXPECT_TRUE(fallback == "SCALAR" || fallback == "EMU128") << fallback;
  EXPECT_EQ(mha::active_target(), targets.front());
}

TEST(Targets, UnknownNamesThrowAndChangeNothing) {
  const std::string before = mha::active_target();
  // A real Highway target of the other architecture, never supported here.
#if defined(__x86_64__) || defined(__i386__)
  const char* foreign = "NEON";
#else
  const char* foreign = "AVX2";
#endif
  for (const char* bad : {"avx2", "AVX9", foreign, " SSE4"}) {
    try {
      mha::set_target(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("(\"") + bad + "\")"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(mha::active_target(), before);
  }
}

TEST(Targets, ForcedTargetRunsItsOwnCode) {
  const std::vector<float> a(64, 1.0f);
  std::vector<float> c(64);
  for (const std::string& target : mha::supported_targets()) {
    mha::set_target(target);
    EXPECT_EQ(mha::active_target(), target);
    mha::sgemm(mha::Transpose::No, mha::Transpose::No, 8, 8, 8, 1.0f, a.data(),
               8, a.data(), 8, 0.0f, c.data(), 8);
    EXPECT_EQ(mha::last_kernel_target(), target);
    mha::softmax(a.data(), 8, c.data(), 8, 8, 8);
    EXPECT_EQ(mha::last_kernel_target(), target);
  }
  mha::set_target("");
  EXPECT_EQ(mha::active_target(), mha::supported_targets().front());
}

TEST(Targets, LayerKeepsWorkingAcrossTargetChanges) {
  const mha::MultiHeadAttention layer(32, 4);
  const std::vector<float> x = RandomVector(3 * 32, 1);
  std::vector<float> first(3 * 32), out(3 * 32);
  layer.forward(x.data(), x.data(), x.data(), 1, 3, 3, first.data());
  for (const std::string& target : mha::supported_targets()) {
    mha::set_target(target);
    layer.forward(x.data(), x.data(), x.data(), 1, 3, 3, out.data());
    EXPECT_EQ(mha::last_kernel_target(), target);
    for (std::size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], first[i], 1e-4);
  }
  mha::set_target("");
}

}  // namespace
}  // namespace mha_test
