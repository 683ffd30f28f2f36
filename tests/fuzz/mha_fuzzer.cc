// libFuzzer harness over mha's public contract (API.md, include/mha/*.h):
// mha::attention, mha::sgemm, mha::softmax, MultiHeadAttention::forward and
// forward_cached. Each input decodes one call (or a few, for the KV cache):
// shapes, strides with padding, masks, NaN/Inf placements, scale, target,
// deliberate bad arguments. Every result is checked against the
// double-precision reference of tests/reference.cc with elementwise bounds
// derived from the documented accuracy, and against the precise rules:
//
//  - hidden keys never count, even when their K/V hold NaN/Inf;
//  - NaN/Inf in a query row, a visible key's K/V, or the weights gives
//    non-finite values in the outputs it reaches;
//  - rows that see no key give zeros (attention) or b_o (layer), and the
//    weights of hidden keys are exactly 0;
//  - padding between rows and gaps in a Layout are never written (nor read
//    into a result: they hold NaN/Inf/huge values);
//  - bad arguments throw std::invalid_argument and write nothing (outputs,
//    weights, KV cache); any other exception is a failure;
//  - the kernels ran on the target set with mha::set_target; optionally, a
//    call is bitwise identical on one thread and on the default arena.
//
// On a mismatch it prints the case and the element (expected vs got) and
// aborts, so libFuzzer saves the input. MHA_FUZZ_VERBOSE=1 prints every case
// before its call (for crashes); MHA_FUZZ_PROFILE=1 the time per phase at
// exit. MHA_FUZZ_TOLERATE=hidden,hiddenweight,nanprop,scale,alias,overflow,
// nullkv reports the failures of those categories without aborting (and
// skips the bad calls that could crash; nullkv passes empty buffers rather
// than null key/value when kv_len is 0): a triage aid to look past known
// defects; the default tolerates nothing. See README.md beside this file.
//
// Input format (bytes read in order; missing bytes read as 0). Byte 0 picks
// the entry point (b % 5): 0 attention, 1 sgemm, 2 softmax, 3 forward,
// 4 forward_cached. tests/fuzz/make_corpus.py writes inputs field by field and
// documents each field; keep the two in step.
#include <sanitizer/common_interface_defs.h>
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define MHA_FUZZ_HAVE_ASAN 1
#endif
#endif

#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "mha/mha.h"
#include "reference.h"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kEps = 0x1.0p-24;  // unit roundoff of fp32
// Safety factor over the first-order error bounds below, and an absolute
// floor for results of (near) zero magnitude (terms under 2^-126 of a row's
// largest are flushed to zero by the exponential).
constexpr double kSafety = 4.0;
constexpr double kTiny = 1e-30;
// Pattern written into outputs before a call: anything outside the view
// must still hold it, bit for bit.
constexpr std::uint32_t kSentinelBits = 0x7fc0beefu;

// ---------------------------------------------------------------- reporting

std::string g_case;  // what the current input decoded to
bool g_verbose = false;
std::set<std::string> g_tolerated;
std::map<std::string, long> g_tolerated_count;

void PrintCase() {
  std::fprintf(stderr, "mha_fuzzer case: %s\n", g_case.c_str());
}

// A failed check. Categories: "hidden" (a hidden key influenced a row),
// "nanprop" (NaN/Inf did not propagate), "scale", "alias", "overflow" (a bad
// argument of that kind was not rejected), "value" (a result outside its
// bound), "other".
void Fail(const std::string& category, const std::string& message) {
  if (g_tolerated.count(category)) {
    if (++g_tolerated_count[category] <= 3) {
      std::fprintf(stderr, "mha_fuzzer: tolerated [%s] %s\n  case: %s\n",
                   category.c_str(), message.c_str(), g_case.c_str());
    }
    return;
  }
  std::fprintf(stderr, "\n==== mha_fuzzer MISMATCH [%s]: %s\n",
               category.c_str(), message.c_str());
  PrintCase();
  std::fflush(stderr);
  std::abort();
}

bool Tolerated(const char* category) { return g_tolerated.count(category); }

std::string F(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

template <class... Parts>
std::string Str(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

// MHA_FUZZ_PROFILE=1: time spent per phase, printed at exit.
bool g_profile = false;
std::map<std::string, std::pair<double, long>> g_phase_time;
class Phase {
 public:
  explicit Phase(const char* name)
      : name_(name), start_(std::chrono::steady_clock::now()) {}
  ~Phase() {
    if (!g_profile) return;
    auto& [seconds, count] = g_phase_time[name_];
    seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    ++count;
  }

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

void AtExitReport() {
  for (const auto& [name, time] : g_phase_time) {
    std::fprintf(stderr, "mha_fuzzer profile: %-22s %8ld x %9.3f ms\n",
                 name.c_str(), time.second, 1e3 * time.first / time.second);
  }
  for (const auto& [category, count] : g_tolerated_count) {
    std::fprintf(stderr, "mha_fuzzer: %ld tolerated failure(s) of [%s]\n",
                 count, category.c_str());
  }
}

#ifdef MHA_FUZZ_HAVE_ASAN
void AsanReportCallback(const char*) { PrintCase(); }
#endif

// Runs a call that must succeed: any exception is a failure.
template <class Call>
void ExpectNoThrow(const std::string& what, Call&& call) {
  if (g_verbose) PrintCase();
  try {
    call();
  } catch (const std::invalid_argument& e) {
    Fail("other", Str(what, ": unexpected std::invalid_argument: ", e.what()));
  } catch (const std::exception& e) {
    Fail("other", Str(what, ": unexpected ", typeid(e).name(), ": ", e.what()));
  } catch (...) {
    Fail("other", what + ": unexpected exception of unknown type");
  }
}

// Runs a call that must throw std::invalid_argument (category names the rule
// when it does not). Returns true when it threw as it must.
template <class Call>
bool ExpectInvalid(const std::string& category, const std::string& what,
                   Call&& call) {
  if (g_verbose) PrintCase();
  try {
    call();
  } catch (const std::invalid_argument& e) {
    if (std::strlen(e.what()) == 0) Fail("other", what + ": empty what()");
    return true;
  } catch (const std::exception& e) {
    Fail("other", Str(what, ": threw ", typeid(e).name(), " (", e.what(),
                      ") instead of std::invalid_argument"));
    return false;
  } catch (...) {
    Fail("other", what + ": threw a non-std exception");
    return false;
  }
  Fail(category, what + ": no std::invalid_argument was thrown");
  return false;
}

// A copy of a buffer taken before a call, to prove the call did not write it.
struct Snapshot {
  const float* data;
  std::vector<float> copy;
  std::string name;
  Snapshot(const std::vector<float>& v, std::string n)
      : data(v.data()), copy(v), name(std::move(n)) {}
  void ExpectUnchanged(const std::string& what) const {
    if (copy.empty()) return;
    if (std::memcmp(data, copy.data(), copy.size() * sizeof(float)) != 0) {
      std::size_t i = 0;
      while (std::memcmp(data + i, copy.data() + i, sizeof(float)) == 0) ++i;
      Fail("other", Str(what, ": ", name, "[", i, "] changed from ", F(copy[i]),
                        " to ", F(data[i])));
    }
  }
};

float Sentinel() {
  float x;
  std::memcpy(&x, &kSentinelBits, sizeof x);
  return x;
}

bool IsSentinel(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == kSentinelBits;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------- decoding

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size)
      : data_(data), size_(size) {}
  std::uint8_t U8() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint16_t U16() {
    const std::uint16_t lo = U8();
    return static_cast<std::uint16_t>(lo | (U8() << 8));
  }
  std::uint32_t U32() {
    const std::uint32_t lo = U16();
    return lo | (static_cast<std::uint32_t>(U16()) << 16);
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

const std::vector<std::string>& Targets() {
  static const std::vector<std::string> targets = mha::supported_targets();
  return targets;
}

// 255: automatic (""); otherwise one of supported_targets().
std::string TargetArgument(std::uint8_t b) {
  return b == 255 ? "" : Targets()[b % Targets().size()];
}
// The target the kernels must report after set_target(TargetArgument(b)).
std::string TargetFor(std::uint8_t b) {
  return b == 255 ? Targets().front() : TargetArgument(b);
}
// Applies set_target; returns the name the kernels must report.
std::string ApplyTarget(std::uint8_t b) {
  const std::string name = TargetArgument(b);
  try {
    mha::set_target(name);
  } catch (const std::exception& e) {
    Fail("other", Str("set_target(\"", name, "\") threw: ", e.what()));
  }
  return name.empty() ? Targets().front() : name;
}

void ExpectRanOn(const std::string& target, const std::string& what) {
  const std::string ran = mha::last_kernel_target();
  if (ran != target) {
    Fail("other", Str(what, ": kernels ran on \"", ran, "\", not on \"", target,
                      "\" set with set_target"));
  }
}

// 0 (valid call) for most bytes, else a bad-argument kind in [1, kinds].
int InvalidKind(std::uint8_t b, int kinds) {
  return b < 0xD0 ? 0 : 1 + (b - 0xD0) % kinds;
}
std::size_t BatchFrom(std::uint8_t b) { return b >= 0xF0 ? 0 : 1 + b % 3; }
std::size_t QLenFrom(std::uint8_t b) {
  if (b == 0xFF) return 0;
  return b & 0x80 ? 1 + (b & 0x7F) % 48 : 1 + b % 8;
}
// Up to 310 keys, so blocks of 256 keys are crossed.
std::size_t KvLenFrom(std::uint16_t v) {
  return v & 0x8000 ? (v & 0x1FF) % 311 : v % 41;
}
std::size_t HeadDimFrom(std::uint8_t b) {
  return std::max<std::size_t>(1, b & 0x80 ? (b & 0x7F) % 73 : b % 17);
}
std::size_t DimFrom(std::uint8_t b) {  // sgemm m, n, k and softmax rows
  if (b == 0xFF) return 0;
  return b & 0x80 ? 1 + (b & 0x7F) % 100 : 1 + b % 40;
}
std::size_t PadFrom(unsigned bits) {
  static const std::size_t pads[] = {0, 1, 3, 16};
  return pads[bits & 3];
}
float PadValueFrom(std::uint8_t b) {
  static const float values[] = {kNaN, kInf, -kInf, 1e30f};
  return values[b & 3];
}

// A small fast generator (splitmix64): the inputs need variety, not quality,
// and mt19937 under the sanitizers cost more than the calls under test.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint32_t operator()() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<std::uint32_t>((z ^ (z >> 31)) >> 32);
  }

 private:
  std::uint64_t state_;
};

// Uniform in [lo, hi), with 24 random bits.
struct Uniform {
  float lo, hi;
  Uniform(float l, float h) : lo(l), hi(h) {}
  float operator()(Rng& rng) const {
    return lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1.0p-24f;
  }
};

// Values of a tensor: kind picks the distribution.
class Values {
 public:
  Values(Rng& rng, unsigned kind) : rng_(rng), kind_(kind % 7) {}
  float operator()() {
    const Uniform unit(-1.0f, 1.0f);
    switch (kind_) {
      case 0:
        return unit(rng_);
      case 1:
        return 4.0f * unit(rng_);
      case 2:
        return static_cast<float>(static_cast<int>(rng_() % 7) - 3);
      case 3:
        return std::ldexp(unit(rng_), static_cast<int>(rng_() % 19) - 12);
      case 4:
        return 0.5f * (unit(rng_) + 1.0f);
      case 5:
        return rng_() % 4 == 0 ? 0.0f : unit(rng_);
      default:
        return 0.25f * unit(rng_);
    }
  }

 private:
  Rng& rng_;
  unsigned kind_;
};

// ---------------------------------------------------------------- views

// A [batch, heads, tokens, dim] view into a buffer with padding.
struct View {
  std::size_t batch = 0, heads = 0, tokens = 0, dim = 0;
  mha::Layout layout{0, 0, 0};

  std::size_t At(std::size_t b, std::size_t h, std::size_t t,
                 std::size_t c) const {
    return b * layout.batch + h * layout.head + t * layout.token + c;
  }
  std::size_t Count() const { return batch * heads * tokens * dim; }
  std::size_t Extent() const {
    return Count() == 0 ? 0 : At(batch - 1, heads - 1, tokens - 1, dim - 1) + 1;
  }
  template <class Fn>
  void ForEach(Fn&& fn) const {
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t t = 0; t < tokens; ++t)
          for (std::size_t c = 0; c < dim; ++c) fn(b, h, t, c, At(b, h, t, c));
  }
  std::string Describe() const {
    return Str("{", layout.batch, ",", layout.head, ",", layout.token, "}");
  }
};

// Layout byte: bits 0-1 padding after each row of dim, bit 2 token-major
// ([batch, token, head, dim], as the layer's projections), bit 3 a gap between
// heads (or tokens), bit 4 a gap between batches; for inputs only, bits 5-7
// == 7 makes every head share one head's data (stride 0), == 6 every batch.
View MakeView(std::uint8_t b, std::size_t batch, std::size_t heads,
              std::size_t tokens, std::size_t dim, bool input) {
  View v{batch, heads, tokens, dim, {}};
  const std::size_t pad_row = PadFrom(b), gap_mid = b & 8 ? 5 : 0,
                    gap_batch = b & 16 ? 7 : 0;
  if (b & 4) {
    v.layout.head = dim + pad_row;
    v.layout.token = heads * v.layout.head + gap_mid;
    v.layout.batch = tokens * v.layout.token + gap_batch;
  } else {
    v.layout.token = dim + pad_row;
    v.layout.head = tokens * v.layout.token + gap_mid;
    v.layout.batch = heads * v.layout.head + gap_batch;
  }
  if (input && (b >> 5) == 7) v.layout.head = 0;
  if (input && (b >> 5) == 6) v.layout.batch = 0;
  return v;
}

// A buffer holding a view: padding `pad`, view elements from `values`.
std::vector<float> FillView(const View& v, float pad, Values& values) {
  std::vector<float> buffer(v.Extent(), pad);
  v.ForEach([&](std::size_t, std::size_t, std::size_t, std::size_t,
                std::size_t at) { buffer[at] = values(); });
  return buffer;
}

std::vector<float> Sanitized(const std::vector<float>& x) {
  std::vector<float> s(x);
  for (float& e : s)
    if (!std::isfinite(e)) e = 0.0f;
  return s;
}

__attribute__((no_sanitize("address", "undefined", "coverage"))) bool AnyNaN(
    const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return true;
  return false;
}
__attribute__((no_sanitize("address", "undefined", "coverage"))) bool AnyInf(
    const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::isinf(x[i])) return true;
  return false;
}
__attribute__((no_sanitize("address", "undefined", "coverage"))) bool
AnyNonFinite(const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

// A value the checks expect to be finite and within `bound` of `want`.
// `hidden_poison` says that NaN/Inf sits in keys hidden from this row, so a
// non-finite result is a hidden-key leak.
// `where` is a callable giving the element's description: built only on a
// failure (building strings for every element would dominate the time).
template <class Where>
void ExpectClose(float got, double want, double bound, bool hidden_poison,
                 const Where& where) {
  if (!std::isfinite(got)) {
    Fail(hidden_poison ? "hidden" : "value",
         Str(where(), ": expected ", F(want), ", got ", F(got),
             hidden_poison ? " (NaN/Inf sits only in keys hidden from this row)"
                           : ""));
    return;
  }
  const double error = std::fabs(static_cast<double>(got) - want);
  if (!(error <= bound)) {
    Fail("value", Str(where(), ": expected ", F(want), ", got ", F(got),
                      ", error ", F(error), " > bound ", F(bound)));
  }
}

template <class Where>
void ExpectNonFinite(float got, const Where& where, const char* why) {
  if (std::isfinite(got)) {
    Fail("nanprop",
         Str(where(), ": expected NaN/Inf (", why, "), got ", F(got)));
  }
}

// `nonfinite_category`: the rule a NaN/Inf here breaks ("hidden" when it can
// only come from keys the row does not see).
template <class Where>
void ExpectZero(float got, const char* nonfinite_category, const Where& where) {
  if (got != 0.0f) {
    Fail(std::isfinite(got) ? "value" : nonfinite_category,
         Str(where(), ": expected exactly 0, got ", F(got)));
  }
}

// The hot loops of the checks, as plain numeric helpers compiled without
// sanitizers or coverage: the checks cost several times the calls under
// test otherwise. Their callers (instrumented) compute the pointers.
#define MHA_FUZZ_PLAIN \
  __attribute__((no_sanitize("address", "undefined", "coverage")))

// sum |a_i b_i| and sum a_i b_i.
MHA_FUZZ_PLAIN double DotAbs(const float* a, const float* b, std::size_t n,
                             double* dot) {
  double sum = 0.0, abs_sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = double(a[i]) * b[i];
    sum += p;
    abs_sum += std::fabs(p);
  }
  *dot = sum;
  return abs_sum;
}
MHA_FUZZ_PLAIN double DotAbsD(const double* a, const double* b, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
// y += p |x| elementwise.
MHA_FUZZ_PLAIN void AxpyAbs(double p, const float* x, double* y,
                            std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += p * std::fabs(x[i]);
}
MHA_FUZZ_PLAIN void AxpyD(double p, const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += p * x[i];
}
MHA_FUZZ_PLAIN double MaxAbs(const float* x, std::size_t n) {
  double m = 0.0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(x[i])));
  return m;
}
// y[o] = |bias[o]| + sum_i |x[i]| |w[i][o]|, w row-major [in, out].
MHA_FUZZ_PLAIN void AbsProjectRow(const float* x, std::size_t in,
                                  const float* w, std::size_t out,
                                  const float* bias, double* y) {
  for (std::size_t o = 0; o < out; ++o) y[o] = bias ? std::fabs(bias[o]) : 0.0;
  for (std::size_t i = 0; i < in; ++i) {
    const double xi = std::fabs(x[i]);
    const float* wr = w + i * out;
    for (std::size_t o = 0; o < out; ++o) y[o] += xi * std::fabs(wr[o]);
  }
}
// sum_e m[e] |w[e][o]| for every o: y = |W|^T m, w row-major [d, d].
MHA_FUZZ_PLAIN void AbsTransposedTimes(const double* m, const float* w,
                                       std::size_t d, double* y) {
  for (std::size_t o = 0; o < d; ++o) y[o] = 0.0;
  for (std::size_t e = 0; e < d; ++e) {
    const float* wr = w + e * d;
    for (std::size_t o = 0; o < d; ++o) y[o] += m[e] * std::fabs(wr[o]);
  }
}

// Runs `call` on a one-thread arena: for the determinism check.
template <class Call>
void OnOneThread(Call&& call) {
  tbb::task_arena arena(1);
  arena.execute(call);
}

// ================================================================ attention

struct AttentionCase {
  mha::AttentionShape s{};
  std::size_t group = 1;
  View qv, kv, vv, ov;
  std::vector<float> q, k, v, out, weights, bias;
  std::vector<std::int32_t> lengths;
  mha::AttentionMask mask;
  float scale = 0.0f;
  bool with_weights = false;
};

void RunAttention(AttentionCase& c, float* out, float* weights) {
  mha::attention(c.s, c.q.empty() ? nullptr : c.q.data(), c.qv.layout,
                 c.k.empty() ? nullptr : c.k.data(), c.kv.layout,
                 c.v.empty() ? nullptr : c.v.data(), c.vv.layout, out,
                 c.ov.layout, c.mask, c.scale, weights);
}

void CheckAttention(const AttentionCase& c) {
  const mha::AttentionShape& s = c.s;
  const std::size_t Q = s.q_len, K = s.kv_len, D = s.head_dim;
  const double scale = c.scale == 0.0f ? 1.0 / std::sqrt(double(D)) : c.scale;
  // Outside the view: never written.
  std::vector<char> in_view(c.out.size(), 0);
  c.ov.ForEach([&](std::size_t, std::size_t, std::size_t, std::size_t,
                   std::size_t at) { in_view[at] = 1; });
  for (std::size_t i = 0; i < c.out.size(); ++i) {
    if (!in_view[i] && !IsSentinel(c.out[i]))
      Fail("other", Str("attention wrote out[", i,
                        "] outside the out view (padding): ", F(c.out[i])));
  }
  // The reference on sanitized data (NaN/Inf -> 0; a bias of -inf stays):
  // exact for every output that no NaN/Inf reaches.
  const std::vector<float> qs = Sanitized(c.q), ks = Sanitized(c.k),
                           vs = Sanitized(c.v);
  std::vector<float> bias_s = c.bias;
  for (float& x : bias_s)
    if (std::isnan(x) || x == kInf) x = 0.0f;
  mha::AttentionMask mask_s = c.mask;
  if (c.mask.bias) mask_s.bias = bias_s.data();
  const mha_test::ReferenceAttentionResult ref = mha_test::ReferenceAttention(
      s, qs.data(), c.qv.layout, ks.data(), c.kv.layout, vs.data(), c.vv.layout,
      mask_s, scale);

  // NaN/Inf in each key's K and V row.
  std::vector<char> k_bad(s.batch * s.num_kv_heads * K),
      v_bad_key(k_bad.size());
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t g = 0; g < s.num_kv_heads; ++g)
      for (std::size_t j = 0; j < K; ++j) {
        const std::size_t key = (b * s.num_kv_heads + g) * K + j;
        k_bad[key] = AnyNonFinite(c.k.data() + c.kv.At(b, g, j, 0), D);
        v_bad_key[key] = AnyNonFinite(c.v.data() + c.vv.At(b, g, j, 0), D);
      }
  std::vector<char> vis, v_bad;
  std::vector<double> magnitude;
  for (std::size_t b = 0; b < s.batch; ++b) {
    for (std::size_t h = 0; h < s.num_heads; ++h) {
      const std::size_t g = h / c.group;
      for (std::size_t i = 0; i < Q; ++i) {
        const std::size_t row = (b * s.num_heads + h) * Q + i;
        auto where_row = [&] {
          return Str("row (b ", b, ", h ", h, ", i ", i, ")");
        };
        const float* qrow = c.q.data() + c.qv.At(b, h, i, 0);
        const bool q_bad = AnyNonFinite(qrow, D);
        std::size_t visible = 0;
        // NaN/Inf in the q row, a visible key's K, or a NaN/+inf bias of a
        // visible key: the row's logits, so its output and weights, are NaN.
        bool logit_nan = q_bad, poison = false;
        double l_max = 0.0, b_max = 0.0, l_exact = 0.0, v_max = 0.0;
        vis.assign(K, 0);
        v_bad.assign(D, 0);
        magnitude.assign(D, 0.0);  // sum of p |v| per column
        for (std::size_t j = 0; j < K; ++j) {
          const long long last = static_cast<long long>(i) +
                                 static_cast<long long>(K) -
                                 static_cast<long long>(Q);
          const float bias = c.mask.bias ? c.bias[i * K + j] : 0.0f;
          vis[j] = !(c.mask.causal && static_cast<long long>(j) > last) &&
                   !(c.mask.kv_lengths && j >= std::size_t(c.lengths[b])) &&
                   bias != -kInf;
          const std::size_t key = (b * s.num_kv_heads + g) * K + j;
          if (!vis[j]) {
            poison = poison || k_bad[key] || v_bad_key[key];
            continue;
          }
          ++visible;
          logit_nan =
              logit_nan || k_bad[key] || std::isnan(bias) || bias == kInf;
          const float* vsrow = vs.data() + c.vv.At(b, g, j, 0);
          if (v_bad_key[key]) {
            const float* vrow = c.v.data() + c.vv.At(b, g, j, 0);
            for (std::size_t e = 0; e < D; ++e)
              if (!std::isfinite(vrow[e])) v_bad[e] = 1;
          }
          v_max = std::max(v_max, MaxAbs(vsrow, D));
          // Sum of p |v| per column, for the bounds.
          AxpyAbs(ref.weights[row * K + j], vsrow, magnitude.data(), D);
          double dot = 0.0;
          const double dot_abs =
              DotAbs(qs.data() + c.qv.At(b, h, i, 0),
                     ks.data() + c.kv.At(b, g, j, 0), D, &dot);
          l_max = std::max(l_max, std::fabs(scale) * dot_abs);
          const double bias_s = std::isfinite(bias) ? bias : 0.0;
          l_exact = std::max(l_exact, std::fabs(scale * dot + bias_s));
          b_max = std::max(b_max, std::fabs(bias_s));
        }
        // Error of a logit, then relative error of a probability and of a
        // sum of |p v| (attention.h: about (head_dim + kv_len) * 2^-23).
        const double e_logit = kEps * ((D + 6) * l_max + 2 * b_max);
        const double rel_p = (K + 8) * kEps + 2 * e_logit;
        const double rel_out = 2 * (D + K + 8) * kEps + 2 * e_logit;
        // attention.h: within about (head_dim + 64 + 4 L) * 2^-23 relative
        // to max |v| over the keys the row sees; L the largest |logit|.
        const double documented = 2 * (D + 64 + 4 * l_exact) * 2 * kEps * v_max;
        const float* const weights_row =
            c.with_weights ? c.weights.data() + row * K : nullptr;
        auto out_at = [&](std::size_t e) { return c.out[c.ov.At(b, h, i, e)]; };
        if (visible == 0) {  // sees no key: zeros, whatever the data
          for (std::size_t e = 0; e < D; ++e)
            ExpectZero(out_at(e), "hidden", [&] {
              return Str(where_row(), " sees no key; out[", e, "]");
            });
          for (std::size_t j = 0; weights_row && j < K; ++j)
            ExpectZero(weights_row[j], "hidden", [&] {
              return Str(where_row(), " sees no key; weights[", j, "]");
            });
          continue;
        }
        for (std::size_t j = 0; weights_row && j < K; ++j) {
          if (!vis[j]) {  // API.md: weights of hidden keys are exactly 0
            ExpectZero(
                weights_row[j], logit_nan ? "hiddenweight" : "hidden",
                [&] { return Str(where_row(), ": weight of hidden key ", j); });
          } else if (logit_nan) {
            ExpectNonFinite(
                weights_row[j],
                [&] { return Str(where_row(), ": weights[", j, "]"); },
                "NaN/Inf in q row, a visible key's K or the bias");
          } else {
            const double p = ref.weights[row * K + j];
            ExpectClose(weights_row[j], p, kSafety * rel_p * p + kTiny, poison,
                        [&] { return Str(where_row(), ": weights[", j, "]"); });
          }
        }
        for (std::size_t e = 0; e < D; ++e) {
          auto where = [&] { return Str(where_row(), ": out[", e, "]"); };
          if (logit_nan) {
            ExpectNonFinite(out_at(e), where,
                            q_bad ? "NaN/Inf in the query row"
                                  : "NaN/Inf in a visible key's K or the bias");
          } else if (v_bad[e]) {
            ExpectNonFinite(out_at(e), where, "NaN/Inf in a visible key's V");
          } else {
            ExpectClose(
                out_at(e), ref.out[row * D + e],
                std::max(kSafety * rel_out * magnitude[e], documented) + kTiny,
                poison, where);
          }
        }
      }
    }
  }
}

void FuzzAttention(Reader& in) {
  const std::string target = ApplyTarget(in.U8());
  std::uint8_t flags = in.U8();
  const int invalid = InvalidKind(in.U8(), 16);
  const std::uint8_t invalid_arg = in.U8();
  AttentionCase c;
  mha::AttentionShape& s = c.s;
  s.batch = BatchFrom(in.U8());
  s.num_kv_heads = 1 + in.U8() % 3;
  s.num_heads = s.num_kv_heads * (1 + in.U8() % 4);
  s.q_len = QLenFrom(in.U8());
  s.kv_len = KvLenFrom(in.U16());
  s.head_dim = HeadDimFrom(in.U8());
  const std::uint8_t lq = in.U8(), lk = in.U8(), lv = in.U8(), lo = in.U8();
  static const float kScales[] = {0.5f,  1.0f,       0.125f, 2.0f, -0.5f, 0.01f,
                                  10.0f, 0.0883883f, 1e-4f,  3.7f, -1.0f, 0.25f,
                                  1.5f,  40.0f,      0.3f,   0.7f};
  const std::uint8_t scale_byte = in.U8();
  c.scale = scale_byte < 128 ? 0.0f : kScales[scale_byte % 16];
  const std::uint8_t value_kind = in.U8();
  Rng rng(in.U32());
  const float pad_value = PadValueFrom(in.U8());
  const std::uint8_t lengths_mode = in.U8(), bias_mode = in.U8();
  if (invalid) {  // a call with work to do, so that the range rules apply
    s.batch = std::max<std::size_t>(s.batch, 1);
    s.q_len = std::max<std::size_t>(s.q_len, 1);
    if (invalid == 6 || invalid == 7 || invalid >= 12)
      s.kv_len = std::max<std::size_t>(s.kv_len, 1);
    if (invalid == 14) flags |= 1;  // with weights
    if (invalid == 15) flags |= 8;  // with a bias
  }
  c.with_weights = flags & 1;
  c.mask.causal = flags & 2;
  // Keep one execution cheap: the double reference costs this many MACs.
  auto work = [&] {
    return s.batch * s.num_heads * s.q_len * (s.kv_len + 1) * s.head_dim;
  };
  while (work() > 30000) {
    if (s.q_len > 1)
      s.q_len = (s.q_len + 1) / 2;
    else if (s.num_heads > s.num_kv_heads)
      s.num_heads = s.num_kv_heads;
    else if (s.batch > 1)
      s.batch = 1;
    else if (s.num_kv_heads > 1)
      s.num_heads = s.num_kv_heads = 1;
    else if (s.head_dim > 16)
      s.head_dim = (s.head_dim + 1) / 2;
    else
      s.kv_len /= 2;
  }
  c.group = s.num_heads / s.num_kv_heads;
  const std::size_t B = s.batch, H = s.num_heads, G = s.num_kv_heads,
                    Q = s.q_len, K = s.kv_len, D = s.head_dim;
  Phase* setup_phase = new Phase("attention setup");
  c.qv = MakeView(lq, B, H, Q, D, false);
  c.kv = MakeView(lk, B, G, K, D, true);
  c.vv = MakeView(lv, B, G, K, D, true);
  c.ov = MakeView(lo, B, H, Q, D, false);
  Values qk_values(rng, value_kind), v_values(rng, value_kind >> 3);
  c.q = FillView(c.qv, pad_value, qk_values);
  c.k = FillView(c.kv, pad_value, qk_values);
  c.v = FillView(c.vv, pad_value, v_values);
  c.out.assign(c.ov.Extent(), Sentinel());
  if (c.with_weights) c.weights.assign(B * H * Q * K, Sentinel());
  // Masks.
  if (flags & 4) {
    c.lengths.resize(B);
    for (std::size_t b = 0; b < B; ++b) {
      std::size_t len = K;
      switch (lengths_mode & 3) {
        case 1:
          len = rng() % (K + 1);
          break;
        case 2:
          len = b == 0 ? 0 : rng() % (K + 1);
          break;
        case 3:
          len = K - std::min<std::size_t>(K, rng() % 3);
          break;
      }
      c.lengths[b] = static_cast<std::int32_t>(len);
    }
    c.mask.kv_lengths = c.lengths.data();
  }
  if (flags & 8) {
    static const float kBiasRange[] = {2.0f, 20.0f, 0.0f, 0.1f};
    const float range = kBiasRange[(bias_mode >> 2) & 3];
    c.bias.resize(Q * K);
    const Uniform unit(-1.0f, 1.0f);
    for (std::size_t i = 0; i < Q; ++i) {
      const bool row_hidden = (bias_mode & 3) == 3 && rng() % 4 == 0;
      for (std::size_t j = 0; j < K; ++j) {
        float x = range * unit(rng);
        if (row_hidden || ((bias_mode & 3) == 1 && rng() % 10 == 0) ||
            ((bias_mode & 3) == 2 && rng() % 2 == 0))
          x = -kInf;
        c.bias[i * K + j] = x;
      }
    }
    if (!c.bias.empty()) c.mask.bias = c.bias.data();
  }
  // NaN/Inf placements: [kind, arg, position (u16)] records.
  std::ostringstream placed;
  const int placements = in.U8() % 9;
  for (int p = 0; p < placements; ++p) {
    const std::uint8_t kind = in.U8() % 16, arg = in.U8();
    const std::uint16_t pos = in.U16();
    const float inf = arg & 1 ? -kInf : kInf;
    auto element = [&](const View& v, std::vector<float>& data, float x) {
      if (v.Count() == 0) return;
      std::size_t n = pos % v.Count();
      const std::size_t e = n % v.dim;
      n /= v.dim;
      const std::size_t t = n % v.tokens;
      n /= v.tokens;
      const std::size_t h = n % v.heads, b = n / v.heads;
      data[v.At(b, h, t, e)] = x;
      placed << " [" << F(x) << " at (" << b << "," << h << "," << t << "," << e
             << ")]";
    };
    auto whole_row = [&](const View& v, std::vector<float>& data, float x,
                         const char* name) {
      if (v.Count() == 0) return;
      const std::size_t r = pos % (v.batch * v.heads * v.tokens);
      const std::size_t t = r % v.tokens, h = (r / v.tokens) % v.heads,
                        b = r / v.tokens / v.heads;
      for (std::size_t e = 0; e < v.dim; ++e) data[v.At(b, h, t, e)] = x;
      placed << " [" << name << " row (" << b << "," << h << "," << t
             << ") = " << F(x) << "]";
    };
    switch (kind) {
      case 0:
        placed << " q:";
        element(c.qv, c.q, kNaN);
        break;
      case 1:
        whole_row(c.qv, c.q, kNaN, "q");
        break;
      case 2:
        placed << " k:";
        element(c.kv, c.k, kNaN);
        break;
      case 3:
        placed << " k:";
        element(c.kv, c.k, inf);
        break;
      case 4:
        placed << " v:";
        element(c.vv, c.v, kNaN);
        break;
      case 5:
        placed << " v:";
        element(c.vv, c.v, inf);
        break;
      case 6:
        placed << " q:";
        element(c.qv, c.q, inf);
        break;
      case 7:
      case 8:
      case 9:
        if (!c.bias.empty()) {
          const float x = kind == 7 ? kNaN : kind == 8 ? kInf : -kInf;
          c.bias[pos % c.bias.size()] = x;
          placed << " [bias[" << pos % c.bias.size() << "] = " << F(x) << "]";
        }
        break;
      case 10:
        if (!c.bias.empty()) {
          const std::size_t i = pos % Q;
          for (std::size_t j = 0; j < K; ++j) c.bias[i * K + j] = -kInf;
          placed << " [bias row " << i << " = -inf]";
        }
        break;
      case 11: {  // NaN/Inf in a key that kv_lengths hides
        if (c.lengths.empty() || K == 0) break;
        const std::size_t b = pos % B;
        const std::size_t len = c.lengths[b];
        if (len >= K) break;
        const std::size_t j = len + (pos / B) % (K - len), g = arg % G;
        const std::size_t e = (arg >> 3) % D;
        const float x = arg & 2 ? kInf : kNaN;
        const bool in_v = arg & 4;
        (in_v ? c.v : c.k)[(in_v ? c.vv : c.kv).At(b, g, j, e)] = x;
        placed << " [" << (in_v ? "v" : "k") << " of hidden key (" << b << ","
               << g << "," << j << "," << e << ") = " << F(x) << "]";
        break;
      }
      case 12: {  // a -inf bias hides key j from row i; poison that key
        if (c.bias.empty()) break;
        const std::size_t i = pos % Q, j = (pos / Q) % K;
        c.bias[i * K + j] = -kInf;
        const float x = arg & 2 ? kInf : kNaN;
        const bool in_v = arg & 4;
        const std::size_t e = (arg >> 3) % D;
        for (std::size_t b = 0; b < B; ++b)
          for (std::size_t g = 0; g < G; ++g)
            (in_v ? c.v : c.k)[(in_v ? c.vv : c.kv).At(b, g, j, e)] = x;
        placed << " [bias (" << i << "," << j << ") = -inf, "
               << (in_v ? "v" : "k") << "[*,*," << j << "," << e
               << "] = " << F(x) << "]";
        break;
      }
      case 13:
        whole_row(c.vv, c.v, kNaN, "v");
        break;
      case 14:
        whole_row(c.kv, c.k, kNaN, "k");
        break;
      default:
        break;
    }
  }
  g_case = Str("attention target ", target, " shape {batch ", B, ", heads ", H,
               ", kv_heads ", G, ", q_len ", Q, ", kv_len ", K, ", head_dim ",
               D, "} layouts q", c.qv.Describe(), " k", c.kv.Describe(), " v",
               c.vv.Describe(), " out", c.ov.Describe(), " causal ",
               c.mask.causal, " kv_lengths ");
  for (std::int32_t x : c.lengths) g_case += Str(x, " ");
  g_case +=
      Str(c.mask.kv_lengths ? "" : "none", " bias ",
          c.mask.bias ? Str("mode ", int(bias_mode)) : "none", " scale ",
          F(c.scale), " weights ", c.with_weights, " padding ", F(pad_value),
          " values ", int(value_kind), " placements:", placed.str());

  const Snapshot q0(c.q, "q"), k0(c.k, "k"), v0(c.v, "v"),
      bias0(c.bias, "bias");
  delete setup_phase;
  if (invalid) {
    AttentionCase bad = c;
    std::vector<float> dummy(64, 1.0f);
    const char* category = "other";
    std::string what;
    float* weights = bad.with_weights ? bad.weights.data() : nullptr;
    float* out = bad.out.data();
    switch (invalid) {
      case 1:
        bad.s.num_heads = 0;
        what = "num_heads 0";
        break;
      case 2:
        bad.s.num_kv_heads = 0;
        what = "num_kv_heads 0";
        break;
      case 3:
        bad.s.head_dim = 0;
        what = "head_dim 0";
        break;
      case 4:
        bad.s.num_kv_heads = bad.s.num_heads + 1;
        what = "num_kv_heads not dividing num_heads";
        break;
      case 5:
        bad.q.clear();
        what = "null q";
        break;
      case 6:
        bad.k.clear();
        what = "null k";
        break;
      case 7:
        bad.v.clear();
        what = "null v";
        break;
      case 8:
        out = nullptr;
        what = "null out";
        break;
      case 9: {
        bad.lengths.assign(B, static_cast<std::int32_t>(K));
        bad.lengths[invalid_arg % B] =
            invalid_arg & 0x80
                ? -1 - (invalid_arg & 3)
                : static_cast<std::int32_t>(K + 1 + (invalid_arg & 3));
        bad.mask.kv_lengths = bad.lengths.data();
        what = Str("kv_lengths[", invalid_arg % B,
                   "] = ", bad.lengths[invalid_arg % B]);
        break;
      }
      case 10: {
        static const float kBad[] = {kNaN, kInf, -kInf};
        bad.scale = kBad[invalid_arg % 3];
        category = "scale";
        what = Str("scale ", F(bad.scale));
        break;
      }
      case 11: {  // out overlaps q: both in one buffer
        category = "alias";
        const std::size_t offset = (invalid_arg * c.q.size()) / 256;
        bad.q.resize(std::max(c.q.size(), offset + c.out.size()), 1.0f);
        bad.ov = c.qv;  // out has q's shape
        out = bad.q.data() + offset;
        what = Str("out = q + ", offset, " (overlapping q)");
        break;
      }
      case 12: {  // weights (or out) overlaps v
        category = "alias";
        const std::size_t offset = (invalid_arg * c.v.size()) / 256;
        if (invalid_arg & 1) {
          const std::size_t count = B * H * Q * K;
          bad.v.resize(std::max(c.v.size(), offset + count), 1.0f);
          weights = bad.v.data() + offset;
          what = Str("weights = v + ", offset, " (overlapping v)");
        } else {
          bad.v.resize(std::max(c.v.size(), offset + c.out.size()), 1.0f);
          out = bad.v.data() + offset;
          what = Str("out = v + ", offset, " (overlapping v)");
        }
        break;
      }
      case 13: {  // an extent that overflows size_t
        category = "overflow";
        if (Tolerated(category)) return;
        bad.mask = {};
        bad.q = bad.k = bad.v = dummy;
        bad.with_weights = false;
        weights = nullptr;
        const std::size_t half = std::size_t{1} << 63;
        bad.qv.layout = bad.kv.layout = bad.vv.layout =
            bad.ov.layout = {16, 16, 4};
        switch (invalid_arg % 3) {
          case 0:  // (batch - 1) * q_layout.batch = 2^64
            bad.s = {3, 1, 1, 1, 1, 4};
            bad.qv.layout = {half, 4, 4};
            break;
          case 1:  // weights: q_len * kv_len = 2^64
            bad.s = {1, 1, 1, std::size_t{1} << 32, std::size_t{1} << 32, 1};
            bad.qv.layout = bad.kv.layout = bad.vv.layout =
                bad.ov.layout = {0, 0, 1};
            weights = dummy.data();
            break;
          default:  // out: (q_len - 1) * token stride = 2^64
            bad.s = {1, 1, 1, 3, 1, 4};
            bad.ov.layout = {0, 0, half};
            break;
        }
        if (bad.out.size() < 64) bad.out.resize(64, Sentinel());
        out = bad.out.data();
        what = Str("overflowing extent, variant ", invalid_arg % 3);
        break;
      }
      case 14: {  // weights overlaps out
        category = "alias";
        const std::size_t offset = (invalid_arg * c.out.size()) / 256;
        bad.out.resize(std::max(c.out.size(), offset + c.weights.size()),
                       Sentinel());
        out = bad.out.data();
        weights = bad.out.data() + offset;
        what = Str("weights = out + ", offset, " (overlapping)");
        break;
      }
      case 15: {  // out overlaps the bias
        category = "alias";
        const std::size_t offset = (invalid_arg * c.bias.size()) / 256;
        bad.bias.resize(std::max(c.bias.size(), offset + c.out.size()), 0.0f);
        bad.mask.bias = bad.bias.data();
        out = bad.bias.data() + offset;
        what = Str("out = mask.bias + ", offset, " (overlapping)");
        break;
      }
      case 16: {  // out's rows over one another: a stride below head_dim
        category = "alias";
        // The dimensions of more than one row, from invalid_arg's on.
        std::size_t* strides[] = {&bad.ov.layout.batch, &bad.ov.layout.head,
                                  &bad.ov.layout.token};
        const std::size_t counts[] = {B, H, Q};
        std::size_t dim = invalid_arg % 3;
        for (std::size_t tried = 0; tried < 3 && counts[dim] < 2; ++tried) {
          dim = (dim + 1) % 3;
        }
        if (counts[dim] < 2) return;  // one row: nothing can overlap
        // Shorter strides shrink the extent: out's buffer still holds it.
        *strides[dim] = invalid_arg / 3 % D;
        what = Str("out_layout ", bad.ov.Describe(), " (rows overlap)");
        break;
      }
    }
    if (Tolerated(category)) return;
    g_case += " | bad argument: " + what;
    const Snapshot out0(bad.out, "out"), weights0(bad.weights, "weights"),
        bq(bad.q, "q buffer"), bv(bad.v, "v buffer"),
        bb(bad.bias, "bias buffer");
    ExpectInvalid(category, "mha::attention with " + what,
                  [&] { RunAttention(bad, out, weights); });
    for (const Snapshot* snap : {&out0, &weights0, &bq, &bv, &bb})
      snap->ExpectUnchanged("mha::attention that threw");
    return;
  }

  {
    Phase phase("attention call");
    ExpectNoThrow("mha::attention", [&] {
      RunAttention(c, c.out.data(),
                   c.with_weights ? c.weights.data() : nullptr);
    });
  }
  for (const Snapshot* snap : {&q0, &k0, &v0, &bias0})
    snap->ExpectUnchanged("mha::attention (an input)");
  if (B * Q * K > 0) ExpectRanOn(target, "mha::attention");
  {
    Phase phase("attention check");
    CheckAttention(c);
  }
  if ((flags & 0x30) == 0x30) {  // bitwise the same on one thread
    Phase phase("attention determinism");
    AttentionCase one = c;
    std::fill(one.out.begin(), one.out.end(), Sentinel());
    std::fill(one.weights.begin(), one.weights.end(), Sentinel());
    OnOneThread([&] {
      RunAttention(one, one.out.data(),
                   one.with_weights ? one.weights.data() : nullptr);
    });
    if (!BitwiseEqual(one.out, c.out) || !BitwiseEqual(one.weights, c.weights))
      Fail("other", "attention differs between 1 thread and the default arena");
  }
}

// ================================================================ sgemm

void FuzzSgemm(Reader& in) {
  const std::string target = ApplyTarget(in.U8());
  const std::uint8_t flags = in.U8();
  const int invalid = InvalidKind(in.U8(), 10);
  const std::uint8_t invalid_arg = in.U8();
  std::size_t m = DimFrom(in.U8()), n = DimFrom(in.U8()), k = DimFrom(in.U8());
  const std::uint8_t pads = in.U8();
  static const float kAlphas[] = {1,      -1, 0.5f,  2,    0,  1.5f,
                                  -0.25f, 3,  1e-3f, 0.1f, -2, 7,
                                  0.7f,   -1, 1,     0.01f};
  static const float kBetas[] = {0, 1, -1, 0.5f, 2,  0.25f, -0.5f, 1e-3f,
                                 3, 0, 1,  0.1f, -2, 0.9f,  1,     0};
  const std::uint8_t alpha_byte = in.U8(), beta_byte = in.U8();
  const float alpha = alpha_byte < 64 ? 1.0f : kAlphas[alpha_byte % 16];
  const float beta = beta_byte < 64 ? 0.0f : kBetas[beta_byte % 16];
  const std::uint8_t value_kind = in.U8();
  Rng rng(in.U32());
  const float pad_value = PadValueFrom(in.U8());
  const bool ta = flags & 1, tb = flags & 2;
  if (invalid) {
    m = std::max<std::size_t>(m, 2);
    n = std::max<std::size_t>(n, 2);
    k = std::max<std::size_t>(k, 2);
  }
  while (m * n * k > 60000) {
    std::size_t& largest = m >= n && m >= k ? m : n >= k ? n : k;
    largest = (largest + 1) / 2;
  }
  // Storage: A is rows_a x cols_a with lda >= cols_a, likewise B; C is m x n.
  const std::size_t rows_a = ta ? k : m, cols_a = ta ? m : k;
  const std::size_t rows_b = tb ? n : k, cols_b = tb ? k : n;
  const std::size_t lda = cols_a + PadFrom(pads),
                    ldb = cols_b + PadFrom(pads >> 2),
                    ldc = n + PadFrom(pads >> 4);
  auto extent = [](std::size_t rows, std::size_t cols, std::size_t ld) {
    return rows * cols == 0 ? 0 : (rows - 1) * ld + cols;
  };
  Values values(rng, value_kind);
  auto fill = [&](std::size_t rows, std::size_t cols, std::size_t ld,
                  float pad) {
    std::vector<float> x(extent(rows, cols, ld), pad);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) x[r * ld + j] = values();
    return x;
  };
  std::vector<float> a = fill(rows_a, cols_a, lda, pad_value);
  std::vector<float> b = fill(rows_b, cols_b, ldb, pad_value);
  // With beta == 0, C is not read: its view holds NaN to prove it.
  std::vector<float> c = fill(m, n, ldc, Sentinel());
  if (beta == 0.0f)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = kNaN;
  auto a_at = [&](std::size_t i, std::size_t p) -> float& {
    return ta ? a[p * lda + i] : a[i * lda + p];
  };
  auto b_at = [&](std::size_t p, std::size_t j) -> float& {
    return tb ? b[j * ldb + p] : b[p * ldb + j];
  };
  std::ostringstream placed;
  const int placements = in.U8() % 7;
  for (int p = 0; p < placements; ++p) {
    const std::uint8_t kind = in.U8() % 8, arg = in.U8();
    const std::uint16_t pos = in.U16();
    const float x = arg & 1 ? (arg & 2 ? -kInf : kInf) : kNaN;
    if (kind <= 1 && m * k > 0) {
      a_at(pos % m, (pos / m) % k) = x;
      placed << " [op(A)(" << pos % m << "," << (pos / m) % k << ") = " << F(x)
             << "]";
    } else if (kind <= 3 && k * n > 0) {
      b_at(pos % k, (pos / k) % n) = x;
      placed << " [op(B)(" << pos % k << "," << (pos / k) % n << ") = " << F(x)
             << "]";
    } else if (kind <= 5 && m * n > 0 && beta != 0.0f) {
      c[(pos % m) * ldc + (pos / m) % n] = x;
      placed << " [C(" << pos % m << "," << (pos / m) % n << ") = " << F(x)
             << "]";
    }
  }
  g_case =
      Str("sgemm target ", target, " trans_a ", ta, " trans_b ", tb, " m ", m,
          " n ", n, " k ", k, " alpha ", F(alpha), " lda ", lda, " ldb ", ldb,
          " beta ", F(beta), " ldc ", ldc, " padding ", F(pad_value),
          " values ", int(value_kind), " placements:", placed.str());
  const mha::Transpose tra = ta ? mha::Transpose::Yes : mha::Transpose::No;
  const mha::Transpose trb = tb ? mha::Transpose::Yes : mha::Transpose::No;
  auto data = [](std::vector<float>& v) {
    return v.empty() ? nullptr : v.data();
  };
  const Snapshot a0(a, "a"), b0(b, "b"), c0(c, "c");

  if (invalid) {
    const char* category = "other";
    std::string what;
    std::vector<float> ab = a, bb = b, cb = c;
    const float *pa = data(ab), *pb = data(bb);
    float* pc = data(cb);
    std::size_t la = lda, lb = ldb, lc = ldc, mm = m, nn = n, kk = k;
    mha::Transpose bad_ta = tra, bad_tb = trb;
    std::vector<float> shared;
    switch (invalid) {
      case 1:
        la = cols_a - 1;
        what = "lda too small";
        break;
      case 2:
        lb = cols_b - 1;
        what = "ldb too small";
        break;
      case 3:
        lc = n - 1;
        what = "ldc too small";
        break;
      case 4:
        pa = nullptr;
        what = "null a";
        break;
      case 5:
        pb = nullptr;
        what = "null b";
        break;
      case 6:
        pc = nullptr;
        what = "null c";
        break;
      case 7:
      case 8: {  // C overlaps A (or B): both in one buffer
        category = "alias";
        const std::vector<float>& in_data = invalid == 7 ? a : b;
        const std::size_t offset = (invalid_arg * in_data.size()) / 256;
        shared = in_data;
        shared.resize(std::max(in_data.size(), offset + c.size()), 1.0f);
        (invalid == 7 ? pa : pb) = shared.data();
        pc = shared.data() + offset;
        what = Str("c = ", invalid == 7 ? "a" : "b", " + ", offset,
                   " (overlapping)");
        break;
      }
      case 9:  // (m - 1) * lda + k wraps: m = 2^62 + 1, lda = 4, k = 1
        category = "overflow";
        bad_ta = bad_tb = mha::Transpose::No;
        mm = (std::size_t{1} << 62) + 1, nn = 1, kk = 1, la = 4, lb = 1, lc = 1;
        what = "m = 2^62 + 1 with lda = 4 (A's extent overflows)";
        break;
      default:  // (m - 1) * ldc = 2^64
        category = "overflow";
        bad_ta = bad_tb = mha::Transpose::No;
        mm = 3, nn = 1, kk = 1, la = 1, lb = 1, lc = std::size_t{1} << 63;
        what = "m = 3 with ldc = 2^63 (C's extent overflows)";
        break;
    }
    if (Tolerated(category)) return;
    if (invalid == 9 || invalid == 10) {  // on the existing buffers
      pa = data(ab), pb = data(bb), pc = data(cb);
    }
    g_case += " | bad argument: " + what;
    const Snapshot c1(cb, "c"), s1(shared, "shared a/b/c buffer");
    ExpectInvalid(category, "mha::sgemm with " + what, [&] {
      mha::sgemm(bad_ta, bad_tb, mm, nn, kk, alpha, pa, la, pb, lb, beta, pc,
                 lc);
    });
    c1.ExpectUnchanged("mha::sgemm that threw");
    s1.ExpectUnchanged("mha::sgemm that threw");
    return;
  }

  ExpectNoThrow("mha::sgemm", [&] {
    mha::sgemm(tra, trb, m, n, k, alpha, data(a), lda, data(b), ldb, beta,
               data(c), ldc);
  });
  a0.ExpectUnchanged("mha::sgemm (input a)");
  b0.ExpectUnchanged("mha::sgemm (input b)");
  if (m * n > 0) ExpectRanOn(target, "mha::sgemm");
  // Padding of C: never written.
  for (std::size_t i = 0; n > 0 && i + 1 < m; ++i)
    for (std::size_t j = n; j < ldc; ++j)
      if (!IsSentinel(c[i * ldc + j]))
        Fail("other", Str("sgemm wrote C padding (", i, ",", j, ")"));
  // Reach of NaN/Inf: a non-finite element in row i of op(A) or column j of
  // op(B) makes C(i, j) non-finite; so does one in C when beta != 0.
  std::vector<char> row_bad(m, 0), col_bad(n, 0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p)
      if (!std::isfinite(a_at(i, p))) row_bad[i] = 1;
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t p = 0; p < k; ++p)
      if (!std::isfinite(b_at(p, j))) col_bad[j] = 1;
  std::vector<float> as = Sanitized(a), bs = Sanitized(b),
                     cs = Sanitized(c0.copy);
  const std::vector<double> want =
      mha_test::ReferenceGemm(ta, tb, m, n, k, alpha, data(as), lda, data(bs),
                              ldb, beta, data(cs), ldc);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const float got = c[i * ldc + j], before = c0.copy[i * ldc + j];
      auto where = [&] { return Str("C(", i, ",", j, ")"); };
      const bool ab_bad = k > 0 && (row_bad[i] || col_bad[j]);
      const bool c_bad = beta != 0.0f && !std::isfinite(before);
      if (c_bad || (ab_bad && alpha != 0.0f)) {
        ExpectNonFinite(got, where,
                        c_bad
                            ? "NaN/Inf in C with beta != 0"
                            : "NaN/Inf in its row of op(A) or column of op(B)");
        continue;
      }
      if (ab_bad && !std::isfinite(got)) continue;  // alpha == 0: either way
      double magnitude = 0.0;
      for (std::size_t p = 0; p < k; ++p)
        magnitude += std::fabs(double(as[ta ? p * lda + i : i * lda + p]) *
                               bs[tb ? j * ldb + p : p * ldb + j]);
      const double c_term =
          beta != 0.0f ? std::fabs(double(beta) * cs[i * ldc + j]) : 0.0;
      const double bound =
          kSafety * ((k + 2) * kEps * std::fabs(alpha) * magnitude +
                     2 * kEps * c_term) +
          kTiny;
      ExpectClose(got, want[i * n + j], bound, false, where);
    }
  }
  if ((flags & 0xC) == 0xC) {  // bitwise the same on one thread
    std::vector<float> one = c0.copy;
    OnOneThread([&] {
      mha::sgemm(tra, trb, m, n, k, alpha, data(a), lda, data(b), ldb, beta,
                 data(one), ldc);
    });
    if (!BitwiseEqual(one, c))
      Fail("other", "sgemm differs between 1 thread and the default arena");
  }
}

// ================================================================ softmax

void FuzzSoftmax(Reader& in) {
  const std::string target = ApplyTarget(in.U8());
  const std::uint8_t flags = in.U8();
  const int invalid = InvalidKind(in.U8(), 9);
  const std::uint8_t invalid_arg = in.U8();
  std::size_t rows = DimFrom(in.U8());
  std::size_t cols = KvLenFrom(in.U16());
  const std::uint8_t pads = in.U8();
  static const float kScales[] = {0.5f, 2,     0.125f, 10,   1e-3f, 0.0883883f,
                                  3,    1,     0.7f,   1.3f, 100,   0.01f,
                                  4,    0.25f, 1e-6f,  8};
  const std::uint8_t scale_byte = in.U8();
  const float scale = scale_byte < 128 ? 1.0f : kScales[scale_byte % 16];
  const std::uint8_t value_kind = in.U8();
  Rng rng(in.U32());
  const float pad_value = PadValueFrom(in.U8());
  const bool in_place = flags & 1;
  if (invalid) {
    rows = std::max<std::size_t>(rows, 2);
    cols = std::max<std::size_t>(cols, 2);
  }
  while (rows * cols > 20000) rows = (rows + 1) / 2;
  const std::size_t ldx = cols + PadFrom(pads),
                    ldy = in_place ? ldx : cols + PadFrom(pads >> 2);
  const std::size_t ex = rows * cols == 0 ? 0 : (rows - 1) * ldx + cols;
  const std::size_t ey = rows * cols == 0 ? 0 : (rows - 1) * ldy + cols;
  static const float kMagnitudes[] = {1, 10, 100, 1e4f, 3, 0.01f, 30, 1};
  const float magnitude = kMagnitudes[(value_kind >> 4) & 7];
  Values values(rng, value_kind);
  std::vector<float> x(ex, in_place ? Sentinel() : pad_value);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j)
      x[r * ldx + j] = magnitude * values();
  std::ostringstream placed;
  const int placements = in.U8() % 7;
  for (int p = 0; p < placements && rows * cols > 0; ++p) {
    const std::uint8_t kind = in.U8() % 8, arg = in.U8();
    const std::uint16_t pos = in.U16();
    const std::size_t r = pos % rows, j = (pos / rows) % cols;
    (void)arg;
    switch (kind) {
      case 0:
      case 1:
        x[r * ldx + j] = -kInf;
        placed << " [x(" << r << "," << j << ") = -inf]";
        break;
      case 2:
        for (std::size_t e = 0; e < cols; ++e) x[r * ldx + e] = -kInf;
        placed << " [row " << r << " all -inf]";
        break;
      case 3:
        x[r * ldx + j] = kNaN;
        placed << " [x(" << r << "," << j << ") = nan]";
        break;
      case 4:
        x[r * ldx + j] = kInf;
        placed << " [x(" << r << "," << j << ") = inf]";
        break;
      default:
        break;
    }
  }
  std::vector<float> y(in_place ? 0 : ey, Sentinel());
  g_case = Str("softmax target ", target, " rows ", rows, " cols ", cols,
               " ldx ", ldx, " ldy ", ldy, in_place ? " in place" : "",
               " scale ", F(scale), " values ", int(value_kind), " padding ",
               F(pad_value), " placements:", placed.str());
  const Snapshot x0(x, "x");
  float* out = in_place ? x.data() : y.data();
  if (invalid) {
    const char* category = "other";
    std::string what;
    std::vector<float> xb = x, yb = in_place ? std::vector<float>() : y;
    const float* px = xb.data();
    float* py = in_place ? xb.data() : yb.data();
    std::size_t lx = ldx, ly = ldy, rr = rows;
    float sc = scale;
    bool must_throw = true;
    switch (invalid) {
      case 1:
        lx = cols - 1;
        what = "ldx too small";
        break;
      case 2:
        ly = cols - 1;
        what = "ldy too small";
        break;
      case 3:
        px = nullptr;
        what = "null x";
        break;
      case 4:
        py = nullptr;
        what = "null y";
        break;
      case 5:  // in place with ldy != ldx
        xb.resize(xb.size() + rows, 1.0f);
        px = py = xb.data();
        ly = ldx + 1;
        what = "y == x with ldy = ldx + 1";
        break;
      case 6:
        category = "overflow";
        rr = 3, lx = std::size_t{1} << 63;
        what = "rows = 3 with ldx = 2^63 (x's extent overflows)";
        break;
      case 7: {  // softmax.h: scale must be finite
        static const float kBad[] = {kNaN, kInf, -kInf};
        sc = kBad[invalid_arg % 3];
        category = "scale";
        what = Str("scale ", F(sc));
        break;
      }
      case 8: {  // finite but not positive: may throw, need not
        static const float kOdd[] = {0.0f, -1.0f, -0.5f};
        sc = kOdd[invalid_arg % 3];
        must_throw = false;
        what = Str("scale ", F(sc));
        break;
      }
      default: {  // y overlaps x other than in place
        category = "alias";
        const std::size_t offset = 1 + (invalid_arg * (ex - 1)) / 256;
        xb.resize(std::max(ex, offset + ey), 1.0f);
        px = xb.data();
        py = xb.data() + offset;
        yb.clear();
        what = Str("y = x + ", offset, " (overlapping, not in place)");
        break;
      }
    }
    if (Tolerated(category)) return;
    g_case += " | bad argument: " + what;
    const Snapshot x1(xb, "x"), y1(yb, "y");
    if (must_throw) {
      ExpectInvalid(category, "mha::softmax with " + what,
                    [&] { mha::softmax(px, lx, py, ly, rr, cols, sc); });
      x1.ExpectUnchanged("mha::softmax that threw");
      y1.ExpectUnchanged("mha::softmax that threw");
    } else {
      if (g_verbose) PrintCase();
      try {
        mha::softmax(px, lx, py, ly, rr, cols, sc);
      } catch (const std::invalid_argument&) {
        x1.ExpectUnchanged("mha::softmax that threw");
        y1.ExpectUnchanged("mha::softmax that threw");
      } catch (...) {
        Fail("other",
             "mha::softmax with " + what + " threw a non-invalid_argument");
      }
    }
    return;
  }
  ExpectNoThrow("mha::softmax", [&] {
    mha::softmax(x.empty() ? nullptr : x.data(), ldx,
                 out == nullptr || ey == 0 ? nullptr : out, ldy, rows, cols,
                 scale);
  });
  if (!in_place) x0.ExpectUnchanged("mha::softmax (input x)");
  if (rows * cols > 0) ExpectRanOn(target, "mha::softmax");
  const std::vector<float>& ybuf = in_place ? x : y;
  for (std::size_t r = 0; cols > 0 && r + 1 < rows; ++r)
    for (std::size_t j = cols; j < ldy; ++j)
      if (!IsSentinel(ybuf[r * ldy + j]))
        Fail("other", Str("softmax wrote y padding (", r, ",", j, ")"));
  const std::vector<double> want =
      mha_test::ReferenceSoftmax(x0.copy.data(), ldx, rows, cols, scale);
  for (std::size_t r = 0; cols > 0 && r < rows; ++r) {
    const float* xr = x0.copy.data() + r * ldx;
    bool row_nan = false;
    double l_max = 0.0;
    for (std::size_t j = 0; j < cols; ++j) {
      if (std::isnan(xr[j]) || xr[j] == kInf) row_nan = true;
      if (std::isfinite(xr[j]))
        l_max = std::max(l_max, std::fabs(double(scale) * xr[j]));
    }
    if (row_nan) {  // softmax.h: a row holding NaN or +inf is all NaN
      for (std::size_t j = 0; j < cols; ++j)
        if (!std::isnan(ybuf[r * ldy + j]))
          Fail("nanprop", Str("y(", r, ",", j,
                              "): expected NaN (the row holds "
                              "NaN or +inf), got ",
                              F(ybuf[r * ldy + j])));
      continue;
    }
    const double rel = (cols + 8) * kEps + 8 * kEps * l_max;
    for (std::size_t j = 0; j < cols; ++j) {
      const float got = ybuf[r * ldy + j];
      auto where = [&] { return Str("y(", r, ",", j, ")"); };
      if (xr[j] == -kInf)
        ExpectZero(got, "value", [&] { return where() + " of a -inf entry"; });
      else
        ExpectClose(got, want[r * cols + j],
                    kSafety * rel * want[r * cols + j] + kTiny, false, where);
    }
  }
  if ((flags & 6) == 6 && !in_place) {  // bitwise the same on one thread
    std::vector<float> one(ey, Sentinel());
    OnOneThread([&] {
      mha::softmax(x.data(), ldx, one.data(), ldy, rows, cols, scale);
    });
    if (!BitwiseEqual(one, y))
      Fail("other", "softmax differs between 1 thread and the default arena");
  }
}

// ================================================================ the layer

struct Model {
  mha::MultiHeadAttentionConfig config;  // as given to the constructor
  std::size_t d = 0, heads = 0, kv_heads = 0, head_dim = 0, kv = 0, group = 1;
  bool bias = false;
  mha::WeightLayout layout = mha::WeightLayout::InOut;
  mha_test::ReferenceWeights w;  // [in, out]; may hold NaN/Inf
  std::vector<float> given_q, given_k, given_v, given_o;

  mha::MultiHeadAttentionConfig Resolved() const {
    mha::MultiHeadAttentionConfig c = config;
    c.num_kv_heads = kv_heads;
    return c;
  }
  static std::vector<float> InLayout(const std::vector<float>& m,
                                     std::size_t in, std::size_t out,
                                     mha::WeightLayout layout) {
    if (layout == mha::WeightLayout::InOut) return m;
    std::vector<float> t(m.size());
    for (std::size_t i = 0; i < in; ++i)
      for (std::size_t o = 0; o < out; ++o) t[o * in + i] = m[i * out + o];
    return t;
  }
  void MakeGiven() {
    given_q = InLayout(w.w_q, d, d, layout);
    given_k = InLayout(w.w_k, d, kv, layout);
    given_v = InLayout(w.w_v, d, kv, layout);
    given_o = InLayout(w.w_o, d, d, layout);
  }
  mha::MultiHeadAttentionWeights Given() const {
    mha::MultiHeadAttentionWeights g{given_q.data(), given_k.data(),
                                     given_v.data(), given_o.data()};
    if (bias) {
      g.b_q = w.b_q.data(), g.b_k = w.b_k.data(), g.b_v = w.b_v.data();
      g.b_o = w.b_o.data();
    }
    g.layout = layout;
    return g;
  }
  std::string Describe() const {
    return Str("config {d_model ", d, ", heads ", heads, ", kv_heads ",
               config.num_kv_heads, " (", kv_heads, "), bias ", bias, "} ",
               layout == mha::WeightLayout::InOut ? "InOut" : "OutIn");
  }
};

// Reads kv_heads, group, head_dim and the weights' scale; draws the weights.
Model DecodeModel(Reader& in, std::uint8_t flags, Rng& rng) {
  Model m;
  m.kv_heads = 1 + in.U8() % 3;
  m.group = 1 + in.U8() % 4;
  const std::uint8_t hd = in.U8();
  m.head_dim = 1 + (hd & 0x80 ? (hd & 0x7F) % 40 : hd % 12);
  const std::uint8_t scales = in.U8();
  while (m.kv_heads * m.group * m.head_dim > 72) {
    if (m.group > 1)
      --m.group;
    else if (m.kv_heads > 1)
      --m.kv_heads;
    else
      m.head_dim = 72;
  }
  m.heads = m.kv_heads * m.group;
  m.d = m.heads * m.head_dim;
  m.kv = m.kv_heads * m.head_dim;
  m.bias = flags & 1;
  m.layout = flags & 2 ? mha::WeightLayout::OutIn : mha::WeightLayout::InOut;
  m.config = {m.d, m.heads,
              (flags & 0x40) && m.kv_heads == m.heads ? 0 : m.kv_heads, m.bias};
  static const float kWeightScale[] = {1, 0.5f, 2, 4};
  const float range = kWeightScale[scales & 3] / std::sqrt(float(m.d));
  const Uniform unit(-1.0f, 1.0f);
  auto draw = [&](std::size_t count, float r) {
    std::vector<float> v(count);
    for (float& x : v) x = r * unit(rng);
    return v;
  };
  m.w.w_q = draw(m.d * m.d, range);
  m.w.w_k = draw(m.d * m.kv, range);
  m.w.w_v = draw(m.d * m.kv, range);
  m.w.w_o = draw(m.d * m.d, range);
  if (m.bias) {
    const float b = (scales >> 2) & 1 ? 0.1f : 1.0f;
    m.w.b_q = draw(m.d, b), m.w.b_k = draw(m.kv, b), m.w.b_v = draw(m.kv, b);
    m.w.b_o = draw(m.d, b);
  }
  return m;
}

// Places NaN/Inf in a weight: codes 6-10 of the layer placements.
void PlaceInWeights(Model& m, std::uint8_t kind, std::uint8_t arg,
                    std::uint16_t pos, std::ostringstream& placed) {
  const float x = arg & 1 ? kInf : kNaN;
  std::vector<float>* target = nullptr;
  const char* name = "";
  switch (kind) {
    case 6:
      target = &m.w.w_q, name = "w_q";
      break;
    case 7:
      target = &m.w.w_k, name = "w_k";
      break;
    case 8:
      target = &m.w.w_v, name = "w_v";
      break;
    case 9:
      target = &m.w.w_o, name = "w_o";
      break;
    case 10:
      if (!m.bias) return;
      switch ((arg >> 1) & 3) {
        case 0:
          target = &m.w.b_q, name = "b_q";
          break;
        case 1:
          target = &m.w.b_k, name = "b_k";
          break;
        case 2:
          target = &m.w.b_v, name = "b_v";
          break;
        default:
          target = &m.w.b_o, name = "b_o";
          break;
      }
      break;
    default:
      return;
  }
  const std::size_t at = pos % target->size();
  (*target)[at] = x;
  placed << " [" << name << "[" << at << "] (as [in, out]) = " << F(x) << "]";
}

struct LayerCall {
  const float *query, *key, *value;
  std::size_t batch, q_len, kv_len;
  mha::AttentionMask mask;
  std::vector<std::int32_t> lengths;
  std::vector<float> bias;
};

// Checks a layer's output (and attention weights) against ReferenceForward.
void CheckLayer(const Model& m, const LayerCall& x, const float* got,
                const float* got_weights, const std::string& what) {
  const std::size_t d = m.d, H = m.heads, hd = m.head_dim, kvd = m.kv;
  const std::size_t B = x.batch, Q = x.q_len, K = x.kv_len;
  const double scale = 1.0 / std::sqrt(double(hd));
  const mha_test::ReferenceWeights& w = m.w;
  // Where NaN/Inf sits.
  auto scan = [](const float* p, std::size_t n, bool& nan, bool& inf) {
    nan = AnyNaN(p, n), inf = AnyInf(p, n);
  };
  std::vector<char> q_nan(B * Q), q_inf(B * Q), k_nan(B * K), k_inf(B * K),
      v_bad(B * K);
  for (std::size_t r = 0; r < B * Q; ++r) {
    bool nan, inf;
    scan(x.query + r * d, d, nan, inf);
    q_nan[r] = nan, q_inf[r] = inf;
  }
  for (std::size_t r = 0; r < B * K; ++r) {
    bool nan, inf;
    scan(x.key + r * d, d, nan, inf);
    k_nan[r] = nan, k_inf[r] = inf;
    v_bad[r] = AnyNonFinite(x.value + r * d, d);
  }
  std::vector<char> wq_nan(H), wq_inf(H), wk_nan(m.kv_heads),
      wk_inf(m.kv_heads);
  bool wv_bad = AnyNonFinite(w.w_v.data(), w.w_v.size()) ||
                AnyNonFinite(w.b_v.data(), w.b_v.size());
  for (std::size_t r = 0; r <= d; ++r) {  // row d: the bias
    for (std::size_t o = 0; o < d; ++o) {
      const float e = r < d ? w.w_q[r * d + o] : (m.bias ? w.b_q[o] : 0.0f);
      if (std::isnan(e)) wq_nan[o / hd] = 1;
      if (std::isinf(e)) wq_inf[o / hd] = 1;
    }
    for (std::size_t o = 0; o < kvd; ++o) {
      const float e = r < d ? w.w_k[r * kvd + o] : (m.bias ? w.b_k[o] : 0.0f);
      if (std::isnan(e)) wk_nan[o / hd] = 1;
      if (std::isinf(e)) wk_inf[o / hd] = 1;
    }
  }
  std::vector<char> wo_bad(d), bo_bad(d);
  for (std::size_t o = 0; o < d; ++o) {
    for (std::size_t r = 0; r < d; ++r)
      if (!std::isfinite(w.w_o[r * d + o])) wo_bad[o] = 1;
    bo_bad[o] = m.bias && !std::isfinite(w.b_o[o]);
  }
  // The reference on sanitized data: exact wherever no NaN/Inf reaches.
  mha_test::ReferenceWeights ws = w;
  for (auto* v :
       {&ws.w_q, &ws.w_k, &ws.w_v, &ws.w_o, &ws.b_q, &ws.b_k, &ws.b_v, &ws.b_o})
    *v = Sanitized(*v);
  const std::vector<float> qs = Sanitized({x.query, x.query + B * Q * d}),
                           ks = Sanitized({x.key, x.key + B * K * d}),
                           vs = Sanitized({x.value, x.value + B * K * d});
  std::vector<float> bias_s = x.bias;
  for (float& e : bias_s)
    if (std::isnan(e) || e == kInf) e = 0.0f;
  mha::AttentionMask mask_s = x.mask;
  if (x.mask.bias) mask_s.bias = bias_s.data();
  std::vector<double> ref_weights;
  const std::vector<double> want =
      mha_test::ReferenceForward(m.Resolved(), ws, qs.data(), ks.data(),
                                 vs.data(), B, Q, K, mask_s, &ref_weights);
  // Magnitudes for the error bounds: |x| |W| + |b| of each projection.
  auto abs_project = [&](const std::vector<float>& in, std::size_t rows,
                         const std::vector<float>& wt, std::size_t out,
                         const std::vector<float>& bias) {
    std::vector<double> y(rows * out, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
      AbsProjectRow(in.data() + r * d, d, wt.data(), out,
                    bias.empty() ? nullptr : bias.data(), y.data() + r * out);
    }
    return y;
  };
  double want_max = 0.0;
  for (double e : want) want_max = std::max(want_max, std::fabs(e));
  const std::vector<double> qa = abs_project(qs, B * Q, ws.w_q, d, ws.b_q);
  const std::vector<double> ka = abs_project(ks, B * K, ws.w_k, kvd, ws.b_k);
  const std::vector<double> va = abs_project(vs, B * K, ws.w_v, kvd, ws.b_v);

  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t i = 0; i < Q; ++i) {
      const std::size_t qr = b * Q + i;
      auto where_row = [&] { return Str(what, " row (b ", b, ", i ", i, ")"); };
      std::vector<char> vis(K);
      std::size_t visible = 0;
      bool poison = false, any_k_bad = false, any_v_bad = false,
           bias_bad = false;
      double b_max = 0.0;
      for (std::size_t j = 0; j < K; ++j) {
        const long long last = static_cast<long long>(i) +
                               static_cast<long long>(K) -
                               static_cast<long long>(Q);
        const float bias = x.mask.bias ? x.bias[i * K + j] : 0.0f;
        vis[j] = !(x.mask.causal && static_cast<long long>(j) > last) &&
                 !(x.mask.kv_lengths && j >= std::size_t(x.lengths[b])) &&
                 bias != -kInf;
        const std::size_t kr = b * K + j;
        if (!vis[j]) {
          poison = poison || k_nan[kr] || k_inf[kr] || v_bad[kr];
          continue;
        }
        ++visible;
        any_k_bad = any_k_bad || k_nan[kr] || k_inf[kr];
        any_v_bad = any_v_bad || v_bad[kr];
        bias_bad = bias_bad || std::isnan(bias) || bias == kInf;
        if (std::isfinite(bias))
          b_max = std::max(b_max, double(std::fabs(bias)));
      }
      const float* out = got + qr * d;
      if (visible == 0) {  // b_o (zeros without bias), whatever the data
        for (std::size_t o = 0; o < d; ++o) {
          const float b_o = m.bias ? w.b_o[o] : 0.0f;
          auto where = [&] {
            return Str(where_row(), " sees no key; output[", o, "]");
          };
          if (bo_bad[o])
            ExpectNonFinite(out[o], where, "b_o is NaN/Inf");
          else if (wo_bad[o] && !std::isfinite(out[o]))
            continue;  // 0 * Inf
          else if (out[o] != b_o)
            Fail(
                std::isfinite(out[o]) ? "value" : "hidden",
                Str(where(), ": expected b_o = ", F(b_o), ", got ", F(out[o])));
        }
        for (std::size_t h = 0; got_weights && h < H; ++h)
          for (std::size_t j = 0; j < K; ++j)
            ExpectZero(got_weights[((b * H + h) * Q + i) * K + j], "hidden",
                       [&] {
                         return Str(where_row(), " sees no key; weights[h ", h,
                                    "][", j, "]");
                       });
        continue;
      }
      // Per head: NaN/Inf in its logits (q row, W_q/b_q of the head, W_k/b_k
      // of its kv head, a visible key row, a NaN/+inf bias) makes the head's
      // output and weights NaN; NaN/Inf in a visible value row or in W_v/b_v
      // reaches the head's output. W_o mixes the heads: the row is NaN.
      bool row_nan = any_v_bad || wv_bad;
      std::vector<char> head_nan(H);
      std::vector<double> l_max(H, 0.0), magnitude(d, 0.0);
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = h / m.group;
        head_nan[h] = q_nan[qr] || q_inf[qr] || wq_nan[h] || wq_inf[h] ||
                      wk_nan[g] || wk_inf[g] || any_k_bad || bias_bad;
        row_nan = row_nan || head_nan[h];
        for (std::size_t j = 0; j < K; ++j) {
          if (!vis[j]) continue;
          const double p = ref_weights[((b * H + h) * Q + i) * K + j];
          const double* kaj = ka.data() + (b * K + j) * kvd + g * hd;
          const double dot = DotAbsD(qa.data() + qr * d + h * hd, kaj, hd);
          AxpyD(p, va.data() + (b * K + j) * kvd + g * hd,
                magnitude.data() + h * hd, hd);
          l_max[h] = std::max(l_max[h], scale * dot);
        }
      }
      const double l_row = *std::max_element(l_max.begin(), l_max.end());
      // The logits' rounding (projections of d terms, dots of head_dim)
      // grows with their magnitude; layer.h's documented bound, normwise
      // over the output, is the fallback.
      auto e_logit = [&](double l) {
        return kEps * ((2 * d + hd + 8) * l + 2 * b_max);
      };
      const double rel_out =
          (2 * (d + K + hd) + 16) * kEps + 2 * e_logit(l_row);
      const double documented =
          2 * (d + K + 4 * (l_row + b_max)) * 4 * kEps * want_max;
      std::vector<double> through_w_o(d);  // sum_e magnitude[e] |w_o[e][o]|
      AbsTransposedTimes(magnitude.data(), ws.w_o.data(), d,
                         through_w_o.data());
      for (std::size_t o = 0; o < d; ++o) {
        auto where = [&] { return Str(where_row(), ": output[", o, "]"); };
        if (row_nan || wo_bad[o] || bo_bad[o]) {
          ExpectNonFinite(out[o], where,
                          row_nan ? "NaN/Inf reaches the row's heads"
                                  : "NaN/Inf in w_o's column or b_o");
          continue;
        }
        const double bound =
            (m.bias ? std::fabs(ws.b_o[o]) : 0.0) + through_w_o[o];
        ExpectClose(out[o], want[qr * d + o],
                    std::max(kSafety * rel_out * bound, documented) + kTiny,
                    poison, where);
      }
      for (std::size_t h = 0; got_weights && h < H; ++h) {
        const double rel_p = (K + 8) * kEps + 2 * e_logit(l_max[h]);
        for (std::size_t j = 0; j < K; ++j) {
          const std::size_t at = ((b * H + h) * Q + i) * K + j;
          auto where = [&] {
            return Str(where_row(), ": weights[h ", h, "][", j, "]");
          };
          if (!vis[j])  // API.md: weights of hidden keys are exactly 0
            ExpectZero(got_weights[at], head_nan[h] ? "hiddenweight" : "hidden",
                       [&] { return where() + " (hidden key)"; });
          else if (head_nan[h])
            ExpectNonFinite(got_weights[at], where,
                            "NaN/Inf in the head's logits");
          else
            ExpectClose(got_weights[at], ref_weights[at],
                        kSafety * rel_p * ref_weights[at] + kTiny, poison,
                        where);
        }
      }
    }
  }
}

// Masks of a layer call, as in FuzzAttention.
void MakeLayerMask(LayerCall& x, std::uint8_t flags, std::uint8_t lengths_mode,
                   std::uint8_t bias_mode, Rng& rng) {
  const std::size_t K = x.kv_len;
  x.mask.causal = flags & 8;
  if (flags & 16) {
    x.lengths.resize(x.batch);
    for (std::size_t b = 0; b < x.batch; ++b) {
      std::size_t len = K;
      if (lengths_mode & 1) len = rng() % (K + 1);
      if ((lengths_mode & 2) && b == 0) len = 0;
      x.lengths[b] = static_cast<std::int32_t>(len);
    }
    x.mask.kv_lengths = x.lengths.data();
  }
  if ((flags & 32) && x.q_len * K > 0) {
    x.bias.resize(x.q_len * K);
    const Uniform unit(-2.0f, 2.0f);
    const unsigned density = bias_mode & 3;  // -inf: none, 1/4, 1/3, 1/2
    for (float& e : x.bias)
      e = density && rng() % (5 - density) == 0 ? -kInf : unit(rng);
    x.mask.bias = x.bias.data();
  }
}

void FuzzForward(Reader& in) {
  const std::uint8_t target_byte = in.U8();
  const std::string target = TargetFor(target_byte);
  const std::uint8_t weights_target_byte = in.U8();
  const std::uint8_t flags = in.U8();
  const int invalid = InvalidKind(in.U8(), 12);
  const std::uint8_t invalid_arg = in.U8();
  const std::uint8_t determinism = in.U8();
  Rng rng(in.U32());
  Model m = DecodeModel(in, flags, rng);
  std::size_t batch = BatchFrom(in.U8()), q_len = QLenFrom(in.U8()),
              kv_len = KvLenFrom(in.U8());
  const int mode = in.U8() % 4;  // self, shared key/value, cross, self pointer
  const std::uint8_t value_kind = in.U8(), lengths_mode = in.U8(),
                     bias_mode = in.U8();
  const bool with_weights = flags & 4;
  if (invalid)
    batch = std::max<std::size_t>(batch, 1),
    q_len = std::max<std::size_t>(q_len, 1);
  if (mode == 0) kv_len = q_len;
  auto work = [&] {
    return batch * ((q_len + 2 * kv_len) * m.d * m.d * 2 +
                    m.heads * q_len * kv_len * m.head_dim * 3);
  };
  while (work() > 70000) {
    if (kv_len > q_len && kv_len > 1)
      kv_len = (kv_len + 1) / 2;
    else if (q_len > 1)
      q_len = (q_len + 1) / 2;
    else if (batch > 1)
      batch = 1;
    else if (kv_len > 1)
      kv_len = (kv_len + 1) / 2;
    else
      break;
    if (mode == 0) kv_len = q_len;
  }
  const std::size_t d = m.d;
  Values values(rng, value_kind);
  auto draw = [&](std::size_t rows) {
    std::vector<float> v(rows * d);
    for (float& e : v) e = values();
    return v;
  };
  std::vector<float> query =
      draw(batch * std::max(q_len, mode == 3 ? kv_len : 0));
  std::vector<float> key =
      mode == 2 || mode == 1 ? draw(batch * kv_len) : std::vector<float>();
  std::vector<float> value =
      mode == 2 ? draw(batch * kv_len) : std::vector<float>();
  std::vector<float>& key_buf = mode == 0 || mode == 3 ? query : key;
  std::vector<float>& value_buf = mode == 2 ? value : key_buf;
  LayerCall x{nullptr, nullptr, nullptr, batch, q_len, kv_len, {}, {}, {}};
  MakeLayerMask(x, flags, lengths_mode, bias_mode, rng);
  std::ostringstream placed;
  const int placements = in.U8() % 7;
  for (int p = 0; p < placements; ++p) {
    const std::uint8_t kind = in.U8() % 16, arg = in.U8();
    const std::uint16_t pos = in.U16();
    const float v = arg & 1 ? (arg & 2 ? -kInf : kInf) : kNaN;
    auto element = [&](std::vector<float>& buf, const char* name,
                       std::size_t rows) {
      if (rows * d == 0) return;
      const std::size_t at = pos % (rows * d);
      buf[at] = v;
      placed << " [" << name << " row " << at / d << " [" << at % d
             << "] = " << F(v) << "]";
    };
    switch (kind) {
      case 0:
      case 1:
        element(query, "query", batch * q_len);
        break;
      case 2:
      case 3:
        element(key_buf, "key", batch * kv_len);
        break;
      case 4:
      case 5:
        element(value_buf, "value", batch * kv_len);
        break;
      case 6:
      case 7:
      case 8:
      case 9:
      case 10:
        PlaceInWeights(m, kind, arg, pos, placed);
        break;
      case 11:
        if (!x.bias.empty()) {
          x.bias[pos % x.bias.size()] = kNaN;
          placed << " [bias[" << pos % x.bias.size() << "] = nan]";
        }
        break;
      case 12:
        if (!x.bias.empty()) {
          const std::size_t i = pos % q_len;
          for (std::size_t j = 0; j < kv_len; ++j)
            x.bias[i * kv_len + j] = -kInf;
          placed << " [bias row " << i << " = -inf]";
        }
        break;
      case 13: {  // NaN/Inf in the key or value row of a key kv_lengths hides
        if (x.lengths.empty() || kv_len == 0) break;
        const std::size_t b = pos % batch, len = x.lengths[b];
        if (len >= kv_len) break;
        const std::size_t j = len + (pos / batch) % (kv_len - len);
        std::vector<float>& buf = arg & 4 ? value_buf : key_buf;
        buf[(b * kv_len + j) * d + (arg >> 3) % d] = v;
        placed << " [" << (arg & 4 ? "value" : "key") << " of hidden key (" << b
               << "," << j << ") = " << F(v) << "]";
        break;
      }
      case 14: {  // a -inf bias hides key j from row i; poison key j
        if (x.bias.empty()) break;
        const std::size_t i = pos % q_len, j = (pos / q_len) % kv_len;
        x.bias[i * kv_len + j] = -kInf;
        std::vector<float>& buf = arg & 4 ? value_buf : key_buf;
        for (std::size_t b = 0; b < batch; ++b)
          buf[(b * kv_len + j) * d + (arg >> 3) % d] = v;
        placed << " [bias (" << i << "," << j << ") = -inf, "
               << (arg & 4 ? "value" : "key") << " row " << j << " = " << F(v)
               << "]";
        break;
      }
      default:
        break;
    }
  }
  m.MakeGiven();
  x.query = query.data();
  // kv_len == 0: key and value may be null. (MHA_FUZZ_TOLERATE=nullkv passes
  // distinct empty buffers instead, past the library's null + offset.)
  static std::vector<float> empty_key(1), empty_value(1);
  const bool null_kv = !Tolerated("nullkv");
  x.key = kv_len ? key_buf.data() : null_kv ? nullptr : empty_key.data();
  x.value = kv_len ? value_buf.data() : null_kv ? nullptr : empty_value.data();
  static const char* const kModes[] = {"self", "shared key/value", "cross",
                                       "self pointer"};
  g_case = Str("forward target ", target, " (weights set on ",
               TargetFor(weights_target_byte), ") ", m.Describe(), " batch ",
               batch, " q_len ", q_len, " kv_len ", kv_len, " mode ",
               kModes[mode], " causal ", x.mask.causal, " kv_lengths ");
  for (std::int32_t e : x.lengths) g_case += Str(e, " ");
  g_case += Str(x.mask.kv_lengths ? "" : "none", " bias ",
                x.mask.bias ? Str("mode ", int(bias_mode)) : "none",
                " weights ", with_weights, " values ", int(value_kind),
                " placements:", placed.str());

  // Build the layer; set its weights on one target, run on another.
  ApplyTarget(weights_target_byte);
  mha::MultiHeadAttention layer(mha::MultiHeadAttentionConfig{1, 1, 0, false});
  ExpectNoThrow("MultiHeadAttention(config)",
                [&] { layer = mha::MultiHeadAttention(m.config); });
  ExpectNoThrow("set_weights", [&] { layer.set_weights(m.Given()); });
  ApplyTarget(target_byte);
  std::vector<float> output(batch * q_len * d, Sentinel());
  std::vector<float> weights(
      with_weights ? batch * m.heads * q_len * kv_len : 0, Sentinel());

  if (invalid) {
    const char* category = "other";
    std::string what;
    std::vector<float> shared;
    const float *q = x.query, *k = x.key, *v = x.value;
    float* out = output.data();
    float* wts = with_weights ? weights.data() : nullptr;
    std::size_t bb = batch, qq = q_len, kk = kv_len;
    mha::AttentionMask mask = x.mask;
    std::vector<std::int32_t> bad_lengths;
    bool after = false;  // the call is forward; otherwise a constructor
    switch (invalid) {
      case 1: {
        mha::MultiHeadAttentionConfig c = m.config;
        if (c.num_heads == 1)
          c.d_model = 0;
        else
          c.d_model += 1;
        if (c.d_model % c.num_heads == 0) c.d_model = 0;
        what = Str("config d_model ", c.d_model, " num_heads ", c.num_heads);
        g_case += " | bad argument: " + what;
        ExpectInvalid("other", "MultiHeadAttention(" + what + ")",
                      [&] { mha::MultiHeadAttention l(c); });
        ExpectInvalid("other", "KVCache(" + what + ")",
                      [&] { mha::KVCache cache(c, 1, 4); });
        return;
      }
      case 2: {
        mha::MultiHeadAttentionConfig c = m.config;
        c.num_kv_heads = m.heads + 1 + invalid_arg % 3;
        what = Str("num_kv_heads ", c.num_kv_heads, " for num_heads ",
                   c.num_heads);
        g_case += " | bad argument: " + what;
        ExpectInvalid("other", "MultiHeadAttention(" + what + ")",
                      [&] { mha::MultiHeadAttention l(c); });
        return;
      }
      case 3:
      case 4: {  // set_weights throws and keeps the old weights
        mha::MultiHeadAttentionWeights bad = m.Given();
        std::vector<float> junk(std::max(d, m.kv) * d + 1, 0.5f);
        if (invalid == 3) {
          if (m.bias)
            bad.b_k = nullptr, what = "b_k missing with config.bias";
          else
            bad.b_v = junk.data(), what = "b_v given without config.bias";
        } else {
          bad.w_q = junk.data();  // new values, then a null one
          (invalid_arg & 1 ? bad.w_o : bad.w_v) = nullptr;
          what = "a null weight pointer";
        }
        g_case += " | bad argument: set_weights with " + what;
        ExpectInvalid("other", "set_weights with " + what,
                      [&] { layer.set_weights(bad); });
        after = true;
        break;
      }
      case 5:
        q = nullptr, what = "null query";
        break;
      case 6:
        out = nullptr, what = "null output";
        break;
      case 7:
        if (kk == 0)
          kk = 1, what = "null key and value (kv_len 1)";
        else
          what = "null key";
        k = nullptr;
        if (invalid_arg & 1) v = nullptr;
        mask = {};
        break;
      case 8:
        bad_lengths.assign(bb, static_cast<std::int32_t>(kk));
        bad_lengths[invalid_arg % bb] =
            invalid_arg & 0x80 ? -1 : static_cast<std::int32_t>(kk + 1);
        mask.kv_lengths = bad_lengths.data();
        what = Str("kv_lengths[", invalid_arg % bb,
                   "] = ", bad_lengths[invalid_arg % bb]);
        break;
      case 9: {  // output overlaps query: one buffer
        category = "alias";
        const std::size_t offset = (invalid_arg * query.size()) / 256;
        shared = query;
        shared.resize(std::max(query.size(), offset + output.size()), 1.0f);
        q = shared.data();
        if (mode == 0 || mode == 3) k = v = kk ? shared.data() : nullptr;
        out = shared.data() + offset;
        what = Str("output = query + ", offset, " (overlapping)");
        break;
      }
      case 10: {  // attention_weights overlaps value (or output overlaps key)
        category = "alias";
        if (kk == 0) {
          kk = 1;
          mask = {};
          k = v = query.data();
        }
        const std::vector<float>& base =
            mode == 2 ? value : (mode == 1 ? key : query);
        // Large enough for every input it stands for.
        const std::size_t needed =
            std::max({base.size(), bb * kk * d,
                      mode == 0 || mode == 3 ? bb * qq * d : 0});
        const std::size_t offset = (invalid_arg * needed) / 256;
        shared = base;
        const std::size_t count =
            invalid_arg & 1 ? bb * m.heads * qq * kk : output.size();
        shared.resize(std::max(needed, offset + count), 1.0f);
        if (mode == 0 || mode == 3)
          q = k = v = shared.data();
        else if (mode == 1)
          k = v = shared.data();
        else
          v = shared.data();
        if (invalid_arg & 1)
          wts = shared.data() + offset,
          what = Str("attention_weights = value + ", offset);
        else
          out = shared.data() + offset, what = Str("output = value + ", offset);
        what += " (overlapping)";
        break;
      }
      case 11:  // batch * q_len * d_model overflows
        category = "overflow";
        bb = std::size_t{1} << 33, qq = std::size_t{1} << 31, kk = 1;
        k = v = query.data();
        mask = {};
        wts = nullptr;
        what = "batch 2^33, q_len 2^31 (the extents overflow)";
        break;
      default: {  // a KV cache whose storage overflows
        category = "overflow";
        if (Tolerated(category)) return;
        what = "KVCache with batch 2^32, max_len 2^32";
        g_case += " | bad argument: " + what;
        ExpectInvalid(category, what, [&] {
          mha::KVCache cache(m.config, std::size_t{1} << 32,
                             std::size_t{1} << 32);
        });
        return;
      }
    }
    if (!after) {
      if (Tolerated(category)) return;
      g_case += " | bad argument: " + what;
      const Snapshot out0(output, "output"), w0(weights, "attention_weights"),
          s0(shared, "shared input/output buffer");
      ExpectInvalid(category, "forward with " + what, [&] {
        layer.forward(q, k, v, bb, qq, kk, out, mask, wts);
      });
      out0.ExpectUnchanged("forward that threw");
      w0.ExpectUnchanged("forward that threw");
      s0.ExpectUnchanged("forward that threw");
      return;
    }
  }

  const Snapshot q0(query, "query"), k0(key, "key"), v0(value, "value");
  Phase* call_phase = new Phase("forward call");
  ExpectNoThrow("forward", [&] {
    layer.forward(x.query, x.key, x.value, batch, q_len, kv_len, output.data(),
                  x.mask, with_weights ? weights.data() : nullptr);
  });
  for (const Snapshot* s : {&q0, &k0, &v0})
    s->ExpectUnchanged("forward (an input)");
  if (batch * q_len > 0) ExpectRanOn(target, "forward");
  delete call_phase;
  {
    Phase phase("forward check");
    CheckLayer(m, x, output.data(), with_weights ? weights.data() : nullptr,
               "forward");
  }
  if ((determinism & 3) == 3) {  // bitwise the same on one thread
    std::vector<float> one(output.size(), Sentinel()),
        one_w(weights.size(), Sentinel());
    OnOneThread([&] {
      layer.forward(x.query, x.key, x.value, batch, q_len, kv_len, one.data(),
                    x.mask, with_weights ? one_w.data() : nullptr);
    });
    if (!BitwiseEqual(one, output) || !BitwiseEqual(one_w, weights))
      Fail("other", "forward differs between 1 thread and the default arena");
  }
}

void FuzzForwardCached(Reader& in) {
  const std::string target = ApplyTarget(in.U8());
  const std::uint8_t flags = in.U8();
  const int invalid = InvalidKind(in.U8(), 7);
  const std::uint8_t invalid_arg = in.U8();
  Rng rng(in.U32());
  Model m = DecodeModel(in, flags, rng);
  std::size_t batch = std::max<std::size_t>(1, BatchFrom(in.U8()));
  std::size_t len = 1 + in.U8() % 40;
  const std::size_t extra = in.U8() % 4;
  const std::uint8_t value_kind = in.U8();
  while (batch * (len * m.d * m.d * 8 + m.heads * len * len * m.head_dim * 2) >
         90000) {
    if (len > 1)
      len = (len + 1) / 2;
    else if (batch > 1)
      batch = 1;
    else
      break;
  }
  const std::size_t d = m.d;
  Values values(rng, value_kind);
  std::vector<float> xs(batch * len * d);
  for (float& e : xs) e = values();
  std::ostringstream placed;
  const int placements = in.U8() % 5;
  for (int p = 0; p < placements; ++p) {
    const std::uint8_t kind = in.U8() % 12, arg = in.U8();
    const std::uint16_t pos = in.U16();
    const float v = arg & 1 ? (arg & 2 ? -kInf : kInf) : kNaN;
    if (kind <= 1) {
      const std::size_t at = pos % xs.size();
      xs[at] = v;
      placed << " [x (b " << at / d / len << ", t " << at / d % len << ")["
             << at % d << "] = " << F(v) << "]";
    } else {
      PlaceInWeights(m, kind, arg, pos, placed);
    }
  }
  m.MakeGiven();
  g_case = Str("forward_cached target ", target, " ", m.Describe(), " batch ",
               batch, " length ", len, " capacity ", len + extra, " values ",
               int(value_kind), " placements:", placed.str(), " chunks:");
  mha::MultiHeadAttention layer(mha::MultiHeadAttentionConfig{1, 1, 0, false});
  ExpectNoThrow("MultiHeadAttention(config)",
                [&] { layer = mha::MultiHeadAttention(m.config); });
  ExpectNoThrow("set_weights", [&] { layer.set_weights(m.Given()); });
  mha::KVCache cache(m.config, batch, len + extra);
  if (cache.capacity() != len + extra || cache.length() != 0)
    Fail("other", "KVCache capacity/length wrong after construction");
  std::vector<float> got(batch * len * d, Sentinel());
  mha::KVCache* active = &cache;
  const mha::MultiHeadAttention* active_layer = &layer;
  std::unique_ptr<mha::KVCache> copy;
  std::unique_ptr<mha::MultiHeadAttention> layer_copy;
  std::size_t copied_at = 0;
  std::string current_target = target;
  bool invalid_done = false;
  for (std::size_t t = 0; t < len;) {
    const std::uint8_t chunk_byte = in.U8();
    if (chunk_byte == 0xFF) {  // new_len == 0 changes nothing
      g_case += " 0";
      ExpectNoThrow("forward_cached with new_len 0", [&] {
        active_layer->forward_cached(nullptr, batch, 0, *active, nullptr);
      });
      if (active->length() != t)
        Fail("other", "forward_cached with new_len 0 changed the length");
      continue;
    }
    const std::size_t chunk =
        std::min(len - t, std::size_t{1} + (chunk_byte & 7));
    if ((flags & 8) && (chunk_byte & 0x80)) {  // another target between calls
      current_target = ApplyTarget((chunk_byte >> 3) & 0xF);
      g_case += Str(" [target ", current_target, "]");
    }
    if ((flags & 4) && !copy && t >= len / 2) {  // go on with copies
      copy = std::make_unique<mha::KVCache>(cache);
      layer_copy = std::make_unique<mha::MultiHeadAttention>(layer);
      active = copy.get(), active_layer = layer_copy.get(), copied_at = t;
      g_case += " [copies]";
    }
    g_case += Str(" ", chunk);
    std::vector<float> in_chunk(batch * chunk * d),
        out(batch * chunk * d, Sentinel());
    for (std::size_t b = 0; b < batch; ++b)
      std::copy_n(xs.data() + (b * len + t) * d, chunk * d,
                  in_chunk.data() + b * chunk * d);
    if (invalid && !invalid_done && (t > 0 || (chunk_byte & 0x40))) {
      invalid_done = true;
      const char* category = "other";
      std::string what;
      std::size_t bb = batch, nn = chunk;
      const float* px = in_chunk.data();
      float* po = out.data();
      std::vector<float> big_in, big_out;
      std::unique_ptr<mha::KVCache> other;
      mha::KVCache* pc = active;
      switch (invalid) {
        case 1:  // more than the room left
          nn = active->capacity() - active->length() + 1 + invalid_arg % 3;
          big_in.assign(batch * nn * d, 0.25f);
          big_out.assign(batch * nn * d, Sentinel());
          px = big_in.data(), po = big_out.data();
          what = Str("new_len ", nn, " beyond the room");
          break;
        case 2:
          bb = batch + 1 + invalid_arg % 2;
          big_in.assign(bb * nn * d, 0.25f);
          big_out.assign(bb * nn * d, Sentinel());
          px = big_in.data(), po = big_out.data();
          what = Str("batch ", bb, " for a cache of batch ", batch);
          break;
        case 3: {
          mha::MultiHeadAttentionConfig c = m.Resolved();
          c.d_model = 2 * d, c.num_heads = 2 * m.heads,
          c.num_kv_heads = 2 * m.kv_heads;
          other = std::make_unique<mha::KVCache>(c, batch, len + extra);
          pc = other.get();
          what = "a cache of another config";
          break;
        }
        case 4:
          px = nullptr, what = "null x";
          break;
        case 5:
          po = nullptr, what = "null output";
          break;
        case 6: {  // output overlaps x
          category = "alias";
          const std::size_t size = in_chunk.size();
          const std::size_t offset = (invalid_arg * size) / 256;
          big_in = in_chunk;
          big_in.resize(offset + size, 0.25f);
          px = big_in.data(), po = big_in.data() + offset;
          what = Str("output = x + ", offset, " (overlapping)");
          break;
        }
        default: {
          category = "overflow";
          if (Tolerated(category)) break;
          what = "KVCache with batch 2^40, max_len 2^24 (storage overflows)";
          g_case += " | bad argument: " + what;
          ExpectInvalid(category, what, [&] {
            mha::KVCache big_cache(m.config, std::size_t{1} << 40,
                                   std::size_t{1} << 24);
          });
          what.clear();
          break;
        }
      }
      if (Tolerated(category)) what.clear();
      if (!what.empty()) {
        g_case += " | bad argument: " + what;
        const std::size_t before = pc->length();
        const Snapshot o0(out, "output"), b0(big_out, "output buffer"),
            i0(big_in, "x/output buffer");
        ExpectInvalid(category, "forward_cached with " + what, [&] {
          active_layer->forward_cached(px, bb, nn, *pc, po);
        });
        o0.ExpectUnchanged("forward_cached that threw");
        b0.ExpectUnchanged("forward_cached that threw");
        i0.ExpectUnchanged("forward_cached that threw");
        if (pc->length() != before)
          Fail("other", "forward_cached that threw changed the cache's length");
        g_case += " | then";
      }
    }
    ExpectNoThrow("forward_cached", [&] {
      active_layer->forward_cached(in_chunk.data(), batch, chunk, *active,
                                   out.data());
    });
    ExpectRanOn(current_target, "forward_cached");
    if (active->length() != t + chunk)
      Fail("other", Str("cache length ", active->length(), " after ", t + chunk,
                        " tokens"));
    for (std::size_t b = 0; b < batch; ++b)
      std::copy_n(out.data() + b * chunk * d, chunk * d,
                  got.data() + (b * len + t) * d);
    t += chunk;
  }
  if (copy && cache.length() != copied_at)
    Fail("other", "feeding a copy of the KV cache changed the original");
  LayerCall x{xs.data(), xs.data(), xs.data(), batch, len, len, {}, {}, {}};
  x.mask.causal = true;
  Phase phase("forward_cached check");
  CheckLayer(m, x, got.data(), nullptr, "forward_cached");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_verbose = std::getenv("MHA_FUZZ_VERBOSE") != nullptr;
  g_profile = std::getenv("MHA_FUZZ_PROFILE") != nullptr;
  if (const char* tolerate = std::getenv("MHA_FUZZ_TOLERATE")) {
    std::string list = tolerate;
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      if (end > start) g_tolerated.insert(list.substr(start, end - start));
      start = end + 1;
    }
  }
  std::atexit(AtExitReport);
#ifdef MHA_FUZZ_HAVE_ASAN
  __asan_set_error_report_callback(AsanReportCallback);
#endif
  Targets();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) return 0;
  Reader in(data, size);
  g_case.clear();
  switch (in.U8() % 5) {
    case 0: {
      Phase p("attention (all)");
      FuzzAttention(in);
      break;
    }
    case 1: {
      Phase p("sgemm (all)");
      FuzzSgemm(in);
      break;
    }
    case 2: {
      Phase p("softmax (all)");
      FuzzSoftmax(in);
      break;
    }
    case 3: {
      Phase p("forward (all)");
      FuzzForward(in);
      break;
    }
    default: {
      Phase p("forward_cached (all)");
      FuzzForwardCached(in);
      break;
    }
  }
  return 0;
}
