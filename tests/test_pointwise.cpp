// The pointwise and masking ops against PyTorch (the activations are test_activations.cpp's):
// every program here is also in scripts/golden/make_pointwise.py, whose results (values with their
// dtypes, gradients, or a refusal) are committed in tests/golden/pointwise.txt. Then what the
// golden file cannot hold: our own refusals, and autocast.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "amp/autocast.h"
#include "autograd/backward.h"
#include "golden_file.h"
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
const std::vector<double> SPECIAL = {1.0, kInf, -kInf, kNan, 0.0, -0.0, -2.5, 3e38};
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

using Outputs = mt::testing::GoldenOutputs;
using Program = mt::testing::GoldenProgram;
Outputs out(const Tensor& x) { return {{"out", x}}; }

using BinaryOp = Tensor (*)(const Tensor&, const Tensor&);
using BinaryScalarOp = Tensor (*)(const Tensor&, const mt::Scalar&);

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

}  // namespace

TEST(PointwiseGolden, EveryProgramMatchesPyTorch) {
  const auto cases = load_cases();
  const auto progs = programs();
  ASSERT_GT(cases.size(), 80u);
  mt::testing::expect_programs_match(cases, progs);
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

TEST(Pointwise, IntegerLerpIsRefused) {
  EXPECT_THROW(mt::lerp(t(IA, mt::kInt64), t(IB, mt::kInt64), 0.5), mt::Error);
}

// Half types compute in float and round once: the float32 result rounded to the type.
TEST(Pointwise, HalfTypesRoundTheFloat32Result) {
  for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const Tensor x = t(ACT, dt), y = t(FB, dt);
    const Tensor x32 = x.to(mt::kFloat32), y32 = y.to(mt::kFloat32);
    const std::string name(mt::dtype_name(dt));
    EXPECT_TRUE(mt::equal(mt::remainder(x, y).to(mt::kFloat32),
                          mt::remainder(x32, y32).to(dt).to(mt::kFloat32)))
        << name;
    EXPECT_TRUE(mt::equal(mt::lerp(x, y, 0.3).to(mt::kFloat32),
                          mt::lerp(x32, y32, 0.3).to(dt).to(mt::kFloat32)))
        << name;
    // The binary ops over more elements than one block of the dense 16-bit path, contiguous and
    // through a strided view (the generic loop).
    std::vector<double> a, b;
    for (int i = 0; i < 1037; ++i) {
      a.push_back((i % 97 - 48) * 0.37);
      b.push_back((i % 11 + 1) * (i % 2 ? 0.7 : -1.3));
    }
    const Tensor big_a = t(a, dt), big_b = t(b, dt);
    for (const auto& [op, f] :
         std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"floor_divide", &mt::floor_divide},
             {"remainder", &mt::remainder},
             {"fmod", &mt::fmod}}) {
      const Tensor want = f(big_a.to(mt::kFloat32), big_b.to(mt::kFloat32)).to(dt);
      EXPECT_TRUE(mt::equal(f(big_a, big_b), want)) << op << " " << name;
      const Tensor sa = big_a.slice(0, 0, 1036, 2), sb = big_b.slice(0, 0, 1036, 2);
      EXPECT_TRUE(mt::equal(f(sa, sb), want.slice(0, 0, 1036, 2))) << op << " " << name;
    }
  }
}

// PyTorch's autocast lists: addcmul promotes, lerp keeps its inputs' dtype.
TEST(Pointwise, AutocastPolicies) {
  const Tensor h = t(ACT, mt::kBFloat16), f = t(ACT, mt::kFloat32);
  mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
  EXPECT_EQ(mt::addcmul(f, h, h).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::addcmul(h, h, h).dtype(), mt::kBFloat16);
  EXPECT_EQ(mt::lerp(h, h, 0.5).dtype(), mt::kBFloat16);
}

// ---- the numbers full, fill_ and masked_fill_ store or refuse ---------------------------------
// tests/golden/fill_values.txt (scripts/golden/make_fill_values.py): for each dtype, numbers
// inside, at and beyond its range, infinities and NaN, as Python floats, ints and bools; what
// PyTorch stores, or that it refuses them. A cast (Tensor::to) saturates instead, and the scalar
// side of an op (x + 1e5) converts as a cast does: both checked last.
TEST(FillValues, StoreOrRefuseAsPyTorch) {
  mt::testing::GoldenFormat format;
  format.value_kinds = {"stores"};
  const auto cases = mt::testing::read_golden_file("fill_values.txt", format);
  ASSERT_GE(cases.size(), 90u);
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    ASSERT_EQ(c.header.size(), 3u);
    const DType dtype = mt::parse_dtype(c.header[0]);
    const std::string& kind = c.header[1];
    const mt::Scalar value = kind == "bool"  ? mt::Scalar(c.header[2] == "true")
                             : kind == "int" ? mt::Scalar(int64_t{std::stoll(c.header[2])})
                                             : mt::Scalar(std::stod(c.header[2]));
    const mt::TensorOptions options = mt::TensorOptions().dtype(dtype);
    const Tensor mask = mt::ones({4}, mt::TensorOptions().dtype(mt::kBool));
    std::vector<std::pair<std::string, std::function<Tensor()>>> fills = {
        {"full", [&] { return mt::full({4}, value, options); }},
        {"full_like", [&] { return mt::full_like(mt::zeros({4}, options), value); }},
        {"fill_", [&] { return mt::zeros({4}, options).fill_(value); }}};
    if (!mt::is_float8(dtype)) {  // as PyTorch, no masked_fill for float8
      fills.push_back(
          {"masked_fill_", [&] { return mt::zeros({4}, options).masked_fill_(mask, value); }});
    }
    for (const auto& [op, fill] : fills) {
      if (c.raises) {
        mt::testing::expect_error(fill, {op + ": value ", "cannot be converted to dtype " +
                                                              c.header[0] + " without overflow"});
        continue;
      }
      const std::vector<double> want = c.first("stores");
      ASSERT_EQ(want.size(), 1u);
      const std::vector<double> got = fill().to(mt::kFloat64).to_vector<double>();
      for (const double g : got) {
        if (std::isnan(want[0])) {
          EXPECT_TRUE(std::isnan(g)) << op;
        } else {
          EXPECT_EQ(g, want[0]) << op;
        }
      }
    }
  }
  // What the check leaves alone: a cast saturates (float8_e4m3fn) or overflows to infinity, and
  // the scalar of an op converts as a cast, as in PyTorch.
  const Tensor big = mt::full({2}, 1e5);
  EXPECT_EQ(big.to(mt::kFloat8E4M3FN).to(mt::kFloat32).to_vector<float>(),
            (std::vector<float>{448, 448}));
  EXPECT_TRUE(std::isinf(big.to(mt::kFloat16).to(mt::kFloat32).to_vector<float>()[0]));
  const Tensor h = mt::zeros({2}, mt::TensorOptions().dtype(mt::kFloat16));
  EXPECT_TRUE(std::isinf((h + 1e5).to(mt::kFloat32).to_vector<float>()[1]));
}
