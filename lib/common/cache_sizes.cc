#include "lib/common/cache_sizes.h"

#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "hwy/base.h"
#include "lib/common/check.h"

namespace mha::detail {
namespace {

// "48K" or "1024K" or "32M" -> bytes; 0 if unreadable. `rest`, if given,
// receives what follows the number and its unit.
std::size_t ParseSize(const std::string& text, std::string* rest = nullptr) {
  std::size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' &&
         value < (std::size_t{1} << 40)) {
    value = value * 10 + static_cast<std::size_t>(text[i++] - '0');
  }
  if (i < text.size() && text[i] == 'K') value <<= 10, ++i;
  if (i < text.size() && text[i] == 'M') value <<= 20, ++i;
  if (rest != nullptr) *rest = text.substr(i);
  return value;
}

std::string ReadLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

CacheSizes FromSysfs() {
  CacheSizes sizes{0, 0, 0, 0, 0, false, {}};
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

constexpr const char* kFieldNames[5] = {"l1d", "ways", "line", "l2", "l3"};
constexpr const char* kOverride = "MHA_CACHES";

// The sizes MHA_CACHES names ("l1d=32K,ways=8,l2=512K"), each with the source
// "MHA_CACHES"; throws std::invalid_argument on anything else.
void ApplyOverride(const char* value, std::size_t* const fields[5],
                   const char* source[5]) {
  std::istringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::size_t equals = item.find('=');
    const std::string key = item.substr(0, equals);
    int field = 0;
    while (field < 5 && key != kFieldNames[field]) ++field;
    std::string rest;
    const std::size_t size = equals == std::string::npos
                                 ? 0
                                 : ParseSize(item.substr(equals + 1), &rest);
    if (field == 5 || size == 0 || !rest.empty()) {
      Fail("mha: MHA_CACHES (\"", value, "\"): \"", item,
           "\" is not one of l1d=, ways=, line=, l2=, l3= with a size such as "
           "48K, 8 or 2M");
    }
    *fields[field] = size;
    source[field] = kOverride;
  }
}

// Whether the CPU's vendor is Intel (CacheSizes::l3_fills_from_one_core).
bool IsIntel() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx) == 0) return false;
  // "GenuineIntel" in ebx, edx, ecx.
  return ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;
#else
  return false;
#endif
}

// Each size from MHA_CACHES, else sysfs, else sysconf, else (missing or
// implausible: some VMs and emulators report none) that of a typical current
// core, with its source. Implausible sizes in MHA_CACHES throw. Never
// inlined: inside MachineCaches, which a product calls about a dozen times,
// it made every call save six registers and set up a 760-byte frame (a 6 x
// 32 x 8 sgemm, AVX2 target under callgrind: 2,200 instructions a call
// before, 2,040 after; its time on AVX3_DL, 191 and 189 ns at best of 11,
// moved by less than the noise).
HWY_NOINLINE CacheSizes Detect() {
  CacheSizes sizes = FromSysfs();
  std::size_t* const fields[] = {&sizes.l1d, &sizes.l1d_ways, &sizes.line,
                                 &sizes.l2, &sizes.l3};
  for (int i = 0; i < 5; ++i) sizes.source[i] = *fields[i] ? "sysfs" : nullptr;
  const char* override_value = std::getenv(kOverride);
  if (override_value != nullptr && *override_value != '\0') {
    ApplyOverride(override_value, fields, sizes.source);
  }
#ifdef _SC_LEVEL1_DCACHE_SIZE
  const int names[] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL1_DCACHE_ASSOC,
                       _SC_LEVEL1_DCACHE_LINESIZE, _SC_LEVEL2_CACHE_SIZE,
                       _SC_LEVEL3_CACHE_SIZE};
  for (int i = 0; i < 5; ++i) {
    if (sizes.source[i] != nullptr) continue;
    *fields[i] = Sysconf(names[i]);
    sizes.source[i] = "sysconf";
  }
#endif
  const auto fall_back = [&](int i, bool implausible, std::size_t typical) {
    if (!implausible) return;
    if (sizes.source[i] == kOverride) {
      Fail("mha: MHA_CACHES (\"", override_value, "\") sets ", kFieldNames[i],
           " to ", *fields[i], ", an implausible value");
    }
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
  sizes.l3_fills_from_one_core = sizes.source[4] == kOverride || IsIntel();
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
         from(4) + (c.l3_fills_from_one_core ? ", one core fills it" : "");
}

}  // namespace mha::detail
