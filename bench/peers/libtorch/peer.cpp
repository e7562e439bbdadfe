// The libtorch peer: the workloads of bench/workloads.h, written the way a libtorch user writes
// them, timed like bench/peers/pytorch_eager.py times PyTorch.
//
//   libtorch_peer <workload> <cpu|cuda> <float32|bfloat16|float16> [min_time_s] [repetitions]
//
// prints one line: "us_per_step=<best repetition> peak_rss_mib=<..> base_rss_mib=<..>", or
// "unsupported=<reason>" when libtorch cannot run the combination (e.g. float16 CPU autocast).
#include <sys/resource.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "workloads.h"

using mantissa_bench::GPTWorkload;
using mantissa_bench::Workload;

namespace {

double max_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// Autocast for the duration of one forward, as torch.autocast does it.
struct AutocastScope {
  AutocastScope(bool cuda, c10::optional<at::ScalarType> dtype) : cuda_(cuda), on_(dtype) {
    if (!on_) return;
    if (cuda_) {
      at::autocast::set_autocast_gpu_dtype(*dtype);
      at::autocast::set_enabled(true);
    } else {
      at::autocast::set_autocast_cpu_dtype(*dtype);
      at::autocast::set_cpu_enabled(true);
    }
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    if (cuda_)
      at::autocast::set_enabled(false);
    else
      at::autocast::set_cpu_enabled(false);
  }
  bool cuda_;
  bool on_;
};

// nanoGPT's model as a libtorch user writes it. libtorch 1.13 has no
// scaled_dot_product_attention, so attention is nanoGPT's composed fallback: q k^T scaled, the
// causal mask filled with -inf, softmax, times v.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t n_embd, int64_t n_head, int64_t block_size) : n_head(n_head) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    c_attn = register_module("c_attn", torch::nn::Linear(n_embd, 3 * n_embd));
    attn_proj = register_module("attn_proj", torch::nn::Linear(n_embd, n_embd));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    c_fc = register_module("c_fc", torch::nn::Linear(n_embd, 4 * n_embd));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * n_embd, n_embd));
    masked = register_buffer(
        "masked", torch::ones({block_size, block_size}, torch::kBool).tril().logical_not());
  }
  torch::Tensor attn(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head;
    auto qkv = c_attn(x).split(C, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hs)));
    att = att.masked_fill(masked.slice(0, 0, T).slice(1, 0, T),
                          -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
    return attn_proj(y);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp_proj(torch::gelu(c_fc(ln_2(x))));
  }
  int64_t n_head;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
  torch::Tensor masked;
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const GPTWorkload& w) {
    wte = register_module("wte", torch::nn::Embedding(w.vocab_size, w.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(w.block_size, w.n_embd));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < w.n_layer; ++i) h->push_back(Block(w.n_embd, w.n_head, w.block_size));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w.n_embd})));
    // nanoGPT's initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)).
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.key().find("ln_") != std::string::npos || p.key().find("bias") != std::string::npos)
        continue;
      const bool proj = p.key().find("_proj.weight") != std::string::npos;
      p.value().normal_(0.0, proj ? 0.02 / std::sqrt(2.0 * double(w.n_layer)) : 0.02);
    }
    for (auto& p : named_parameters())
      if (p.key().find("bias") != std::string::npos) p.value().zero_();
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    const int64_t T = idx.size(1);
    auto pos = torch::arange(0, T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    auto x = wte(idx) + wpe(pos);
    for (const auto& block : *h) x = block->as<BlockImpl>()->forward(x);
    return torch::nn::functional::linear(ln_f(x), wte->weight);  // lm_head tied to wte
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT);

// Warms up, finds an iteration count that takes at least min_time, and returns the best of
// `reps` timed repetitions in seconds per step.
double time_step(const std::function<void()>& step, const std::function<void()>& sync,
                 double min_time, int reps) {
  using clock = std::chrono::steady_clock;
  int64_t iters = 1;
  for (;;) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < iters; ++i) step();
    sync();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= min_time) break;
    iters = s <= 0 ? iters * 10 : std::max<int64_t>(iters * 2, int64_t(iters * 1.2 * min_time / s));
  }
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < iters; ++i) step();
    sync();
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count() / iters);
  }
  return best;
}

// One nanoGPT training step (bench/workloads.h's GPT workloads).
int run_gpt(const GPTWorkload& w, bool cuda, c10::optional<at::ScalarType> amp, double min_time,
            int reps, double base_rss) {
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  torch::manual_seed(0);
  GPT model(w);
  model->to(device);
  model->train();
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto idx = torch::randint(0, w.vocab_size, {w.batch, w.block_size}, opts);
  auto targets = torch::randint(0, w.vocab_size, {w.batch * w.block_size}, opts);
  // nanoGPT's groups: weight decay on parameters of two or more dimensions only.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(w.lr).betas({0.9, 0.95}).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(w.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  torch::optim::AdamW optimizer(groups, torch::optim::AdamWOptions(w.lr));
  auto step = [&] {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      AutocastScope scope(cuda, amp);
      auto logits = model->forward(idx);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets);
    }
    loss.backward();
    optimizer.step();
  };
  const double best = time_step(
      step,
      [&] {
        if (cuda) torch::cuda::synchronize();
      },
      min_time, reps);
  std::printf("us_per_step=%.4f peak_rss_mib=%.2f base_rss_mib=%.2f\n", best * 1e6, max_rss_mib(),
              base_rss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const double base_rss = max_rss_mib();
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s workload cpu|cuda float32|bfloat16|float16 [min_s] [reps]\n",
                 argv[0]);
    return 2;
  }
  const Workload* w = mantissa_bench::find_workload(argv[1]);
  const GPTWorkload* gpt = mantissa_bench::find_gpt_workload(argv[1]);
  const bool cuda = std::string(argv[2]) == "cuda";
  const std::string precision = argv[3];
  const double min_time = argc > 4 ? std::atof(argv[4]) : 0.2;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 3;
  if (gpt != nullptr) {
    if (cuda && !torch::cuda::is_available()) {
      std::printf("unsupported=no CUDA device\n");
      return 0;
    }
    if (precision == "float16" && !cuda) {
      std::printf("unsupported=CPU autocast has no float16 in libtorch %s\n", TORCH_VERSION);
      return 0;
    }
    c10::optional<at::ScalarType> amp;
    if (precision == "bfloat16") amp = at::kBFloat16;
    if (precision == "float16") amp = at::kHalf;
    return run_gpt(*gpt, cuda, amp, min_time, reps, base_rss);
  }
  if (w == nullptr) {
    std::fprintf(stderr, "unknown workload %s\n", argv[1]);
    return 2;
  }
  if (cuda && !torch::cuda::is_available()) {
    std::printf("unsupported=no CUDA device\n");
    return 0;
  }
  c10::optional<at::ScalarType> amp;
  at::ScalarType dtype = at::kFloat;
  if (precision == "bfloat16") amp = dtype = at::kBFloat16;
  if (precision == "float16") amp = dtype = at::kHalf;
  // libtorch 1.13's CPU autocast supports bfloat16 only.
  if (!cuda && precision == "float16" && w->name != "add") {
    std::printf("unsupported=CPU autocast has no float16 in libtorch %s\n", TORCH_VERSION);
    return 0;
  }
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  torch::manual_seed(0);

  std::function<void()> step;
  torch::Tensor a, b, x, target;
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::SGD> optimizer;
  if (w->name == "add") {
    a = torch::randn({w->batch}, torch::TensorOptions().device(device).dtype(dtype));
    b = torch::randn({w->batch}, torch::TensorOptions().device(device).dtype(dtype));
    step = [&] {
      auto c = a + b;
      (void)c;
    };
  } else {
    for (size_t i = 0; i + 1 < w->layers.size(); ++i) {
      if (i > 0) model->push_back(torch::nn::ReLU());
      model->push_back(torch::nn::Linear(w->layers[i], w->layers[i + 1]));
    }
    model->to(device);
    x = torch::randn({w->batch, w->layers.front()}, device);
    target = torch::randn({w->batch, w->layers.back()}, device);
    if (w->train) {
      optimizer = std::make_unique<torch::optim::SGD>(
          model->parameters(), torch::optim::SGDOptions(w->lr).momentum(w->momentum));
      step = [&] {
        optimizer->zero_grad();  // set_to_none, like mantissa's and PyTorch 2's default
        torch::Tensor loss;
        {
          AutocastScope scope(cuda, amp);
          loss = torch::mse_loss(model->forward(x), target);
        }
        loss.backward();
        optimizer->step();
      };
    } else {
      step = [&] {
        for (auto& p : model->parameters()) p.mutable_grad().reset();
        torch::Tensor loss;
        {
          AutocastScope scope(cuda, amp);
          loss = model->forward(x).sum();
        }
        loss.backward();
      };
    }
  }
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  const double best = time_step(step, sync, min_time, reps);
  std::printf("us_per_step=%.4f peak_rss_mib=%.2f base_rss_mib=%.2f\n", best * 1e6, max_rss_mib(),
              base_rss);
  return 0;
}
