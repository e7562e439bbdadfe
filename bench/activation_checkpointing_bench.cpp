// Activation checkpointing's memory and time on the CPU (docs/performance.md): one GPT training
// step (forward, cross_entropy, backward, AdamW) with no block and with every block checkpointed.
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
#include <vector>

#include "engine/cpu_allocator.h"
#include "engine/generator.h"
#include "nn/functional.h"
#include "nn/optim/adam.h"
#include "nn/transformer.h"

namespace mt = mantissa;

namespace {

struct Result {
  double activation_mib = 0;
  double ms_per_step = 0;
  double forward_ms = 0;  // of the same step: forward and loss; the rest is backward and AdamW
};

Result run(const mt::nn::GPTConfig& c, int64_t batch, int steps, bool checkpointed) {
  mt::manual_seed(0);
  mt::nn::GPT model(c);
  if (checkpointed) {
    std::vector<int64_t> all(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) all[static_cast<size_t>(i)] = i;
    model->set_activation_checkpointing(all);
  }
  mt::optim::AdamW opt(model->parameters(), {.lr = 1e-4});
  const auto opts = mt::TensorOptions().dtype(mt::kInt64);
  const mt::Tensor idx = mt::randint(0, c.vocab_size, {batch, c.block_size}, opts);
  const mt::Tensor target = mt::randint(0, c.vocab_size, {batch, c.block_size}, opts);
  std::vector<double> ms, fwd, act;
  for (int s = 0; s < steps + 1; ++s) {  // the first step allocates gradients and state
    opt.zero_grad(/*set_to_none=*/false);
    const int64_t before = mt::cpu_memory_stats().allocated_bytes;
    mt::reset_cpu_peak_memory_stats();
    const auto t0 = std::chrono::steady_clock::now();
    const mt::Tensor logits = model(idx);
    const mt::Tensor loss =
        mt::nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size}), target.reshape({-1}));
    const auto tf = std::chrono::steady_clock::now();
    loss.backward();
    opt.step();
    const auto t1 = std::chrono::steady_clock::now();
    if (s == 0) continue;
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    fwd.push_back(std::chrono::duration<double, std::milli>(tf - t0).count());
    act.push_back(static_cast<double>(mt::cpu_memory_stats().peak_allocated_bytes - before) /
                  (1024.0 * 1024.0));
  }
  // The median step, and its forward.
  std::vector<size_t> order(ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  const size_t mid = order[order.size() / 2];
  return {*std::max_element(act.begin(), act.end()), ms[mid], fwd[mid]};
}

}  // namespace

int main(int argc, char** argv) {
  mt::nn::GPTConfig c;
  c.n_layer = argc > 1 ? std::atoll(argv[1]) : 8;
  c.n_embd = argc > 2 ? std::atoll(argv[2]) : 256;
  c.block_size = argc > 3 ? std::atoll(argv[3]) : 256;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 4;
  const int steps = argc > 5 ? std::atoi(argv[5]) : 3;
  c.n_head = 8;
  c.vocab_size = 256;
  c.dropout = argc > 6 ? std::atof(argv[6]) : 0.1;
  std::printf(
      "GPT %lldL %lld wide, block %lld, batch %lld, byte vocab, dropout %g, AdamW; "
      "median of %d steps\n",
      static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
      static_cast<long long>(c.block_size), static_cast<long long>(batch), c.dropout, steps);
  std::printf(
      "| blocks checkpointed | activation peak MiB | ms/step | of which forward |\n"
      "|---|---|---|---|\n");
  Result r[2];
  for (int pass = 0; pass < 2; ++pass) {  // interleaved: none, all, none, all
    for (int ck = 0; ck < 2; ++ck) {
      const Result x = run(c, batch, steps, ck == 1);
      if (pass == 0 || x.ms_per_step < r[ck].ms_per_step) r[ck] = x;
    }
  }
  std::printf("| none | %.1f | %.1f | %.1f |\n| all %lld | %.1f | %.1f | %.1f |\n",
              r[0].activation_mib, r[0].ms_per_step, r[0].forward_ms,
              static_cast<long long>(c.n_layer), r[1].activation_mib, r[1].ms_per_step,
              r[1].forward_ms);
  std::printf("activations: %.2fx less; time: %.2fx\n", r[0].activation_mib / r[1].activation_mib,
              r[1].ms_per_step / r[0].ms_per_step);
  return 0;
}
