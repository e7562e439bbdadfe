// Double backward (create_graph): every op the op list (engine/ops.def) marks Twice
// passes a second-order gradcheck in float64 on its op cases (tests/op_cases.cpp), and every
// other differentiable op refuses create_graph with an error naming its node. Programs from
// scripts/golden/make_double_backward.py (a gradient penalty, a Hessian-vector product, a leaf's
// .grad with history) match the values PyTorch computed, committed in
// tests/golden/double_backward.txt.
#include <cmath>
#include <functional>
#include <map>

#include "autograd/backward.h"
#include "autograd/gradcheck.h"
#include "autograd/op_index.h"
#include "autograd/recorder.h"
#include "golden_file.h"
#include "op_cases.h"
#include "test_util.h"

namespace mt = mantissa;
namespace ag = mantissa::autograd;
using mt::Shape;
using mt::Tensor;
using mt::testing::Inputs;
using mt::testing::op_cases;
using mt::testing::op_of;
using mt::testing::OpCase;
using Problems = std::vector<std::string>;

namespace {

Inputs inputs_for(const OpCase& c) {
  Inputs x;
  for (const Shape& s : c.shapes) {
    Tensor t = mt::testing::random_tensor(s, mt::kFloat64, true, c.low, c.high);
    // Away from 0, where abs/relu/maximum-style kinks would fool finite differences.
    if (c.low < 0) t = t + mt::sign(t) * 0.05;
    x.push_back(t.detach().requires_grad_());
  }
  return x;
}

// For a listed op: each float64 case passes gradgradcheck (and there is one). For any other
// differentiable op: its first gradient with create_graph throws the create_graph error.
Problems double_backward_problems(const std::string& op, bool listed,
                                  const std::vector<const OpCase*>& cases) {
  Problems p;
  bool checked = false;
  for (const OpCase* c : cases) {
    if (!mt::testing::supports(*c, mt::kFloat64) || !c->differentiable) continue;
    const Inputs x = inputs_for(*c);
    if (listed) {
      try {
        ag::gradgradcheck(c->fn, x, 1e-6, 1e-5, 1e-3);
      } catch (const mt::Error& e) {
        p.push_back(c->name + ": gradgradcheck fails: " + e.what());
      }
      checked = true;
      continue;
    }
    try {
      const Tensor out = c->fn(x);
      ag::grad({out}, x, {mt::ones_like(out)}, true, true, /*create_graph=*/true);
      p.push_back(c->name + ": supports create_graph but the op index does not list " + op);
    } catch (const mt::Error& e) {
      if (std::string(e.what()).find("does not support create_graph (double backward)") ==
          std::string::npos)
        p.push_back(c->name + ": unexpected error " + e.what());
    }
  }
  if (listed && !checked) p.push_back(op + ": no float64 case to gradgradcheck");
  return p;
}

std::vector<const OpCase*> cases_named(const std::string& op, const std::vector<OpCase>& cases) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : cases)
    if (op_of(c) == op) out.push_back(&c);
  return out;
}

}  // namespace

// One test per differentiable op of the index, so that a failure names the op.
class DoubleBackwardOp : public ::testing::TestWithParam<int> {};

std::vector<int> differentiable_ops() {
  std::vector<int> out;
  for (int i = 0; i < mt::kNumOps; ++i)
    if (mt::kOpIndex[i].differentiable()) out.push_back(i);
  return out;
}

TEST_P(DoubleBackwardOp, MatchesItsListing) {
  const mt::OpInfo& op = mt::kOpIndex[GetParam()];
  const bool listed = mt::supports_double_backward(static_cast<mt::OpId>(GetParam()));
  for (const std::string& problem :
       double_backward_problems(op.name, listed, cases_named(op.name, op_cases())))
    ADD_FAILURE() << problem;
}

INSTANTIATE_TEST_SUITE_P(AllOps, DoubleBackwardOp, ::testing::ValuesIn(differentiable_ops()),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(mt::kOpIndex[info.param].name);
                         });

// ---- the checks catch what they must ---------------------------------------------------------
namespace {

// x * x whose node claims double-backward support but computes 2x from an unrecorded copy: the
// first gradient is right and the second would silently be missing a term.
Tensor square_with_false_claim(const Tensor& x) {
  Tensor out = mt::mul(x.detach(), x.detach());
  if (ag::Recorder rec{"FalseClaimBackward0", {&x}}) {
    rec.save(x);
    rec.finish(
        out,
        [](ag::BackwardContext& ctx) -> std::vector<Tensor> {
          return {ctx.grad() * (ctx.saved(0).detach() * 2.0)};
        },
        ag::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

TEST(DoubleBackwardIndex, CatchesAFalseClaim) {
  const OpCase fake{"false_claim", mt::kFloatingTypes, {{4, 3}}, [](const Inputs& x) {
                      return square_with_false_claim(x[0]);
                    }};
  EXPECT_TRUE(ag::gradcheck(fake.fn, inputs_for(fake)));  // the first order is right
  const Problems p = double_backward_problems("false_claim", true, {&fake});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("gradgradcheck fails"), std::string::npos) << p[0];
}

namespace {

// x * x whose create_graph formula is self-consistent but not the gradient: its double backward
// agrees with finite differences of that wrong first gradient.
Tensor square_with_other_create_graph_formula(const Tensor& x) {
  Tensor out = mt::mul(x.detach(), x.detach());
  if (ag::Recorder rec{"OtherFormulaBackward0", {&x}}) {
    rec.save(x);
    rec.finish(
        out,
        [](ag::BackwardContext& ctx) -> std::vector<Tensor> {
          const Tensor in = ctx.saved(0);
          if (ctx.create_graph()) return {ctx.grad() * in * 3.0};
          return {ctx.grad() * (in.detach() * 2.0)};
        },
        ag::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

TEST(DoubleBackwardIndex, CatchesACreateGraphFormulaThatDiffersFromThePlainOne) {
  const OpCase fake{"other_formula", mt::kFloatingTypes, {{4, 3}}, [](const Inputs& x) {
                      return square_with_other_create_graph_formula(x[0]);
                    }};
  const Problems p = double_backward_problems("other_formula", true, {&fake});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("under create_graph"), std::string::npos) << p[0];
}

TEST(DoubleBackwardIndex, CatchesAListedOpWithoutACaseAndAnUnlistedOpThatWorks) {
  EXPECT_EQ(double_backward_problems("nothing", true, {}),
            Problems{"nothing: no float64 case to gradgradcheck"});
  const auto mul_cases = cases_named("mul", op_cases());
  const Problems p = double_backward_problems("mul", false, mul_cases);
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p[0].find("does not list mul"), std::string::npos) << p[0];
}

// ---- engine behaviour --------------------------------------------------------------------------
TEST(DoubleBackward, UnsupportedOpThrowsNamingItsNode) {
  const Tensor x = mt::testing::random_tensor({1, 2, 5, 5}, mt::kFloat64, false).requires_grad_();
  const Tensor w = mt::testing::random_tensor({3, 2, 3, 3}, mt::kFloat64, false).requires_grad_();
  const Tensor y = mt::tanh(mt::conv2d(x, w)).sum();
  mt::testing::expect_error([&] { ag::grad({y}, {x}, {}, false, false, /*create_graph=*/true); },
                            {"op Conv", "does not support create_graph (double backward)"});
  const Tensor z = mt::layer_norm(x, {5}).sum();
  mt::testing::expect_error([&] { z.backward(Tensor(), false, /*create_graph=*/true); },
                            {"op NativeLayerNorm", "does not support create_graph"});
  // Without create_graph both run as before.
  EXPECT_TRUE(ag::grad({y}, {x})[0].defined());
  EXPECT_NO_THROW(z.backward());
}

TEST(DoubleBackward, GradientsCarryHistoryAndTheGraphIsRetained) {
  const Tensor x = mt::from_vector(std::vector<double>{0.5, -1.0, 2.0}, Shape{3}).requires_grad_();
  const Tensor y = (mt::exp(x) * x).sum();
  const Tensor g = ag::grad({y}, {x}, {}, false, false, /*create_graph=*/true)[0];
  EXPECT_TRUE(g.requires_grad());
  EXPECT_FALSE(g.is_leaf());
  // create_graph implies retain_graph: the forward graph can be run again.
  const Tensor g_again = ag::grad({y}, {x}, {}, /*retain_graph=*/true)[0];
  mt::testing::expect_close(g_again, g.detach(), 0, 0);
  // d/dx (e^x (x + 1)) = e^x (x + 2)
  const Tensor h = ag::grad({g.sum()}, {x})[0];
  mt::testing::expect_close(h, (mt::exp(x) * (x + 2.0)).detach(), 1e-14, 1e-14);
  // Without create_graph the gradient has no history.
  EXPECT_FALSE(ag::grad({(x * x).sum()}, {x})[0].requires_grad());
}

TEST(DoubleBackward, SavedOutputIsDifferentiatedThroughItsForward) {
  // exp, sqrt, tanh and softmax read their saved output: the second derivative must go through
  // the forward again (d2/dx2 e^x = e^x, not 0).
  const Tensor x = mt::from_vector(std::vector<double>{0.3, 1.2}, Shape{2}).requires_grad_();
  const Tensor g = ag::grad({mt::exp(x).sum()}, {x}, {}, false, false, true)[0];
  mt::testing::expect_close(ag::grad({g.sum()}, {x})[0], mt::exp(x).detach(), 1e-15, 0);
}

// ---- against PyTorch --------------------------------------------------------------------------
namespace {

using Outputs = std::map<std::string, Tensor>;

std::map<std::string, Outputs> load_cases() {
  std::map<std::string, Outputs> cases;
  for (const auto& [name, c] : mt::testing::read_golden_file("double_backward.txt"))
    cases[name] = c.tensors_by_name();
  return cases;
}

// sin(a i + b) over the elements in row-major order, as the script's filled().
Tensor filled(const Shape& shape, double a, double b) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(a * double(i) + b);
  return mt::from_vector(v, shape);
}
Tensor param(const Tensor& t) { return t.detach().requires_grad_(); }

const std::map<std::string, std::function<Outputs()>>& programs() {
  static const std::map<std::string, std::function<Outputs()>> all = {
      {"gradient_penalty",
       [] {
         const Tensor x = param(filled({4, 3}, 0.7, 0.1));
         const Tensor w1 = param(filled({5, 3}, 1.3, 0.2) * 0.8);
         const Tensor b1 = param(filled({5}, 2.1, 0.3) * 0.5);
         const Tensor w2 = param(filled({1, 5}, 0.9, 0.4) * 0.8);
         const Tensor b2 = param(filled({1}, 1.1, 0.5) * 0.5);
         const Tensor out = mt::linear(mt::tanh(mt::linear(x, w1, b1)), w2, b2);
         const Tensor g = ag::grad({out.sum()}, {x}, {}, false, false, true)[0];
         const Tensor penalty = (g * g).sum({1}).mean();
         penalty.backward();
         EXPECT_FALSE(b2.grad().defined());  // the penalty does not depend on the last bias
         return Outputs{{"out", out},           {"g", g},
                        {"penalty", penalty},   {"w1.grad", w1.grad()},
                        {"b1.grad", b1.grad()}, {"w2.grad", w2.grad()},
                        {"x.grad", x.grad()}};
       }},
      {"hessian_vector_product",
       [] {
         const Tensor x = param(filled({3, 4}, 0.9, 0.2) * 1.5);
         const Tensor w = filled({4, 5}, 1.7, 0.6);
         const Tensor t = mt::abs(filled({3, 5}, 0.5, 1.0));
         const Tensor v = filled({3, 4}, 2.3, 0.7);
         const Tensor target = filled({3, 4}, 1.1, 0.3);
         const Tensor f =
             (mt::log_softmax(x.mm(w), 1) * t).sum() + (mt::pow(x, 3) * mt::sigmoid(x)).sum() +
             (mt::softmax(x, 0) * mt::gelu(x)).sum() + mt::mse_loss(mt::tanh(x), target);
         const Tensor g = ag::grad({f}, {x}, {}, false, false, true)[0];
         const Tensor hv = ag::grad({(g * v).sum()}, {x})[0];
         return Outputs{{"f", f}, {"g", g}, {"hv", hv}};
       }},
      {"leaf_grad_with_graph",
       [] {
         const Tensor x = param(mt::from_vector(std::vector<double>{0.5, -1.0, 2.0}, Shape{3}));
         (x * x * x).sum().backward(Tensor(), false, /*create_graph=*/true);
         const Tensor first = x.grad().detach().clone();
         EXPECT_TRUE(x.grad().requires_grad());
         x.grad().sum().backward();  // adds 6x into x.grad
         return Outputs{{"x.grad_first", first}, {"x.grad", x.grad()}};
       }},
  };
  return all;
}

}  // namespace

class DoubleBackwardGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DoubleBackwardGolden, MatchesPyTorch) {
  const auto cases = load_cases();
  const auto found = cases.find(GetParam());
  ASSERT_NE(found, cases.end()) << "no golden record for " << GetParam()
                                << "; rerun scripts/golden/make_double_backward.py";
  const Outputs out = programs().at(GetParam())();
  ASSERT_EQ(out.size(), found->second.size());
  for (const auto& [name, expected] : found->second) {
    ASSERT_TRUE(out.count(name)) << "the program has no output " << name;
    ASSERT_TRUE(out.at(name).defined()) << name;
    mt::testing::expect_close(out.at(name), expected, 1e-11, 1e-12, GetParam() + " " + name);
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, DoubleBackwardGolden,
                         ::testing::Values("gradient_penalty", "hessian_vector_product",
                                           "leaf_grad_with_graph"));

TEST(DoubleBackwardGolden, EveryRecordHasAProgram) {
  for (const auto& [name, outputs] : load_cases()) EXPECT_TRUE(programs().count(name)) << name;
  EXPECT_EQ(load_cases().size(), programs().size());
}

// relu, sigmoid, tanh and gelu's tanh form write their backward once
// (engine/activation_formulas.h): the kernel evaluates it without create_graph, the ops with it, so
// both give the same gradient, to rounding, at every input. relu's passes the gradient where its
// output is NaN (PyTorch's threshold_backward), on both paths.
TEST(DoubleBackward, PointwiseBackwardsAreTheSameFormulaWithAndWithoutCreateGraph) {
  const std::vector<double> xs = {-3.0, -0.5, -0.0, 0.0, 1e-3, 0.7, 2.5, 9.0, std::nan("")};
  const Tensor x = mt::from_vector(xs).to(mt::kFloat32);
  const Tensor g =
      mt::from_vector(std::vector<double>{0.3, -1.2, 2.0, 0.5, -0.7, 1.1, 0.9, -2.2, 1.5})
          .to(mt::kFloat32);
  const std::map<std::string, std::function<Tensor(const Tensor&)>> ops = {
      {"relu", [](const Tensor& t) { return mt::relu(t); }},
      {"sigmoid", [](const Tensor& t) { return mt::sigmoid(t); }},
      {"tanh", [](const Tensor& t) { return mt::tanh(t); }},
      {"gelu_tanh", [](const Tensor& t) { return mt::gelu(t, "tanh"); }}};
  for (const auto& [name, f] : ops) {
    SCOPED_TRACE(name);
    std::vector<std::vector<float>> grads;
    for (const bool create_graph : {false, true}) {
      const Tensor in = x.detach().requires_grad_();
      const Tensor out = f(in);
      grads.push_back(ag::grad({out}, {in}, {g}, false, false, create_graph)[0].to_vector<float>());
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      if (std::isnan(grads[0][i])) {
        EXPECT_TRUE(std::isnan(grads[1][i])) << "at " << xs[i];
      } else {
        EXPECT_NEAR(grads[1][i], grads[0][i], 1e-6 * std::abs(grads[0][i]) + 1e-7)
            << "at " << xs[i];
      }
    }
    if (name == "relu") {
      EXPECT_FLOAT_EQ(grads[1].back(), 1.5f);  // NaN output: g passes
    }
  }
}
