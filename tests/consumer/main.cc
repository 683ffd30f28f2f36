// A program built against an installed mha: one forward pass.
#include <mha/mha.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const mha::MultiHeadAttention layer(64, 4);
  const std::vector<float> x(3 * 64, 0.5f);
  std::vector<float> out(3 * 64);
  layer.forward(x.data(), x.data(), x.data(), 1, 3, 3, out.data());
  for (float v : out) {
    if (!std::isfinite(v)) return 1;
  }
  std::printf("consumer ok on %s\n", mha::active_target().c_str());
  return 0;
}
