// The cache sizes the kernels block for: MHA_CACHES's, else read from sysfs,
// else sysconf, else (missing or implausible, as in some VMs) typical sizes,
// each with where it came from, so that a benchmark report can say which.
#include "lib/common/cache_sizes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace mha_test {
namespace {

TEST(CacheSizes, EverySizeIsPlausibleAndNamesItsSource) {
  const mha::detail::CacheSizes& c = mha::detail::MachineCaches();
  EXPECT_GE(c.l1d, 16u << 10);
  EXPECT_LE(c.l1d, 1u << 20);
  EXPECT_GE(c.l1d_ways, 2u);
  EXPECT_GE(c.line, mha::detail::kShortestCacheLine);
  EXPECT_EQ(c.line & (c.line - 1), 0u);
  EXPECT_GE(c.l2, 256u << 10);
  EXPECT_GE(c.l3, c.l2);
  const std::string description = mha::detail::DescribeMachineCaches();
  for (const char* source : c.source) {
    ASSERT_NE(source, nullptr);
    const std::string name = source;
    EXPECT_TRUE(name == "MHA_CACHES" || name == "sysfs" || name == "sysconf" ||
                name == "default")
        << name;
    EXPECT_NE(description.find("(" + name + ")"), std::string::npos)
        << description;
  }
  EXPECT_NE(description.find("L2 " + std::to_string(c.l2 >> 10) + " KiB"),
            std::string::npos)
      << description;
}

// ctest runs the kernels' tests again under other machines' caches
// (tests/CMakeLists.txt), with MHA_CACHES and MHA_EXPECT_CACHES, the parts of
// the description it must produce, separated by '|': this checks that the
// sizes in force are those, so that those runs cannot test the machine's own
// blocking unnoticed.
TEST(CacheSizes, MhaCachesReplacesTheSizesItNames) {
  const char* expected = std::getenv("MHA_EXPECT_CACHES");
  if (expected == nullptr) {
    GTEST_SKIP() << "run by ctest with MHA_CACHES and MHA_EXPECT_CACHES";
  }
  const std::string description = mha::detail::DescribeMachineCaches();
  std::istringstream parts(expected);
  std::string part;
  int count = 0;
  while (std::getline(parts, part, '|')) {
    EXPECT_NE(description.find(part), std::string::npos)
        << "\"" << part << "\" not in " << description;
    ++count;
  }
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace mha_test
