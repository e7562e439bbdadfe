// The schedulers of nn/optim/schedulers.h against PyTorch 1.13's get_last_lr() sequences
// (tests/golden/optim.txt, scripts/golden/make_optim.py), their state dicts, composition, and
// skipped AMP steps.
#include <cmath>
#include <functional>
#include <memory>

#include "nn/optim/adagrad.h"
#include "nn/optim/adam.h"
#include "nn/optim/schedulers.h"
#include "nn/optim/sgd.h"
#include "optim_golden.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::testing::expect_error;
using Vec = std::vector<double>;

namespace {

const Vec kPlateauMetrics = {1.0, 0.9, 0.85, 0.849, 0.86, 0.848, 0.847, 0.9,  0.7,  0.7,
                             0.7, 0.7, 0.69, 0.695, 0.71, 0.72,  0.5,   0.5,  0.5,  0.5,
                             0.5, 0.5, 0.5,  0.5,   0.5,  0.5,   0.49,  0.49, 0.49, 0.49};

double lam(int64_t e) {
  return e % 4 ? std::pow(0.95, static_cast<double>(e)) : 1.0 / (1.0 + static_cast<double>(e));
}

// An optimizer with its schedulers, as one golden case builds them.
struct Setup {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<std::shared_ptr<optim::LRScheduler>> scheds;  // stepped in order
  std::string momentum_key;                                 // OneCycleLR cases
  size_t metric = 0;                                        // next plateau metric
  void step() {
    for (auto& s : scheds) {
      if (s->takes_metric()) {
        s->step(kPlateauMetrics[metric++]);
      } else {
        s->step();
      }
    }
  }
};

std::unique_ptr<Setup> sgd(double momentum = 0.0, int groups = 1) {
  auto s = std::make_unique<Setup>();
  std::vector<optim::ParamGroup> gs;
  for (int k = 0; k < groups; ++k) {
    s->params.push_back(mt::zeros({2}, mt::TensorOptions().dtype(mt::kFloat64)).requires_grad_());
    gs.push_back({{s->params.back()}, {{"lr", 0.1 / std::pow(10.0, k)}}});
  }
  s->opt = std::make_unique<optim::SGD>(gs, 0.1, optim::SGDOptions{.momentum = momentum});
  return s;
}

std::unique_ptr<Setup> adam() {
  auto s = std::make_unique<Setup>();
  s->params.push_back(mt::zeros({2}, mt::TensorOptions().dtype(mt::kFloat64)).requires_grad_());
  s->opt = std::make_unique<optim::Adam>(s->params, optim::AdamOptions{.lr = 0.1});
  return s;
}

template <typename S, typename... Args>
std::shared_ptr<optim::LRScheduler> add(Setup& s, Args&&... args) {
  auto p = std::make_shared<S>(*s.opt, std::forward<Args>(args)...);
  s.scheds.push_back(p);
  return p;
}

// The cases of make_optim.py, scheduler for scheduler.
const std::map<std::string, std::function<std::unique_ptr<Setup>()>>& builders() {
  using O = optim::OneCycleOptions;
  static const std::map<std::string, std::function<std::unique_ptr<Setup>()>> b = {
      {"multistep",
       [] {
         auto s = sgd();
         add<optim::MultiStepLR>(*s, std::vector<int64_t>{3, 7, 7, 12}, 0.5);
         return s;
       }},
      {"exponential",
       [] {
         auto s = sgd();
         add<optim::ExponentialLR>(*s, 0.9);
         return s;
       }},
      {"exponential_two_groups",
       [] {
         auto s = sgd(0.0, 2);
         add<optim::ExponentialLR>(*s, 0.8);
         return s;
       }},
      {"cosine_annealing",
       [] {
         auto s = sgd();
         add<optim::CosineAnnealingLR>(*s, 10, 0.001);
         return s;
       }},
      {"cosine_annealing_short",
       [] {
         auto s = sgd();
         add<optim::CosineAnnealingLR>(*s, 3);
         return s;
       }},
      {"linear",
       [] {
         auto s = sgd();
         add<optim::LinearLR>(*s, 0.25, 0.9, 8);
         return s;
       }},
      {"linear_decay",
       [] {
         auto s = sgd();
         add<optim::LinearLR>(*s, 1.0, 0.1, 12);
         return s;
       }},
      {"lambda",
       [] {
         auto s = sgd();
         add<optim::LambdaLR>(*s, optim::LambdaLR::Lambda(lam));
         return s;
       }},
      {"onecycle_cos",
       [] {
         auto s = sgd(0.9);
         add<optim::OneCycleLR>(*s, O{.max_lr = {0.5}, .total_steps = 30});
         s->momentum_key = "momentum";
         return s;
       }},
      {"onecycle_linear_three_phase",
       [] {
         auto s = adam();
         add<optim::OneCycleLR>(*s, O{.max_lr = {0.3},
                                      .total_steps = 30,
                                      .pct_start = 0.25,
                                      .anneal_strategy = "linear",
                                      .base_momentum = 0.8,
                                      .max_momentum = 0.9,
                                      .div_factor = 10.0,
                                      .final_div_factor = 100.0,
                                      .three_phase = true});
         s->momentum_key = "beta1";
         return s;
       }},
      {"onecycle_no_momentum",
       [] {
         auto s = sgd(0.0, 2);
         add<optim::OneCycleLR>(
             *s, O{.max_lr = {0.4, 0.04}, .total_steps = 30, .cycle_momentum = false});
         return s;
       }},
      {"sequential_linear_exponential",
       [] {
         auto s = sgd();
         auto a = std::make_shared<optim::LinearLR>(*s->opt, 0.1, 1.0, 5);
         auto b = std::make_shared<optim::ExponentialLR>(*s->opt, 0.9);
         add<optim::SequentialLR>(*s, std::vector<std::shared_ptr<optim::LRScheduler>>{a, b},
                                  std::vector<int64_t>{5});
         return s;
       }},
      {"sequential_three",
       [] {
         auto s = sgd();
         auto a = std::make_shared<optim::ExponentialLR>(*s->opt, 0.7);
         auto b = std::make_shared<optim::CosineAnnealingLR>(*s->opt, 8, 0.01);
         auto c = std::make_shared<optim::MultiStepLR>(*s->opt, std::vector<int64_t>{3, 6}, 0.3);
         add<optim::SequentialLR>(*s, std::vector<std::shared_ptr<optim::LRScheduler>>{a, b, c},
                                  std::vector<int64_t>{4, 14});
         return s;
       }},
      {"chained_multistep_exponential",
       [] {
         auto s = sgd();
         add<optim::MultiStepLR>(*s, std::vector<int64_t>{4, 9}, 0.5);
         add<optim::ExponentialLR>(*s, 0.95);
         return s;
       }},
      {"plateau_min_rel",
       [] {
         auto s = sgd();
         add<optim::ReduceLROnPlateau>(*s, optim::PlateauOptions{.mode = "min",
                                                                 .factor = 0.5,
                                                                 .patience = 2,
                                                                 .threshold = 0.01,
                                                                 .cooldown = 1,
                                                                 .min_lr = {0.02}});
         return s;
       }},
      {"plateau_max_abs",
       [] {
         auto s = sgd();
         add<optim::ReduceLROnPlateau>(*s, optim::PlateauOptions{.mode = "max",
                                                                 .factor = 0.3,
                                                                 .patience = 1,
                                                                 .threshold = 0.05,
                                                                 .threshold_mode = "abs",
                                                                 .eps = 1e-3});
         return s;
       }},
      {"plateau_default",
       [] {
         auto s = sgd();
         add<optim::ReduceLROnPlateau>(*s);
         return s;
       }},
  };
  return b;
}

std::vector<std::string> golden_scheduler_cases() {
  std::vector<std::string> names;
  for (const auto& [name, c] : mt::testing::optim_golden()) {
    if (!c.first("lr").empty()) names.push_back(name);
  }
  return names;
}

void expect_lr(const Setup& s, const mt::testing::OptimGoldenCase& golden, size_t t,
               const std::string& what) {
  const auto& groups = s.opt->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const Vec lrs = golden.first(g == 0 ? "lr" : "lr" + std::to_string(g));
    ASSERT_GT(lrs.size(), t) << what;
    EXPECT_DOUBLE_EQ(groups[g].get("lr"), lrs[t]) << what << " group " << g << " at step " << t;
    if (!s.scheds.empty()) {
      EXPECT_DOUBLE_EQ(s.scheds.back()->get_last_lr()[g], lrs[t]) << what;
    }
  }
  if (!s.momentum_key.empty()) {
    EXPECT_DOUBLE_EQ(groups[0].get(s.momentum_key), golden.first("momentum")[t])
        << what << " momentum at step " << t;
  }
}

class SchedulerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerGolden, LrSequenceMatchesPyTorch) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  auto s = builders().at(GetParam())();
  const size_t n = golden.first("lr").size();
  expect_lr(*s, golden, 0, GetParam());
  for (size_t t = 1; t < n; ++t) {
    s->opt->step();
    s->step();
    expect_lr(*s, golden, t, GetParam());
  }
}

TEST_P(SchedulerGolden, ResumeFromStateDictsGivesTheSameSequence) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  auto s = builders().at(GetParam())();
  for (size_t t = 1; t <= 12; ++t) s->step();
  const optim::OptimizerState opt_state = s->opt->state_dict();
  std::vector<optim::SchedulerState> states;
  for (auto& sch : s->scheds) states.push_back(sch->state_dict());
  auto r = builders().at(GetParam())();
  r->opt->load_state_dict(opt_state);
  for (size_t k = 0; k < states.size(); ++k) r->scheds[k]->load_state_dict(states[k]);
  r->metric = s->metric;
  expect_lr(*r, golden, 12, GetParam() + " resumed");
  for (size_t t = 13; t < golden.first("lr").size(); ++t) {
    r->step();
    expect_lr(*r, golden, t, GetParam() + " resumed");
  }
}

TEST_P(SchedulerGolden, SkippedAmpStepDoesNotAdvance) {
  const auto& golden = mt::testing::optim_golden().at(GetParam());
  auto s = builders().at(GetParam())();
  for (size_t t = 1; t <= 3; ++t) s->step();
  const Tensor found_inf = mt::full({}, 1.0, mt::TensorOptions().dtype(mt::kFloat32));
  for (auto& sch : s->scheds) {
    // The Trainer's path: the GradScaler's step records the skip, the scheduler reads it.
    for (const Tensor& p : s->params) p.set_grad(mt::zeros_like(p));
    s->opt->step_if_finite(found_inf);
    const int64_t epoch = sch->last_epoch();
    if (sch->takes_metric()) {
      sch->step(0.0);
    } else {
      sch->step();
    }
    EXPECT_EQ(sch->last_epoch(), epoch) << GetParam();
  }
  expect_lr(*s, golden, 3, GetParam() + " after a skipped step");
  s->step();
  expect_lr(*s, golden, 4, GetParam() + " after a skipped step");
}

INSTANTIATE_TEST_SUITE_P(PyTorch, SchedulerGolden, ::testing::ValuesIn(golden_scheduler_cases()));

TEST(SchedulerGoldenFile, EveryCaseHasABuilderAndEveryBuilderARecord) {
  const auto names = golden_scheduler_cases();
  ASSERT_FALSE(names.empty()) << "tests/golden/optim.txt missing; run scripts/golden/make_optim.py";
  for (const auto& n : names) EXPECT_TRUE(builders().count(n)) << n;
  for (const auto& [n, f] : builders()) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(Schedulers, InvalidArgumentsThrow) {
  auto s = sgd();
  optim::Optimizer& o = *s->opt;
  expect_error([&] { optim::CosineAnnealingLR(o, 0); }, {"CosineAnnealingLR", "T_max"});
  expect_error([&] { optim::LinearLR(o, 1.5); }, {"LinearLR", "Starting multiplicative factor"});
  expect_error([&] { optim::LinearLR(o, 0.5, -1.0); }, {"LinearLR", "Ending multiplicative"});
  expect_error([&] { optim::OneCycleLR(o, {.max_lr = {0.1}, .total_steps = 0}); },
               {"OneCycleLR", "total_steps, but got 0"});
  expect_error([&] { optim::OneCycleLR(o, {.max_lr = {0.1}, .total_steps = 5, .pct_start = 2}); },
               {"OneCycleLR", "pct_start, but got 2"});
  expect_error(
      [&] { optim::OneCycleLR(o, {.max_lr = {0.1}, .total_steps = 5, .anneal_strategy = "exp"}); },
      {"OneCycleLR", "anneal_strategy", "'exp'"});
  expect_error(
      [&] {
        optim::OneCycleLR(o, {.max_lr = {0.1, 0.2, 0.3}, .total_steps = 5});
      },
      {"OneCycleLR", "max_lr", "got 3"});
  expect_error([&] { optim::ReduceLROnPlateau(o, {.factor = 1.0}); },
               {"ReduceLROnPlateau", "Factor should be < 1.0"});
  expect_error([&] { optim::ReduceLROnPlateau(o, {.mode = "up"}); }, {"mode up is unknown"});
  expect_error([&] { optim::ReduceLROnPlateau(o, {.threshold_mode = "pct"}); },
               {"threshold mode pct is unknown"});
  expect_error(
      [&] {
        optim::LambdaLR(o, std::vector<optim::LambdaLR::Lambda>{lam, lam});
      },
      {"LambdaLR", "Expected 1 lr_lambdas, but got 2"});
  Tensor p = mt::zeros({2}).requires_grad_();
  optim::Adagrad adagrad({p});
  expect_error([&] { optim::OneCycleLR(adagrad, {.max_lr = {0.1}, .total_steps = 5}); },
               {"OneCycleLR", "Adagrad", "must support momentum"});
}

TEST(Schedulers, OneCycleRefusesToStepPastTotalSteps) {
  auto s = sgd(0.9);
  optim::OneCycleLR sch(*s->opt, {.max_lr = {0.1}, .total_steps = 3});
  for (int i = 0; i < 3; ++i) sch.step();
  expect_error([&] { sch.step(); }, {"OneCycleLR", "Tried to step 5 times", "total steps is 3"});
}

TEST(Schedulers, MetricAndPlainStepsAreNotInterchangeable) {
  auto s = sgd();
  optim::ReduceLROnPlateau plateau(*s->opt);
  expect_error([&] { plateau.step(); }, {"ReduceLROnPlateau", "step(metric)"});
  optim::ExponentialLR exp(*s->opt, 0.5);
  expect_error([&] { exp.step(1.0); }, {"ExponentialLR", "call step()"});
  expect_error(
      [&] {
        auto p = std::make_shared<optim::ReduceLROnPlateau>(*s->opt);
        auto e = std::make_shared<optim::ExponentialLR>(*s->opt, 0.5);
        optim::SequentialLR(*s->opt, {e, p}, {3});
      },
      {"SequentialLR", "metric-driven"});
  expect_error(
      [&] {
        auto e = std::make_shared<optim::ExponentialLR>(*s->opt, 0.5);
        optim::SequentialLR(*s->opt, {e}, {3});
      },
      {"SequentialLR", "one more than the number of milestone"});
}

TEST(Schedulers, ChainableSchedulersScaleAnLrSetByHand) {
  auto s = sgd();
  optim::ExponentialLR sch(*s->opt, 0.5);
  s->opt->set_lr(0.8);
  sch.step();
  EXPECT_DOUBLE_EQ(s->opt->lr(), 0.4);
}

}  // namespace
