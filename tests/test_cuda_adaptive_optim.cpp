// RMSprop, Adagrad, NAdam and RAdam on CUDA against the CPU: the same steps from the same start,
// in float64 and float32 and with bfloat16 parameters under master weights, and a step skipped on
// the device when found_inf is set. Every test skips without a GPU.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/optim/adagrad.h"
#include "nn/optim/nadam.h"
#include "nn/optim/radam.h"
#include "nn/optim/rmsprop.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::testing::kGpu;

namespace {

struct Case {
  std::string name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};

std::vector<Case> cases() {
  return {
      {"rmsprop",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::RMSprop>(
             p, optim::RMSpropOptions{
                    .lr = 0.01, .weight_decay = 0.1, .momentum = 0.8, .centered = true});
       }},
      {"adagrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adagrad>(
             p,
             optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.05, .initial_accumulator_value = 0.1});
       }},
      {"nadam",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::NAdam>(p, optim::NAdamOptions{.weight_decay = 0.1});
       }},
      {"radam",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::RAdam>(p, optim::RAdamOptions{.lr = 0.01});
       }},
  };
}

// Runs `steps` steps of the case on both devices with the same gradients; returns the parameters
// (on the CPU) of each.
std::pair<std::vector<Tensor>, std::vector<Tensor>> run_both(const Case& c, mt::DType dtype,
                                                             bool master, int steps) {
  std::vector<Tensor> cpu, gpu;
  // Sizes across chunk and list boundaries of the multi-tensor launches.
  for (int64_t n : {1, 37, 5000, 70000}) {
    Tensor p = mt::testing::random_tensor({n}, dtype, false);
    cpu.push_back(p.clone().requires_grad_());
    gpu.push_back(p.to(kGpu).requires_grad_());
  }
  auto a = c.make(cpu), b = c.make(gpu);
  a->set_master_weights(master);
  b->set_master_weights(master);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      Tensor g = mt::testing::random_tensor(cpu[i].shape(), dtype, false);
      cpu[i].set_grad(g);
      gpu[i].set_grad(g.to(kGpu));
    }
    a->step();
    b->step();
  }
  std::vector<Tensor> back;
  for (const Tensor& g : gpu) back.push_back(g.detach().to(mt::Device::cpu()));
  return {cpu, back};
}

TEST(CudaAdaptiveOptim, MatchesTheCpu) {
  MT_REQUIRE_GPU();
  for (const Case& c : cases()) {
    for (mt::DType dtype : {mt::kFloat64, mt::kFloat32}) {
      auto [cpu, gpu] = run_both(c, dtype, false, 6);
      const double tol = dtype == mt::kFloat64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < cpu.size(); ++i) {
        mt::testing::expect_close(gpu[i], cpu[i].detach(), tol, tol,
                                  c.name + " " + std::to_string(i));
      }
    }
  }
}

TEST(CudaAdaptiveOptim, MasterWeightsMatchTheCpu) {
  MT_REQUIRE_GPU();
  for (const Case& c : cases()) {
    auto [cpu, gpu] = run_both(c, mt::kBFloat16, true, 4);
    for (size_t i = 0; i < cpu.size(); ++i) {
      // One bfloat16 ulp: the float32 master copies agree closely, the rounding may differ.
      mt::testing::expect_close(gpu[i].to(mt::kFloat32), cpu[i].detach().to(mt::kFloat32), 8e-3,
                                1e-6, c.name + " bfloat16 " + std::to_string(i));
    }
  }
}

TEST(CudaAdaptiveOptim, FoundInfSkipsOnTheDevice) {
  MT_REQUIRE_GPU();
  for (const Case& c : cases()) {
    Tensor p = mt::testing::random_tensor({300}, mt::kFloat32, false).to(kGpu).requires_grad_();
    auto opt = c.make({p});
    p.set_grad(mt::ones_like(p));
    opt->step();
    const Tensor before = p.detach().clone();
    opt->step_if_finite(mt::full({}, 1.0, mt::TensorOptions(kGpu).dtype(mt::kFloat32)));
    EXPECT_TRUE(opt->last_step_skipped()) << c.name;
    EXPECT_TRUE(mt::equal(p.detach(), before)) << c.name;
    EXPECT_EQ(opt->state(0)->step, 1) << c.name;
  }
}

}  // namespace
