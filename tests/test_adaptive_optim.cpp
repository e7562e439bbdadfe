// RMSprop, Adagrad, NAdam and RAdam against PyTorch 1.13's float64 trajectories
// (tests/golden/optim.txt, scripts/golden/make_optim.py) and PyTorch 2's decoupled weight decay
// (optim_torch2.txt, make_optim_torch2.py; Adam's too), their option checks and state dicts,
// and the fused float32 step against the formulas evaluated element by element here.
#include <cmath>
#include <functional>
#include <memory>

#include "nn/optim/adagrad.h"
#include "nn/optim/adam.h"
#include "nn/optim/nadam.h"
#include "nn/optim/radam.h"
#include "nn/optim/rmsprop.h"
#include "optim_golden.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::testing::expect_error;
using Vec = std::vector<double>;

namespace {

using Factory = std::function<std::unique_ptr<optim::Optimizer>(Tensor)>;
template <typename O, typename Opt>
Factory make(Opt o) {
  return [o](Tensor p) { return std::make_unique<O>(std::vector<Tensor>{p}, o); };
}

// The cases of make_optim.py, option for option.
const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> f = {
      {"rmsprop_plain", make<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.01})},
      {"rmsprop_centered_momentum", make<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.02,
                                                                               .alpha = 0.9,
                                                                               .eps = 1e-6,
                                                                               .weight_decay = 0.1,
                                                                               .momentum = 0.8,
                                                                               .centered = true})},
      {"rmsprop_maximize",
       make<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .maximize = true})},
      {"adagrad_plain", make<optim::Adagrad>(optim::AdagradOptions{.lr = 0.1})},
      {"adagrad_options",
       make<optim::Adagrad>(optim::AdagradOptions{.lr = 0.1,
                                                  .lr_decay = 0.05,
                                                  .weight_decay = 0.2,
                                                  .initial_accumulator_value = 0.3,
                                                  .eps = 1e-6,
                                                  .maximize = true})},
      {"nadam_plain", make<optim::NAdam>(optim::NAdamOptions{.lr = 0.01})},
      {"nadam_options", make<optim::NAdam>(optim::NAdamOptions{.lr = 0.05,
                                                               .betas = {0.8, 0.95},
                                                               .eps = 1e-6,
                                                               .weight_decay = 0.1,
                                                               .momentum_decay = 0.01})},
      {"radam_plain", make<optim::RAdam>(optim::RAdamOptions{.lr = 0.01})},
      {"radam_options", make<optim::RAdam>(optim::RAdamOptions{
                            .lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = 0.1})},
      // make_optim_torch2.py: PyTorch 2's decoupled_weight_decay.
      {
          "adam_decoupled", make<optim::Adam>(optim::AdamOptions{.lr = 0.05,
                                                                 .betas = {0.8, 0.9},
                                                                 .eps = 1e-6,
                                                                 .weight_decay = 0.1,
                                                                 .decoupled_weight_decay = true})},
      {"nadam_decoupled", make<optim::NAdam>(optim::NAdamOptions{.lr = 0.05,
                                                                 .betas = {0.8, 0.95},
                                                                 .eps = 1e-6,
                                                                 .weight_decay = 0.1,
                                                                 .momentum_decay = 0.01,
                                                                 .decoupled_weight_decay = true})},
      {"radam_decoupled", make<optim::RAdam>(optim::RAdamOptions{.lr = 0.05,
                                                                 .betas = {0.8, 0.9},
                                                                 .eps = 1e-6,
                                                                 .weight_decay = 0.1,
                                                                 .decoupled_weight_decay = true})},
  };
  return f;
}

Tensor vec(const Vec& v, mt::DType dtype = mt::kFloat64) {
  Tensor t = mt::from_vector<double>(v, mt::Shape{static_cast<int64_t>(v.size())}, mt::kFloat64);
  return dtype == mt::kFloat64 ? t : t.to(dtype);
}

void expect_near_vec(const Vec& actual, const Vec& expected, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], rtol * (1.0 + std::abs(expected[i])))
        << what << " element " << i;
  }
}

// Runs a golden case from `from_step` on, with `opt` on `p`.
void run_steps(const mt::testing::OptimGoldenCase& golden, optim::Optimizer& opt, Tensor& p,
               size_t from_step, size_t to_step, double rtol, const std::string& what) {
  const auto grads = golden.all("grad");
  const auto params = golden.all("param");
  for (size_t s = from_step; s < to_step; ++s) {
    p.set_grad(vec(grads[s], p.dtype()));
    opt.step();
    expect_near_vec(p.to(mt::kFloat64).to_vector<double>(), params[s], rtol,
                    what + " step " + std::to_string(s + 1));
  }
}

class OptimGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimGolden, Float64TrajectoryMatchesPyTorch) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  for (bool fused : {true, false}) {
    Tensor p = vec(golden.first("init")).requires_grad_();
    auto opt = factories().at(GetParam())(p);
    opt->set_fused(fused);
    run_steps(golden, *opt, p, 0, golden.all("grad").size(), 1e-14,
              GetParam() + (fused ? " fused" : " unfused"));
  }
}

TEST_P(OptimGolden, ResumeFromStateDictContinuesTheTrajectory) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  Tensor p = vec(golden.first("init")).requires_grad_();
  auto opt = factories().at(GetParam())(p);
  run_steps(golden, *opt, p, 0, 4, 1e-14, GetParam());
  const optim::OptimizerState saved = opt->state_dict();
  EXPECT_EQ(saved.state.at(0).step, 4);
  Tensor q = p.detach().clone().requires_grad_();
  auto resumed = factories().at(GetParam())(q);
  resumed->load_state_dict(saved);
  run_steps(golden, *resumed, q, 4, golden.all("grad").size(), 1e-14, GetParam() + " resumed");
}

TEST_P(OptimGolden, Float32FollowsTheFloat64Trajectory) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  Tensor p = vec(golden.first("init"), mt::kFloat32).requires_grad_();
  auto opt = factories().at(GetParam())(p);
  run_steps(golden, *opt, p, 0, golden.all("grad").size(), 2e-5, GetParam() + " float32");
}

TEST_P(OptimGolden, SkippedStepLeavesParameterAndStateAlone) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  Tensor p = vec(golden.first("init")).requires_grad_();
  auto opt = factories().at(GetParam())(p);
  run_steps(golden, *opt, p, 0, 2, 1e-14, GetParam());
  const Vec before = p.to_vector<double>();
  p.set_grad(vec(golden.all("grad")[2]));
  opt->step_if_finite(mt::full({}, 1.0, mt::TensorOptions().dtype(mt::kFloat32)));
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(p.to_vector<double>(), before);
  EXPECT_EQ(opt->state(0)->step, 2);
  run_steps(golden, *opt, p, 2, golden.all("grad").size(), 1e-14, GetParam() + " after skip");
}

std::vector<std::string> golden_optimizer_cases() {
  std::vector<std::string> names;
  for (const auto& [name, c] : mt::testing::optim_golden()) {
    if (!c.first("init").empty()) names.push_back(name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, OptimGolden, ::testing::ValuesIn(golden_optimizer_cases()));

TEST(OptimGoldenFile, EveryCaseHasAFactoryAndEveryFactoryARecord) {
  const auto names = golden_optimizer_cases();
  ASSERT_FALSE(names.empty()) << "tests/golden/optim.txt missing; run scripts/golden/make_optim.py";
  for (const auto& n : names) EXPECT_TRUE(factories().count(n)) << n;
  for (const auto& [n, f] : factories()) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

// ---- the fused float32 kernels against the formulas, element by element ----------------------

// Each reference takes (p, g, step) for one element and owns its state; float32 throughout.
struct RmspropRef {
  float lr = 0.02f, alpha = 0.9f, eps = 1e-6f, wd = 0.1f, mom = 0.8f;
  float sq = 0, buf = 0, ga = 0;
  void step(float& p, float g, int) {
    g = g + wd * p;
    sq = sq * alpha + (1 - alpha) * g * g;
    ga = ga * alpha + (1 - alpha) * g;
    const float avg = std::sqrt(sq - ga * ga) + eps;
    buf = buf * mom + g / avg;
    p = p - lr * buf;
  }
};
struct AdagradRef {
  float sum = 0.3f;
  void step(float& p, float g, int t) {
    g = -g + 0.2f * p;
    const float clr = static_cast<float>(0.1 / (1 + (t - 1) * 0.05));
    sum = sum + g * g;
    p = p - clr * g / (std::sqrt(sum) + 1e-6f);
  }
};
struct NadamRef {
  float m = 0, v = 0, mu_product = 1;
  void step(float& p, float g, int t) {
    const double b1 = 0.8, b2 = 0.95, lr = 0.05, md = 0.01;
    g = g + 0.1f * p;
    const double mu = b1 * (1 - 0.5 * std::pow(0.96, t * md));
    const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * md));
    mu_product *= static_cast<float>(mu);
    const double next = static_cast<double>(mu_product) * mu_next;
    m = m * 0.8f + 0.2f * g;
    v = v * 0.95f + 0.05f * g * g;
    const float denom = std::sqrt(v / static_cast<float>(1 - std::pow(b2, t))) + 1e-6f;
    p = p - static_cast<float>(lr * (1 - mu) / (1 - mu_product)) * g / denom;
    p = p - static_cast<float>(lr * mu_next / (1 - next)) * m / denom;
  }
};
struct RadamRef {
  float m = 0, v = 0;
  void step(float& p, float g, int t) {
    const double b1 = 0.8, b2 = 0.9, lr = 0.05;
    g = g + 0.1f * p;
    m = m * 0.8f + 0.2f * g;
    v = v * 0.9f + 0.1f * g * g;
    const double bc2 = 1 - std::pow(b2, t);
    const double rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 * t * std::pow(b2, t) / bc2;
    float u = m / static_cast<float>(1 - std::pow(b1, t)) * static_cast<float>(lr);
    if (rho_t > 5) {
      const double rect =
          std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      u = u * static_cast<float>(std::sqrt(bc2)) / (std::sqrt(v) + 1e-6f) *
          static_cast<float>(rect);
    }
    p = p - u;
  }
};

template <typename Ref>
void check_fused_against_formula(const std::string& name) {
  // Two parameters of different sizes in one group, so the multi-tensor path sees a list.
  Tensor a = mt::testing::random_tensor({37}, mt::kFloat32, false).requires_grad_();
  Tensor b = mt::testing::random_tensor({3, 5}, mt::kFloat32, false).requires_grad_();
  std::vector<float> pa = a.to_vector<float>(), pb = b.to_vector<float>();
  std::vector<Ref> ra(pa.size()), rb(pb.size());
  auto opt = factories().at(name)(a);
  opt->add_param_group(optim::ParamGroup{{b}, {}});
  for (int t = 1; t <= 12; ++t) {
    Tensor ga = mt::testing::random_tensor({37}, mt::kFloat32, false);
    Tensor gb = mt::testing::random_tensor({3, 5}, mt::kFloat32, false);
    a.set_grad(ga);
    b.set_grad(gb);
    opt->step();
    const auto gav = ga.to_vector<float>(), gbv = gb.to_vector<float>();
    for (size_t i = 0; i < pa.size(); ++i) ra[i].step(pa[i], gav[i], t);
    for (size_t i = 0; i < pb.size(); ++i) rb[i].step(pb[i], gbv[i], t);
    const auto fa = a.to_vector<float>(), fb = b.to_vector<float>();
    for (size_t i = 0; i < pa.size(); ++i)
      ASSERT_NEAR(fa[i], pa[i], 2e-5 * (1 + std::abs(pa[i]))) << name << " a[" << i << "] t=" << t;
    for (size_t i = 0; i < pb.size(); ++i)
      ASSERT_NEAR(fb[i], pb[i], 2e-5 * (1 + std::abs(pb[i]))) << name << " b[" << i << "] t=" << t;
  }
}

TEST(FusedAdaptiveOptim, RmspropMatchesFormula) {
  check_fused_against_formula<RmspropRef>("rmsprop_centered_momentum");
}
TEST(FusedAdaptiveOptim, AdagradMatchesFormula) {
  check_fused_against_formula<AdagradRef>("adagrad_options");
}
TEST(FusedAdaptiveOptim, NadamMatchesFormula) {
  check_fused_against_formula<NadamRef>("nadam_options");
}
TEST(FusedAdaptiveOptim, RadamMatchesFormula) {
  check_fused_against_formula<RadamRef>("radam_options");
}

TEST(FusedAdaptiveOptim, MasterWeightsKeepFloat32StateForBFloat16Params) {
  Tensor p32 = mt::testing::random_tensor({64}, mt::kFloat32, false).requires_grad_();
  Tensor p16 = p32.detach().to(mt::kBFloat16).requires_grad_();
  Tensor ref = p16.detach().to(mt::kFloat32).requires_grad_();
  optim::RAdam a({p16}, {.lr = 0.05});
  optim::RAdam b({ref}, {.lr = 0.05});
  a.set_master_weights(true);
  for (int t = 0; t < 8; ++t) {
    Tensor g = mt::testing::random_tensor({64}, mt::kFloat32, false);
    p16.set_grad(g.to(mt::kBFloat16));
    ref.set_grad(g.to(mt::kBFloat16).to(mt::kFloat32));
    a.step();
    b.step();
  }
  EXPECT_EQ(a.state(0)->buffers.at("exp_avg").dtype(), mt::kFloat32);
  EXPECT_EQ(p16.to(mt::kFloat32).to_vector<float>(),
            ref.to(mt::kBFloat16).to(mt::kFloat32).to_vector<float>());
}

// ---- options ---------------------------------------------------------------------------------

TEST(AdaptiveOptimOptions, InvalidValuesThrowPyTorchMessages) {
  Tensor p = mt::zeros({2}).requires_grad_();
  expect_error([&] { optim::RMSprop({p}, {.lr = -1}); }, {"RMSprop", "Invalid learning rate: -1"});
  expect_error([&] { optim::RMSprop({p}, {.alpha = -0.5}); }, {"Invalid alpha value: -0.5"});
  expect_error([&] { optim::RMSprop({p}, {.momentum = -0.1}); }, {"Invalid momentum value"});
  expect_error([&] { optim::Adagrad({p}, {.lr_decay = -1}); }, {"Adagrad", "Invalid lr_decay"});
  expect_error([&] { optim::Adagrad({p}, {.initial_accumulator_value = -1}); },
               {"Invalid initial_accumulator_value value: -1"});
  expect_error(
      [&] {
        optim::NAdam({p}, {.betas = {1.0, 0.9}});
      },
      {"NAdam", "Invalid beta parameter at index 0: 1"});
  expect_error([&] { optim::NAdam({p}, {.momentum_decay = -1}); }, {"Invalid momentum_decay"});
  expect_error([&] { optim::RAdam({p}, {.eps = -1}); }, {"RAdam", "Invalid epsilon value: -1"});
  expect_error([&] { optim::RAdam({p}, {.weight_decay = std::nan("")}); },
               {"Invalid weight_decay value"});
  expect_error(
      [&] {
        optim::RAdam(std::vector<optim::ParamGroup>{{{p}, {{"momentum", 0.9}}}});
      },
      {"RAdam", "unknown option 'momentum'"});
}

TEST(AdaptiveOptimOptions, StateDictRejectsForeignStateAndWrongMuProductShape) {
  Tensor p = mt::zeros({3}).requires_grad_();
  optim::NAdam opt({p});
  p.set_grad(mt::ones({3}));
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  EXPECT_EQ(s.state.at(0).buffers.at("mu_product").dtype(), mt::kFloat32);
  EXPECT_EQ(s.state.at(0).buffers.at("mu_product").numel(), 1);
  optim::OptimizerState bad = s;
  bad.state.at(0).buffers["mu_product"] = mt::ones({3});
  expect_error([&] { opt.load_state_dict(bad); }, {"NAdam", "mu_product", "single value"});
  optim::RAdam radam({p});
  s.param_groups[0].options.erase("momentum_decay");
  expect_error([&] { radam.load_state_dict(s); }, {"RAdam", "unknown entry 'mu_product'"});
}

}  // namespace
