// The activations of engine/activations.def against PyTorch: every program here is also in
// scripts/golden/make_activations.py, whose results are committed in tests/golden/activations.txt.
// Then what the golden file cannot hold: today's PyTorch where it changed since the golden
// file's, our refusals, rounding of the half types, autocast, and the modules; and, walking the
// list, that every entry is an op, a module and a config layer type that agree, whose backward
// kernel and create_graph formula agree. relu, gelu, sigmoid and tanh are rows of the unary op
// table, tested with it in test_elementwise.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/backward.h"
#include "golden_file.h"
#include "nn/layers.h"
#include "runner/config/config_schema.h"
#include "runner/training/model_builder.h"
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
      {"hardswish", [](const Tensor& x) { return mt::hardswish(x); }},
      {"selu", [](const Tensor& x) { return mt::selu(x); }},
      {"celu", [](const Tensor& x) { return mt::celu(x); }},
      {"celu_alpha", [](const Tensor& x) { return mt::celu(x, 0.5); }},
      {"softsign", [](const Tensor& x) { return mt::softsign(x); }},
      {"logsigmoid", [](const Tensor& x) { return mt::logsigmoid(x); }},
      {"hardtanh", [](const Tensor& x) { return mt::hardtanh(x); }},
      {"hardtanh_range", [](const Tensor& x) { return mt::hardtanh(x, -0.5, 2.0); }}};
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
  p["wide_float32"] = [] {
    const Tensor x = t({-100.0, -30.0, -3.0, 0.0, 3.0, 20.0, 50.0, 80.0}, mt::kFloat32);
    return Outputs{{"selu", mt::selu(x)},
                   {"celu", mt::celu(x, 2.0)},
                   {"softsign", mt::softsign(x)},
                   {"logsigmoid", mt::logsigmoid(x)},
                   {"hardtanh", mt::hardtanh(x, -2.0, 25.0)}};
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
  leaky.options = mt::runner::LeakyReLULayer{.negative_slope = 0.2};
  elu.type = "elu";
  elu.options = mt::runner::ELULayer{.alpha = 0.5};
  softplus.type = "softplus";
  softplus.options = mt::runner::SoftplusLayer{.beta = 2.0, .threshold = 3.0};
  model.layers = {leaky, elu, softplus};
  auto seq = mt::runner::build_model(model);
  const Tensor x = t(ACT);
  EXPECT_TRUE(mt::equal(seq->forward(x), mt::softplus(mt::elu(mt::leaky_relu(x, 0.2), 0.5), 2, 3)));
  mt::runner::LayerSpec mish, hardswish;
  mish.type = "mish";
  mish.select();
  hardswish.type = "hardswish";
  hardswish.select();
  model.layers = {mish, hardswish};
  EXPECT_TRUE(mt::equal(mt::runner::build_model(model)->forward(x), mt::hardswish(mt::mish(x))));
}

// ---- the list, walked
// ----------------------------------------------------------------------------
namespace {

struct ListedActivation {
  std::string name, module, repr;                 // repr: the module's extra_repr with the defaults
  std::function<Tensor(const Tensor&)> op;        // with the defaults
  std::function<Tensor(const Tensor&)> op_other;  // with other parameters
  std::function<std::shared_ptr<mt::nn::UnaryModule>()> make;      // with the defaults
  std::function<void(mt::runner::LayerSpec&)> set_other;           // the same other parameters
  std::function<bool(const mt::runner::LayerSpec&)> spec_default;  // the struct has the defaults
};

// Other parameters than the defaults: shifted and scaled, never 0.
double other(double d) { return d == 0.0 ? 0.5 : d * 1.5 + (d > 0 ? 0.25 : -0.25); }

std::vector<ListedActivation> listed() {
  std::vector<ListedActivation> v;
  [[maybe_unused]] auto py_float = [](double x) {
    std::ostringstream os;
    os << x;
    std::string s = os.str();
    return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
  };
  [[maybe_unused]] auto py_number = [](double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  };
#define MT_ACTIVATION(name, Module, Math, node, policy)                                            \
  v.push_back({#name, #Module, "", [](const Tensor& x) { return mt::name(x); },                    \
               [](const Tensor& x) { return mt::name(x); }, [] { return mt::nn::Module().ptr(); }, \
               [](mt::runner::LayerSpec&) {},                                                      \
               [](const mt::runner::LayerSpec& l) {                                                \
                 return std::holds_alternative<mt::runner::Module##Layer>(l.options);              \
               }});
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0)                \
  v.push_back({#name, #Module, #p0 "=" + r0(d0), [](const Tensor& x) { return mt::name(x); }, \
               [](const Tensor& x) { return mt::name(x, other(d0)); },                        \
               [] { return mt::nn::Module().ptr(); },                                         \
               [](mt::runner::LayerSpec& l) {                                                 \
                 std::get<mt::runner::Module##Layer>(l.options).p0 = other(d0);               \
               },                                                                             \
               [](const mt::runner::LayerSpec& l) {                                           \
                 return std::get<mt::runner::Module##Layer>(l.options).p0 == d0;              \
               }});
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  v.push_back({#name, #Module, #p0 "=" + r0(d0) + ", " #p1 "=" + r1(d1),                       \
               [](const Tensor& x) { return mt::name(x); },                                    \
               [](const Tensor& x) { return mt::name(x, other(d0), other(d1)); },              \
               [] { return mt::nn::Module().ptr(); },                                          \
               [](mt::runner::LayerSpec& l) {                                                  \
                 auto& o = std::get<mt::runner::Module##Layer>(l.options);                     \
                 o.p0 = other(d0), o.p1 = other(d1);                                           \
               },                                                                              \
               [](const mt::runner::LayerSpec& l) {                                            \
                 const auto& o = std::get<mt::runner::Module##Layer>(l.options);               \
                 return o.p0 == d0 && o.p1 == d1;                                              \
               }});
#include "engine/activations.def"
  return v;
}

}  // namespace

// Each entry is an op of the op list, a module of its name printed as PyTorch prints it, and a
// config layer type whose keys reach the op; its layer struct starts at the list's defaults.
TEST(ActivationList, EveryEntryIsAnOpAModuleAndAConfigLayer) {
  const std::vector<ListedActivation> entries = listed();
  ASSERT_EQ(entries.size(), 11u);
  const Tensor x = t(ACT);
  for (const ListedActivation& e : entries) {
    SCOPED_TRACE(e.name);
    const auto m = e.make();
    EXPECT_EQ(m->type_name(), e.module);
    EXPECT_EQ(m->extra_repr(), e.repr);
    EXPECT_TRUE(mt::equal(m->forward(x), e.op(x)));
    EXPECT_NE(std::find(mt::runner::kLayerTypes.begin(), mt::runner::kLayerTypes.end(), e.name),
              mt::runner::kLayerTypes.end());
    mt::runner::LayerSpec spec;
    spec.type = e.name;
    spec.select();
    EXPECT_TRUE(e.spec_default(spec)) << "the layer struct's member is not the list's default";
    mt::runner::ModelConfig model;
    model.layers = {spec};
    EXPECT_TRUE(mt::equal(mt::runner::build_model(model)->forward(x), e.op(x)));
    e.set_other(spec);
    model.layers = {spec};
    EXPECT_TRUE(mt::equal(mt::runner::build_model(model)->forward(x), e.op_other(x)));
    EXPECT_THROW((void)e.op(t(IA, mt::kInt64)), mt::Error);
  }
}

// The backward kernel and the create_graph formula are one formula (engine/activation_formulas.h)
// evaluated by the kernel on scalars and by the ops on Tensors: they agree to rounding, on both
// sides of every kink and far out, where the Tensor form must stay finite.
TEST(ActivationList, BackwardKernelAndCreateGraphFormulaAgree) {
  const Tensor in = t({-100.0, -20.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0, 4.0, 25.0, 100.0});
  for (const ListedActivation& e : listed()) {
    for (const auto& f : {e.op, e.op_other}) {
      SCOPED_TRACE(e.name);
      const Tensor x = in.clone().requires_grad_();
      const Tensor w = weights(in.numel());
      const Tensor kernel = mt::autograd::grad({(f(x) * w).sum()}, {x}).at(0);
      const Tensor formula =
          mt::autograd::grad({(f(x) * w).sum()}, {x}, {}, true, false, true).at(0);
      mt::testing::expect_close(formula.detach(), kernel, 1e-14, 1e-300, e.name);
      // And the formula's own derivative (the second) is finite everywhere (a piecewise-linear
      // entry's formula does not depend on x).
      if (!formula.requires_grad()) continue;
      const Tensor second = mt::autograd::grad({formula.sum()}, {x}, {}, false, true).at(0);
      if (second.defined()) {
        EXPECT_TRUE(mt::all_finite(second).item<bool>()) << e.name << second;
      }
    }
  }
}

// Half types compute in float and round once: the float32 result rounded to the type; under a
// bf16 autocast each entry keeps its policy (softplus runs in float32, the others in bf16).
TEST(ActivationList, HalfTypesRoundTheFloat32ResultAndAutocastKeepsThePolicy) {
  for (const ListedActivation& e : listed()) {
    for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
      const Tensor x = t(ACT, dt), x32 = x.to(mt::kFloat32);
      EXPECT_TRUE(
          mt::equal(e.op_other(x).to(mt::kFloat32), e.op_other(x32).to(dt).to(mt::kFloat32)))
          << e.name << " " << mt::dtype_name(dt);
    }
    mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
    EXPECT_EQ(e.op(t(ACT, mt::kBFloat16)).dtype(),
              e.name == "softplus" ? mt::kFloat32 : mt::kBFloat16)
        << e.name;
  }
}

// celu's alpha of 0 divides by zero: refused by the op, the module and the config key, as
// PyTorch's op refuses it; softplus's beta must be positive in a config.
TEST(ActivationList, ParametersTheyCannotTakeAreRefused) {
  const Tensor x = t(ACT);
  mt::testing::expect_error([&] { (void)mt::celu(x, 0.0); }, {"celu: alpha cannot be 0"});
  mt::testing::expect_error([&] { (void)mt::nn::CELU(0.0); }, {"CELU: alpha cannot be 0"});
  auto config_error = [](const std::string& layer, const std::vector<std::string>& parts) {
    try {
      (void)mt::runner::parse_config("model:\n  layers:\n    - " + layer + "\n", "t.yaml");
      ADD_FAILURE() << "no config error for " << layer;
    } catch (const mt::runner::ConfigError& e) {
      for (const auto& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nlacks " << p;
    }
  };
  config_error("{type: celu, alpha: 0}", {"model.layers.0.alpha", "cannot be 0"});
  config_error("{type: softplus, beta: 0}", {"model.layers.0.beta"});
  config_error("{type: hardtanh, alpha: 1}", {"alpha"});
}
