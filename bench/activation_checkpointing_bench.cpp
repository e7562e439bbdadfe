// Activation checkpointing's memory and time on the CPU (docs/performance.md): one GPT training
// step (forward, cross_entropy, backward, AdamW) with no block checkpointed, with every block,
// and with every block keeping its attention output (selective checkpointing).
// "Activations" is the allocator's peak during the step above what was allocated before it
// (weights, gradients and optimizer state are allocated before it, so they do not count).
//
//   mantissa_checkpoint_bench [n_layer n_embd block_size batch steps dropout]
//
// bench/peers/pytorch_checkpoint.py runs PyTorch's torch.utils.checkpoint on the same model
// (without dropout: pass 0 here to compare).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/cpu_allocator.h"
#include "engine/generator.h"
#include "nn/functional.h"
#include "nn/optim/adam.h"
#include "nn/transformer.h"

namespace mt = mantissa;

namespace {

// One model of the comparison, with its optimizer and its per-step measurements.
struct Arm {
  mt::nn::GPT model{nullptr};
  std::unique_ptr<mt::optim::AdamW> opt;
  std::vector<double> ms, forward_ms, activation_mib;
};

// kind 0: no checkpointing; 1: every block; 2: every block, keeping the attention outputs.
Arm make_arm(const mt::nn::GPTConfig& c, int kind) {
  mt::manual_seed(0);
  Arm a;
  a.model = mt::nn::GPT(c);
  if (kind > 0) {
    std::vector<int64_t> all(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) all[static_cast<size_t>(i)] = i;
    mt::nn::CheckpointOptions options;
    if (kind == 2) options.save_ops = {"scaled_dot_product_attention"};
    a.model->set_activation_checkpointing(all, options);
  }
  a.opt = std::make_unique<mt::optim::AdamW>(a.model->parameters(),
                                             mt::optim::AdamWOptions{.lr = 1e-4});
  return a;
}

// One training step; `record` keeps its time, its forward's time and its activation peak.
void step(Arm& a, const mt::nn::GPTConfig& c, const mt::Tensor& idx, const mt::Tensor& target,
          bool record) {
  a.opt->zero_grad(/*set_to_none=*/false);
  const int64_t before = mt::cpu_memory_stats().allocated_bytes;
  mt::reset_cpu_peak_memory_stats();
  const auto t0 = std::chrono::steady_clock::now();
  const mt::Tensor logits = a.model(idx);
  const mt::Tensor loss =
      mt::nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size}), target.reshape({-1}));
  const auto tf = std::chrono::steady_clock::now();
  loss.backward();
  a.opt->step();
  const auto t1 = std::chrono::steady_clock::now();
  if (!record) return;
  a.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  a.forward_ms.push_back(std::chrono::duration<double, std::milli>(tf - t0).count());
  a.activation_mib.push_back(
      static_cast<double>(mt::cpu_memory_stats().peak_allocated_bytes - before) /
      (1024.0 * 1024.0));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  mt::nn::GPTConfig c;
  c.n_layer = argc > 1 ? std::atoll(argv[1]) : 8;
  c.n_embd = argc > 2 ? std::atoll(argv[2]) : 256;
  c.block_size = argc > 3 ? std::atoll(argv[3]) : 256;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 4;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 20;
  c.n_head = 8;
  c.vocab_size = 256;
  c.dropout = argc > 6 ? std::atof(argv[6]) : 0.1;
  std::printf(
      "GPT %lldL %lld wide, block %lld, batch %lld, byte vocab, dropout %g, AdamW; "
      "%d steps each\n",
      static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
      static_cast<long long>(c.block_size), static_cast<long long>(batch), c.dropout, steps);
  // The models live side by side and take turns, step by step, so that a slow spell of the
  // machine hits all of them; a time ratio is the median of the ratios of neighbouring steps.
  constexpr int kArms = 3;
  Arm arms[kArms] = {make_arm(c, 0), make_arm(c, 1), make_arm(c, 2)};
  const auto opts = mt::TensorOptions().dtype(mt::kInt64);
  const mt::Tensor idx = mt::randint(0, c.vocab_size, {batch, c.block_size}, opts);
  const mt::Tensor target = mt::randint(0, c.vocab_size, {batch, c.block_size}, opts);
  for (Arm& a : arms) step(a, c, idx, target, false);  // allocates gradients and state
  std::vector<double> ratios[kArms];
  for (int s = 0; s < steps; ++s) {
    // Rotate which goes first, so that none always follows another's allocations.
    for (int k = 0; k < kArms; ++k) step(arms[(s + k) % kArms], c, idx, target, true);
    for (int k = 1; k < kArms; ++k) ratios[k].push_back(arms[k].ms.back() / arms[0].ms.back());
  }
  const auto peak = [](const Arm& a) {
    return *std::max_element(a.activation_mib.begin(), a.activation_mib.end());
  };
  std::printf(
      "| blocks checkpointed | activation peak MiB | ms/step (median) | of which forward | "
      "time vs none (median of step triples; middle half) |\n|---|---|---|---|---|\n");
  const char* names[kArms] = {"none", "all", "all, attention kept (checkpoint_keep_attention)"};
  for (int k = 0; k < kArms; ++k) {
    std::printf("| %s | %.1f (%.2fx less) | %.1f | %.1f |", names[k], peak(arms[k]),
                peak(arms[0]) / peak(arms[k]), median(arms[k].ms), median(arms[k].forward_ms));
    if (k == 0) {
      std::printf(" |\n");
      continue;
    }
    std::vector<double>& r = ratios[k];
    std::sort(r.begin(), r.end());
    std::printf(" %.2fx (%.2f-%.2f) |\n", r[r.size() / 2], r[r.size() / 4], r[3 * r.size() / 4]);
  }
  return 0;
}
