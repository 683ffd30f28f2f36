#include "lib/layer/layer_weights.h"

#include <algorithm>
#include <cstring>

#include "lib/common/storage.h"
#include "lib/layer/config.h"

namespace mha::detail {
namespace {

enum Projection { kQ, kK, kV, kO };

// The weights as the user gave them: element (i, o) of each [in, out]
// projection, whatever the layout.
struct UserWeights {
  const MultiHeadAttentionConfig& config;
  const MultiHeadAttentionWeights& w;

  float operator()(Projection which, std::size_t i, std::size_t o) const {
    const float* m[] = {w.w_q, w.w_k, w.w_v, w.w_o};
    const std::size_t out =
        which == kK || which == kV ? KvDim(config) : config.d_model;
    return w.layout == WeightLayout::InOut ? m[which][i * out + o]
                                           : m[which][o * config.d_model + i];
  }
  const float* Bias(Projection which) const {
    const float* b[] = {w.b_q, w.b_k, w.b_v, w.b_o};
    return b[which];
  }
};

// Element (i, o) of a projection held in another packing (already rounded
// to the precision: widening it and rounding it again is exact).
struct PackedWeights {
  const PackedProjections& p;

  float operator()(Projection which, std::size_t i, std::size_t o) const {
    const std::size_t first[] = {0, p.k_column(), p.v_column()};
    const unsigned char* panels = which == kO ? p.o.get() : p.qkv.get();
    const std::size_t column = which == kO ? o : first[which] + o;
    const std::size_t nr = p.panel_cols;
    const std::size_t index = (column / nr * p.d_model + i) * nr + column % nr;
    return WithStorageType(p.precision, [&](auto t) {
      using T = decltype(t);
      T element;
      std::memcpy(&element, panels + index * sizeof(T), sizeof(T));
      return ToFloat(element);
    });
  }
  const float* Bias(Projection which) const {
    if (which == kO) return p.OBias();
    const std::size_t first[] = {0, p.k_column(), p.v_column()};
    return p.QkvBias(first[which]);
  }
};

// Columns [0, out) of projection `which` as panels of nr columns, all
// d_model steps deep, zero-padded to whole panels, from `panels` on, each
// element rounded to `precision`.
template <class Source>
void PackProjection(const Source& source, Projection which, std::size_t in,
                    std::size_t out, std::size_t nr, Precision precision,
                    unsigned char* panels) {
  const std::size_t bytes = bytes_per_element(precision);
  std::vector<float> step(nr);  // one step of a panel, in fp32
  for (std::size_t j0 = 0; j0 < out; j0 += nr) {
    for (std::size_t i = 0; i < in; ++i) {
      for (std::size_t c = 0; c < nr; ++c) {
        step[c] = j0 + c < out ? source(which, i, j0 + c) : 0.0f;
      }
      StoreRounded(precision, step.data(), nr,
                   panels + (j0 * in + i * nr) * bytes);
    }
  }
}

template <class Source>
std::unique_ptr<const PackedProjections> Pack(const MultiHeadAttentionConfig& c,
                                              const Source& source,
                                              std::size_t nr) {
  auto p = std::make_unique<PackedProjections>();
  const std::size_t d = c.d_model, kv = KvDim(c);
  p->panel_cols = nr;
  p->d_model = d;
  p->kv_dim = kv;
  p->q_width = (d + nr - 1) / nr * nr;
  p->kv_width = (kv + nr - 1) / nr * nr;
  p->precision = c.weight_precision;
  const std::size_t bytes = bytes_per_element(p->precision);
  p->qkv = AllocateHugePagesArray<unsigned char>(d * p->qkv_width() * bytes);
  p->o = AllocateHugePagesArray<unsigned char>(d * p->q_width * bytes);
  unsigned char* qkv = p->qkv.get();
  PackProjection(source, kQ, d, d, nr, p->precision, qkv);
  PackProjection(source, kK, d, kv, nr, p->precision,
                 qkv + p->k_column() * d * bytes);
  PackProjection(source, kV, d, kv, nr, p->precision,
                 qkv + p->v_column() * d * bytes);
  PackProjection(source, kO, d, d, nr, p->precision, p->o.get());
  if (c.bias) {
    p->qkv_bias.assign(p->qkv_width(), 0.0f);
    std::copy_n(source.Bias(kQ), d, p->qkv_bias.begin());
    std::copy_n(source.Bias(kK), kv, p->qkv_bias.begin() + p->k_column());
    std::copy_n(source.Bias(kV), kv, p->qkv_bias.begin() + p->v_column());
    p->o_bias.assign(source.Bias(kO), source.Bias(kO) + d);
  }
  return p;
}

}  // namespace

LayerWeights::LayerWeights(const MultiHeadAttentionConfig& config,
                           const MultiHeadAttentionWeights& weights,
                           std::size_t target_index, std::size_t panel_cols)
    : config_(config) {
  by_target_.resize(target_index + 1);
  by_target_[target_index] =
      Pack(config, UserWeights{config, weights}, panel_cols);
}

const PackedProjections& LayerWeights::For(std::size_t target_index,
                                           std::size_t panel_cols) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (target_index >= by_target_.size()) by_target_.resize(target_index + 1);
  std::unique_ptr<const PackedProjections>& slot = by_target_[target_index];
  if (!slot) {
    const PackedProjections& any =
        **std::find_if(by_target_.begin(), by_target_.end(),
                       [](const auto& packing) { return packing != nullptr; });
    slot = Pack(config_, PackedWeights{any}, panel_cols);
  }
  return *slot;
}

}  // namespace mha::detail
