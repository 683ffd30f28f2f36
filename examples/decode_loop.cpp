// An engine-style decode loop: prefill a prompt through the KV cache, then
// generate token by token, inside an engine-owned task_arena that caps the
// threads mha may use.
#include <mha/mha.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const mha::MultiHeadAttentionConfig config{1024, 16, 4,
                                             true};  // grouped-query
  mha::MultiHeadAttention layer(config);
  layer.init_random(1);
  const std::size_t batch = 2, prompt = 128, steps = 64, d = config.d_model;
  mha::KVCache cache(config, batch, prompt + steps);

  std::mt19937 engine(7);
  std::normal_distribution<float> randn;
  std::vector<float> x(batch * prompt * d), out(batch * prompt * d);
  for (float& v : x) v = randn(engine);

  tbb::task_arena arena(2);  // the engine decides how many threads mha gets
  arena.execute([&] {
    layer.forward_cached(x.data(), batch, prompt, cache,
                         out.data());  // prefill
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> token(batch * d), next(batch * d);
    for (std::size_t step = 0; step < steps; ++step) {
      for (std::size_t b = 0; b < batch; ++b)  // feed back the last output
        std::copy_n(out.data() + b * d, d, token.data() + b * d);
      layer.forward_cached(token.data(), batch, 1, cache, next.data());
      out.swap(next);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    std::printf(
        "decoded %zu steps x batch %zu on %s: %.3f ms/step, cache %zu/%zu\n",
        steps, batch, mha::last_kernel_target().c_str(), 1e3 * seconds / steps,
        cache.length(), cache.capacity());
  });
  return 0;
}
