// The seed documents' example in mha's API: d_model 512, 8 heads, batch 2,
// sequence 10, random N(0,1)*sqrt(2/d_model) weights and N(0,1) inputs.
// Prints like the seed's NumPy script: the input query and the output, with
// NumPy's abbreviation of long arrays.
#include <mha/mha.h>

#include <cstdio>
#include <random>
#include <vector>

namespace {

// Prints a [d0, d1, d2] array as NumPy does past 1000 elements: the first and
// last three entries of each axis, "..." between.
void PrintAbbreviated(const std::vector<float>& x, std::size_t d0,
                      std::size_t d1, std::size_t d2) {
  constexpr std::size_t kEdge = 3;
  auto shown = [](std::size_t n, std::size_t i) {
    return n <= 2 * kEdge || i < kEdge || i >= n - kEdge;
  };
  std::printf("[");
  for (std::size_t a = 0; a < d0; ++a) {
    std::printf(a == 0 ? "[" : "\n\n [");
    for (std::size_t b = 0; b < d1; ++b) {
      if (!shown(d1, b)) {
        if (b == kEdge) std::printf("\n  ...");
        continue;
      }
      std::printf(b == 0 ? "[" : "\n  [");
      for (std::size_t c = 0; c < d2; ++c) {
        if (!shown(d2, c)) {
          if (c == kEdge) std::printf(" ...");
          continue;
        }
        std::printf(c == 0 ? "%11.8f" : " %11.8f", x[(a * d1 + b) * d2 + c]);
      }
      std::printf("]");
    }
    std::printf("]");
  }
  std::printf("]\n");
}

}  // namespace

int main() {
  const std::size_t d_model = 512, num_heads = 8, batch_size = 2, seq_len = 10;

  // Creating an instance of MultiHeadAttention (random weights, as the seed).
  const mha::MultiHeadAttention multi_head_attn(d_model, num_heads);

  // Example input (batch_size, sequence_length, embedding_dim).
  std::mt19937_64 engine(2024);
  std::normal_distribution<float> randn;
  auto random_input = [&] {
    std::vector<float> x(batch_size * seq_len * d_model);
    for (float& v : x) v = randn(engine);
    return x;
  };
  const std::vector<float> q = random_input(), k = random_input(),
                           v = random_input();

  // Performing multi-head attention.
  std::vector<float> output(batch_size * seq_len * d_model);
  std::vector<float> attention_weights(batch_size * num_heads * seq_len *
                                       seq_len);
  multi_head_attn.forward(q.data(), k.data(), v.data(), batch_size, seq_len,
                          seq_len, output.data(), {}, attention_weights.data());

  std::printf("Input Query (Q):\n");
  PrintAbbreviated(q, batch_size, seq_len, d_model);
  std::printf("Multi-Head Attention Output:\n");
  PrintAbbreviated(output, batch_size, seq_len, d_model);
  std::printf("Attention weights shape: (%zu, %zu, %zu, %zu)\n", batch_size,
              num_heads, seq_len, seq_len);
  std::printf("Kernels ran on: %s (supported:",
              mha::last_kernel_target().c_str());
  for (const std::string& target : mha::supported_targets())
    std::printf(" %s", target.c_str());
  std::printf(")\n");
  return 0;
}
