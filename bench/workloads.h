// The benchmark workloads, shared by mantissa's benchmarks and the libtorch peer so that both run
// the same shapes (bench/peers/pytorch_eager.py mirrors this table; keep the three in step).
//
// Every MLP workload is Linear layers with bias and ReLU between them, MSE loss against a
// fixed target, and SGD (zero_grad, forward, backward, step) on fixed input data, so that data
// generation is not timed. The GPT workloads (gpt_workloads()) are one nanoGPT training step on
// fixed random token ids. This header has no dependencies: the libtorch peer includes it too.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mantissa_bench {

struct Workload {
  std::string_view name;
  std::vector<int64_t> layers;  // feature sizes: in, hidden..., out (empty for "add")
  int64_t batch;
  double lr;
  double momentum;
  bool train;  // a full SGD step; false: linear_fb (forward + backward only) and add
};

inline const std::vector<Workload>& workloads() {
  static const std::vector<Workload> w = {
      {"add", {}, 16, 0.0, 0.0, false},  // a + b on 16-element tensors, no autograd
      {"linear_fb", {16, 16}, 4, 0.0, 0.0, false},
      {"toy", {10, 10, 5}, 20, 1e-3, 0.0, true},
      {"mlp512", {512, 512, 512}, 256, 1e-3, 0.9, true},
      {"mlp4096", {1024, 4096, 1024}, 512, 1e-3, 0.9, true},
  };
  return w;
}

inline const Workload* find_workload(std::string_view name) {
  for (const auto& w : workloads())
    if (w.name == name) return &w;
  return nullptr;
}

// Matmul FLOPs of one step (2 per multiply-add): the forward, the weight gradients, and the input
// gradients of every layer but the first (the input does not require grad). Elementwise work is
// not counted.
inline double step_flops(const Workload& w) {
  if (w.layers.size() < 2) return double(w.batch);  // add: one FLOP per element
  double flops = 0;
  for (size_t i = 0; i + 1 < w.layers.size(); ++i) {
    const double mnk = double(w.batch) * double(w.layers[i]) * double(w.layers[i + 1]);
    flops += 2 * mnk * (i == 0 ? 2 : 3);
  }
  return flops;
}

// A nanoGPT-shaped decoder trained for one step: forward, cross_entropy over the [B*T, vocab]
// logits, backward, AdamW (betas 0.9/0.95) with weight decay on parameters of two or more
// dimensions only, dropout 0, lm_head tied to the token embedding.
struct GPTWorkload {
  std::string_view name;
  int64_t vocab_size, n_layer, n_head, n_embd, block_size;
  int64_t batch;  // sequences of block_size tokens per step
  bool gpu;       // run on cuda only (too large for a CPU benchmark); else on the CPU only
  double lr = 6e-4;
  double weight_decay = 0.1;
  int64_t tokens_per_step() const { return batch * block_size; }
};

inline const std::vector<GPTWorkload>& gpt_workloads() {
  static const std::vector<GPTWorkload> w = {
      // configs/gpt_tiny.yaml's model and batch: byte-level, 4 layers, 4 heads, 128 wide.
      {"gpt_tiny", 256, 4, 4, 128, 128, 16, false},
      // GPT-2 small (124M parameters), nanoGPT's padded vocabulary.
      {"gpt2_124m", 50304, 12, 12, 768, 1024, 8, true},
  };
  return w;
}

inline const GPTWorkload* find_gpt_workload(std::string_view name) {
  for (const auto& w : gpt_workloads())
    if (w.name == name) return &w;
  return nullptr;
}

// nanoGPT's estimate_mfu numerator: 6 N + 12 n_layer n_embd block_size FLOPs per token, N the
// parameters without the position embeddings (counting the tied lm_head once), with biases and
// LayerNorm weights.
inline double gpt_flops_per_token(const GPTWorkload& w) {
  const double C = double(w.n_embd), L = double(w.n_layer), T = double(w.block_size);
  const double per_layer = 2 * C                                      // ln_1
                           + 3 * C * C + 3 * C                        // attn.c_attn
                           + C * C + C                                // attn.c_proj
                           + 2 * C                                    // ln_2
                           + 4 * C * C + 4 * C                        // mlp.c_fc
                           + 4 * C * C + C;                           // mlp.c_proj
  const double n = double(w.vocab_size) * C + L * per_layer + 2 * C;  // wte, blocks, ln_f
  return 6 * n + 12 * L * C * T;
}

}  // namespace mantissa_bench
