// The activations with parameters (leaky_relu, elu, softplus) and mish and hardswish against
// PyTorch: every program here is also in scripts/golden/make_activations.py, whose results are
// committed in tests/golden/activations.txt. Then what the golden file cannot hold: today's
// PyTorch where it changed since the golden file's, our refusals, rounding of the half types,
// autocast, and the modules. The activations without parameters (relu, gelu, silu, ...) are rows
// of the unary op table, tested with it in test_elementwise.cpp.
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/backward.h"
#include "golden_file.h"
#include "nn/layers.h"
#include "runner/model_builder.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Tensor;

namespace {

using Outputs = mt::testing::GoldenOutputs;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
const std::vector<double> IA = {7, -7, 7, -7, 0, 9, -9, 1};
const std::vector<double> ACT = {-20.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0};
// softplus(beta=2, threshold=3) switches to the identity above x = 1.5.
const std::vector<double> SOFT = {-30.0, -1.0, 0.0, 1.0, 1.49, 1.5, 1.51, 10.0};
// hardswish's golden inputs stay off -3 and 3, where today's PyTorch differs from the golden's.
const std::vector<double> HSW = {-20.0, -3.5, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0};

Tensor t(const std::vector<double>& v, DType dtype = mt::kFloat64) {
  return mt::from_vector(v).to(dtype);
}
Tensor leaf(const std::vector<double>& v) { return t(v).requires_grad_(); }
Tensor weights(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(0.5 * static_cast<double>(i + 1));
  return t(v);
}
Outputs out(const Tensor& x) { return {{"out", x}}; }

// The programs of make_activations.py, by case name.
std::map<std::string, mt::testing::GoldenProgram> programs() {
  std::map<std::string, mt::testing::GoldenProgram> p;
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> activations = {
      {"leaky_relu", [](const Tensor& x) { return mt::leaky_relu(x); }},
      {"leaky_relu_slope", [](const Tensor& x) { return mt::leaky_relu(x, 0.2); }},
      {"elu", [](const Tensor& x) { return mt::elu(x); }},
      {"elu_alpha", [](const Tensor& x) { return mt::elu(x, 0.5); }},
      {"softplus", [](const Tensor& x) { return mt::softplus(x); }},
      {"softplus_beta_threshold", [](const Tensor& x) { return mt::softplus(x, 2.0, 3.0); }},
      {"mish", [](const Tensor& x) { return mt::mish(x); }},
      {"hardswish", [](const Tensor& x) { return mt::hardswish(x); }}};
  for (const auto& [name, fn] : activations) {
    const std::vector<double>& in =
        name.rfind("softplus", 0) == 0 ? SOFT : (name == "hardswish" ? HSW : ACT);
    p[name + "_grad"] = [fn, &in] {
      Tensor x = leaf(in), y = fn(x);
      (y * weights(8)).sum().backward();
      return Outputs{{"y", y}, {"x.grad", x.grad()}};
    };
    p[name + "_float32"] = [fn, &in] { return out(fn(t(in, mt::kFloat32))); };
  }
  p["mish_hardswish_wide_float32"] = [] {
    const Tensor x = t({-100.0, -30.0, -3.0, 3.0, 20.0, 30.0, 89.0, 100.0}, mt::kFloat32);
    return Outputs{{"mish", mt::mish(x)}, {"hardswish", mt::hardswish(x)}};
  };
  p["softplus_large_float32"] = [] {
    return out(mt::softplus(t({15.0, 19.9, 20.0, 20.1, 50.0, 100.0}, mt::kFloat32)));
  };
  return p;
}

}  // namespace

TEST(ActivationsGolden, EveryProgramMatchesPyTorch) {
  mt::testing::GoldenFormat format;
  format.dtype_column = true;
  const auto cases = mt::testing::read_golden_file("activations.txt", format);
  ASSERT_GE(cases.size(), 18u);
  mt::testing::expect_programs_match(cases, programs());
}

// ---- what the golden file does not hold ---------------------------------------------------------

TEST(Activations, IntegerInputsAreRefused) {
  EXPECT_THROW(mt::leaky_relu(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::elu(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::softplus(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::mish(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::hardswish(t(IA, mt::kInt64)), mt::Error);
}

// hardswish's gradient at the edges as today's PyTorch gives it (PyTorch 2.7 on; 1.13, which
// makes the golden file, gave x / 3 + 1/2 there): 0 at -3, 1 at 3, g for NaN; its second
// derivative 1/3 strictly inside (-3, 3), 0 at the edges. The values are torch 2.15's for
//   x = torch.tensor([-3, 3, -3.0001, 2.9999, nan], dtype=float64, requires_grad=True)
//   F.hardswish(x).sum().backward()   and the double backward of [-3, 0.5, 3].
TEST(Activations, HardswishGradientAtTheEdgesIsTodaysPyTorchs) {
  const Tensor x = t({-3.0, 3.0, -3.0001, 2.9999, kNan}).requires_grad_();
  mt::hardswish(x).sum().backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  EXPECT_EQ(g[0], 0.0);
  EXPECT_EQ(g[1], 1.0);
  EXPECT_EQ(g[2], 0.0);
  EXPECT_DOUBLE_EQ(g[3], 2.9999 / 3 + 0.5);
  EXPECT_EQ(g[4], 1.0);
  const Tensor x32 = t({-3.0, 3.0}, mt::kFloat32).requires_grad_();
  mt::hardswish(x32).sum().backward();
  EXPECT_EQ(x32.grad().to_vector<float>(), (std::vector<float>{0.0f, 1.0f}));
  const Tensor y = t({-3.0, 0.5, 3.0}).requires_grad_();
  const Tensor gy = mt::autograd::grad({mt::hardswish(y).sum()}, {y}, {}, true, false, true)[0];
  EXPECT_EQ(gy.to_vector<double>(), (std::vector<double>{0.0, 0.5 / 3 + 0.5, 1.0}));
  const std::vector<double> gg = mt::autograd::grad({gy.sum()}, {y}).at(0).to_vector<double>();
  EXPECT_EQ(gg[0], 0.0);
  EXPECT_DOUBLE_EQ(gg[1], 1.0 / 3);
  EXPECT_EQ(gg[2], 0.0);
}

// mish's first gradient under create_graph is built from ops differentiable to any order, so a
// third derivative exists (PyTorch's infinitely_differentiable_mish_backward); checked against
// finite differences of the second.
TEST(Activations, MishDifferentiatesThreeTimes) {
  const Tensor x = t({-2.0, -0.5, 0.0, 0.7, 3.0}).requires_grad_();
  const auto second = [](const Tensor& in) {
    const Tensor g = mt::autograd::grad({mt::mish(in).sum()}, {in}, {}, true, false, true)[0];
    return mt::autograd::grad({g.sum()}, {in}, {}, true, false, true)[0];
  };
  const Tensor d2 = second(x);
  const std::vector<double> d3 = mt::autograd::grad({d2.sum()}, {x}).at(0).to_vector<double>();
  const double eps = 1e-6;
  const std::vector<double> x0 = x.detach().to_vector<double>();
  for (size_t i = 0; i < x0.size(); ++i) {
    std::vector<double> hi = x0, lo = x0;
    hi[i] += eps;
    lo[i] -= eps;
    const double fd = (second(t(hi).requires_grad_()).to_vector<double>()[i] -
                       second(t(lo).requires_grad_()).to_vector<double>()[i]) /
                      (2 * eps);
    EXPECT_NEAR(d3[i], fd, 1e-5) << "x = " << x0[i];
  }
  // Where exp overflows float32, the second derivative is still finite (0 on both sides).
  const Tensor wide = t({-100.0, 100.0}, mt::kFloat32).requires_grad_();
  for (float v : second(wide).to_vector<float>()) EXPECT_TRUE(std::isfinite(v)) << v;
}

// Half types compute in float and round once: the float32 result rounded to the type.
TEST(Activations, HalfTypesRoundTheFloat32Result) {
  for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const Tensor x = t(ACT, dt), x32 = x.to(mt::kFloat32);
    const std::string name(mt::dtype_name(dt));
    for (const auto& [op, f] :
         std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
             {"leaky_relu", [](const Tensor& v) { return mt::leaky_relu(v, 0.2); }},
             {"elu", [](const Tensor& v) { return mt::elu(v); }},
             {"softplus", [](const Tensor& v) { return mt::softplus(v); }},
             {"mish", [](const Tensor& v) { return mt::mish(v); }},
             {"hardswish", [](const Tensor& v) { return mt::hardswish(v); }}}) {
      EXPECT_TRUE(mt::equal(f(x).to(mt::kFloat32), f(x32).to(dt).to(mt::kFloat32)))
          << op << " " << name;
    }
  }
}

// PyTorch's autocast lists: softplus runs in float32; the others (mish and hardswish among them)
// keep their inputs' dtype.
TEST(Activations, AutocastPolicies) {
  const Tensor h = t(ACT, mt::kBFloat16), f = t(ACT, mt::kFloat32);
  mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
  EXPECT_EQ(mt::softplus(h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::leaky_relu(h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::elu(f).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::mish(h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::hardswish(f).dtype(), mt::kFloat32);
}

// ---- modules and the config's layer types ----------------------------------------------------
TEST(ActivationModules, ComputeTheFunctionalOpsAndPrintAsPyTorch) {
  const Tensor x = t(ACT);
  EXPECT_TRUE(mt::equal(mt::nn::LeakyReLU(0.2)(x), mt::leaky_relu(x, 0.2)));
  EXPECT_TRUE(mt::equal(mt::nn::ELU(0.5)(x), mt::elu(x, 0.5)));
  EXPECT_TRUE(mt::equal(mt::nn::Softplus(2.0, 3.0)(x), mt::softplus(x, 2.0, 3.0)));
  EXPECT_TRUE(mt::equal(mt::nn::Softplus()(x), mt::nn::functional::softplus(x)));
  EXPECT_TRUE(mt::equal(mt::nn::Mish()(x), mt::nn::functional::mish(x)));
  EXPECT_TRUE(mt::equal(mt::nn::Hardswish()(x), mt::hardswish(x)));
  EXPECT_EQ(mt::nn::Mish()->type_name(), "Mish");
  EXPECT_EQ(mt::nn::Hardswish()->type_name(), "Hardswish");
  EXPECT_EQ(mt::nn::LeakyReLU()->extra_repr(), "negative_slope=0.01");
  EXPECT_EQ(mt::nn::ELU()->extra_repr(), "alpha=1.0");
  EXPECT_EQ(mt::nn::Softplus()->extra_repr(), "beta=1, threshold=20");
  EXPECT_EQ(mt::nn::Softplus(0.5, 3.0)->extra_repr(), "beta=0.5, threshold=3");
}

TEST(ActivationModules, ConfigLayerTypesBuildThem) {
  mt::runner::ModelConfig model;
  mt::runner::LayerSpec leaky, elu, softplus;
  leaky.type = "leaky_relu";
  leaky.negative_slope = 0.2;
  elu.type = "elu";
  elu.alpha = 0.5;
  softplus.type = "softplus";
  softplus.beta = 2.0;
  softplus.threshold = 3.0;
  model.layers = {leaky, elu, softplus};
  auto seq = mt::runner::build_model(model);
  const Tensor x = t(ACT);
  EXPECT_TRUE(mt::equal(seq->forward(x), mt::softplus(mt::elu(mt::leaky_relu(x, 0.2), 0.5), 2, 3)));
  mt::runner::LayerSpec mish, hardswish;
  mish.type = "mish";
  hardswish.type = "hardswish";
  model.layers = {mish, hardswish};
  EXPECT_TRUE(mt::equal(mt::runner::build_model(model)->forward(x), mt::hardswish(mt::mish(x))));
}
