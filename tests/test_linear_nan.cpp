// NaN and infinities through every fused linear path on the CPU (linear with act None, ReLU and
// GeluTanh, with and without bias, and the two-layer linear_act_linear block; forward and
// backward; float32, float16, bfloat16), against a float64 reference written out with PyTorch's
// semantics: relu(NaN) = NaN, ReLU's backward reads the output and passes the gradient where it
// is NaN (threshold_backward: out <= 0 ? 0 : g), tanh-GELU and its derivative by PyTorch's
// formulas (NaN at -inf, and for the derivative at +inf). test_cuda_linear.cpp holds CUDA to the
// same results. Also the vectorised ReLU rules of the CPU's row passes and GEMM
// epilogue against kernels/activation_math.h, lane by lane.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/activation_math.h"
#include "kernels/cpu/gemm/row_passes.h"
#include "kernels/cpu/gemm/sgemm.h"
#include "linear_special_values.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using Act = mt::LinearActivation;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::SpecialLinearCase;

namespace {

const char* act_name(Act a) { return a == Act::None ? "none" : a == Act::Relu ? "relu" : "gelu"; }

// ---- the float64 reference, PyTorch's semantics --------------------------------------------
constexpr double kBeta = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kKappa = 0.044715;

double act_forward(double z, Act act) {
  switch (act) {
    case Act::None:
      return z;
    case Act::Relu:  // clamp_min(z, 0): NaN stays NaN
      return std::isnan(z) ? z : (z < 0 ? 0.0 : z);
    case Act::GeluTanh:
      return 0.5 * z * (1 + std::tanh(kBeta * (z + kKappa * z * z * z)));
  }
  return z;
}

// g * act'(z), where h = act(z) (ReLU's derivative is read from h, as PyTorch does).
double act_backward(double g, double z, double h, Act act) {
  switch (act) {
    case Act::None:
      return g;
    case Act::Relu:
      return h <= 0 ? 0.0 : g;
    case Act::GeluTanh: {
      const double t = std::tanh(kBeta * (z + kKappa * z * z * z));
      return g * (0.5 * (1 + t) + 0.5 * z * (1 - t * t) * kBeta * (1 + 3 * kKappa * z * z));
    }
  }
  return g;
}

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  explicit Mat(const Tensor& t)
      : rows(t.size(0)), cols(t.dim() > 1 ? t.size(1) : 1), v(t.to_vector<double>()) {}
  double& operator()(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * cols + j)]; }
  Tensor tensor() const { return mt::from_vector(v, Shape{rows, cols}); }
};

// a [r,k] @ b[c,k]^T (+ bias [c]), summed in k order.
Mat matmul_nt(const Mat& a, const Mat& b, const Mat* bias) {
  Mat out(a.rows, b.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double s = 0;
      for (int64_t k = 0; k < a.cols; ++k) s += a(i, k) * b(j, k);
      out(i, j) = bias != nullptr ? s + (*bias)(j, 0) : s;
    }
  return out;
}
Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}
Mat column_sums(const Mat& a) {
  Mat s(a.cols, 1);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) s(j, 0) += a(i, j);
  return s;
}

// One layer y = act(x w^T + b) and its gradients for upstream gradient gy.
struct LayerRef {
  Mat pre, y, gp, gx, gw, gb;
};
LayerRef layer_reference(const Mat& x, const Mat& w, const Mat* b, Act act, const Mat& gy) {
  LayerRef r{matmul_nt(x, w, b), Mat(0, 0), Mat(0, 0), Mat(0, 0), Mat(0, 0), Mat(0, 0)};
  r.y = r.pre;
  for (double& v : r.y.v) v = act_forward(v, act);
  r.gp = gy;
  for (size_t i = 0; i < r.gp.v.size(); ++i)
    r.gp.v[i] = act_backward(gy.v[i], r.pre.v[i], r.y.v[i], act);
  r.gx = matmul_nt(r.gp, transpose(w), nullptr);
  r.gw = matmul_nt(transpose(r.gp), transpose(x), nullptr);
  r.gb = column_sums(r.gp);
  return r;
}

Tensor vec(const Mat& column) { return mt::from_vector(column.v, Shape{column.rows}); }

// Finite values are near (the GELU and half-type roundings); NaN and each infinity must be
// where the reference has them (expect_close's rule).
mt::testing::Tolerance tol(DType dt) {
  switch (dt) {
    case mt::kFloat32:
      return {1e-5, 1e-5};
    case mt::kFloat16:
      return {4e-3, 1e-2};
    default:
      return {4e-2, 8e-2};
  }
}

Tensor leaf(const Tensor& t, DType dt) { return t.to(dt).detach().requires_grad_(); }

}  // namespace

TEST(LinearNan, ReluOfNanIsNanAndPassesTheGradient) {
  for (DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Tensor x = leaf(mt::from_vector(std::vector<double>{nan, 1.0}, Shape{1, 2}), dt);
    const Tensor w = leaf(mt::from_vector(std::vector<double>{1.0, 1.0}, Shape{1, 2}), dt);
    const Tensor b = leaf(mt::from_vector(std::vector<double>{0.5}, Shape{1}), dt);
    const Tensor y = F::linear(x, w, b, Act::Relu);
    EXPECT_TRUE(std::isnan(y.to_vector<double>()[0])) << mt::dtype_name(dt);
    y.backward(mt::from_vector(std::vector<double>{2.0}, Shape{1, 1}).to(dt));
    // threshold_backward passes the gradient through a NaN output.
    EXPECT_EQ(b.grad().to_vector<double>()[0], 2.0) << mt::dtype_name(dt);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2.0, 2.0})) << mt::dtype_name(dt);
    EXPECT_TRUE(std::isnan(w.grad().to_vector<double>()[0])) << mt::dtype_name(dt);
  }
}

TEST(LinearNan, EveryFusedPathPropagatesNanAndInfinityLikePyTorch) {
  using S = SpecialLinearCase;
  for (bool with_inf : {false, true}) {
    const SpecialLinearCase c = mt::testing::special_linear_case(with_inf);
    const Mat x(c.x), w1(c.w1), b1(c.b1.reshape(Shape{S::N, 1})), w2(c.w2),
        b2(c.b2.reshape(Shape{S::N2, 1})), gy1(c.gy1), gy2(c.gy2);
    for (DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
      const auto t = tol(dt);
      for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
        for (bool with_bias : {false, true}) {
          const std::string what = std::string(mt::dtype_name(dt)) + " " + act_name(act) +
                                   (with_bias ? " bias" : "") + (with_inf ? " nan+inf" : " nan");
          // linear(x, w1, b1, act): linear_forward, then act' and linear_backward_weight.
          {
            const LayerRef r = layer_reference(x, w1, with_bias ? &b1 : nullptr, act, gy1);
            const Tensor xa = leaf(c.x, dt), wa = leaf(c.w1, dt);
            const Tensor ba = with_bias ? leaf(c.b1, dt) : Tensor();
            const Tensor y = F::linear(xa, wa, ba, act);
            y.backward(c.gy1.to(dt));
            mt::testing::expect_close(y, r.y.tensor(), t.rtol, t.atol, what + " forward");
            mt::testing::expect_close(xa.grad(), r.gx.tensor(), t.rtol, t.atol, what + " grad x");
            mt::testing::expect_close(wa.grad(), r.gw.tensor(), t.rtol, t.atol, what + " grad w");
            if (with_bias)
              mt::testing::expect_close(ba.grad(), vec(r.gb), t.rtol, t.atol, what + " grad b");
            if (act == Act::Relu) {  // the point of the exercise: row 1's NaN survives ReLU
              const std::vector<double> yv = y.to_vector<double>();
              for (int64_t n = 0; n < S::N; ++n)
                EXPECT_TRUE(std::isnan(yv[static_cast<size_t>(S::N + n)])) << what << " n " << n;
            }
          }
          // linear_act_linear: also linear_backward_act (act' and b1's gradient).
          {
            const LayerRef r1 = layer_reference(x, w1, with_bias ? &b1 : nullptr, act, Mat(0, 0));
            const Mat out = matmul_nt(r1.y, w2, with_bias ? &b2 : nullptr);
            const Mat gh = matmul_nt(gy2, transpose(w2), nullptr);
            Mat gp1 = gh;
            for (size_t i = 0; i < gp1.v.size(); ++i)
              gp1.v[i] = act_backward(gh.v[i], r1.pre.v[i], r1.y.v[i], act);
            const Tensor xa = leaf(c.x, dt), w1a = leaf(c.w1, dt), w2a = leaf(c.w2, dt);
            const Tensor b1a = with_bias ? leaf(c.b1, dt) : Tensor();
            const Tensor b2a = with_bias ? leaf(c.b2, dt) : Tensor();
            const Tensor y = F::linear_act_linear(xa, w1a, b1a, act, w2a, b2a);
            y.backward(c.gy2.to(dt));
            const std::string w2s = what + " block";
            mt::testing::expect_close(y, out.tensor(), t.rtol, t.atol, w2s + " forward");
            mt::testing::expect_close(xa.grad(), matmul_nt(gp1, transpose(w1), nullptr).tensor(),
                                      t.rtol, t.atol, w2s + " grad x");
            mt::testing::expect_close(w1a.grad(),
                                      matmul_nt(transpose(gp1), transpose(x), nullptr).tensor(),
                                      t.rtol, t.atol, w2s + " grad w1");
            mt::testing::expect_close(w2a.grad(),
                                      matmul_nt(transpose(gy2), transpose(r1.y), nullptr).tensor(),
                                      t.rtol, t.atol, w2s + " grad w2");
            if (with_bias) {
              mt::testing::expect_close(b1a.grad(), vec(column_sums(gp1)), t.rtol, t.atol,
                                        w2s + " grad b1");
              mt::testing::expect_close(b2a.grad(), vec(column_sums(gy2)), t.rtol, t.atol,
                                        w2s + " grad b2");
            }
          }
        }
      }
    }
  }
}

// ---- the AVX-512 ReLU rules against the scalar math ------------------------------------------
namespace {

// Values that tell the ordered compares apart: signed zeros, NaN, infinities, subnormals.
std::vector<float> relu_probe_values() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  return {0.0f, -0.0f, nan, -nan, inf, -inf, tiny, -tiny, 1.5f, -1.5f, 3e38f, -3e38f, 2.0f, -2.0f};
}

// Bit for bit, except that any NaN matches any NaN: which operand's NaN a sum of two NaNs
// keeps is not specified, and the compiler may swap a scalar sum's operands.
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

// bias_relu_rows: activation::relu(row + bias) per element, for rows of every width up to 17
// (full, masked and scalar tails) and bias values that make -0 and NaN sums.
TEST(ActivationMath, RowPassReluIsTheScalarRule) {
  const std::vector<float> v = relu_probe_values();
  const int64_t k = static_cast<int64_t>(v.size());
  for (int64_t n = 1; n <= 17; ++n) {
    const int64_t rows = k;
    std::vector<float> data(rows * n), bias(n), expect(rows * n);
    for (int64_t j = 0; j < n; ++j) bias[j] = v[(j * 5 + 1) % k];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) data[i * n + j] = v[(i + j) % k];
    for (bool with_bias : {false, true}) {
      std::vector<float> out = data;
      for (int64_t e = 0; e < rows * n; ++e)
        expect[e] = mt::activation::relu(with_bias ? data[e] + bias[e % n] : data[e]);
      mt::cpu::bias_relu_rows(out.data(), rows, n, with_bias ? bias.data() : nullptr, true);
      for (int64_t e = 0; e < rows * n; ++e)
        ASSERT_TRUE(same_bits(out[e], expect[e]))
            << "n " << n << " bias " << with_bias << " element " << e << ": " << out[e] << " vs "
            << expect[e];
    }
  }
}

// round_bias_relu_rows: what round_dense, a float add, round_dense, activation::relu and a
// narrowing give element by element, for bfloat16 and float16, rows of every width up to 17 and
// values that round up, tie, overflow float16, or make -0 and NaN.
template <typename T>
void check_round_bias_relu_rows() {
  std::vector<float> v = relu_probe_values();
  for (float f : {1.00390625f, 1.0117188f, 65519.0f, 65520.0f, 1e-8f, 3.1415927f, -2.7182817f})
    v.push_back(f);
  const int64_t k = static_cast<int64_t>(v.size());
  for (int64_t n = 1; n <= 17; ++n) {
    const int64_t rows = k;
    std::vector<float> data(rows * n), bias(n);
    for (int64_t j = 0; j < n; ++j) bias[j] = v[(j * 5 + 1) % k];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) data[i * n + j] = v[(i + j) % k];
    for (bool with_bias : {false, true}) {
      for (bool relu : {false, true}) {
        std::vector<T> out(rows * n);
        mt::cpu::round_bias_relu_rows(data.data(), rows, n, with_bias ? bias.data() : nullptr, relu,
                                      out.data());
        for (int64_t e = 0; e < rows * n; ++e) {
          float want = float(T(data[e]));
          if (with_bias) want = float(T(want + bias[e % n]));
          if (relu) want = mt::activation::relu(want);
          ASSERT_TRUE(same_bits(float(out[e]), float(T(want))))
              << "n " << n << " bias " << with_bias << " relu " << relu << " element " << e << ": "
              << float(out[e]) << " vs " << want;
        }
      }
    }
  }
}

TEST(ActivationMath, HalfTypeRowPassIsRoundBiasRoundRelu) {
  check_round_bias_relu_rows<mt::BFloat16>();
  check_round_bias_relu_rows<mt::Half>();
}

// add_column_sums: each column's double sum of its rows in order, from float32, bfloat16 and
// float16 rows (widened exactly) of every width up to 70 (several 64-column blocks and the masked
// remainders), a row stride longer than the rows, infinities and NaN.
template <typename T>
void check_column_sums() {
  std::vector<float> v = relu_probe_values();
  for (float f : {1.00390625f, 3.1415927f, -2.7182817f, 1e-3f, -7.5f, 0.1f}) v.push_back(f);
  const int64_t k = static_cast<int64_t>(v.size()), rows = 37;
  for (int64_t n = 1; n <= 70; ++n) {
    const int64_t ld = n + 3;
    std::vector<T> m(rows * ld);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < ld; ++j) m[i * ld + j] = T(v[(i * 7 + j * 3) % k]);
    std::vector<double> sums(n), want(n);
    for (int64_t j = 0; j < n; ++j) sums[j] = want[j] = 0.25 * double(j);  // added to, not set
    mt::cpu::add_column_sums(sums.data(), m.data(), rows, n, ld);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) want[j] += double(float(m[i * ld + j]));
    for (int64_t j = 0; j < n; ++j) {
      uint64_t a, b;
      std::memcpy(&a, &sums[j], 8);
      std::memcpy(&b, &want[j], 8);
      ASSERT_TRUE(a == b || (std::isnan(sums[j]) && std::isnan(want[j])))
          << "n " << n << " column " << j << ": " << sums[j] << " vs " << want[j];
    }
  }
}

TEST(ActivationMath, ColumnSumsAreRowOrderDoubleSums) {
  check_column_sums<float>();
  check_column_sums<mt::BFloat16>();
  check_column_sums<mt::Half>();
}

// The GEMM epilogue's ReLU (forward) and ReLU-derivative mask (backward) in registers equal the
// scalar rules applied to sgemm()'s result, lane by lane, for every register width; the bias
// and the mask h carry signed zeros, NaNs and infinities.
TEST(ActivationMath, GemmEpilogueReluIsTheScalarRule) {
  using Ep = mt::cpu::GemmEpilogue;
  const std::vector<float> v = relu_probe_values();
  const int k = static_cast<int>(v.size());
  for (int n = 1; n <= 16; ++n) {
    const int m = k;
    std::vector<float> ones(m, 1.0f), b(n), bias(n), g(m * n), h(m * n);
    for (int j = 0; j < n; ++j) bias[j] = v[(j * 3 + 1) % k];
    std::vector<float> plain(m * n);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        h[i * n + j] = v[(i + 2 * j) % k];
        g[i * n + j] = 0.25f * float(1 + (i + j) % 7);
      }
    }
    // One GEMM per row with K = 1 (A = [1], B = the row), so each value reaches the epilogue
    // exactly.
    std::vector<float> fused(m * n), masked(m * n);
    bool ran = true;
    for (int i = 0; i < m && ran; ++i) {
      for (int j = 0; j < n; ++j) b[j] = v[(i + j) % k];
      mt::cpu::sgemm(CblasNoTrans, CblasNoTrans, 1, n, 1, ones.data(), 1, b.data(), n,
                     plain.data() + i * n, n);
      ran = mt::cpu::sgemm_fused(CblasNoTrans, CblasNoTrans, 1, n, 1, ones.data(), 1, b.data(), n,
                                 fused.data() + i * n, n,
                                 Ep::linear_forward({}, {bias.data()}, Ep::Activation::Relu));
      // Backward: C = g's row, masked where h <= 0.
      ran = ran && mt::cpu::sgemm_fused(CblasNoTrans, CblasNoTrans, 1, n, 1, ones.data(), 1,
                                        g.data() + i * n, n, masked.data() + i * n, n,
                                        Ep::activation_backward({}, {h.data() + i * n, n}, {}));
    }
    if (!ran) GTEST_SKIP() << "no AVX-512 masked GEMM on this CPU";
    for (int e = 0; e < m * n; ++e) {
      const float want = mt::activation::relu(plain[e] + bias[e % n]);
      ASSERT_TRUE(same_bits(fused[e], want)) << "n " << n << " element " << e;
      const float want_grad = mt::formulas::relu_grad(g[e], h[e]);
      ASSERT_TRUE(same_bits(masked[e], want_grad)) << "n " << n << " element " << e;
    }
  }
}
