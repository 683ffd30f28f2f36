#include "lib/common/cache_sizes.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace mha::detail {
namespace {

// "48K" or "1024K" or "32M" -> bytes; 0 if unreadable.
std::size_t ParseSize(const std::string& text) {
  std::size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + static_cast<std::size_t>(text[i++] - '0');
  }
  if (i < text.size() && text[i] == 'K') value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  return value;
}

std::string ReadLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

CacheSizes FromSysfs() {
  CacheSizes sizes{0, 0, 0, 0, 0};
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" +
                            std::to_string(index) + "/";
    const std::string level = ReadLine(dir + "level");
    if (level.empty()) break;
    const std::string type = ReadLine(dir + "type");
    const std::size_t size = ParseSize(ReadLine(dir + "size"));
    if (level == "1" && type == "Data") {
      sizes.l1d = size;
      sizes.l1d_ways = ParseSize(ReadLine(dir + "ways_of_associativity"));
      sizes.line = ParseSize(ReadLine(dir + "coherency_line_size"));
    }
    if (level == "2" && type != "Instruction") sizes.l2 = size;
    if (level == "3" && type != "Instruction") sizes.l3 = size;
  }
  return sizes;
}

std::size_t Sysconf(int name) {
  const long value = sysconf(name);
  return value > 0 ? static_cast<std::size_t>(value) : 0;
}

CacheSizes Detect() {
  CacheSizes sizes = FromSysfs();
#ifdef _SC_LEVEL1_DCACHE_SIZE
  if (sizes.l1d == 0) sizes.l1d = Sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (sizes.l2 == 0) sizes.l2 = Sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (sizes.l3 == 0) sizes.l3 = Sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (sizes.l1d_ways == 0) sizes.l1d_ways = Sysconf(_SC_LEVEL1_DCACHE_ASSOC);
  if (sizes.line == 0) sizes.line = Sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
#endif
  // Implausible or missing sizes (some VMs and emulators report none): take
  // those of a typical current core.
  if (sizes.l1d < (16u << 10) || sizes.l1d > (1u << 20)) sizes.l1d = 48u << 10;
  if (sizes.l1d_ways < 2 || sizes.l1d_ways > 64) sizes.l1d_ways = 8;
  if (sizes.line < kShortestCacheLine || sizes.line > 256 ||
      (sizes.line & (sizes.line - 1)) != 0) {
    sizes.line = kShortestCacheLine;
  }
  if (sizes.l2 < (256u << 10) || sizes.l2 > (64u << 20)) sizes.l2 = 1u << 20;
  if (sizes.l3 < sizes.l2 || sizes.l3 > (1u << 30)) sizes.l3 = 32u << 20;
  return sizes;
}

}  // namespace

const CacheSizes& MachineCaches() {
  static const CacheSizes sizes = Detect();
  return sizes;
}

}  // namespace mha::detail
