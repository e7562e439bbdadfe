// The benchmark workloads, shared by mantissa's benchmarks and the libtorch peer so that both run
// the same shapes (bench/peers/pytorch_eager.py mirrors this table; keep the three in step).
//
// Every training workload is Linear layers with bias and ReLU between them, MSE loss against a
// fixed target, and SGD (zero_grad, forward, backward, step) on fixed input data, so that data
// generation is not timed. This header has no dependencies: the libtorch peer includes it too.
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

}  // namespace mantissa_bench
