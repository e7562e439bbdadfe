// Every elementwise op against a float64 reference computed here with <cmath>, on random
// non-contiguous and broadcast inputs in every dtype the op supports, plus NaN/Inf behaviour,
// error messages, in-place forms, and gradients (gradcheck on float64).
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "engine/kernel_tables.h"
#include "kernels/activation_math.h"
#include "kernels/vectorizable_math.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::floating_dtypes;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(20240607);
  return r;
}

// Random values in [lo, hi) (integers when `dtype` is integral), reshaped by `map`, in a tensor of
// `shape`; non-contiguous when asked: a transposed, every-other-row view of a larger buffer.
Tensor rnd(const Shape& shape, DType dtype, bool non_contiguous, double lo = -2.0, double hi = 2.0,
           const std::function<double(double)>& map = {}) {
  Shape big = shape;
  const bool nc = non_contiguous && shape.size() > 0;
  if (nc) {  // swap first: for 2-D shapes dim 0 is one of the swapped dims
    if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
    big[0] *= 2;
  }
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(big.numel()));
  for (double& x : v) {
    x = u(rng());
    if (map) x = map(x);
    if (mt::is_integral(dtype, true)) x = std::floor(x);
  }
  Tensor t = mt::from_vector(v, big).to(dtype == DType::Bool ? mt::kInt64 : dtype);
  if (dtype == DType::Bool) t = t.to(DType::Bool);
  if (!nc) return t;
  t = t.slice(0, 0, std::nullopt, 2);
  if (t.dim() >= 2) t = t.transpose(-1, -2);
  // Shapes with size-1 dims ([4, 1]) may come out contiguous: strides of size-1 dims don't count.
  if (std::find(shape.begin(), shape.end(), 1) == shape.end()) {
    EXPECT_FALSE(t.is_contiguous());
  }
  EXPECT_EQ(t.shape(), shape);
  return t;
}

// Row-major values of `t` broadcast to `shape`.
std::vector<double> bvalues(const Tensor& t, const Shape& shape) {
  return t.expand(shape).to_vector<double>();
}

Tensor ref_tensor(const std::vector<double>& v, const Shape& shape) {
  return mt::from_vector(v, shape);
}

double away_from_zero(double x) { return x < 0 ? x - 0.2 : x + 0.2; }

const std::vector<DType>& int_dtypes() {
  static const std::vector<DType> v{mt::kInt32, mt::kInt64, mt::kUInt8};
  return v;
}

std::string name_of(DType d) { return std::string(mt::dtype_name(d)); }

// ---- unary ops ------------------------------------------------------------------------------
struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
  bool ints;           // also defined for int32/int64 (same dtype out)
  bool ints_to_float;  // integer inputs promote to float32
  bool smooth = true;  // differentiable on [lo, hi] (after `map`)
  std::function<double(double)> map = {};
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](auto& x) { return mt::neg(x); }, [](double x) { return -x; }, -2, 2, true, false},
      {"neg_op", [](auto& x) { return -x; }, [](double x) { return -x; }, -2, 2, true, false},
      {"abs", [](auto& x) { return mt::abs(x); }, [](double x) { return std::fabs(x); }, -2, 2,
       true, false, true, away_from_zero},
      {"exp", [](auto& x) { return mt::exp(x); }, [](double x) { return std::exp(x); }, -3, 3,
       false, true},
      {"log", [](auto& x) { return mt::log(x); }, [](double x) { return std::log(x); }, 0.1, 5,
       false, true},
      {"sqrt", [](auto& x) { return mt::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1, 5,
       false, true},
      {"rsqrt", [](auto& x) { return mt::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       0.1, 5, false, true},
      {"square", [](auto& x) { return mt::square(x); }, [](double x) { return x * x; }, -3, 3, true,
       false},
      {"sign", [](auto& x) { return mt::sign(x); },
       [](double x) { return double((x > 0) - (x < 0)); }, -2, 2, true, false, true,
       away_from_zero},
      {"reciprocal", [](auto& x) { return mt::reciprocal(x); }, [](double x) { return 1 / x; }, -2,
       2, false, true, true, away_from_zero},
      {"sin", [](auto& x) { return mt::sin(x); }, [](double x) { return std::sin(x); }, -3, 3,
       false, true},
      {"cos", [](auto& x) { return mt::cos(x); }, [](double x) { return std::cos(x); }, -3, 3,
       false, true},
      {"log1p", [](auto& x) { return mt::log1p(x); }, [](double x) { return std::log1p(x); }, -0.5,
       3, false, true},
      {"expm1", [](auto& x) { return mt::expm1(x); }, [](double x) { return std::expm1(x); }, -2, 2,
       false, true},
      {"relu", [](auto& x) { return mt::relu(x); }, [](double x) { return x < 0 ? 0.0 : x; }, -2, 2,
       true, false, true, away_from_zero},
      {"gelu", [](auto& x) { return mt::gelu(x); }, gelu_ref, -4, 4, false, false},
      {"gelu_tanh", [](auto& x) { return mt::gelu(x, "tanh"); }, gelu_tanh_ref, -4, 4, false,
       false},
      {"silu", [](auto& x) { return mt::silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -5,
       5, false, false},
      {"sigmoid", [](auto& x) { return mt::sigmoid(x); }, sigmoid_ref, -6, 6, false, true},
      {"tanh", [](auto& x) { return mt::tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3,
       false, true},
      {"clamp_min", [](auto& x) { return mt::clamp(x, -0.5, std::nullopt); },
       [](double x) { return std::max(x, -0.5); }, -2, 2, false, true},
      {"clamp_max", [](auto& x) { return mt::clamp(x, std::nullopt, 0.75); },
       [](double x) { return std::min(x, 0.75); }, -2, 2, false, true},
      {"clamp_both", [](auto& x) { return x.clamp(-1, 1); },
       [](double x) { return std::min(std::max(x, -1.0), 1.0); }, -2, 2, true, false},
      {"pow_2.5", [](auto& x) { return mt::pow(x, 2.5); },
       [](double x) { return std::pow(x, 2.5); }, 0.1, 3, false, false},
      {"pow_-1.5", [](auto& x) { return x.pow(-1.5); }, [](double x) { return std::pow(x, -1.5); },
       0.2, 3, false, false},
      {"pow_3", [](auto& x) { return mt::pow(x, 3); }, [](double x) { return x * x * x; }, -2, 2,
       true, false},
      {"pow_0", [](auto& x) { return mt::pow(x, 0); }, [](double) { return 1.0; }, -2, 2, true,
       false},
      {"add_scalar", [](auto& x) { return mt::add(x, 1.5); }, [](double x) { return x + 1.5; }, -2,
       2, false, false},
      {"sub_scalar", [](auto& x) { return mt::sub(x, 3); }, [](double x) { return x - 3; }, -2, 2,
       true, false},
      {"mul_scalar", [](auto& x) { return mt::mul(x, -2.5); }, [](double x) { return x * -2.5; },
       -2, 2, false, false},
      {"div_scalar", [](auto& x) { return mt::div(x, 4.0); }, [](double x) { return x / 4; }, -2, 2,
       false, false},
      {"rsub_scalar", [](auto& x) { return 2.0 - x; }, [](double x) { return 2 - x; }, -2, 2, false,
       false},
      {"rdiv_scalar", [](auto& x) { return 1.0 / x; }, [](double x) { return 1 / x; }, -2, 2, false,
       false, true, away_from_zero},
      {"scalar_mul_op", [](auto& x) { return 3 * x + 1; }, [](double x) { return 3 * x + 1; }, -2,
       2, true, false},
  };
  return cases;
}

}  // namespace

TEST(Unary, FloatingDtypesNonContiguousAndScalar) {
  for (const auto& c : unary_cases()) {
    for (DType dt : floating_dtypes()) {
      for (const Shape& shape : {Shape{5, 6}, Shape{37}, Shape{}, Shape{2, 3, 4}}) {
        const Tensor x = rnd(shape, dt, true, c.lo, c.hi, c.map);
        const Tensor y = c.op(x);
        const std::string what =
            std::string(c.name) + " " + name_of(dt) + " " + ::testing::PrintToString(shape);
        EXPECT_EQ(y.dtype(), dt) << what;
        std::vector<double> ref;
        for (double v : x.to_vector<double>()) ref.push_back(c.ref(v));
        expect_close(y, ref_tensor(ref, shape), what);
      }
    }
  }
}

TEST(Unary, LargeInputsUseEveryPath) {
  // Large enough to be split across OpenMP threads, strided and broadcast (stride-0) inputs.
  for (DType dt : {mt::kFloat32, mt::kFloat16}) {
    const Tensor x = rnd({300, 257}, dt, true);
    expect_close(mt::tanh(x),
                 ref_tensor(
                     [&] {
                       std::vector<double> r;
                       for (double v : x.to_vector<double>()) r.push_back(std::tanh(v));
                       return r;
                     }(),
                     x.shape()),
                 "tanh large");
    const Tensor row = rnd({257}, dt, false);
    const Tensor b = row.expand({300, 257});
    const auto rv = row.to_vector<double>();
    std::vector<double> r;
    for (int i = 0; i < 300; ++i)
      for (double v : rv) r.push_back(std::exp(v));
    expect_close(mt::exp(b), ref_tensor(r, b.shape()), "exp of expanded");
  }
}

// Dense float16 and bfloat16 operands take a blocked path (vectorised conversions around float
// math); it must round exactly as computing in float32 and storing to 16 bits once does, across
// block edges (256) and with the output aliasing an input, and give what the generic loop gives
// a strided view of the same values (NaN and infinities included).
TEST(Unary, Dense16BitBlocksRoundOnce) {
  for (const DType dt : {mt::kFloat16, mt::kBFloat16}) {
    for (int64_t n : {int64_t(5), int64_t(256), int64_t(1000)}) {
      const Tensor xf = rnd({n}, mt::kFloat32, false, -3.0, 3.0).to(dt).to(mt::kFloat32);
      const Tensor yf = rnd({n}, mt::kFloat32, false, 0.5, 3.0).to(dt).to(mt::kFloat32);
      const Tensor x = xf.to(dt), y = yf.to(dt);
      auto h = [dt](const Tensor& t) { return t.to(dt); };
      const std::string what = std::string(name_of(dt)) + " n " + std::to_string(n);
      EXPECT_TRUE(mt::equal(mt::relu(x), h(mt::relu(xf)))) << what;
      EXPECT_TRUE(mt::equal(mt::exp(x), h(mt::exp(xf)))) << what;
      EXPECT_TRUE(mt::equal(x * y, h(xf * yf))) << what;
      EXPECT_TRUE(mt::equal(x / y, h(xf / yf))) << what;
      EXPECT_TRUE(mt::equal(mt::add(x, y, 0.3), h(mt::add(xf, yf, 0.3)))) << what;
      Tensor z = x.clone();
      z.add_(y);
      EXPECT_TRUE(mt::equal(z, h(xf + yf))) << what;
      // The generic loop: every other element of a tensor twice as long.
      Tensor xs = mt::zeros({n, 2}, dt), ys = mt::zeros({n, 2}, dt);
      xs.select(1, 0).copy_(x);
      ys.select(1, 0).copy_(y);
      const Tensor xv = xs.select(1, 0), yv = ys.select(1, 0);
      ASSERT_FALSE(xv.is_contiguous());
      auto same_bits = [](const Tensor& a, const Tensor& b) {
        const auto u = a.to(mt::kFloat32).to_vector<float>();
        const auto v = b.to(mt::kFloat32).to_vector<float>();
        for (size_t i = 0; i < u.size(); ++i)
          if (!(std::isnan(u[i]) ? std::isnan(v[i]) : std::memcmp(&u[i], &v[i], 4) == 0))
            return false;
        return u.size() == v.size();
      };
      EXPECT_TRUE(same_bits(mt::add(x, y, 0.3), mt::add(xv, yv, 0.3))) << what;
      EXPECT_TRUE(same_bits(x / (y - y), xv / (yv - yv))) << what << " (inf and NaN)";
      EXPECT_TRUE(same_bits(mt::exp(x * 40.0), mt::exp(xv * 40.0))) << what << " (overflow)";
      // A scalar operand (one value broadcast), on either side.
      EXPECT_TRUE(same_bits(x * 0.3, xv * 0.3)) << what;
      const Tensor seven = mt::full({1}, 7.0, dt).expand({n});
      EXPECT_TRUE(same_bits(mt::div(seven, x), mt::div(seven, xv))) << what;
    }
  }
}

TEST(Unary, IntegerDtypes) {
  for (const auto& c : unary_cases()) {
    if (!c.ints && !c.ints_to_float) continue;
    for (DType dt : {mt::kInt32, mt::kInt64}) {
      const Tensor x = rnd({4, 5}, dt, true, std::max(c.lo, -5.0), std::max(c.hi, 3.0), c.map);
      const std::string what = std::string(c.name) + " " + name_of(dt);
      const Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), c.ints_to_float ? mt::kFloat32 : dt) << what;
      std::vector<double> ref;
      for (double v : x.to_vector<double>()) {
        const double r = c.ref(v);
        ref.push_back(c.ints_to_float ? r : std::trunc(r));
      }
      if (c.ints_to_float) {
        expect_close(y, ref_tensor(ref, x.shape()), what);
      } else {
        EXPECT_EQ(y.to_vector<double>(), ref) << what;
      }
    }
  }
  // uint8: abs and relu are the identity, square wraps modulo 256.
  const Tensor u = rnd({3, 7}, mt::kUInt8, true, 0, 255);
  EXPECT_EQ(mt::abs(u).to_vector<int64_t>(), u.to_vector<int64_t>());
  EXPECT_EQ(mt::relu(u).to_vector<int64_t>(), u.to_vector<int64_t>());
  std::vector<int64_t> sq;
  for (int64_t v : u.to_vector<int64_t>()) sq.push_back((v * v) % 256);
  EXPECT_EQ(mt::square(u).to_vector<int64_t>(), sq);
  // Bool promotes to float32 for floating ops.
  const Tensor b = mt::tensor<bool>({true, false});
  EXPECT_EQ(mt::exp(b).dtype(), mt::kFloat32);
  expect_close(mt::exp(b), mt::tensor<double>({std::exp(1.0), 1.0}));
}

TEST(Unary, NanAndInfPropagation) {
  for (DType dt : floating_dtypes()) {
    const Tensor x = mt::tensor<float>({NAN, INFINITY, -INFINITY, 0.0f, -1.0f}, dt);
    auto v = [](const Tensor& t) { return t.to_vector<double>(); };
    const auto relu = v(mt::relu(x));
    EXPECT_TRUE(std::isnan(relu[0])) << name_of(dt);
    EXPECT_EQ(relu[1], INFINITY);
    EXPECT_EQ(relu[2], 0.0);
    const auto sig = v(mt::sigmoid(x));
    EXPECT_TRUE(std::isnan(sig[0]));
    EXPECT_EQ(sig[1], 1.0);
    EXPECT_EQ(sig[2], 0.0);
    EXPECT_EQ(sig[3], 0.5);
    const auto th = v(mt::tanh(x));
    EXPECT_EQ(th[1], 1.0);
    EXPECT_EQ(th[2], -1.0);
    const auto e = v(mt::exp(x));
    EXPECT_EQ(e[1], INFINITY);
    EXPECT_EQ(e[2], 0.0);
    const auto lg = v(mt::log(x));
    EXPECT_TRUE(std::isnan(lg[0]));
    EXPECT_EQ(lg[3], -INFINITY);
    EXPECT_TRUE(std::isnan(lg[4]));
    EXPECT_TRUE(std::isnan(v(mt::sqrt(x))[4]));
    EXPECT_EQ(v(mt::reciprocal(x))[3], INFINITY);
    EXPECT_EQ(v(mt::abs(x))[2], INFINITY);
    EXPECT_TRUE(std::isnan(v(mt::abs(x))[0]));
    const auto cl = v(mt::clamp(x, -0.5, 0.5));
    EXPECT_TRUE(std::isnan(cl[0])) << "clamp keeps NaN";
    EXPECT_EQ(cl[1], 0.5);
    EXPECT_EQ(cl[2], -0.5);
    EXPECT_TRUE(std::isnan(v(mt::gelu(x))[0]));
    EXPECT_EQ(v(mt::gelu(x))[1], INFINITY);
    const auto ones = mt::ones({5}, dt);
    const auto mx = v(mt::maximum(x, ones)), mn = v(mt::minimum(ones, x));
    EXPECT_TRUE(std::isnan(mx[0])) << "maximum propagates NaN";
    EXPECT_TRUE(std::isnan(mn[0])) << "minimum propagates NaN";
    EXPECT_EQ(mx[1], INFINITY);
    EXPECT_EQ(mn[2], -INFINITY);
    const auto d = v(ones / mt::zeros({5}, dt));
    EXPECT_EQ(d[0], INFINITY);
    EXPECT_TRUE(std::isnan(v(mt::zeros({1}, dt) / mt::zeros({1}, dt))[0]));
    EXPECT_TRUE(std::isnan(v(x + ones)[0]));
  }
}

// ---- binary ops -----------------------------------------------------------------------------
namespace {
struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double alo, ahi, blo, bhi;
  bool ints;  // defined for integers with an integer result
  std::function<double(double)> bmap = {};
};
const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](auto& a, auto& b) { return mt::add(a, b); },
       [](double a, double b) { return a + b; }, -3, 3, -3, 3, true},
      {"add_alpha", [](auto& a, auto& b) { return mt::add(a, b, 3); },
       [](double a, double b) { return a + 3 * b; }, -3, 3, -3, 3, true},
      {"add_alpha_float", [](auto& a, auto& b) { return a.add(b, -0.5); },
       [](double a, double b) { return a - 0.5 * b; }, -3, 3, -3, 3, false},
      {"sub", [](auto& a, auto& b) { return mt::sub(a, b); },
       [](double a, double b) { return a - b; }, -3, 3, -3, 3, true},
      {"sub_alpha", [](auto& a, auto& b) { return a.sub(b, 2); },
       [](double a, double b) { return a - 2 * b; }, -3, 3, -3, 3, true},
      {"mul", [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; }, -3,
       3, -3, 3, true},
      {"div", [](auto& a, auto& b) { return mt::div(a, b); },
       [](double a, double b) { return a / b; }, -3, 3, -2, 2, false, away_from_zero},
      {"pow", [](auto& a, auto& b) { return mt::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.2, 3, -2, 2, false},
      {"pow_int", [](auto& a, auto& b) { return a.pow(b); },
       [](double a, double b) { return std::pow(a, b); }, -3, 3, 0, 4, true},
      {"maximum", [](auto& a, auto& b) { return mt::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -3, 3, -3, 3, true},
      {"minimum", [](auto& a, auto& b) { return mt::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -3, 3, -3, 3, true},
      {"sub_op", [](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; },
       -3, 3, -3, 3, true},
      {"div_op", [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; },
       -3, 3, -2, 2, false, away_from_zero},
  };
  return cases;
}

// a [4,6] (non-contiguous) with b of each broadcastable shape.
const std::vector<std::pair<Shape, Shape>>& binary_shapes() {
  static const std::vector<std::pair<Shape, Shape>> s = {
      {{4, 6}, {4, 6}}, {{4, 6}, {6}}, {{4, 1}, {1, 6}},
      {{4, 6}, {}},     {{}, {4, 6}},  {{2, 1, 3}, {4, 1}},
  };
  return s;
}
}  // namespace

TEST(Binary, FloatingDtypesBroadcastNonContiguous) {
  for (const auto& c : binary_cases()) {
    for (DType dt : floating_dtypes()) {
      for (const auto& [sa, sb] : binary_shapes()) {
        const Tensor a = rnd(sa, dt, true, c.alo, c.ahi),
                     b = rnd(sb, dt, true, c.blo, c.bhi, c.bmap);
        const Tensor y = c.op(a, b);
        const Shape out = mt::broadcast_shapes(sa, sb, "test");
        const std::string what = std::string(c.name) + " " + name_of(dt) + " " +
                                 ::testing::PrintToString(sa) + " " + ::testing::PrintToString(sb);
        EXPECT_EQ(y.dtype(), dt) << what;
        const auto av = bvalues(a, out), bv = bvalues(b, out);
        std::vector<double> ref;
        for (size_t i = 0; i < av.size(); ++i) ref.push_back(c.ref(av[i], bv[i]));
        expect_close(y, ref_tensor(ref, out), what);
      }
    }
  }
}

TEST(Binary, IntegerDtypes) {
  for (const auto& c : binary_cases()) {
    for (DType dt : int_dtypes()) {
      const bool u8 = dt == mt::kUInt8;
      const Tensor a = rnd({3, 5}, dt, true, u8 ? 0 : c.alo, c.ahi + 1);
      const Tensor b = rnd({5}, dt, true, u8 || c.blo >= 0 ? 0 : c.blo, c.bhi + 1, c.bmap);
      const std::string what = std::string(c.name) + " " + name_of(dt);
      if (!c.ints) {
        if (std::string(c.name).rfind("div", 0) == 0) {  // true division gives float32
          const Tensor y = c.op(a, b);
          EXPECT_EQ(y.dtype(), mt::kFloat32) << what;
          const auto av = bvalues(a, {3, 5}), bv = bvalues(b, {3, 5});
          std::vector<double> ref;
          for (size_t i = 0; i < av.size(); ++i) ref.push_back(av[i] / bv[i]);
          expect_close(y, ref_tensor(ref, {3, 5}), what);
        }
        continue;
      }
      const Tensor y = c.op(a, b);
      EXPECT_EQ(y.dtype(), dt) << what;
      const auto av = bvalues(a, {3, 5}), bv = bvalues(b, {3, 5});
      std::vector<int64_t> ref;
      for (size_t i = 0; i < av.size(); ++i) {
        int64_t r = static_cast<int64_t>(std::llround(c.ref(av[i], bv[i])));
        if (u8) r = static_cast<uint8_t>(r);  // wraps, as uint8 arithmetic does
        if (dt == mt::kInt32) r = static_cast<int32_t>(r);
        ref.push_back(r);
      }
      EXPECT_EQ(y.to_vector<int64_t>(), ref) << what;
    }
  }
}

TEST(Binary, MixedDtypesPromote) {
  const Tensor h = rnd({3, 4}, mt::kFloat16, true), f = rnd({4}, mt::kFloat32, true);
  // d is exact in float16: whether it is rounded to float16 or float first doesn't matter.
  const Tensor i = rnd({3, 4}, mt::kInt32, true, -5, 5), d = mt::scalar_tensor(0.75, mt::kFloat64);
  auto check = [](const Tensor& y, DType want, const std::vector<double>& ref, const char* what) {
    EXPECT_EQ(y.dtype(), want) << what;
    expect_close(y, ref_tensor(ref, y.shape()), what);
  };
  const auto hv = bvalues(h, {3, 4}), fv = bvalues(f, {3, 4}), iv = bvalues(i, {3, 4});
  const double dv = d.item<double>();
  std::vector<double> r1, r2, r3, r4;
  for (size_t k = 0; k < 12; ++k) {
    r1.push_back(hv[k] * fv[k]);
    r2.push_back(iv[k] + fv[k]);
    r3.push_back(dv - hv[k]);
    r4.push_back(iv[k] * 2.5);
  }
  check(h * f, mt::kFloat32, r1, "f16*f32");
  check(i + f, mt::kFloat32, r2, "i32+f32");
  check(d - h, mt::kFloat16, r3, "0-d f64 - f16");
  check(i * 2.5, mt::kFloat32, r4, "i32*2.5");
}

// ---- where, comparisons, logical ------------------------------------------------------------

TEST(Where, BroadcastAndPromotion) {
  for (DType dt : floating_dtypes()) {
    const Tensor cond = rnd({4, 5}, mt::kBool, true, 0, 2);
    const Tensor a = rnd({5}, dt, true), b = rnd({4, 1}, dt, true);
    const Tensor y = mt::where(cond, a, b);
    EXPECT_EQ(y.dtype(), dt);
    const auto cv = cond.to_vector<double>(), av = bvalues(a, {4, 5}), bv = bvalues(b, {4, 5});
    std::vector<double> ref;
    for (size_t i = 0; i < cv.size(); ++i) ref.push_back(cv[i] != 0 ? av[i] : bv[i]);
    expect_close(y, ref_tensor(ref, {4, 5}), name_of(dt));
    const Tensor ys = mt::where(cond, a, -1.5);
    for (size_t i = 0; i < cv.size(); ++i) ref[i] = cv[i] != 0 ? av[i] : -1.5;
    expect_close(ys, ref_tensor(ref, {4, 5}), "where scalar");
  }
  const Tensor c = mt::tensor<bool>({true, false});
  const Tensor w = mt::where(c, mt::tensor<int32_t>({1, 2}), mt::tensor<float>({0.5, 0.25}));
  EXPECT_EQ(w.dtype(), mt::kFloat32);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 0.25}));
  EXPECT_EQ(mt::where(c, mt::tensor<int64_t>({1, 2}), 7).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 7}));
  expect_error([&] { mt::where(mt::tensor<float>({1, 0}), c, c); }, {"where", "bool", "float32"});
}

TEST(Comparison, AllOpsAllDtypes) {
  using Cmp = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::tuple<const char*, Cmp, std::function<bool(double, double)>>> ops = {
      {"eq", [](auto& a, auto& b) { return mt::eq(a, b); },
       [](double a, double b) { return a == b; }},
      {"ne", [](auto& a, auto& b) { return a != b; }, [](double a, double b) { return a != b; }},
      {"lt", [](auto& a, auto& b) { return mt::lt(a, b); },
       [](double a, double b) { return a < b; }},
      {"le", [](auto& a, auto& b) { return a <= b; }, [](double a, double b) { return a <= b; }},
      {"gt", [](auto& a, auto& b) { return mt::gt(a, b); },
       [](double a, double b) { return a > b; }},
      {"ge", [](auto& a, auto& b) { return a >= b; }, [](double a, double b) { return a >= b; }},
  };
  std::vector<DType> all = floating_dtypes();
  for (DType d : {mt::kInt32, mt::kInt64, mt::kUInt8, mt::kBool}) all.push_back(d);
  for (const auto& [name, op, ref] : ops) {
    for (DType dt : all) {
      // Small integers so that ties occur.
      const double hi = dt == mt::kBool ? 2 : 4;
      const auto whole = [](double x) { return std::floor(x); };
      const Tensor a = rnd({4, 6}, dt, true, 0, hi, whole), b = rnd({6}, dt, true, 0, hi, whole);
      const Tensor y = op(a, b);
      EXPECT_EQ(y.dtype(), mt::kBool);
      const auto av = bvalues(a, {4, 6}), bv = bvalues(b, {4, 6});
      std::vector<bool> want;
      for (size_t i = 0; i < av.size(); ++i) want.push_back(ref(av[i], bv[i]));
      EXPECT_EQ(y.to_vector<bool>(), want) << name << " " << name_of(dt);
    }
  }
  // Mixed dtypes and scalars compare in the promoted type.
  const Tensor i = mt::tensor<int32_t>({1, 2, 3});
  EXPECT_EQ((i < 2.5).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ((i == mt::tensor<float>({1.0, 2.5, 3.0})).to_vector<bool>(),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ((mt::tensor<float>({NAN}) == mt::tensor<float>({NAN})).to_vector<bool>()[0], false);
  EXPECT_EQ((mt::tensor<float>({NAN}) != mt::tensor<float>({NAN})).to_vector<bool>()[0], true);
  EXPECT_TRUE(mt::equal(i, mt::tensor<int32_t>({1, 2, 3})));
  EXPECT_FALSE(mt::equal(i, mt::tensor<int32_t>({1, 2})));
  EXPECT_TRUE(mt::allclose(mt::tensor<double>({1.0}), mt::tensor<double>({1.0 + 1e-9})));
  EXPECT_FALSE(mt::allclose(mt::tensor<double>({1.0}), mt::tensor<double>({1.1})));
}

TEST(Logical, AndOrNot) {
  const Tensor a = mt::tensor<bool>({true, true, false, false});
  const Tensor b = mt::tensor<bool>({true, false, true, false});
  EXPECT_EQ(mt::logical_and(a, b).to_vector<bool>(),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((a | b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((!a).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ((a & b).dtype(), mt::kBool);
  // Numbers: nonzero is true.
  const Tensor x = mt::tensor<float>({0.5, 0, -2, 0});
  EXPECT_EQ(mt::logical_and(x, b).to_vector<bool>(), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(mt::logical_or(x, mt::zeros({4})).to_vector<bool>(),
            (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(mt::logical_not(mt::tensor<int32_t>({0, 3})).to_vector<bool>(),
            (std::vector<bool>{true, false}));
  // Broadcasting and non-contiguous.
  const Tensor m = rnd({3, 4}, mt::kBool, true, 0, 2), r = rnd({4}, mt::kBool, true, 0, 2);
  const auto mv = bvalues(m, {3, 4}), rv = bvalues(r, {3, 4});
  std::vector<bool> want_and, want_or;
  for (size_t i = 0; i < mv.size(); ++i) {
    want_and.push_back(mv[i] != 0 && rv[i] != 0);
    want_or.push_back(mv[i] != 0 || rv[i] != 0);
  }
  EXPECT_EQ((m & r).to_vector<bool>(), want_and);
  EXPECT_EQ((m | r).to_vector<bool>(), want_or);
  EXPECT_EQ((a + b).to_vector<bool>(),
            (std::vector<bool>{true, true, true, false}));  // bool add: or
}

// ---- in place -------------------------------------------------------------------------------

TEST(InPlace, MatchesOutOfPlace) {
  for (DType dt : floating_dtypes()) {
    const Tensor x0 = rnd({4, 6}, dt, false), o = rnd({6}, dt, true, 0.5, 2);
    auto fresh = [&] {
      Tensor base = mt::zeros({8, 6}, dt);
      Tensor v = base.slice(0, 0, std::nullopt, 2);  // non-contiguous self
      v.copy_(x0);
      return v;
    };
    const auto xv = x0.to_vector<double>(), ov = bvalues(o, {4, 6});
    auto expect = [&](const Tensor& got, const std::function<double(double, double)>& f,
                      const char* what) {
      std::vector<double> ref;
      for (size_t i = 0; i < xv.size(); ++i) ref.push_back(f(xv[i], ov[i]));
      expect_close(got, ref_tensor(ref, {4, 6}), std::string(what) + " " + name_of(dt));
    };
    Tensor t = fresh();
    const uint32_t v0 = t.version();
    Tensor& r = t.add_(o);
    EXPECT_EQ(&r, &t);
    EXPECT_GT(t.version(), v0);
    expect(
        t, [](double a, double b) { return a + b; }, "add_");
    using Op = std::function<void(Tensor&)>;
    using Ref = std::function<double(double, double)>;
    const std::vector<std::tuple<const char*, Op, Ref>> cases = {
        {"add_ alpha", [&](Tensor& s) { s.add_(o, 2.5); },
         [](double a, double b) { return a + 2.5 * b; }},
        {"sub_", [&](Tensor& s) { s.sub_(o); }, [](double a, double b) { return a - b; }},
        {"sub_ alpha", [&](Tensor& s) { s.sub_(o, 2); },
         [](double a, double b) { return a - 2 * b; }},
        {"mul_", [&](Tensor& s) { s.mul_(o); }, [](double a, double b) { return a * b; }},
        {"div_", [&](Tensor& s) { s.div_(o); }, [](double a, double b) { return a / b; }},
        {"+=", [&](Tensor& s) { s += o; }, [](double a, double b) { return a + b; }},
        {"-=", [&](Tensor& s) { s -= o; }, [](double a, double b) { return a - b; }},
        {"*=", [&](Tensor& s) { s *= o; }, [](double a, double b) { return a * b; }},
        {"/=", [&](Tensor& s) { s /= o; }, [](double a, double b) { return a / b; }},
        {"add_ scalar", [](Tensor& s) { s.add_(1.5); }, [](double a, double) { return a + 1.5; }},
        {"+= scalar", [](Tensor& s) { s += 2; }, [](double a, double) { return a + 2; }},
        {"mul_ scalar", [](Tensor& s) { s.mul_(-3); }, [](double a, double) { return a * -3; }},
        {"*= scalar", [](Tensor& s) { s *= 0.5; }, [](double a, double) { return a * 0.5; }},
        {"div_ scalar", [](Tensor& s) { s.div_(4); }, [](double a, double) { return a / 4; }},
    };
    for (const auto& [what, op, ref] : cases) {
      Tensor s = fresh();
      op(s);
      expect(s, ref, what);
    }
    // The base tensor's skipped rows stay zero.
    Tensor base = mt::zeros({8, 6}, dt);
    base.slice(0, 0, std::nullopt, 2).add_(mt::ones({6}, dt));
    EXPECT_EQ(base.select(0, 1).to_vector<double>(), std::vector<double>(6, 0.0));
    EXPECT_EQ(base.select(0, 2).to_vector<double>(), std::vector<double>(6, 1.0));
  }
  // Integer self with integer or lower-category other.
  Tensor i = mt::tensor<int32_t>({1, 2, 3});
  i += mt::tensor<int64_t>({10, 20, 30});
  i *= 2;
  i.sub_(mt::tensor<uint8_t>({1, 0, 1}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{21, 44, 65}));
  EXPECT_EQ(i.dtype(), mt::kInt32);
  // Float self accepts a float64 or int other (cast to self's dtype).
  Tensor f = mt::tensor<float>({1, 2});
  f += mt::tensor<double>({0.5, 0.25});
  f.mul_(mt::tensor<int64_t>({2, 4}));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{3, 9}));
  EXPECT_EQ(f.dtype(), mt::kFloat32);
}

TEST(InPlace, MixedDtypesRoundOnce) {
  // float16 self += float32 other computes in float32 and rounds once: 1 + (2^-11 + 2^-20) is
  // above the float16 midpoint 1 + 2^-11, so it rounds up (rounding `other` first would tie down).
  const float other = std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20);
  Tensor h = mt::ones({2}, mt::kFloat16);
  h.add_(mt::full({2}, other, mt::kFloat32));
  EXPECT_EQ(h.to_vector<mt::Half>()[0].x, mt::Half(1.0f + other).x);
  EXPECT_EQ(h.to_vector<float>()[0], 1.0f + std::ldexp(1.0f, -10));
  Tensor m = mt::ones({2}, mt::kBFloat16);
  m.mul_(mt::full({2}, 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), mt::kFloat32));
  EXPECT_EQ(m.to_vector<float>()[1], 1.0f + std::ldexp(1.0f, -7));
  Tensor d = mt::ones({2}, mt::kFloat16);
  d.div_(mt::full({2}, 1.0 / (1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20)), mt::kFloat64));
  EXPECT_EQ(d.to_vector<float>()[0], 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(d.dtype(), mt::kFloat16);
}

TEST(InPlace, Errors) {
  Tensor i = mt::tensor<int32_t>({1, 2, 3});
  expect_error(
      [&] {
        i += mt::tensor<float>({1, 2, 3});
      },
      {"add_", "result type float32 can't be cast to the desired output type int32"});
  expect_error([&] { i.mul_(2.5); }, {"mul_", "can't be cast", "int32"});
  expect_error([&] { i /= mt::tensor<int32_t>({1, 1, 1}); }, {"div_", "can't be cast"});
  expect_error([&] { mt::tensor<bool>({true}).add_(mt::tensor<int32_t>({1})); },
               {"can't be cast", "bool"});
  Tensor f = mt::zeros({3});
  expect_error(
      [&] {
        f += mt::zeros({2, 3});
      },
      {"add_", "output with shape [3] doesn't match the broadcast shape [2, 3]"});
  expect_error([&] { f.mul_(mt::zeros({4})); }, {"mul_", "[3]", "[4]"});
  Tensor leaf = mt::ones({2}, mt::TensorOptions().requires_grad());
  expect_error([&] { leaf.add_(1.0); }, {"leaf"});
  {
    mt::autograd::NoGradGuard no_grad;
    leaf.add_(1.0);  // allowed without grad mode, as in torch.no_grad()
  }
  EXPECT_EQ(leaf.to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Errors, NotImplementedAndBadArguments) {
  const Tensor b = mt::tensor<bool>({true, false});
  expect_error([&] { mt::neg(b); }, {"neg", "bool"});
  expect_error([&] { -b; }, {"neg", "bool"});
  expect_error([&] { mt::abs(b); }, {"op abs not implemented for dtype bool on device cpu"});
  expect_error([&] { mt::gelu(mt::tensor<int64_t>({1})); },
               {"op gelu not implemented for dtype int64 on device cpu"});
  expect_error([&] { mt::silu(mt::tensor<int32_t>({1})); }, {"silu", "int32"});
  // A kernel called directly with a dtype outside its set.
  const Tensor out = mt::empty({2}, mt::kBool);
  expect_error([&] { mt::sqrt_kernel(mt::kCPU)(out, b); },
               {"op sqrt not implemented for dtype bool on device cpu"});
  expect_error([&] { mt::gelu(mt::ones({1}), "fast"); }, {"gelu", "'none' or 'tanh'", "fast"});
  expect_error([&] { mt::clamp(mt::ones({1}), std::nullopt, std::nullopt); },
               {"clamp", "min", "max"});
  expect_error([&] { mt::clamp(b, 0, 1); }, {"clamp", "bool"});
  expect_error([&] { mt::sub(b, b); }, {"sub", "bool"});
  expect_error([&] { mt::ones({2}) - b; }, {"sub", "bool"});
  expect_error([&] { mt::ones({2}).sub_(b); }, {"sub", "bool"});
  expect_error([&] { mt::add(mt::tensor<int32_t>({1}), mt::tensor<int32_t>({1}), 0.5); },
               {"add", "alpha"});
  expect_error([] { mt::pow(mt::tensor<int64_t>({2}), -1); },
               {"pow", "integers to negative integer powers are not allowed"});
  EXPECT_EQ(mt::pow(mt::tensor<int64_t>({2}), -1.0).to_vector<double>(),
            (std::vector<double>{0.5}));
  // As in PyTorch (1.13 and 2.x): only a Scalar exponent is refused, however it is spelled; an
  // integer tensor exponent, 0-dim included, runs the integer power (0 where |base| > 1), as
  // torch.pow(tensor([2, 3]), tensor([-1, 2])) = [0, 9] and torch.pow(tensor([2, 3]), tensor(-1))
  // = [0, 0] in torch 1.13.
  expect_error(
      [] {
        (void)mt::tensor<int32_t>({2, 3}).pow(-2);
      },
      {"pow", "integers to negative integer powers are not allowed", "-2"});
  expect_error([] { (void)mt::pow(mt::tensor<bool>({true}), -1); },
               {"pow", "integers to negative integer powers are not allowed"});
  EXPECT_EQ(mt::pow(mt::tensor<int64_t>({2, 3}), mt::tensor<int64_t>({-1, 2})).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(mt::pow(mt::tensor<int64_t>({2, 3}), mt::full({}, -1, mt::kInt64)).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0}));
}

// ---- gradients ------------------------------------------------------------------------------
namespace {
Tensor grad_input(const Shape& shape, double lo, double hi,
                  const std::function<double(double)>& map = {}, bool non_contiguous = true) {
  Tensor t = rnd(shape, mt::kFloat64, non_contiguous, lo, hi, map);
  t.requires_grad_(true);
  return t;
}
using Fn = mt::autograd::GradcheckFn;
}  // namespace

TEST(Gradients, UnaryOps) {
  for (const auto& c : unary_cases()) {
    if (!c.smooth) continue;
    // clamp: keep inputs away from the bounds (-1, -0.5, 0.75, 1).
    auto map = c.map;
    if (std::string(c.name).rfind("clamp", 0) == 0) {
      map = [](double x) {
        for (double bound : {-1.0, -0.5, 0.75, 1.0})
          if (std::fabs(x - bound) < 0.1) return bound + 0.15;
        return x;
      };
    }
    for (const Shape& shape : {Shape{3, 4}, Shape{}}) {
      const Tensor x = grad_input(shape, c.lo, c.hi, map);
      const Fn fn = [&](const std::vector<Tensor>& in) { return c.op(in[0]); };
      try {
        EXPECT_TRUE(mt::autograd::gradcheck(fn, {x})) << c.name;
      } catch (const mt::Error& e) {
        ADD_FAILURE() << c.name << " " << ::testing::PrintToString(shape) << ": " << e.what();
      }
    }
  }
}

TEST(Gradients, BinaryOpsSameShape) {
  for (const auto& c : binary_cases()) {
    if (c.ints && std::string(c.name) == "pow_int") continue;
    const Tensor a = grad_input({3, 4}, c.alo, c.ahi);
    Tensor b;
    if (std::string(c.name) == "maximum" || std::string(c.name) == "minimum") {
      // Distinct values: b = a +- (0.2 .. 1).
      const Tensor off = rnd({3, 4}, mt::kFloat64, false, -1, 1, away_from_zero);
      b = (a.detach() + off).detach();
      b = rnd({3, 4}, mt::kFloat64, true).copy_(b);
      b.requires_grad_(true);
    } else {
      b = grad_input({3, 4}, c.blo, c.bhi, c.bmap);
    }
    const Fn fn = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
    try {
      EXPECT_TRUE(mt::autograd::gradcheck(fn, {a, b})) << c.name;
    } catch (const mt::Error& e) {
      ADD_FAILURE() << c.name << ": " << e.what();
    }
  }
  // Ties of maximum/minimum split the gradient (PyTorch's convention).
  const Tensor x = mt::tensor<double>({1.0, 2.0}, mt::TensorOptions(mt::kFloat64).requires_grad());
  const Tensor y = mt::tensor<double>({1.0, 3.0}, mt::TensorOptions(mt::kFloat64).requires_grad());
  auto g = mt::autograd::grad({mt::maximum(x, y)}, {x, y}, {mt::ones({2}, mt::kFloat64)});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0.5, 0.0}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{0.5, 1.0}));
}

TEST(Gradients, BroadcastingBinaryOps) {
  for (const auto& c : binary_cases()) {
    if (std::string(c.name) == "pow_int" || std::string(c.name) == "maximum" ||
        std::string(c.name) == "minimum")
      continue;
    for (const auto& [sa, sb] : binary_shapes()) {
      const Tensor a = grad_input(sa, c.alo, c.ahi), b = grad_input(sb, c.blo, c.bhi, c.bmap);
      const Fn fn = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
      try {
        EXPECT_TRUE(mt::autograd::gradcheck(fn, {a, b})) << c.name;
      } catch (const mt::Error& e) {
        ADD_FAILURE() << c.name << " " << ::testing::PrintToString(sa) << " "
                      << ::testing::PrintToString(sb) << ": " << e.what();
      }
    }
  }
}

TEST(Gradients, WhereAndInPlace) {
  const Tensor cond = rnd({3, 4}, mt::kBool, true, 0, 2);
  const Tensor a = grad_input({3, 4}, -2, 2), b = grad_input({3, 4}, -2, 2);
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::where(cond, in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::where(cond, in[0], 0.5); }, {a}));
  const Tensor o = grad_input({3, 4}, 0.5, 2, [](double x) { return x; });
  const std::vector<std::pair<const char*, std::function<void(Tensor&, const Tensor&)>>> ops = {
      {"add_", [](Tensor& s, const Tensor& t) { s.add_(t, 1.5); }},
      {"sub_", [](Tensor& s, const Tensor& t) { s.sub_(t); }},
      {"mul_", [](Tensor& s, const Tensor& t) { s.mul_(t); }},
      {"div_", [](Tensor& s, const Tensor& t) { s.div_(t); }},
      {"*= scalar", [](Tensor& s, const Tensor&) { s *= 2.5; }},
      {"+= scalar",
       [](Tensor& s, const Tensor& t) {
         s += t;
         s += 1.0;
       }},
  };
  for (const auto& [name, op] : ops) {
    const Fn fn = [&, op = op](const std::vector<Tensor>& in) {
      Tensor s = in[0] * 1.0;  // a non-leaf to modify in place
      op(s, in[1]);
      return s * s;
    };
    try {
      EXPECT_TRUE(mt::autograd::gradcheck(fn, {a, o})) << name;
    } catch (const mt::Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
  }
}

// The branch-free float exp and normal CDF behind the CPU's GELU and attention loops, swept
// against double-precision references at the accuracy kernels/vectorizable_math.h states.
TEST(VectorizableMath, ExpWithinTwoUlp) {
  auto ulp_error = [](float got, double want) {
    const float w = static_cast<float>(want);
    const double ulp =
        std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
    return std::fabs(double(got) - want) / ulp;
  };
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.7f * float(i) / 2000000.0f;
    const double want = std::exp(double(x));
    if (want > std::numeric_limits<float>::max()) break;
    worst = std::max(worst, ulp_error(mt::vmath::exp_f32(x), want));
  }
  EXPECT_LE(worst, 2.0);
  // Denormal results, the limits, and the special values.
  EXPECT_NEAR(mt::vmath::exp_f32(-100.0f), std::exp(-100.0), 2e-45);
  EXPECT_EQ(mt::vmath::exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(mt::vmath::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(mt::vmath::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(mt::vmath::exp_f32(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(mt::vmath::exp_f32(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(mt::vmath::exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

// Softmax's masked scores are -inf: exp_f32 must return their 0 without computing a denormal on
// the way (each such multiply is a microcode assist of ~100 cycles on x86, which made the causal
// attention kernel spend a third of its forward in them). The underflow flag tells.
TEST(VectorizableMath, ExpOfMaskedScoresComputesNoDenormal) {
  for (float x : {-std::numeric_limits<float>::infinity(), -104.0f, -1e30f,
                  std::numeric_limits<float>::quiet_NaN()}) {
    std::feclearexcept(FE_ALL_EXCEPT);
    volatile float in = x;
    volatile float y = mt::vmath::exp_f32(in);
    EXPECT_FALSE(std::fetestexcept(FE_UNDERFLOW)) << x;
    if (!std::isnan(x)) {
      EXPECT_EQ(y, 0.0f) << x;
    }
  }
  std::feclearexcept(FE_ALL_EXCEPT);
  volatile float in = -100.0f;  // a true denormal result is still computed
  volatile float y = mt::vmath::exp_f32(in);
  EXPECT_GT(y, 0.0f);
}

TEST(VectorizableMath, NormalCdfRelativeError) {
  auto worst_from = [](float lo) {
    double worst = 0;
    for (int i = 0; i <= 1000000; ++i) {
      const float x = lo + (8.0f - lo) * float(i) / 1000000.0f;
      const double want = 0.5 * std::erfc(-double(x) / std::sqrt(2.0));
      worst = std::max(worst, std::fabs(mt::vmath::normal_cdf_f32(x) - want) / want);
    }
    return worst;
  };
  EXPECT_LE(worst_from(-11.4f), 1e-5);  // Phi >= 1e-30
  EXPECT_LE(worst_from(-5.6f), 2e-6);   // Phi >= 1e-8
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(mt::vmath::normal_cdf_f32(-inf), 0.0f);
  EXPECT_EQ(mt::vmath::normal_cdf_f32(inf), 1.0f);
  EXPECT_NEAR(mt::vmath::normal_cdf_f32(0.0f), 0.5f, 1.2e-7);  // within 2 ulp
  EXPECT_TRUE(std::isnan(mt::vmath::normal_cdf_f32(std::numeric_limits<float>::quiet_NaN())));
  // gelu(-inf) is NaN (-inf * 0) as in PyTorch, gelu(+inf) = +inf.
  EXPECT_TRUE(std::isnan(mt::activation::gelu(-inf)));
  EXPECT_EQ(mt::activation::gelu(inf), inf);
}

// A dense tensor with a scalar operand (a stride-0 input) on either side runs a loop that loads
// the scalar once; every element equals the float computation of that element alone.
TEST(ScalarOperand, EitherSideMatchesElementByElement) {
  mt::manual_seed(11);
  const Tensor x = mt::randn({1000}) + 3.0;  // positive: pow's base
  const Tensor s = mt::scalar_tensor(1.75);
  const auto xv = x.to_vector<float>();
  const float sv = 1.75f;
  const auto left = mt::div(x, s).to_vector<float>(), right = mt::sub(s, x).to_vector<float>();
  const auto pw = mt::pow(s, x).to_vector<float>();
  Tensor inplace = x.clone();
  inplace.div_(1.75);
  const auto in = inplace.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(left[i], xv[i] / sv) << i;
    ASSERT_EQ(right[i], sv - xv[i]) << i;
    ASSERT_EQ(pw[i], std::pow(sv, xv[i])) << i;
    ASSERT_EQ(in[i], xv[i] / sv) << i;
  }
}
