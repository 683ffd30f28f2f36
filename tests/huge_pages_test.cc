// The allocator of packed weights and KV caches: alignment, and on Linux
// x86-64 with transparent huge pages enabled, huge-page advice on large runs.
#include "mha/detail/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mha/memory.h"

namespace mha_test {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

using Buffer = std::unique_ptr<void, mha::detail::HugePagesFree>;

std::uintptr_t Address(const Buffer& b) {
  return reinterpret_cast<std::uintptr_t>(b.get());
}

#if defined(__linux__) && defined(__x86_64__)
// What /proc/self/smaps says of the mapping holding p: its "THPeligible"
// value (1 when huge pages may back it), -1 if not found.
int ThpEligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(std::strlen("THPeligible:")));
    }
  }
  return -1;
}

// The transparent huge pages mode in force: "always", "madvise", "never",
// or "" if the kernel does not say.
std::string TransparentHugePagesMode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(file, modes);
  const std::size_t open = modes.find('['), close = modes.find(']');
  if (open == std::string::npos || close < open) return "";
  return modes.substr(open + 1, close - open - 1);
}

bool TransparentHugePagesEnabled() {
  const std::string mode = TransparentHugePagesMode();
  return !mode.empty() && mode != "never";
}
#endif

TEST(HugePages, SmallRunsAreVectorAlignedAndWritable) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{100},
                            std::size_t{64} << 10}) {
    const Buffer b(mha::detail::AllocateHugePages(bytes));
    ASSERT_NE(b.get(), nullptr) << bytes;
    EXPECT_EQ(Address(b) % 64, 0u) << bytes;
    std::memset(b.get(), 0x5a, bytes);
  }
  mha::detail::FreeHugePages(nullptr);
}

TEST(HugePages, LargeRunsStartOnAHugePageAndMayUseThem) {
  const std::size_t bytes = 3 * kMiB + 5;
  const Buffer b(mha::detail::AllocateHugePages(bytes));
  ASSERT_NE(b.get(), nullptr);
  EXPECT_EQ(Address(b) % (2 * kMiB), 0u);
  std::memset(b.get(), 0x5a, bytes);
  EXPECT_EQ(static_cast<unsigned char*>(b.get())[bytes - 1], 0x5a);
#if defined(__linux__) && defined(__x86_64__)
  // (Not under qemu-user, whose smaps are the emulator's own.)
  if (TransparentHugePagesEnabled()) EXPECT_EQ(ThpEligible(b.get()), 1);
#endif
}

TEST(HugePages, AdviceCanBeTurnedOffForLaterBuffers) {
  // 64 MiB, above glibc's largest mmap threshold: fresh mappings, never
  // heap memory that an earlier buffer's advice left marked.
  constexpr std::size_t kBytes = 64 * kMiB;
  ASSERT_TRUE(mha::huge_pages());  // the default
  const Buffer advised(mha::detail::AllocateHugePages(kBytes));
  mha::set_huge_pages(false);
  EXPECT_FALSE(mha::huge_pages());
  const Buffer plain(mha::detail::AllocateHugePages(kBytes));
  mha::set_huge_pages(true);
  EXPECT_TRUE(mha::huge_pages());
  ASSERT_NE(plain.get(), nullptr);
  EXPECT_EQ(Address(plain) % 64, 0u);
  std::memset(plain.get(), 0x5a, kBytes);
#if defined(__linux__) && defined(__x86_64__)
  // Only "madvise" tells the two apart: "always" backs both, "never" none.
  if (TransparentHugePagesMode() == "madvise") {
    EXPECT_EQ(ThpEligible(advised.get()), 1);
    EXPECT_EQ(ThpEligible(plain.get()), 0);
  }
#endif
}

TEST(HugePages, AllocatorServesContainers) {
  std::vector<float, mha::detail::HugePageAllocator<float>> v(kMiB, 1.0f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % (2 * kMiB), 0u);
  auto copy = v;
  copy[7] = 2.0f;
  EXPECT_EQ(v[7], 1.0f);
  EXPECT_EQ(copy[kMiB - 1], 1.0f);
}

}  // namespace
}  // namespace mha_test
