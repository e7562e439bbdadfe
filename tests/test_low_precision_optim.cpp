// Adam's low-memory state: bfloat16 moments (Optimizer::set_state_dtype) and stochastic rounding
// of bfloat16 stores (set_stochastic_rounding, kernels/optimizer_math.h): the rounding is
// unbiased and lands on a neighbour; updates below half an ulp survive it (they vanish under
// round-to-nearest); the bits are a function of (seed, parameter, step, element), so the fused,
// per-parameter and resumed paths agree bit for bit; planned state bytes per layout; on a GPU, the
// CPU's trajectory.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "engine/device.h"
#include "kernels/optimizer_math.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

// Runs `steps` AdamW steps on a copy of `init` with gradient `grad` each step.
Tensor train(const Tensor& init, const Tensor& grad, int steps, bool stochastic, uint64_t seed,
             std::optional<mt::DType> state_dtype, bool fused = true, double lr = 1e-3) {
  Tensor p = init.clone().requires_grad_();
  optim::AdamW opt({p}, {.lr = lr, .weight_decay = 0.0});
  opt.set_state_dtype(state_dtype);
  opt.set_stochastic_rounding(stochastic, seed);
  opt.set_fused(fused);
  for (int s = 0; s < steps; ++s) {
    p.set_grad(grad.clone());
    opt.step();
  }
  return p.detach();
}

}  // namespace

TEST(StochasticRounding, IsUnbiasedAndLandsOnANeighbour) {
  const float lo = 1.0f, ulp = 1.0f / 128;  // bfloat16's spacing at 1
  for (float frac : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const float x = lo + frac * ulp;
    double sum = 0;
    const int n = 1 << 16;
    for (int i = 0; i < n; ++i) {
      const float r = static_cast<float>(
          mt::optim_math::round_bf16_stochastic(x, static_cast<uint32_t>(i) * 2654435761u));
      ASSERT_TRUE(r == lo || r == lo + ulp) << r;
      sum += r;
    }
    EXPECT_NEAR(sum / n, x, ulp * 0.01) << "fraction " << frac;
  }
  // Exact values, infinities and NaN do not move.
  EXPECT_EQ(static_cast<float>(mt::optim_math::round_bf16_stochastic(1.5f, 0xffffu)), 1.5f);
  EXPECT_TRUE(std::isinf(static_cast<float>(
      mt::optim_math::round_bf16_stochastic(std::numeric_limits<float>::infinity(), 0xffffu))));
  EXPECT_TRUE(std::isnan(static_cast<float>(
      mt::optim_math::round_bf16_stochastic(std::numeric_limits<float>::quiet_NaN(), 0xffffu))));
  // Negative values round in magnitude, equally unbiased.
  double sum = 0;
  for (int i = 0; i < 4096; ++i)
    sum += static_cast<float>(mt::optim_math::round_bf16_stochastic(-(lo + 0.25f * ulp), i * 16u));
  EXPECT_NEAR(sum / 4096, -(lo + 0.25f * ulp), ulp * 0.02);
}

// A bfloat16 parameter at 1.0 stepped by AdamW at lr 1e-3 (each update ~1e-3, an eighth of the
// ulp 2^-7): round-to-nearest never moves it; stochastic rounding moves it by the total, on
// average over the elements.
TEST(StochasticRounding, UpdatesBelowHalfAnUlpSurviveInBFloat16) {
  const Tensor init = mt::ones({4096}).to(mt::kBFloat16);
  const Tensor grad = mt::ones({4096}).to(mt::kBFloat16);
  const int steps = 40;
  const Tensor nearest = train(init, grad, steps, false, 0, std::nullopt);
  EXPECT_TRUE(mt::equal(nearest, init)) << "round-to-nearest should lose every update";
  const Tensor sr = train(init, grad, steps, true, 7, std::nullopt);
  EXPECT_EQ(sr.dtype(), mt::kBFloat16);
  const double moved = 1.0 - sr.to(mt::kFloat64).mean().item<double>();
  EXPECT_NEAR(moved, steps * 1e-3, steps * 1e-3 * 0.1);
}

// The bits depend on the seed, the parameter, the step and the element only: the per-parameter
// kernels give the fused kernels' bits, the same seed the same run, another seed another.
TEST(StochasticRounding, IsAFunctionOfSeedParameterStepAndElement) {
  mt::manual_seed(1);
  const Tensor init = mt::randn({333}).to(mt::kBFloat16);
  const Tensor grad = mt::randn({333}).to(mt::kBFloat16);
  const Tensor a = train(init, grad, 5, true, 11, std::nullopt, true);
  const Tensor b = train(init, grad, 5, true, 11, std::nullopt, false);
  const Tensor c = train(init, grad, 5, true, 12, std::nullopt, true);
  EXPECT_TRUE(mt::equal(a, b)) << "fused and per-parameter kernels must draw the same bits";
  EXPECT_FALSE(mt::equal(a, c)) << "another seed should round differently";
}

// float32 parameters with bfloat16 moments: the moments are bfloat16, the trajectory stays close
// to float32 state's, and the state costs half.
TEST(LowPrecisionState, BFloat16MomentsTrackFloat32Moments) {
  mt::manual_seed(2);
  const Tensor init = mt::randn({64, 32});
  Tensor p32 = init.clone().requires_grad_(), p16 = init.clone().requires_grad_();
  optim::Adam full({p32}, {.lr = 1e-2}), half({p16}, {.lr = 1e-2});
  half.set_state_dtype(mt::kBFloat16);
  half.set_stochastic_rounding(true, 3);
  for (int s = 0; s < 20; ++s) {
    const Tensor g = mt::randn({64, 32});
    p32.set_grad(g.clone());
    p16.set_grad(g.clone());
    full.step();
    half.step();
  }
  EXPECT_EQ(half.state(0)->buffers.at("exp_avg").dtype(), mt::kBFloat16);
  EXPECT_EQ(half.state(0)->buffers.at("exp_avg_sq").dtype(), mt::kBFloat16);
  EXPECT_EQ(p16.dtype(), mt::kFloat32);
  expect_close(p16, p32, 0, 5e-3, "parameters after 20 steps");
  EXPECT_FALSE(mt::equal(p16, p32));
  const optim::ParamGroup& g = half.param_groups()[0];
  EXPECT_EQ(half.planned_state_bytes(g, p16), 64 * 32 * 2 * 2);
  EXPECT_EQ(full.planned_state_bytes(full.param_groups()[0], p32), 64 * 32 * 2 * 4);
}

// A state_dict saved mid-run and loaded into a fresh optimizer with the same settings continues
// bit for bit: the state stays bfloat16 and the rounding bits follow the step.
TEST(LowPrecisionState, ResumesBitwiseFromAStateDict) {
  mt::manual_seed(4);
  const Tensor init = mt::randn({257});
  std::vector<Tensor> grads;
  for (int s = 0; s < 8; ++s) grads.push_back(mt::randn({257}));
  auto make = [](Tensor& p) {
    auto opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{});
    opt->set_state_dtype(mt::kBFloat16);
    opt->set_stochastic_rounding(true, 99);
    return opt;
  };
  Tensor whole = init.clone().requires_grad_();
  auto a = make(whole);
  for (const Tensor& g : grads) {
    whole.set_grad(g.clone());
    a->step();
  }
  Tensor first = init.clone().requires_grad_();
  auto b = make(first);
  for (int s = 0; s < 4; ++s) {
    first.set_grad(grads[static_cast<size_t>(s)].clone());
    b->step();
  }
  const optim::OptimizerState saved = b->state_dict();
  Tensor second = first.detach().clone().requires_grad_();
  auto c = make(second);
  c->load_state_dict(saved);
  EXPECT_EQ(c->state(0)->buffers.at("exp_avg").dtype(), mt::kBFloat16);
  for (int s = 4; s < 8; ++s) {
    second.set_grad(grads[static_cast<size_t>(s)].clone());
    c->step();
  }
  EXPECT_TRUE(mt::equal(second, whole));
}

TEST(LowPrecisionState, OnlyAdamTakesItAndPlansItsBytes) {
  Tensor p = mt::zeros({10}).requires_grad_();
  optim::SGD sgd({p}, 0.1);
  expect_error([&] { sgd.set_state_dtype(mt::kBFloat16); }, {"SGD", "Adam and AdamW only"});
  expect_error([&] { sgd.set_stochastic_rounding(true, 1); }, {"SGD", "Adam and AdamW only"});
  EXPECT_EQ(sgd.planned_state_bytes(sgd.param_groups()[0], p), 0);  // no momentum, no buffer
  optim::SGD momentum({p}, optim::SGDOptions{.momentum = 0.9, .lr = 0.1});
  EXPECT_EQ(momentum.planned_state_bytes(momentum.param_groups()[0], p), 40);
  optim::Adam adam({p});
  expect_error([&] { adam.set_state_dtype(mt::kFloat16); }, {"Adam", "float32 or bfloat16"});
  // Master weights: a bfloat16 parameter's float32 copy and float32 moments.
  Tensor b = mt::zeros({10}, mt::TensorOptions().dtype(mt::kBFloat16)).requires_grad_();
  optim::Adam master({b});
  master.set_master_weights(true);
  EXPECT_EQ(master.planned_state_bytes(master.param_groups()[0], b), 10 * (4 + 8));
}

// On a GPU, float32 and pure bfloat16 parameters with bfloat16 moments and stochastic rounding
// follow the CPU's trajectory. The rounding bits are the same function of (seed, parameter, step,
// element) on both devices; what can differ is the last bit of the float32 value before a rounding
// (the compilers contract multiply-adds differently), which moves a stochastic rounding to the
// other neighbour with a chance of about 2^-16 per rounding (a float32 ulp over a bfloat16 one).
// So nearly every bfloat16 value is the CPU's bit for bit, and every float32 parameter is within
// a few float32 ulps per step of it.
TEST(LowPrecisionStateCuda, MatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(5);
  const int64_t n = 4099;
  const Tensor init = mt::randn({n});
  std::vector<Tensor> grads;
  for (int s = 0; s < 20; ++s) grads.push_back(mt::randn({n}));
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    auto run = [&](mt::Device d) {
      Tensor p = init.to(dt).to(d).detach().requires_grad_();
      optim::AdamW opt({p}, {.lr = 1e-3, .weight_decay = 0.01});
      opt.set_state_dtype(mt::kBFloat16);
      opt.set_stochastic_rounding(true, 11);
      for (const Tensor& g : grads) {
        p.set_grad(g.to(dt).to(d));
        opt.step();
      }
      return std::vector<Tensor>{p.detach().cpu(), opt.state(0)->buffers.at("exp_avg").cpu(),
                                 opt.state(0)->buffers.at("exp_avg_sq").cpu()};
    };
    const std::vector<Tensor> cpu = run(mt::Device::cpu());
    const std::vector<Tensor> gpu = run(mt::Device::cuda(0));
    const char* names[] = {"parameter", "exp_avg", "exp_avg_sq"};
    for (size_t k = 0; k < cpu.size(); ++k) {
      const std::string what = std::string(mt::dtype_name(dt)) + " " + names[k];
      ASSERT_EQ(gpu[k].dtype(), cpu[k].dtype()) << what;
      const auto a = gpu[k].to(mt::kFloat32).to_vector<float>();
      const auto b = cpu[k].to(mt::kFloat32).to_vector<float>();
      int64_t same = 0;
      for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
      if (cpu[k].dtype() == mt::kBFloat16) {
        EXPECT_GE(same * 100, n * 99) << what << ": " << same << " of " << n << " bitwise equal";
      } else {
        // Contraction: a few float32 ulps a step; a flipped moment: under lr * 2^-6 a step.
        expect_close(gpu[k], cpu[k], 20 * 4 * std::ldexp(1.0, -23), 20 * 1e-3 * std::ldexp(1.0, -6),
                     what);
      }
    }
  }
}
