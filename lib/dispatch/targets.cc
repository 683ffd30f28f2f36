// supported_targets, active_target, set_target and MHA_TARGET.
//
// The forced target lives here, not in Highway's process-wide ChosenTarget,
// so that a host program using Highway itself is not affected by set_target.

#include "mha/targets.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "lib/common/cache_sizes.h"
#include "lib/common/check.h"
#include "lib/dispatch/dispatch.h"

namespace mha {
namespace {

// Targets compiled into the library and supported by this CPU.
std::int64_t UsableTargets() {
  static const std::int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return usable;
}

std::int64_t BestOf(std::int64_t targets) { return targets & -targets; }

// 0 when no supported target has this name.
std::int64_t TargetNamed(const std::string& name) {
  for (std::int64_t rest = UsableTargets(); rest != 0; rest &= rest - 1) {
    if (name == hwy::TargetName(BestOf(rest))) return BestOf(rest);
  }
  return 0;
}

std::string JoinedTargetNames() {
  std::string names;
  for (const std::string& name : supported_targets()) {
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

struct TargetChoice {
  std::atomic<std::int64_t> forced{0};  // 0: automatic
  std::atomic<bool> environment_invalid{false};
  std::string environment_value;  // written once, under environment_once
  std::once_flag environment_once;
};

TargetChoice& Choice() {
  static TargetChoice choice;
  return choice;
}

// Applies MHA_TARGET the first time any call needs the target.
void ApplyEnvironmentOnce() {
  TargetChoice& choice = Choice();
  std::call_once(choice.environment_once, [&choice] {
    const char* value = std::getenv("MHA_TARGET");
    if (value == nullptr || *value == '\0') return;
    choice.environment_value = value;
    if (const std::int64_t target = TargetNamed(value)) {
      choice.forced = target;
    } else {
      choice.environment_invalid = true;
    }
  });
}

std::int64_t TargetInForce() {
  ApplyEnvironmentOnce();
  TargetChoice& choice = Choice();
  if (choice.environment_invalid) {
    detail::Fail(
        "mha: MHA_TARGET (\"", choice.environment_value,
        "\") names no supported target; supported: ", JoinedTargetNames());
  }
  const std::int64_t forced = choice.forced;
  return forced != 0 ? forced : BestOf(UsableTargets());
}

thread_local std::int64_t kernel_target_of_thread = 0;

}  // namespace

std::vector<std::string> supported_targets() {
  std::vector<std::string> names;
  for (std::int64_t rest = UsableTargets(); rest != 0; rest &= rest - 1) {
    names.emplace_back(hwy::TargetName(BestOf(rest)));
  }
  return names;
}

std::string active_target() { return hwy::TargetName(TargetInForce()); }

void set_target(const std::string& name) {
  ApplyEnvironmentOnce();
  std::int64_t target = 0;
  if (!name.empty()) {
    target = TargetNamed(name);
    if (target == 0) {
      detail::Fail(
          "mha::set_target: name (\"", name,
          "\") is not a supported target; supported: ", JoinedTargetNames());
    }
  }
  TargetChoice& choice = Choice();
  choice.forced = target;
  choice.environment_invalid = false;
}

std::string last_kernel_target() {
  return kernel_target_of_thread == 0
             ? std::string()
             : hwy::TargetName(kernel_target_of_thread);
}

namespace detail {

namespace {

std::size_t IndexOf(std::int64_t target) {
#if (HWY_TARGETS & (HWY_TARGETS - 1)) == 0
  (void)target;
  return 0;  // a single compiled target: HWY_EXPORT tables have one entry
#else
  // The arrangement of hwy::ChosenTarget: one slot per dynamic target, the
  // fallback (SCALAR or EMU128) last.
  const std::int64_t chosen =
      HWY_CHOSEN_TARGET_SHIFT(target) | HWY_CHOSEN_TARGET_MASK_SCALAR;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<std::uint64_t>(chosen));
#endif
}

}  // namespace

std::size_t ChosenTargetIndex() {
  MachineCaches();  // throws while MHA_CACHES is malformed
  return IndexOf(TargetInForce());
}

std::size_t PreferredTargetIndex() {
  ApplyEnvironmentOnce();
  if (Choice().environment_invalid) return IndexOf(BestOf(UsableTargets()));
  return IndexOf(TargetInForce());
}

void NoteKernelTarget(std::int64_t target) { kernel_target_of_thread = target; }

}  // namespace detail
}  // namespace mha
