// The pointwise and masking ops against PyTorch: every program here is also in
// scripts/golden/make_pointwise.py, whose results (values with their dtypes, gradients, or a
// refusal) are committed in tests/golden/pointwise.txt. Then what the golden file cannot hold:
// our own refusals, and autocast.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "amp/autocast.h"
#include "autograd/backward.h"
#include "golden_file.h"
#include "nn/layers.h"
#include "runner/model_builder.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;

namespace {

using mt::testing::GoldenTensor;

std::map<std::string, mt::testing::GoldenCase> load_cases() {
  mt::testing::GoldenFormat format;
  format.dtype_column = true;
  return mt::testing::read_golden_file("pointwise.txt", format);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
const std::vector<double> FA = {5.5, -5.5, 7.0, -7.0, 0.0, 3.25, -3.25, 1.0};
const std::vector<double> FB = {2.0, 2.0, -2.0, -2.0, 3.0, -1.5, 1.5, 0.75};
const std::vector<double> IA = {7, -7, 7, -7, 0, 9, -9, 1};
const std::vector<double> IB = {2, 2, -2, -2, 3, -4, 4, 5};
const std::vector<double> ACT = {-20.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0};
const std::vector<double> SOFT = {-30.0, -1.0, 0.0, 1.0, 1.49, 1.5, 1.51, 10.0};
const std::vector<double> SPECIAL = {1.0, kInf, -kInf, kNan, 0.0, -0.0, -2.5, 3e38};
const std::vector<double> HSW = {-20.0, -3.5, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0};
const std::vector<double> MASK4 = {1, 0, 0, 1};

Tensor t(const std::vector<double>& v, DType dtype = mt::kFloat64, Shape shape = {}) {
  Tensor x = mt::from_vector(v).to(dtype);
  return shape.empty() ? x : x.reshape(shape);
}
Tensor scalar(double v, DType dtype = mt::kFloat64) { return mt::full({}, v, dtype); }
Tensor leaf(const std::vector<double>& v, Shape shape = {}) {
  return t(v, mt::kFloat64, std::move(shape)).requires_grad_();
}
Tensor mask4() { return t(MASK4, mt::kBool); }
Tensor mask8() { return t({1, 0, 0, 1, 1, 0, 0, 1}, mt::kBool); }
Tensor weights(int64_t n, Shape shape = {}) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(0.5 * static_cast<double>(i + 1));
  return t(v, mt::kFloat64, std::move(shape));
}

using Outputs = std::vector<std::pair<std::string, Tensor>>;
using Program = std::function<Outputs()>;
Outputs out(const Tensor& x) { return {{"out", x}}; }

using BinaryOp = Tensor (*)(const Tensor&, const Tensor&);
using BinaryScalarOp = Tensor (*)(const Tensor&, const mt::Scalar&);
using Activation = std::function<Tensor(const Tensor&)>;

// The programs of make_pointwise.py, by case name.
std::map<std::string, Program> programs() {
  std::map<std::string, Program> p;
  const std::vector<std::tuple<std::string, BinaryOp, BinaryScalarOp>> divisions = {
      {"floor_divide", &mt::floor_divide, &mt::floor_divide},
      {"remainder", &mt::remainder, &mt::remainder},
      {"fmod", &mt::fmod, &mt::fmod}};
  for (const auto& [op, f, fs] : divisions) {
    p[op + "_float64"] = [f] { return out(f(t(FA), t(FB))); };
    p[op + "_float32"] = [f] { return out(f(t(FA, mt::kFloat32), t(FB, mt::kFloat32))); };
    p[op + "_int64"] = [f] { return out(f(t(IA, mt::kInt64), t(IB, mt::kInt64))); };
    p[op + "_int32_scalar"] = [fs] { return out(fs(t(IA, mt::kInt32), -3)); };
    p[op + "_int_by_float_scalar"] = [fs] { return out(fs(t(IA, mt::kInt64), 2.5)); };
    p[op + "_float_by_zero"] = [f] { return out(f(t({1, -1, 0, 2.5}), t({0, 0, 0, -0.0}))); };
    p[op + "_int_by_zero_refused"] = [f] {
      return out(f(t(IA, mt::kInt64), t({2, 2, 0, 1, 1, 1, 1, 1}, mt::kInt64)));
    };
    p[op + "_broadcast"] = [f] { return out(f(t(FA, mt::kFloat64, {2, 4}), t({2, -3, 0.5, 4}))); };
  }
  for (const auto& [name, f] : std::vector<std::pair<std::string, BinaryOp>>{
           {"remainder_grad", &mt::remainder}, {"fmod_grad", &mt::fmod}}) {
    p[name] = [f] {
      Tensor a = leaf(FA, {2, 4}), b = leaf({2.0, -3.0, 0.75, 4.0});
      Tensor y = f(a, b);
      (y * weights(8, {2, 4})).sum().backward();
      return Outputs{{"y", y}, {"a.grad", a.grad()}, {"b.grad", b.grad()}};
    };
  }
  p["remainder_scalar_grad"] = [] {
    Tensor a = leaf(FA), y = mt::remainder(a, -2.5);
    (y * weights(8)).sum().backward();
    return Outputs{{"y", y}, {"a.grad", a.grad()}};
  };

  // masked_fill
  p["masked_fill_float32_broadcast_mask"] = [] {
    return out(t(FA, mt::kFloat32, {2, 4}).masked_fill(mask4(), 2.5));
  };
  p["masked_fill_int64_float_value"] = [] {
    return out(t(IA, mt::kInt64, {2, 4}).masked_fill(mask4(), 2.7));
  };
  p["masked_fill_bool"] = [] { return out(mask4().masked_fill(t({1, 1, 0, 0}, mt::kBool), true)); };
  p["masked_fill_mask_broadcasts_self"] = [] {
    return out(
        t({1, 2, 3, 4}, mt::kFloat64, {1, 4}).masked_fill(t({1, 0, 1}, mt::kBool, {3, 1}), -1.0));
  };
  p["masked_fill_tensor_value_grad"] = [] {
    Tensor x = leaf(FA, {2, 4}), v = scalar(2.0).requires_grad_();
    Tensor y = x.masked_fill(mask4(), v);
    (y * weights(8, {2, 4})).sum().backward();
    return Outputs{{"y", y}, {"x.grad", x.grad()}, {"v.grad", v.grad()}};
  };
  p["masked_fill_float64_value_into_float32"] = [] {
    return out(t(FA, mt::kFloat32).masked_fill(mask8(), scalar(0.1)));
  };
  p["masked_fill_inplace_grad"] = [] {
    Tensor x = leaf(FA, {2, 4}), v = scalar(-1.5).requires_grad_();
    Tensor y = x * 2;
    y.masked_fill_(mask4(), v);
    (y * weights(8, {2, 4})).sum().backward();
    return Outputs{{"y", y}, {"x.grad", x.grad()}, {"v.grad", v.grad()}};
  };
  p["masked_fill_value_with_dims_refused"] = [] {
    return out(t(FA).masked_fill(mask8(), t({1.0})));
  };
  p["masked_fill_inplace_broadcast_self_refused"] = [] {
    Tensor x = t({1, 2, 3, 4});
    x.masked_fill_(t({1, 0}, mt::kBool, {2, 1}), 0.0);
    return out(x);
  };

  // isnan / isinf / isfinite
  for (const auto& [op, f] : std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>>{
           {"isnan", &mt::isnan}, {"isinf", &mt::isinf}, {"isfinite", &mt::isfinite}}) {
    p[op + "_float32"] = [f] { return out(f(t(SPECIAL, mt::kFloat32))); };
    p[op + "_float64"] = [f] { return out(f(t(SPECIAL))); };
    p[op + "_float16"] = [f] {
      return out(f(t(std::vector<double>(SPECIAL.begin(), SPECIAL.begin() + 7), mt::kFloat16)));
    };
    p[op + "_int64"] = [f] { return out(f(t(IA, mt::kInt64))); };
    p[op + "_bool"] = [f] { return out(f(mask4())); };
  }

  // activations
  const std::vector<std::pair<std::string, Activation>> activations = {
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

  // lerp
  for (const auto& [w, tag] : std::vector<std::pair<double, std::string>>{
           {0.25, "0p25"}, {0.75, "0p75"}, {1.0, "1p0"}, {-0.5, "m0p5"}, {1.5, "1p5"}}) {
    p["lerp_scalar_" + tag + "_float64"] = [w] { return out(mt::lerp(t(FA), t(FB), w)); };
    p["lerp_scalar_" + tag + "_float32"] = [w] {
      return out(mt::lerp(t(FA, mt::kFloat32), t(FB, mt::kFloat32), w));
    };
  }
  const std::vector<double> lerp_w = {0.25, 0.75, -0.5, 1.5, 0.0, 1.0, 0.5, 0.4};
  p["lerp_tensor_weight_grad"] = [lerp_w] {
    Tensor s = leaf(FA, {2, 4}), e = leaf({1.0, -2.0, 0.5, 3.0}), w = leaf(lerp_w, {2, 4});
    Tensor y = mt::lerp(s, e, w);
    (y * weights(8, {2, 4})).sum().backward();
    return Outputs{{"y", y}, {"s.grad", s.grad()}, {"e.grad", e.grad()}, {"w.grad", w.grad()}};
  };
  p["lerp_scalar_weight_grad"] = [] {
    Tensor s = leaf(FA), e = leaf(FB), y = mt::lerp(s, e, 0.3);
    (y * weights(8)).sum().backward();
    return Outputs{{"y", y}, {"s.grad", s.grad()}, {"e.grad", e.grad()}};
  };
  p["lerp_weight_float32"] = [lerp_w] {
    return out(mt::lerp(t(FA, mt::kFloat32), t(FB, mt::kFloat32), t(lerp_w, mt::kFloat32)));
  };
  p["lerp_mixed_dtypes_refused"] = [] { return out(mt::lerp(t(FA, mt::kFloat32), t(FB), 0.5)); };

  // addcmul
  p["addcmul_grad"] = [] {
    Tensor s = leaf(FA, {2, 4}), a = leaf(FB, {2, 4}), b = leaf({1.0, -2.0, 0.5, 3.0});
    Tensor y = mt::addcmul(s, a, b, 0.5);
    (y * weights(8, {2, 4})).sum().backward();
    return Outputs{{"y", y}, {"s.grad", s.grad()}, {"a.grad", a.grad()}, {"b.grad", b.grad()}};
  };
  p["addcmul_float32"] = [] {
    return out(mt::addcmul(t(FA, mt::kFloat32), t(FB, mt::kFloat32), t(ACT, mt::kFloat32), -1.5));
  };
  p["addcmul_int64"] = [] {
    return out(mt::addcmul(t(IA, mt::kInt64), t(IB, mt::kInt64), t(IA, mt::kInt64), 3));
  };
  p["addcmul_promotes"] = [] {
    return out(mt::addcmul(t(FA, mt::kFloat32), t(FB), t(IA, mt::kInt64)));
  };
  p["addcmul_zero_dim_operand"] = [] {
    return out(mt::addcmul(t(IA, mt::kInt64), scalar(2.5), t(IB, mt::kInt64)));
  };

  // tril / triu
  std::vector<double> m234;
  for (int i = 0; i < 24; ++i) m234.push_back(i - 11.0);
  for (const auto& [op, f] :
       std::vector<std::pair<std::string, Tensor (*)(const Tensor&, int64_t)>>{
           {"tril", &mt::tril}, {"triu", &mt::triu}}) {
    for (int64_t k : {0, 1, -1, 5, -5}) {
      const std::string tag = k < 0 ? "m" + std::to_string(-k) : std::to_string(k);
      p[op + "_" + tag] = [f, k, m234] { return out(f(t(m234, mt::kFloat64, {2, 3, 4}), k)); };
    }
    p[op + "_int64"] = [f] {
      return out(f(mt::arange(12, mt::TensorOptions().dtype(mt::kInt64)).reshape({3, 4}), 1));
    };
    p[op + "_bool"] = [f] { return out(f(mt::ones({4, 3}, mt::kBool), -1)); };
    p[op + "_grad"] = [f, m234] {
      Tensor x = leaf(m234, {2, 3, 4}), y = f(x, 1);
      (y * weights(24, {2, 3, 4})).sum().backward();
      return Outputs{{"y", y}, {"x.grad", x.grad()}};
    };
    p[op + "_one_dim_refused"] = [f] { return out(f(t(FA), 0)); };
  }
  return p;
}

// Values equal, NaN where PyTorch has NaN, infinities and signed zeros' values exactly; finite
// floating values within a few units in the last place (transcendental functions may round
// differently from PyTorch's vectorised ones).
void expect_matches(const std::string& what, const Tensor& got, const GoldenTensor& want) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(std::string(mt::dtype_name(got.dtype())), want.dtype) << what;
  ASSERT_EQ(got.shape(), want.shape) << what;
  const auto g = got.to_vector<double>();
  const std::vector<double>& w = want.values;
  const double rtol = got.dtype() == mt::kFloat64 ? 1e-14 : mt::is_floating(got.dtype()) ? 1e-6 : 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i]) || rtol == 0) {
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])
          << what << "[" << i << "]: got " << g[i] << ", PyTorch " << w[i];
    } else {
      EXPECT_NEAR(g[i], w[i], rtol * std::fabs(w[i]) + 1e-300)
          << what << "[" << i << "]: PyTorch " << w[i];
    }
  }
}

}  // namespace

TEST(PointwiseGolden, EveryProgramMatchesPyTorch) {
  const auto cases = load_cases();
  const auto progs = programs();
  ASSERT_GT(cases.size(), 90u);
  for (const auto& [name, golden] : cases) {
    auto it = progs.find(name);
    if (it == progs.end()) {
      ADD_FAILURE() << "golden case " << name << " has no program here";
      continue;
    }
    if (golden.raises) {
      EXPECT_THROW(it->second(), mt::Error) << name << ": PyTorch refuses it";
      continue;
    }
    Outputs outs;
    try {
      outs = it->second();
    } catch (const mt::Error& e) {
      ADD_FAILURE() << name << " threw: " << e.what();
      continue;
    }
    ASSERT_EQ(outs.size(), golden.tensors.size()) << name;
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_EQ(outs[i].first, golden.tensors[i].name) << name;
      expect_matches(name + " " + outs[i].first, outs[i].second, golden.tensors[i]);
    }
  }
  for (const auto& [name, fn] : progs)
    EXPECT_TRUE(cases.count(name)) << "program " << name << " has no golden case";
}

// ---- what the golden file does not hold
// ----------------------------------------------------------
TEST(Pointwise, IntegerDivisionByZeroNamesTheOp) {
  const Tensor a = t(IA, mt::kInt32), zero = t({0}, mt::kInt32);
  for (const auto& [op, f] :
       std::vector<std::pair<std::string, BinaryOp>>{{"floor_divide", &mt::floor_divide},
                                                     {"remainder", &mt::remainder},
                                                     {"fmod", &mt::fmod}}) {
    try {
      f(a, zero);
      ADD_FAILURE() << op << " did not throw";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(op + ": ZeroDivisionError"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(mt::floor_divide(t(IA, mt::kUInt8), 0), mt::Error);
}

TEST(Pointwise, FloorDivideRecordsNoGradient) {
  Tensor a = leaf(FA), b = leaf(FB);
  EXPECT_FALSE(mt::floor_divide(a, b).requires_grad());
  EXPECT_TRUE(mt::remainder(a, b).requires_grad());
}

TEST(Pointwise, MaskedFillWantsABoolMask) {
  // PyTorch 1.13 accepts some integer masks with a deprecation path; mantissa refuses them.
  EXPECT_THROW(t(FA).masked_fill(t(IA, mt::kInt64), 1.0), mt::Error);
  EXPECT_THROW(t(FA).masked_fill(t(MASK4, mt::kUInt8), 1.0), mt::Error);
}

TEST(Pointwise, MaskedFillInPlaceRefusesALeafThatRequiresGrad) {
  Tensor x = leaf(FA);
  EXPECT_THROW(x.masked_fill_(mask8(), 0.0), mt::Error);
  const uint32_t version = t(FA).version();
  Tensor y = t(FA);
  y.masked_fill_(mask8(), 0.0);
  EXPECT_EQ(y.version(), version + 1);
}

TEST(Pointwise, IntegerActivationsAndLerpAreRefused) {
  EXPECT_THROW(mt::leaky_relu(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::elu(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::softplus(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::mish(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::hardswish(t(IA, mt::kInt64)), mt::Error);
  EXPECT_THROW(mt::lerp(t(IA, mt::kInt64), t(IB, mt::kInt64), 0.5), mt::Error);
}

// hardswish's gradient at the edges as today's PyTorch gives it (PyTorch 2.7 on; 1.13, which
// makes the golden file, gave x / 3 + 1/2 there): 0 at -3, 1 at 3, g for NaN; its second
// derivative 1/3 strictly inside (-3, 3), 0 at the edges. The values are torch 2.15's for
//   x = torch.tensor([-3, 3, -3.0001, 2.9999, nan], dtype=float64, requires_grad=True)
//   F.hardswish(x).sum().backward()   and the double backward of [-3, 0.5, 3].
TEST(Pointwise, HardswishGradientAtTheEdgesIsTodaysPyTorchs) {
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
TEST(Pointwise, MishDifferentiatesThreeTimes) {
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
TEST(Pointwise, HalfTypesRoundTheFloat32Result) {
  for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const Tensor x = t(ACT, dt), y = t(FB, dt);
    const Tensor x32 = x.to(mt::kFloat32), y32 = y.to(mt::kFloat32);
    const std::string name(mt::dtype_name(dt));
    EXPECT_TRUE(mt::equal(mt::elu(x).to(mt::kFloat32), mt::elu(x32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(
        mt::equal(mt::softplus(x).to(mt::kFloat32), mt::softplus(x32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(mt::equal(mt::mish(x).to(mt::kFloat32), mt::mish(x32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(
        mt::equal(mt::hardswish(x).to(mt::kFloat32), mt::hardswish(x32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(mt::equal(mt::remainder(x, y).to(mt::kFloat32),
                          mt::remainder(x32, y32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(mt::equal(mt::lerp(x, y, 0.3).to(mt::kFloat32),
                          mt::lerp(x32, y32, 0.3).to(dt).to(mt::kFloat32)))
        << name;
  }
}

// PyTorch's autocast lists: softplus runs in float32, addcmul promotes, the others (mish and
// hardswish among them) keep their inputs' dtype.
TEST(Pointwise, AutocastPolicies) {
  const Tensor h = t(ACT, mt::kBFloat16), f = t(ACT, mt::kFloat32);
  mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
  EXPECT_EQ(mt::softplus(h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::addcmul(f, h, h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::addcmul(h, h, h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::leaky_relu(h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::elu(f).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::lerp(h, h, 0.5).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::mish(h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::hardswish(f).dtype(), mt::kFloat32);
}

// ---- modules and the config's layer types
// --------------------------------------------------------
TEST(PointwiseModules, ComputeTheFunctionalOpsAndPrintAsPyTorch) {
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

TEST(PointwiseModules, ConfigLayerTypesBuildThem) {
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
