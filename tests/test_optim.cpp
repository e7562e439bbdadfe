// Optimizers, LR schedulers and gradient clipping, checked against plain-loop float64
// references written here from the textbook update rules.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <sstream>

#include "nn/clip_grad.h"
#include "nn/optim/adagrad.h"
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/nadam.h"
#include "nn/optim/radam.h"
#include "nn/optim/rmsprop.h"
#include "nn/optim/sgd.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using Vec = std::vector<double>;

namespace {

// ---- references ---------------------------------------------------------------------------
struct SgdRef {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  Vec buf = {};
  void step(Vec& p, const Vec& grad) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = maximize ? -grad[i] : grad[i];
      d += weight_decay * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false, amsgrad = false, maximize = false;
  Vec m = {}, v = {}, vmax = {};
  int t = 0;
  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m = v = vmax = Vec(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = maximize ? -grad[i] : grad[i];
      if (decoupled) {
        p[i] *= 1 - lr * weight_decay;
      } else {
        g += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double m_hat = m[i] / bc1, v_hat = (amsgrad ? vmax[i] : v[i]) / bc2;
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// A random tensor; non-contiguous ones are a step-2 slice of a transposed buffer. (Local so
// the shapes do not depend on test_util's helper.)
Tensor random_tensor(const mt::Shape& shape, mt::DType dtype, bool non_contiguous) {
  if (!non_contiguous || shape.size() == 0) return mt::testing::random_tensor(shape, dtype, false);
  mt::Shape big = shape;
  if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
  big[0] *= 2;
  Tensor v = mt::testing::random_tensor(big, dtype, false).slice(0, 0, std::nullopt, 2);
  if (v.dim() >= 2) v = v.transpose(-1, -2);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.shape(), shape);
  return v;
}

Tensor as_tensor(const Vec& v, const mt::Shape& shape) {
  return mt::from_vector<double>(v, shape, mt::kFloat64);
}

// Per-dtype tolerance for a few optimizer steps (the reference does not round between steps).
mt::testing::Tolerance step_tolerance(mt::DType t) {
  switch (t) {
    case mt::kFloat64:
      return {1e-12, 1e-12};
    case mt::kFloat32:
      return {1e-5, 1e-5};
    case mt::kFloat16:
      return {4e-3, 4e-3};
    default:
      return {3e-2, 3e-2};
  }
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// Steps one parameter with random (alternately non-contiguous) gradients through the optimizer
// and the reference, comparing after every step.
template <typename Ref>
void check_trajectory(const MakeOpt& make, Ref ref, mt::DType dtype, bool non_contiguous, int steps,
                      const std::string& what) {
  Tensor param = random_tensor({3, 4}, dtype, non_contiguous).requires_grad_();
  auto opt = make({param});
  Vec p = param.to_vector<double>();
  const auto tol = step_tolerance(dtype);
  for (int k = 0; k < steps; ++k) {
    Tensor g = random_tensor({3, 4}, dtype, k % 2 == 1);
    param.set_grad(g);
    opt->step();
    ref.step(p, g.to_vector<double>());
    expect_close(param, as_tensor(p, param.shape()), tol.rtol, tol.atol,
                 what + " " + std::string(mt::dtype_name(dtype)) + " step " + std::to_string(k));
    EXPECT_TRUE(param.is_leaf() && param.requires_grad()) << what;
  }
}

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------
TEST(SGD, MatchesReferenceForEveryOption) {
  const std::vector<SgdRef> configs{
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.5},
      {.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .maximize = true},
      {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.2, .nesterov = true, .maximize = true},
  };
  for (size_t c = 0; c < configs.size(); ++c) {
    const SgdRef& cfg = configs[c];
    MakeOpt make = [&](std::vector<Tensor> ps) {
      return std::make_unique<optim::SGD>(
          std::move(ps), cfg.lr,
          optim::SGDOptions{cfg.momentum, cfg.dampening, cfg.weight_decay, cfg.nesterov,
                            cfg.maximize});
    };
    for (mt::DType dtype : mt::testing::floating_dtypes()) {
      const bool reduced = mt::is_reduced_float(dtype);
      check_trajectory(make, cfg, dtype, /*non_contiguous=*/c % 2 == 0, reduced ? 3 : 6,
                       "SGD config " + std::to_string(c));
    }
  }
}

TEST(SGD, PositionalLrWithModuleParameters) {
  mt::nn::Linear model(4, 3);
  mt::optim::SGD optimizer(model->parameters(), /*lr=*/0.001);
  const Vec w0 = model->weight.to_vector<double>();
  Tensor g = random_tensor(model->weight.shape(), mt::kFloat32, false);
  model->weight.set_grad(g);
  optimizer.step();
  Vec expected = w0;
  const Vec gv = g.to_vector<double>();
  for (size_t i = 0; i < expected.size(); ++i) expected[i] -= 0.001 * gv[i];
  expect_close(model->weight, as_tensor(expected, model->weight.shape()));
  EXPECT_DOUBLE_EQ(optimizer.lr(), 0.001);
}

// ---- Adam / AdamW -------------------------------------------------------------------------
TEST(Adam, MatchesReferenceForEveryOption) {
  std::vector<AdamRef> configs(7);
  configs[0] = {.lr = 0.1};
  configs[1] = {.lr = 0.1, .amsgrad = true};
  configs[2] = {.lr = 0.05, .weight_decay = 0.1};
  configs[3] = {.lr = 0.1, .weight_decay = 0.1, .decoupled = true};
  configs[4] = {.lr = 0.1, .weight_decay = 0.05, .amsgrad = true, .maximize = true};
  configs[5] = {.lr = 0.1, .beta1 = 0.3, .beta2 = 0.9, .eps = 1e-3};  // lerp's large-weight form
  configs[6] = {
      .lr = 0.1, .weight_decay = 0.2, .decoupled = true, .amsgrad = true, .maximize = true};
  for (size_t c = 0; c < configs.size(); ++c) {
    const AdamRef& cfg = configs[c];
    MakeOpt make = [&](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
      if (cfg.decoupled) {
        return std::make_unique<optim::AdamW>(std::move(ps),
                                              optim::AdamWOptions{cfg.lr,
                                                                  {cfg.beta1, cfg.beta2},
                                                                  cfg.eps,
                                                                  cfg.weight_decay,
                                                                  cfg.amsgrad,
                                                                  cfg.maximize});
      }
      return std::make_unique<optim::Adam>(std::move(ps), optim::AdamOptions{cfg.lr,
                                                                             {cfg.beta1, cfg.beta2},
                                                                             cfg.eps,
                                                                             cfg.weight_decay,
                                                                             cfg.amsgrad,
                                                                             cfg.maximize});
    };
    for (mt::DType dtype : mt::testing::floating_dtypes()) {
      const bool reduced = mt::is_reduced_float(dtype);
      check_trajectory(make, cfg, dtype, /*non_contiguous=*/c % 2 == 1, reduced ? 3 : 8,
                       "Adam config " + std::to_string(c));
    }
  }
}

TEST(Adam, AdamWDefaultsDecoupleWeightDecay) {
  Tensor w = random_tensor({5}, mt::kFloat64, false).requires_grad_();
  optim::AdamW opt({w});
  const auto& group = opt.param_groups()[0];
  EXPECT_EQ(group.get("weight_decay"), 1e-2);
  EXPECT_EQ(group.get("decoupled_weight_decay"), 1.0);
  EXPECT_EQ(group.get("lr"), 1e-3);
  EXPECT_EQ(group.get("beta1"), 0.9);
  EXPECT_EQ(group.get("beta2"), 0.999);
  EXPECT_EQ(group.get("eps"), 1e-8);
  optim::Adam adam({random_tensor({5}, mt::kFloat64, false).requires_grad_()});
  EXPECT_EQ(adam.param_groups()[0].get("weight_decay"), 0.0);
  EXPECT_EQ(adam.param_groups()[0].get("decoupled_weight_decay"), 0.0);

  AdamRef ref{.lr = 1e-3, .weight_decay = 1e-2, .decoupled = true};
  Vec p = w.to_vector<double>();
  for (int k = 0; k < 4; ++k) {
    Tensor g = random_tensor({5}, mt::kFloat64, false);
    w.set_grad(g);
    opt.step();
    ref.step(p, g.to_vector<double>());
  }
  expect_close(w, as_tensor(p, w.shape()));
  EXPECT_EQ(opt.state(0)->step, 4);
}

// float32 arithmetic op by op as PyTorch's single-tensor implementations round it (each tensor
// op rounds its result); the fused kernels must agree bit for bit. (PyTorch's own vectorised
// loops may fuse a multiply-add, so agreement with PyTorch itself is to within a few ulps.)
TEST(Adam, Float32RoundsLikePyTorchOps) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  Tensor w = random_tensor({64}, mt::kFloat32, false).requires_grad_();
  optim::Adam opt({w}, {.lr = lr, .weight_decay = wd, .amsgrad = true});
  std::vector<float> p = w.to_vector<float>(), m(64, 0.f), v(64, 0.f), vmax(64, 0.f);
  for (int t = 1; t <= 30; ++t) {
    Tensor g = random_tensor({64}, mt::kFloat32, false);
    w.set_grad(g);
    opt.step();
    const std::vector<float> gv = g.to_vector<float>();
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    const float step_size = static_cast<float>(-(lr / bc1)),
                bc2s = static_cast<float>(std::sqrt(bc2));
    for (size_t i = 0; i < p.size(); ++i) {
      const float grad = gv[i] + static_cast<float>(wd) * p[i];  // grad.add(p, alpha)
      m[i] = m[i] + static_cast<float>(1 - b1) * (grad - m[i]);  // lerp_, small weight
      v[i] = v[i] * static_cast<float>(b2);                      // mul_
      v[i] = v[i] + static_cast<float>(1 - b2) * grad * grad;    // addcmul_
      vmax[i] = std::max(vmax[i], v[i]);                         // maximum
      const float denom = std::sqrt(vmax[i]) / bc2s + static_cast<float>(eps);  // sqrt, div, add_
      p[i] = p[i] + step_size * m[i] / denom;                                   // addcdiv_
    }
  }
  EXPECT_EQ(w.to_vector<float>(), p);
}

TEST(SGD, Float32RoundsLikePyTorchOps) {
  const double lr = 0.05, mom = 0.9, wd = 0.01;
  Tensor w = random_tensor({64}, mt::kFloat32, false).requires_grad_();
  optim::SGD opt({w}, lr, {.momentum = mom, .weight_decay = wd, .nesterov = true});
  std::vector<float> p = w.to_vector<float>(), buf;
  for (int t = 0; t < 30; ++t) {
    Tensor g = random_tensor({64}, mt::kFloat32, false);
    w.set_grad(g);
    opt.step();
    const std::vector<float> gv = g.to_vector<float>();
    if (buf.empty()) buf.resize(64);
    for (size_t i = 0; i < p.size(); ++i) {
      const float d = gv[i] + static_cast<float>(wd) * p[i];
      buf[i] = t == 0 ? d : buf[i] * static_cast<float>(mom) + 1.0f * d;
      p[i] = p[i] + static_cast<float>(-lr) * (d + static_cast<float>(mom) * buf[i]);
    }
  }
  EXPECT_EQ(w.to_vector<float>(), p);
}

// A long float32 run stays within PyTorch-comparison tolerance of the exact trajectory.
TEST(Adam, Float32HundredStepsTrackFloat64Reference) {
  Tensor w = random_tensor({4, 5}, mt::kFloat32, false).requires_grad_();
  optim::Adam opt({w}, {.lr = 0.01});
  AdamRef ref{.lr = 0.01};
  Vec p = w.to_vector<double>();
  for (int k = 0; k < 100; ++k) {
    Tensor g = random_tensor({4, 5}, mt::kFloat32, false);
    w.set_grad(g);
    opt.step();
    ref.step(p, g.to_vector<double>());
  }
  expect_close(w, as_tensor(p, w.shape()), 1e-5, 1e-6, "100 float32 Adam steps");
}

// Large enough for the kernels to split the elements across threads.
TEST(Adam, LargeParameterMatchesReference) {
  Tensor w = random_tensor({50000}, mt::kFloat64, false).requires_grad_();
  optim::Adam opt({w}, {.lr = 0.1, .weight_decay = 0.1, .amsgrad = true});
  AdamRef ref{.lr = 0.1, .weight_decay = 0.1, .amsgrad = true};
  Vec p = w.to_vector<double>();
  for (int k = 0; k < 3; ++k) {
    Tensor g = random_tensor({50000}, mt::kFloat64, false);
    w.set_grad(g);
    opt.step();
    ref.step(p, g.to_vector<double>());
  }
  expect_close(w, as_tensor(p, w.shape()));
}

// ---- common optimizer behaviour -----------------------------------------------------------
TEST(Optimizer, PerGroupOptionsAndDefaults) {
  Tensor w = random_tensor({3, 2}, mt::kFloat64, false).requires_grad_();
  Tensor b = random_tensor({2}, mt::kFloat64, false).requires_grad_();
  optim::ParamGroup g0{{w}, {}};
  optim::ParamGroup g1{{b}, {{"lr", 0.01}}};
  g1["momentum"] = 0.0;
  optim::SGD opt({g0, g1}, 0.1, {.momentum = 0.9});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.lr(0), 0.1);
  EXPECT_EQ(opt.lr(1), 0.01);
  EXPECT_EQ(opt.param_groups()[0].get("momentum"), 0.9);
  EXPECT_EQ(opt.param_groups()[1].get("momentum"), 0.0);
  EXPECT_EQ(opt.param_groups()[1].get("dampening"), 0.0);

  SgdRef rw{.lr = 0.1, .momentum = 0.9}, rb{.lr = 0.01};
  Vec pw = w.to_vector<double>(), pb = b.to_vector<double>();
  for (int k = 0; k < 3; ++k) {
    if (k == 2) {  // lr changes between steps apply to the next step
      opt.set_lr(0.2, 0);
      rw.lr = 0.2;
    }
    Tensor gw = random_tensor({3, 2}, mt::kFloat64, true),
           gb = random_tensor({2}, mt::kFloat64, false);
    w.set_grad(gw);
    b.set_grad(gb);
    opt.step();
    rw.step(pw, gw.to_vector<double>());
    rb.step(pb, gb.to_vector<double>());
  }
  expect_close(w, as_tensor(pw, w.shape()));
  expect_close(b, as_tensor(pb, b.shape()));
  EXPECT_EQ(opt.state(1)->buffers.count("momentum_buffer"), 0u);  // no momentum, no buffer
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(0), 0.5);
  EXPECT_EQ(opt.lr(1), 0.5);

  Tensor c = random_tensor({4}, mt::kFloat64, false).requires_grad_();
  opt.add_param_group({{c}, {{"lr", 0.3}}});
  EXPECT_EQ(opt.param_groups()[2].get("momentum"), 0.9);
  expect_error([&] { opt.lr(3); }, {"SGD: parameter group 3 out of range"});
}

// Groups typed as in libtorch: made from an optimizer's options struct, read back as one and
// changed as one, while the same options stay readable by name (schedulers, state_dict).
TEST(Optimizer, TypedParamGroups) {
  Tensor w = random_tensor({3, 2}, mt::kFloat64, false).requires_grad_();
  Tensor b = random_tensor({2}, mt::kFloat64, false).requires_grad_();
  optim::Adam opt({optim::ParamGroup{
                       {w}, optim::AdamOptions{.lr = 0.05, .betas = {0.8, 0.99}, .amsgrad = true}},
                   optim::ParamGroup{{b}}});
  const auto g0 = opt.param_groups()[0].options_as<optim::AdamOptions>();
  EXPECT_EQ(g0.lr, 0.05);
  EXPECT_EQ(g0.betas, (std::pair<double, double>{0.8, 0.99}));
  EXPECT_TRUE(g0.amsgrad);
  EXPECT_EQ(g0.eps, 1e-8);
  EXPECT_EQ(opt.param_groups()[0].get("beta1"), 0.8);
  EXPECT_EQ(opt.param_groups()[0].get("amsgrad"), 1.0);
  auto g1 = opt.param_groups()[1].options_as<optim::AdamOptions>();
  EXPECT_EQ(g1.lr, 1e-3);  // the optimizer's defaults
  EXPECT_FALSE(g1.maximize);
  g1.weight_decay = 0.1;
  g1.maximize = true;
  opt.param_groups()[1].set_options(g1);  // the next step uses it
  EXPECT_EQ(opt.param_groups()[1].get("maximize"), 1.0);
  EXPECT_EQ(opt.param_groups()[1].options_as<optim::AdamOptions>().weight_decay, 0.1);

  AdamRef rw{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .amsgrad = true};
  AdamRef rb{.weight_decay = 0.1, .maximize = true};
  Vec pw = w.to_vector<double>(), pb = b.to_vector<double>();
  for (int k = 0; k < 3; ++k) {
    Tensor gw = random_tensor({3, 2}, mt::kFloat64, false),
           gb = random_tensor({2}, mt::kFloat64, false);
    w.set_grad(gw);
    b.set_grad(gb);
    opt.step();
    rw.step(pw, gw.to_vector<double>());
    rb.step(pb, gb.to_vector<double>());
  }
  expect_close(w, as_tensor(pw, w.shape()));
  expect_close(b, as_tensor(pb, b.shape()));

  // Another optimizer's struct is refused by its first option the optimizer does not know, and
  // a group read as a struct whose options it lacks names the missing one.
  expect_error(
      [&] {
        optim::SGD({optim::ParamGroup{{w}, optim::AdamOptions{}}}, 0.1);
      },
      {"SGD: unknown option 'amsgrad'"});
  expect_error([&] { (void)opt.param_groups()[0].options_as<optim::SGDOptions>(); },
               {"no option 'momentum'"});
}

// The step reads a group as its struct without looking names up; every way of writing an option
// (by name, by arithmetic, by struct, replacing the options, loading a state dict) reaches the
// next read and the next step.
TEST(Optimizer, TypedReadFollowsEveryWriteToTheGroup) {
  optim::ParamGroup g({}, optim::SGDOptions{.momentum = 0.5});
  EXPECT_EQ(g.options_as<optim::SGDOptions>().momentum, 0.5);
  g["lr"] = 0.25;
  g["momentum"] *= 3.0;
  g["extra"] = 7.0;  // a name the struct does not have (as a scheduler's initial_lr)
  const auto o = g.options_as<optim::SGDOptions>();
  EXPECT_EQ(o.lr, 0.25);
  EXPECT_EQ(o.momentum, 1.5);
  EXPECT_EQ(static_cast<double>(g["extra"]), 7.0);
  g["nesterov"] = g["lr"];  // one option's value into another
  EXPECT_TRUE(g.options_as<optim::SGDOptions>().nesterov);
  std::map<std::string, double> replaced = g.options();
  replaced["lr"] = 0.125;
  g.set_options(replaced);
  EXPECT_EQ(g.options_as<optim::SGDOptions>().lr, 0.125);
  expect_error([&] { (void)static_cast<double>(g["missing"]); }, {"no option 'missing'"});

  // A rate set between steps moves the parameter by that rate; a loaded state dict's options
  // replace the group's.
  Tensor w = mt::ones({2}, mt::kFloat64).requires_grad_();
  optim::SGD opt({w}, 1.0);
  w.set_grad(mt::ones({2}, mt::kFloat64));
  opt.step();  // 1 - 1 = 0
  const optim::OptimizerState saved = opt.state_dict();
  opt.param_groups()[0]["lr"] = 0.5;
  opt.step();  // 0 - 0.5
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{-0.5, -0.5}));
  opt.load_state_dict(saved);  // lr 1 again
  opt.step();
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{-1.5, -1.5}));
}

TEST(Optimizer, ZeroGrad) {
  Tensor w = random_tensor({3}, mt::kFloat32, false).requires_grad_();
  Tensor u = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  optim::SGD opt({w, u}, 0.1);
  Tensor g = random_tensor({3}, mt::kFloat32, false);
  w.set_grad(g);
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_same(g));  // zeroed in place
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(3, 0.f));
  EXPECT_FALSE(u.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Optimizer, ParametersWithoutGradAreUntouched) {
  Tensor w = random_tensor({3}, mt::kFloat32, false).requires_grad_();
  Tensor frozen = random_tensor({2, 2}, mt::kFloat32, true).requires_grad_();
  const auto before = frozen.to_vector<float>();
  const uint32_t version = frozen.version();
  optim::Adam opt({w, frozen}, {.lr = 0.1, .weight_decay = 0.1});
  w.set_grad(random_tensor({3}, mt::kFloat32, false));
  opt.step();
  opt.step();
  EXPECT_EQ(frozen.to_vector<float>(), before);
  EXPECT_EQ(frozen.version(), version);
  EXPECT_EQ(opt.state(1), nullptr);
  ASSERT_NE(opt.state(0), nullptr);
  EXPECT_EQ(opt.state(0)->step, 2);
  EXPECT_EQ(opt.state_dict().state.count(1), 0u);
  const std::vector<Tensor> grads = opt.grads_to_unscale();
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(grads[0].is_same(w.grad()));
}

TEST(Optimizer, HyperparameterValidation) {
  auto p = [] {
    return std::vector<Tensor>{random_tensor({2}, mt::kFloat32, false).requires_grad_()};
  };
  expect_error([&] { optim::SGD(p(), -1); }, {"Invalid learning rate: -1"});
  expect_error([&] { optim::SGD(p(), 0.1, {.momentum = -0.5}); }, {"Invalid momentum value: -0.5"});
  expect_error([&] { optim::SGD(p(), 0.1, {.weight_decay = -1}); },
               {"Invalid weight_decay value: -1"});
  expect_error([&] { optim::SGD(p(), 0.1, {.nesterov = true}); },
               {"Nesterov momentum requires a momentum and zero dampening"});
  expect_error([&] { optim::SGD(p(), 0.1, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               {"Nesterov momentum requires a momentum and zero dampening"});
  expect_error([&] { optim::SGD(p(), std::nan("")); }, {"Invalid learning rate: nan"});
  expect_error([&] { optim::Adam(p(), {.lr = -1}); }, {"Adam: Invalid learning rate: -1"});
  expect_error([&] { optim::Adam(p(), {.eps = -1e-8}); }, {"Invalid epsilon value: -1e-08"});
  expect_error(
      [&] {
        optim::Adam(p(), {.betas = {1.0, 0.999}});
      },
      {"Invalid beta parameter at index 0: 1"});
  expect_error(
      [&] {
        optim::Adam(p(), {.betas = {0.9, -0.1}});
      },
      {"Invalid beta parameter at index 1: -0.1"});
  expect_error([&] { optim::AdamW(p(), {.weight_decay = -0.1}); },
               {"AdamW: Invalid weight_decay value: -0.1"});
  // Per-group values are validated too, and unknown keys are typos.
  expect_error(
      [&] {
        optim::SGD({optim::ParamGroup{p(), {{"lr", -2}}}}, 0.1);
      },
      {"Invalid learning rate: -2"});
  expect_error(
      [&] {
        optim::SGD({optim::ParamGroup{p(), {{"momentun", 0.9}}}}, 0.1);
      },
      {"SGD: unknown option 'momentun'", "momentum"});
  // Parameter lists.
  expect_error([&] { optim::SGD(std::vector<Tensor>{}, 0.1); },
               {"optimizer got an empty parameter list"});
  Tensor leaf = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  expect_error([&] { optim::SGD({leaf * 2.0}, 0.1); }, {"can't optimize a non-leaf Tensor"});
  expect_error([&] { optim::SGD({leaf, leaf}, 0.1); }, {"duplicate parameters"});
  expect_error([&] { optim::SGD({mt::zeros({2}, mt::kInt64)}, 0.1); }, {"floating point"});
  optim::SGD opt({leaf}, 0.1);
  expect_error(
      [&] {
        opt.add_param_group({{leaf}, {}});
      },
      {"some parameters appear in more than one parameter group"});
  expect_error([&] { opt.param_groups()[0].get("betas"); }, {"no option 'betas'"});
}

// ---- state_dict ---------------------------------------------------------------------------
namespace {
using MakeWithLr = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, double)>;
const std::vector<std::pair<std::string, MakeWithLr>>& optimizer_makers() {
  static const std::vector<std::pair<std::string, MakeWithLr>> makers{
      {"SGD",
       [](std::vector<Tensor> ps, double lr) {
         return std::make_unique<optim::SGD>(std::move(ps), lr,
                                             optim::SGDOptions{.momentum = 0.9, .nesterov = true});
       }},
      {"Adam",
       [](std::vector<Tensor> ps, double lr) {
         return std::make_unique<optim::Adam>(std::move(ps),
                                              optim::AdamOptions{.lr = lr, .amsgrad = true});
       }},
      {"AdamW",
       [](std::vector<Tensor> ps, double lr) {
         return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = lr});
       }},
  };
  return makers;
}
}  // namespace

TEST(Optimizer, StateDictRoundTripGivesBitwiseEqualNextStep) {
  for (const auto& [name, make] : optimizer_makers()) {
    Tensor a1 = random_tensor({3, 4}, mt::kFloat32, false).requires_grad_();
    Tensor a2 = random_tensor({5}, mt::kFloat32, false).requires_grad_();
    auto o1 = make({a1, a2}, 0.05);
    for (int k = 0; k < 3; ++k) {
      a1.set_grad(random_tensor({3, 4}, mt::kFloat32, true));
      a2.set_grad(random_tensor({5}, mt::kFloat32, false));
      o1->step();
    }
    Tensor b1 = a1.detach().clone().requires_grad_(), b2 = a2.detach().clone().requires_grad_();
    auto o2 = make({b1, b2}, 0.7);  // different lr: the loaded options must replace it
    const optim::OptimizerState saved = o1->state_dict();
    ASSERT_EQ(saved.param_groups.size(), 1u);
    EXPECT_EQ(saved.param_groups[0].params, (std::vector<int64_t>{0, 1}));
    ASSERT_EQ(saved.state.size(), 2u);
    o2->load_state_dict(saved);
    EXPECT_EQ(o2->lr(), 0.05) << name;
    for (const auto& [key, t] : o2->state(0)->buffers) {
      EXPECT_FALSE(t.is_same(o1->state(0)->buffers.at(key))) << name << " shares " << key;
    }
    Tensor g1 = random_tensor({3, 4}, mt::kFloat32, false),
           g2 = random_tensor({5}, mt::kFloat32, false);
    a1.set_grad(g1);
    a2.set_grad(g2);
    b1.set_grad(g1.clone());
    b2.set_grad(g2.clone());
    o1->step();
    o2->step();
    EXPECT_EQ(a1.to_vector<float>(), b1.to_vector<float>()) << name;
    EXPECT_EQ(a2.to_vector<float>(), b2.to_vector<float>()) << name;
    EXPECT_EQ(o1->state(0)->step, o2->state(0)->step) << name;
  }
}

TEST(Optimizer, LoadStateDictConvertsToParamDtype) {
  Tensor a = random_tensor({4}, mt::kFloat32, false).requires_grad_();
  optim::Adam o1({a});
  a.set_grad(random_tensor({4}, mt::kFloat32, false));
  o1.step();
  Tensor b = a.detach().to(mt::kFloat64).requires_grad_();
  optim::Adam o2({b});
  o2.load_state_dict(o1.state_dict());
  const Tensor m = o2.state(0)->buffers.at("exp_avg");
  EXPECT_EQ(m.dtype(), mt::kFloat64);
  EXPECT_EQ(m.to_vector<double>(), o1.state(0)->buffers.at("exp_avg").to_vector<double>());
  EXPECT_EQ(o2.state(0)->step, 1);
}

TEST(Optimizer, BadLoadStateDictErrors) {
  auto param = [](mt::Shape s) { return random_tensor(s, mt::kFloat32, false).requires_grad_(); };
  Tensor w = param({2, 3});
  optim::Adam src({w});
  w.set_grad(random_tensor({2, 3}, mt::kFloat32, false));
  src.step();
  const optim::OptimizerState saved = src.state_dict();

  optim::Adam two({optim::ParamGroup{{param({2, 3})}, {}}, optim::ParamGroup{{param({1})}, {}}});
  expect_error([&] { two.load_state_dict(saved); },
               {"loaded state dict has a different number of parameter groups"});
  optim::Adam bigger({param({2, 3}), param({1})});
  expect_error([&] { bigger.load_state_dict(saved); },
               {"doesn't match the size of optimizer's group"});
  optim::Adam transposed({param({3, 2})});
  expect_error([&] { transposed.load_state_dict(saved); }, {"'exp_avg'", "shape [2, 3]", "[3, 2]"});
  optim::SGD sgd({param({2, 3})}, 0.1);
  expect_error([&] { sgd.load_state_dict(saved); }, {"SGD: loaded state dict has unknown option"});

  optim::Adam target({param({2, 3})}, {.lr = 0.123});
  optim::OptimizerState bad = saved;
  bad.state[0].buffers["momentum_buffer"] = mt::zeros({2, 3});
  expect_error([&] { target.load_state_dict(bad); }, {"unknown entry 'momentum_buffer'"});
  bad = saved;
  bad.state[7] = bad.state[0];
  expect_error([&] { target.load_state_dict(bad); }, {"parameter id 7"});
  // A failed load leaves the optimizer as it was.
  EXPECT_EQ(target.lr(), 0.123);
  EXPECT_EQ(target.state(0), nullptr);
}

// ---- LR schedulers ------------------------------------------------------------------------
TEST(LRScheduler, StepLRClosedForm) {
  Tensor w = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  Tensor b = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  optim::SGD opt({optim::ParamGroup{{w}, {}}, optim::ParamGroup{{b}, {{"lr", 0.5}}}}, 0.1);
  optim::StepLR sched(opt, /*step_size=*/3, /*gamma=*/0.5);
  EXPECT_EQ(opt.param_groups()[0].get("initial_lr"), 0.1);
  EXPECT_EQ(opt.param_groups()[1].get("initial_lr"), 0.5);
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    EXPECT_EQ(sched.last_epoch(), epoch);
    const double factor = std::pow(0.5, static_cast<double>(epoch / 3));
    EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * factor) << epoch;
    EXPECT_DOUBLE_EQ(opt.lr(1), 0.5 * factor) << epoch;
    EXPECT_EQ(sched.get_last_lr(), (std::vector<double>{opt.lr(0), opt.lr(1)}));
    sched.step();
  }
  // Restoring the scheduler continues the same sequence.
  const optim::SchedulerState s = sched.state_dict();
  optim::StepLR other(opt, 3, 0.5);  // keeps the recorded initial_lr as its base
  EXPECT_EQ(other.base_lrs(), (std::vector<double>{0.1, 0.5}));
  other.load_state_dict(s);
  EXPECT_EQ(other.last_epoch(), 10);
  other.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * 0.125);
  expect_error([&] { optim::StepLR(opt, 0); }, {"step_size must be positive"});
  expect_error(
      [&] {
        other.load_state_dict(optim::SchedulerState{1, {0.1}, {0.1}});
      },
      {"1 base lrs", "2 parameter groups"});
}

TEST(LRScheduler, CosineWarmupSequence) {
  Tensor w = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  const double base = 0.4, min_lr = 0.01;
  const int64_t W = 4, T = 12;
  optim::SGD opt({w}, base);
  optim::CosineWarmupLR sched(opt, W, T, min_lr);
  for (int64_t t = 0; t < T + 5; ++t) {
    double expected;
    if (t < W) {
      expected = base * static_cast<double>(t + 1) / W;
    } else if (t < T) {
      const double progress = static_cast<double>(t - W) / (T - W);
      expected = min_lr + (base - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
    } else {
      expected = min_lr;
    }
    EXPECT_NEAR(opt.lr(), expected, 1e-15) << "t = " << t;
    sched.step();
  }
  // Landmarks: first step trains, the peak at W-1 and W, min_lr from T on.
  optim::SGD opt2({random_tensor({2}, mt::kFloat32, false).requires_grad_()}, 1.0);
  optim::CosineWarmupLR s2(opt2, 2, 6);
  std::vector<double> lrs;
  for (int k = 0; k < 8; ++k, s2.step()) lrs.push_back(opt2.lr());
  EXPECT_DOUBLE_EQ(lrs[0], 0.5);
  EXPECT_DOUBLE_EQ(lrs[1], 1.0);
  EXPECT_DOUBLE_EQ(lrs[2], 1.0);
  EXPECT_NEAR(lrs[4], 0.5, 1e-15);
  EXPECT_GT(lrs[5], 0.0);
  EXPECT_EQ(lrs[6], 0.0);
  EXPECT_EQ(lrs[7], 0.0);
  // No warmup: cosine from the first step.
  optim::SGD opt3({random_tensor({2}, mt::kFloat32, false).requires_grad_()}, 1.0);
  optim::CosineWarmupLR s3(opt3, 0, 4);
  EXPECT_EQ(opt3.lr(), 1.0);
  s3.step();
  s3.step();
  EXPECT_NEAR(opt3.lr(), 0.5, 1e-15);
  expect_error([&] { optim::CosineWarmupLR(opt3, 5, 4); }, {"0 <= warmup_steps <= total_steps"});
}

// ---- gradient clipping --------------------------------------------------------------------
TEST(ClipGrad, NormScalesGradsAndReturnsTotal) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64}) {
    for (double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
      std::vector<Tensor> ps{random_tensor({3, 4}, dtype, false).requires_grad_(),
                             random_tensor({5}, dtype, false).requires_grad_(),
                             random_tensor({2}, dtype, false).requires_grad_()};
      ps[0].set_grad(random_tensor({3, 4}, dtype, true));
      ps[1].set_grad(random_tensor({5}, dtype, false));  // ps[2] has no grad
      Vec all;
      std::vector<Vec> before;
      for (int i = 0; i < 2; ++i) {
        before.push_back(ps[i].grad().to_vector<double>());
        all.insert(all.end(), before.back().begin(), before.back().end());
      }
      double total = 0;
      for (double x : all) {
        total = std::isinf(norm_type) ? std::max(total, std::fabs(x))
                                      : total + std::pow(std::fabs(x), norm_type);
      }
      if (!std::isinf(norm_type)) total = std::pow(total, 1.0 / norm_type);
      const auto tol = mt::testing::tolerance_for(dtype);
      const std::string what =
          std::string(mt::dtype_name(dtype)) + " p=" + std::to_string(norm_type);

      // Below the limit: returned norm, grads untouched.
      const double n1 = mt::nn::clip_grad_norm_(ps, total * 2, norm_type);
      EXPECT_NEAR(n1, total, tol.rtol * total + tol.atol) << what;
      for (int i = 0; i < 2; ++i) EXPECT_EQ(ps[i].grad().to_vector<double>(), before[i]) << what;
      // Above: scaled by max_norm / (total + 1e-6).
      const double max_norm = total / 4;
      const double n2 = mt::nn::clip_grad_norm_(ps, max_norm, norm_type);
      EXPECT_NEAR(n2, total, tol.rtol * total + tol.atol) << what;
      const double coef = max_norm / (total + 1e-6);
      for (int i = 0; i < 2; ++i) {
        Vec expected = before[i];
        for (double& x : expected) x *= coef;
        expect_close(ps[i].grad(), as_tensor(expected, ps[i].shape()), what);
      }
      EXPECT_FALSE(ps[2].grad().defined());
    }
  }
}

TEST(ClipGrad, NonFiniteAndEmpty) {
  Tensor w = random_tensor({3}, mt::kFloat32, false).requires_grad_();
  EXPECT_EQ(mt::nn::clip_grad_norm_({w}, 1.0), 0.0);
  w.set_grad(mt::from_vector<float>({1.f, INFINITY, 2.f}));
  expect_error([&] { mt::nn::clip_grad_norm_({w}, 1.0, 2.0, /*error_if_nonfinite=*/true); },
               {"The total norm of order 2", "non-finite"});
  EXPECT_TRUE(std::isinf(mt::nn::clip_grad_norm_({w}, 1.0)));
  // Scaled by a zero coefficient, as PyTorch does: finite entries become 0, inf becomes nan.
  const auto g = w.grad().to_vector<float>();
  EXPECT_EQ(g[0], 0.f);
  EXPECT_TRUE(std::isnan(g[1]));
}

TEST(ClipGrad, Value) {
  for (mt::DType dtype : mt::testing::floating_dtypes()) {
    Tensor w = random_tensor({4, 3}, dtype, false).requires_grad_();
    Tensor g = random_tensor({4, 3}, dtype, true);
    w.set_grad(g);
    const Vec before = g.to_vector<double>();
    Tensor u = random_tensor({2}, dtype, false).requires_grad_();
    mt::nn::clip_grad_value_({w, u}, 0.5);
    Vec expected = before;
    for (double& x : expected) x = std::clamp(x, -0.5, 0.5);
    EXPECT_EQ(w.grad().to_vector<double>(), expected) << mt::dtype_name(dtype);
    EXPECT_FALSE(u.grad().defined());
  }
}

// The options each optimizer's groups hold, by name, with their defaults: the state_dict form
// that checkpoints store and PyTorch's names (betas as beta1/beta2, bools as 0/1).
TEST(Optim, GroupOptionNamesAndDefaultsArePinned) {
  const auto text = [](const optim::Optimizer& o) {
    std::ostringstream os;
    const optim::OptimizerState state = o.state_dict();
    for (const auto& [k, v] : state.param_groups.at(0).options) os << k << '=' << v << ' ';
    return os.str();
  };
  const auto p = [] { return std::vector<Tensor>{mt::zeros({2}).requires_grad_()}; };
  EXPECT_EQ(text(optim::SGD(p(), 0.1)),
            "dampening=0 lr=0.1 maximize=0 momentum=0 nesterov=0 weight_decay=0 ");
  EXPECT_EQ(text(optim::Adam(p())),
            "amsgrad=0 beta1=0.9 beta2=0.999 decoupled_weight_decay=0 "
            "eps=1e-08 lr=0.001 maximize=0 weight_decay=0 ");
  EXPECT_EQ(text(optim::AdamW(p())),
            "amsgrad=0 beta1=0.9 beta2=0.999 decoupled_weight_decay=1 "
            "eps=1e-08 lr=0.001 maximize=0 weight_decay=0.01 ");
  EXPECT_EQ(text(optim::RMSprop(p())),
            "alpha=0.99 centered=0 eps=1e-08 lr=0.01 maximize=0 momentum=0 weight_decay=0 ");
  EXPECT_EQ(text(optim::Adagrad(p())),
            "eps=1e-10 initial_accumulator_value=0 lr=0.01 lr_decay=0 "
            "maximize=0 weight_decay=0 ");
  // decoupled_weight_decay: PyTorch 2's option, added after the first checkpoints were written
  // (a group saved without it loads with the default: OlderStateDictsLoadWithTheNewOptions).
  EXPECT_EQ(text(optim::NAdam(p())),
            "beta1=0.9 beta2=0.999 decoupled_weight_decay=0 eps=1e-08 "
            "lr=0.002 momentum_decay=0.004 weight_decay=0 ");
  EXPECT_EQ(text(optim::RAdam(p())),
            "beta1=0.9 beta2=0.999 decoupled_weight_decay=0 eps=1e-08 "
            "lr=0.001 weight_decay=0 ");
}

// A state dict written before an option existed (NAdam's and RAdam's decoupled_weight_decay)
// loads, and the option takes the optimizer's default.
TEST(Optim, OlderStateDictsLoadWithTheNewOptions) {
  Tensor w = mt::zeros({3}).requires_grad_();
  optim::NAdam opt({w}, {.weight_decay = 0.1});
  optim::OptimizerState old = opt.state_dict();
  old.param_groups.at(0).options.erase("decoupled_weight_decay");
  opt.param_groups()[0]["decoupled_weight_decay"] = 1.0;
  opt.load_state_dict(old);
  EXPECT_EQ(opt.param_groups()[0].get("decoupled_weight_decay"), 0.0);
  EXPECT_EQ(opt.param_groups()[0].get("weight_decay"), 0.1);
}
