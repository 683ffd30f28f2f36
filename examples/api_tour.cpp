// The README's API tour, compiled so that it stays true.
#include <mha/mha.h>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  // A layer as in the seed documents: d_model 512, 8 heads, random weights.
  mha::MultiHeadAttention layer(512, 8);
  const std::size_t batch = 2, seq = 10;
  std::vector<float> x(batch * seq * 512, 0.1f), out(x.size());
  layer.forward(x.data(), x.data(), x.data(), batch, seq, seq, out.data());

  // Your own weights, PyTorch's [out, in] layout, grouped-query attention.
  mha::MultiHeadAttention gqa(
      {/*d_model=*/256, /*num_heads=*/8, /*num_kv_heads=*/2});
  std::vector<float> w_q(256 * 256, 0.01f), w_kv(64 * 256, 0.01f),
      w_o(256 * 256, 0.01f);
  mha::MultiHeadAttentionWeights w{w_q.data(), w_kv.data(), w_kv.data(),
                                   w_o.data()};
  w.layout = mha::WeightLayout::OutIn;
  gqa.set_weights(w);

  // Decoding: a KV cache, then one token at a time, causally.
  mha::KVCache cache(gqa.config(), /*batch=*/1, /*max_len=*/64);
  std::vector<float> token(256, 0.5f), next(256);
  for (int step = 0; step < 3; ++step)
    gqa.forward_cached(token.data(), 1, 1, cache, next.data());

  // The kernels underneath: attention over [batch, head, token, head_dim]
  // views.
  const mha::AttentionShape s{
      1, 2, 2, /*q_len=*/4, /*kv_len=*/6, /*head_dim=*/16};
  std::vector<float> q(2 * 4 * 16, 0.2f), kv(2 * 6 * 16, 0.3f), o(q.size());
  mha::AttentionMask mask;
  mask.causal = true;
  mha::attention(s, q.data(), {128, 64, 16}, kv.data(), {192, 96, 16},
                 kv.data(), {192, 96, 16}, o.data(), {128, 64, 16}, mask);

  // 16-bit weights and KV cache (BF16 or F16): half the bytes per token.
  mha::MultiHeadAttentionConfig small{256, 8, 2};
  small.weight_precision = mha::Precision::BF16;
  mha::MultiHeadAttention compact(small);
  compact.init_random(1);
  mha::KVCache cache16(small, 1, 64, mha::Precision::F16);
  compact.forward_cached(token.data(), 1, 1, cache16, next.data());
  // The attention kernel over a 16-bit cache an engine keeps itself.
  std::vector<std::uint16_t> kv16(kv.size(), mha::to_f16(0.3f));
  mha::attention(s, q.data(), {128, 64, 16}, kv16.data(), {192, 96, 16},
                 kv16.data(), {192, 96, 16}, mha::Precision::F16, o.data(),
                 {128, 64, 16}, mask);

  std::printf("ran on %s; caches hold %zu and %zu tokens\n",
              mha::active_target().c_str(), cache.length(), cache16.length());
}
