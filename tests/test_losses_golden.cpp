// The losses with their options (class weights, ignore_index, label_smoothing, pos_weight, beta,
// delta, log_target) and every reduction against PyTorch 1.13: scripts/golden/make_losses.py
// ran each case in float64 and wrote the inputs, the loss and the input gradients to
// tests/golden/losses.txt. Each program here runs the case of its name on those inputs.
// Also: the nodes the new losses record, their errors, the modules, and binary_cross_entropy's
// refusal under autocast.
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "golden_file.h"
#include "nn/loss.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
namespace F = mantissa::nn::functional;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using nn::KlDivReduction;
using nn::Reduction;

namespace {

using Named = std::map<std::string, Tensor>;

std::map<std::string, Named> load_cases() {
  mt::testing::GoldenFormat format;
  format.dtype_column = true;
  std::map<std::string, Named> cases;
  for (const auto& [name, c] : mt::testing::read_golden_file("losses.txt", format)) {
    for (const auto& t : c.tensors)
      cases[name][t.name] = t.dtype == "int64" ? t.f64().to(mt::kInt64) : t.f64();
  }
  return cases;
}

const std::map<std::string, Named>& golden() {
  static const std::map<std::string, Named> cases = load_cases();
  return cases;
}

// A case's program: the loss of the inputs x, t, w, pw (w and pw undefined when absent).
using Program =
    std::function<Tensor(const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw)>;

const char* reduction_name(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Mean ? "mean" : "sum";
}

// The programs, named as make_losses.py names its cases.
std::map<std::string, Program> programs() {
  std::map<std::string, Program> p;
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    const std::string rn = reduction_name(r);
    const auto nll = [r](int64_t ignore) {
      return [r, ignore](const Tensor& x, const Tensor& t, const Tensor& w, const Tensor&) {
        return F::nll_loss(x, t, r, ignore, w);
      };
    };
    p["nll_loss_weight_" + rn] = nll(-100);
    p["nll_loss_weight_3d_ignore1_" + rn] = nll(1);
    p["nll_loss_weight_unbatched_" + rn] = nll(-100);
    for (double ls : {0.0, 0.2}) {
      const std::string tag = ls == 0.0 ? "ls0" : "ls2";
      const auto ce = [r, ls](int64_t ignore) {
        return [r, ls, ignore](const Tensor& x, const Tensor& t, const Tensor& w, const Tensor&) {
          return F::cross_entropy(x, t, r, ls, ignore, w);
        };
      };
      p["cross_entropy_weight_" + tag + "_" + rn] = ce(-100);
      p["cross_entropy_weight_3d_ignore1_" + tag + "_" + rn] = ce(1);
      p["cross_entropy_weight_probs_" + tag + "_" + rn] = ce(-100);
    }
    const Program bcel = [r](const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
      return F::binary_cross_entropy_with_logits(x, t, r, pw, w);
    };
    p["bce_with_logits_weight_" + rn] = bcel;
    p["bce_with_logits_row_weight_pos_weight_" + rn] = bcel;
    p["bce_with_logits_pos_weight_" + rn] = bcel;
    const Program bce = [r](const Tensor& x, const Tensor& t, const Tensor& w, const Tensor&) {
      return F::binary_cross_entropy(x, t, r, w);
    };
    p["bce_" + rn] = bce;
    p["bce_weight_" + rn] = bce;
    p["bce_clamped_" + rn] = bce;
    for (auto [beta, tag] : {std::pair{1.0, "1p0"}, {0.5, "0p5"}, {0.0, "0p0"}}) {
      p["smooth_l1_loss_beta" + std::string(tag) + "_" + rn] =
          [r, beta](const Tensor& x, const Tensor& t, const Tensor&, const Tensor&) {
            return F::smooth_l1_loss(x, t, r, beta);
          };
    }
    for (auto [delta, tag] : {std::pair{1.0, "1p0"}, {0.3, "0p3"}, {2.5, "2p5"}}) {
      p["huber_loss_delta" + std::string(tag) + "_" + rn] =
          [r, delta](const Tensor& x, const Tensor& t, const Tensor&, const Tensor&) {
            return F::huber_loss(x, t, r, delta);
          };
    }
  }
  for (auto [kr, rn] : {std::pair{KlDivReduction::None, "none"},
                        {KlDivReduction::Mean, "mean"},
                        {KlDivReduction::Sum, "sum"},
                        {KlDivReduction::BatchMean, "batchmean"}}) {
    const auto kl = [kr](bool log_target) -> Program {
      return [kr, log_target](const Tensor& x, const Tensor& t, const Tensor&, const Tensor&) {
        return F::kl_div(x, t, kr, log_target);
      };
    };
    p["kl_div_" + std::string(rn)] = kl(false);
    p["kl_div_zero_target_" + std::string(rn)] = kl(false);
    p["kl_div_log_target_" + std::string(rn)] = kl(true);
  }
  return p;
}

Tensor get(const Named& c, const std::string& name) {
  const auto it = c.find(name);
  return it == c.end() ? Tensor() : it->second;
}

class LossGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LossGolden, MatchesPyTorch) {
  const auto found = golden().find(GetParam());
  ASSERT_NE(found, golden().end())
      << "no golden record for " << GetParam() << "; rerun scripts/golden/make_losses.py";
  const Named& c = found->second;
  const Tensor x = get(c, "x").detach().requires_grad_();
  Tensor t = get(c, "t");
  const Tensor expected_t_grad = get(c, "t.grad");
  if (expected_t_grad.defined()) t = t.detach().requires_grad_();
  const Tensor loss = programs().at(GetParam())(x, t, get(c, "w"), get(c, "pw"));
  expect_close(loss, get(c, "loss"), 1e-12, 1e-12, GetParam() + " loss");
  const Tensor g = get(c, "g");
  loss.backward(g);
  expect_close(x.grad(), get(c, "x.grad"), 1e-11, 1e-12, GetParam() + " x.grad");
  if (expected_t_grad.defined()) {
    ASSERT_TRUE(t.grad().defined()) << GetParam();
    expect_close(t.grad(), expected_t_grad, 1e-11, 1e-12, GetParam() + " t.grad");
  }
}

std::vector<std::string> program_names() {
  std::vector<std::string> names;
  for (const auto& [name, program] : programs()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cases, LossGolden, ::testing::ValuesIn(program_names()),
                         [](const auto& info) { return info.param; });

TEST(LossGoldenFile, EveryRecordHasAProgram) {
  const auto p = programs();
  EXPECT_FALSE(golden().empty());
  for (const auto& [name, c] : golden()) EXPECT_TRUE(p.count(name)) << name;
}

Tensor f64(std::vector<double> v, Shape s) { return mt::from_vector(v, s, mt::kFloat64); }

TEST(Losses, RecordOneNodeNamedAsPyTorch) {
  const Tensor x = f64({0.2, 0.7, 0.4, 0.9}, {2, 2}).requires_grad_();
  const Tensor t = f64({0.0, 1.0, 0.5, 1.0}, {2, 2});
  EXPECT_EQ(F::smooth_l1_loss(x, t).grad_fn()->name(), "SmoothL1LossBackward0");
  EXPECT_EQ(F::huber_loss(x, t).grad_fn()->name(), "HuberLossBackward0");
  EXPECT_EQ(F::binary_cross_entropy(x, t).grad_fn()->name(), "BinaryCrossEntropyBackward0");
  EXPECT_EQ(F::kl_div(x, t, KlDivReduction::BatchMean).grad_fn()->name(), "KlDivBackward0");
}

TEST(Losses, ArgumentErrorsNameTheOpAndValues) {
  const Tensor x = f64({0.2, 0.7, 0.4, 0.9}, {2, 2});
  expect_error([&] { F::smooth_l1_loss(x, x, Reduction::Mean, -0.5); },
               {"smooth_l1_loss", "beta", "-0.5"});
  expect_error([&] { F::huber_loss(x, x, Reduction::Mean, 0.0); }, {"huber_loss", "delta"});
  expect_error([&] { F::binary_cross_entropy(x * 2.0, x); },
               {"binary_cross_entropy", "between 0 and 1"});
  expect_error([&] { F::binary_cross_entropy(x, x.reshape({4})); },
               {"binary_cross_entropy", "target size"});
  expect_error(
      [&] {
        F::binary_cross_entropy(x, x, Reduction::Mean, f64({1, 2, 3}, {3}));
      },
      {"binary_cross_entropy", "weight", "[3]"});
  const Tensor labels = mt::from_vector(std::vector<int64_t>{0, 1}, Shape{2});
  expect_error(
      [&] {
        F::cross_entropy(x, labels, Reduction::Mean, 0.0, -100, f64({1, 2, 3}, {3}));
      },
      {"cross_entropy", "2 classes", "[3]"});
  expect_error(
      [&] {
        F::nll_loss(x, labels, Reduction::Mean, -100, f64({1, 2}, {2}).requires_grad_());
      },
      {"nll_loss", "weight", "not differentiable"});
  expect_error(
      [&] {
        F::binary_cross_entropy_with_logits(x, x, Reduction::Mean, Tensor(),
                                            f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
      },
      {"binary_cross_entropy_with_logits", "weight", "[2, 2]"});
  expect_error([] { nn::parse_kl_div_reduction("average"); }, {"average", "batchmean"});
}

// PyTorch puts binary_cross_entropy on autocast's banned list: in float16/bfloat16 a sigmoid's
// output rounds to 0 or 1 where the loss needs the difference. mantissa refuses it under any
// autocast scope; the with-logits form runs in float32 there.
TEST(Losses, BinaryCrossEntropyIsRefusedUnderAutocast) {
  const Tensor p = f64({0.2, 0.7, 0.4, 0.9}, {2, 2}).to(mt::kFloat32);
  const Tensor t = f64({0.0, 1.0, 0.5, 1.0}, {2, 2}).to(mt::kFloat32);
  const double outside = F::binary_cross_entropy(p, t).item<double>();
  {
    mt::amp::autocast scope(mt::kCPU, mt::amp::Precision::BFloat16);
    expect_error(
        [&] { F::binary_cross_entropy(p, t); },
        {"binary_cross_entropy", "unsafe to autocast", "binary_cross_entropy_with_logits"});
    expect_error([&] { nn::BCELoss()->forward(p, t); }, {"unsafe to autocast"});
    const Tensor logits = mt::log(p / (1.0 - p)).to(mt::kBFloat16);
    EXPECT_EQ(F::binary_cross_entropy_with_logits(logits, t).dtype(), mt::kFloat32);
    EXPECT_EQ(F::smooth_l1_loss(p.to(mt::kBFloat16), t).dtype(), mt::kFloat32);
    EXPECT_EQ(F::kl_div(p.to(mt::kBFloat16), t).dtype(), mt::kFloat32);
  }
  EXPECT_EQ(F::binary_cross_entropy(p, t).item<double>(), outside);
}

TEST(Losses, ModulesForwardTheirOptions) {
  const Tensor x = f64({0.2, 0.7, 0.4, 0.9, 0.1, 0.5}, {2, 3});
  const Tensor t = f64({0.0, 1.0, 0.5, 1.0, 0.3, 0.2}, {2, 3});
  const Tensor w = f64({0.5, 2.0, 1.0}, {3});
  const Tensor labels = mt::from_vector(std::vector<int64_t>{2, 0}, Shape{2});
  expect_close(nn::SmoothL1Loss(Reduction::Sum, 0.25)->forward(x, t),
               F::smooth_l1_loss(x, t, Reduction::Sum, 0.25), 0, 0);
  expect_close(nn::HuberLoss(Reduction::Mean, 0.3)->forward(x, t),
               F::huber_loss(x, t, Reduction::Mean, 0.3), 0, 0);
  expect_close(nn::BCELoss(Reduction::Mean, w)->forward(x, t),
               F::binary_cross_entropy(x, t, Reduction::Mean, w), 0, 0);
  expect_close(nn::KLDivLoss(KlDivReduction::BatchMean, true)->forward(x, t),
               F::kl_div(x, t, KlDivReduction::BatchMean, true), 0, 0);
  expect_close(nn::NLLLoss(nn::NLLLossOptions{Reduction::Mean, 0, w})->forward(x, labels),
               F::nll_loss(x, labels, Reduction::Mean, 0, w), 0, 0);
  expect_close(nn::CrossEntropyLoss(nn::CrossEntropyOptions{Reduction::Sum, 0.1, -100, w})
                   ->forward(x, labels),
               F::cross_entropy(x, labels, Reduction::Sum, 0.1, -100, w), 0, 0);
  expect_close(nn::BCEWithLogitsLoss(Reduction::Mean, Tensor(), w)->forward(x, t),
               F::binary_cross_entropy_with_logits(x, t, Reduction::Mean, Tensor(), w), 0, 0);
  // Class weights are buffers, as PyTorch's (they move with the module and save with it).
  EXPECT_EQ(nn::NLLLoss(nn::NLLLossOptions{Reduction::Mean, -100, w})->named_buffers().size(), 1u);
  EXPECT_EQ(nn::HuberLoss(Reduction::Mean, 0.3)->extra_repr(), "delta=0.3");
  EXPECT_EQ(nn::KLDivLoss(KlDivReduction::BatchMean)->extra_repr(), "reduction='batchmean'");
}

}  // namespace
