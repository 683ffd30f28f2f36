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
  CacheSizes sizes{0, 0, 0, 0, 0, {}};
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

// Each size from sysfs, else sysconf, else (missing or implausible: some VMs
// and emulators report none) that of a typical current core, with its source.
CacheSizes Detect() {
  CacheSizes sizes = FromSysfs();
  std::size_t* fields[] = {&sizes.l1d, &sizes.l1d_ways, &sizes.line, &sizes.l2,
                           &sizes.l3};
  for (int i = 0; i < 5; ++i) sizes.source[i] = *fields[i] ? "sysfs" : nullptr;
#ifdef _SC_LEVEL1_DCACHE_SIZE
  const int names[] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL1_DCACHE_ASSOC,
                       _SC_LEVEL1_DCACHE_LINESIZE, _SC_LEVEL2_CACHE_SIZE,
                       _SC_LEVEL3_CACHE_SIZE};
  for (int i = 0; i < 5; ++i) {
    if (*fields[i] != 0) continue;
    *fields[i] = Sysconf(names[i]);
    sizes.source[i] = "sysconf";
  }
#endif
  const auto fall_back = [&](int i, bool implausible, std::size_t typical) {
    if (!implausible) return;
    *fields[i] = typical;
    sizes.source[i] = "default";
  };
  fall_back(0, sizes.l1d < (16u << 10) || sizes.l1d > (1u << 20), 48u << 10);
  fall_back(1, sizes.l1d_ways < 2 || sizes.l1d_ways > 64, 8);
  fall_back(2,
            sizes.line < kShortestCacheLine || sizes.line > 256 ||
                (sizes.line & (sizes.line - 1)) != 0,
            kShortestCacheLine);
  fall_back(3, sizes.l2 < (256u << 10) || sizes.l2 > (64u << 20), 1u << 20);
  fall_back(4, sizes.l3 < sizes.l2 || sizes.l3 > (1u << 30), 32u << 20);
  return sizes;
}

}  // namespace

const CacheSizes& MachineCaches() {
  static const CacheSizes sizes = Detect();
  return sizes;
}

std::string DescribeMachineCaches() {
  const CacheSizes& c = MachineCaches();
  const auto kib = [](std::size_t bytes) {
    return std::to_string(bytes >> 10) + " KiB";
  };
  const auto from = [&](int i) {
    return std::string(" (") + c.source[i] + ")";
  };
  return "L1d " + kib(c.l1d) + from(0) + " " + std::to_string(c.l1d_ways) +
         "-way" + from(1) + " " + std::to_string(c.line) + "-byte lines" +
         from(2) + ", L2 " + kib(c.l2) + from(3) + ", L3 " + kib(c.l3) +
         from(4);
}

}  // namespace mha::detail
