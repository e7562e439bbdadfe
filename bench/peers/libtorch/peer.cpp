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
#include <cstdio>
#include <cstdlib>
#include <string>

#include "workloads.h"

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

}  // namespace

int main(int argc, char** argv) {
  const double base_rss = max_rss_mib();
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s workload cpu|cuda float32|bfloat16|float16 [min_s] [reps]\n",
                 argv[0]);
    return 2;
  }
  const Workload* w = mantissa_bench::find_workload(argv[1]);
  const bool cuda = std::string(argv[2]) == "cuda";
  const std::string precision = argv[3];
  const double min_time = argc > 4 ? std::atof(argv[4]) : 0.2;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 3;
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
  using clock = std::chrono::steady_clock;
  // Warm up, then find an iteration count that takes at least min_time.
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
  std::printf("us_per_step=%.4f peak_rss_mib=%.2f base_rss_mib=%.2f\n", best * 1e6, max_rss_mib(),
              base_rss);
  return 0;
}
