// conv2d, max_pool2d and avg_pool2d against plain-loop float64 references written here (forward
// and backward, every floating dtype, contiguous and transposed-view inputs, many geometries),
// gradcheck on float64, output shapes with ceil_mode, error messages, the Conv2d/MaxPool2d/
// AvgPool2d modules (init bounds, printing, Sequential), conv2d under autocast, and the cuDNN
// math-type rule and error description (kernels/conv_math.h), which are pure host code.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "conv_composite_check.h"
#include "kernels/conv_math.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::Shape;
using mt::Size2;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using Vec = std::vector<double>;

namespace {

// Asserts |actual - expected| <= atol + rtol * magnitude elementwise, where magnitude is the sum
// of |terms| that made each expected value (it bounds the accumulation error).
void expect_close_mag(const Tensor& actual, const Shape& shape, const Vec& expected,
                      const Vec& magnitude, const std::string& what) {
  ASSERT_EQ(actual.shape(), shape) << what;
  const auto tol = mt::testing::tolerance_for(actual.dtype());
  const Vec a = actual.to_vector<double>();
  ASSERT_EQ(a.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = tol.atol + tol.rtol * std::max(magnitude[i], std::fabs(expected[i]));
    if (!(std::fabs(a[i] - expected[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << expected[i]
                    << " (bound " << bound << ")";
    }
  }
}

// ---- convolution reference ----------------------------------------------------------------

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, O, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const ConvCase kConvCases[] = {
    {"basic 3x3", 2, 3, 7, 6, 4, 3, 3, 1, 0, 1, 1, true},
    {"batch 1 no bias", 1, 2, 5, 5, 3, 3, 3, 1, 0, 1, 1, false},
    {"stride 2", 3, 3, 9, 8, 5, 3, 3, 2, 0, 1, 1, true},
    {"padding 1", 2, 2, 6, 7, 3, 3, 3, 1, 1, 1, 1, true},
    {"padding 2 stride 2", 1, 3, 7, 7, 2, 5, 5, 2, 2, 1, 1, false},
    {"dilation 2", 2, 2, 9, 10, 3, 3, 3, 1, 1, 2, 1, true},
    {"groups 2", 3, 4, 6, 6, 6, 3, 3, 1, 1, 1, 2, true},
    {"depthwise", 2, 4, 7, 5, 4, 3, 3, 1, 1, 1, 4, true},
    {"depthwise multiplier 2", 1, 3, 6, 6, 6, 3, 3, 2, 1, 1, 3, false},
    {"pointwise 1x1", 3, 5, 4, 6, 7, 1, 1, 1, 0, 1, 1, true},
    {"1x1 stride 2", 2, 3, 5, 5, 4, 1, 1, 2, 0, 1, 1, true},
    {"non-square kernel", 2, 3, 8, 7, 4, 2, 4, 1, 0, 1, 1, true},
    {"mixed stride/padding/dilation", 3, 4, 11, 9, 4, 3, 2, {2, 1}, {1, 2}, {2, 3}, 2, true},
    {"kernel covers padded input", 1, 2, 3, 3, 2, 5, 5, 1, 1, 1, 1, true},
};

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Forward and backward of a convolution by direct loops over every (output, tap) pair. Each
// value comes with the sum of |terms| it was made of.
struct ConvReference {
  Shape out_shape;
  Vec out, out_mag, gx, gx_mag, gw, gw_mag, gb, gb_mag;
};

ConvReference reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& go,
                             const ConvCase& c) {
  const Vec xs = x.to_vector<double>(), ws = w.to_vector<double>();
  const Vec bs = b.defined() ? b.to_vector<double>() : Vec(c.O, 0.0);
  const int64_t Ho = conv_out(c.H, c.kh, c.stride.h, c.padding.h, c.dilation.h);
  const int64_t Wo = conv_out(c.W, c.kw, c.stride.w, c.padding.w, c.dilation.w);
  const int64_t Cg = c.C / c.groups, Og = c.O / c.groups;
  ConvReference r;
  r.out_shape = Shape{c.N, c.O, Ho, Wo};
  const size_t n_out = static_cast<size_t>(r.out_shape.numel());
  r.out.assign(n_out, 0.0);
  r.out_mag.assign(n_out, 0.0);
  const Vec gos = go.defined() ? go.to_vector<double>() : Vec(n_out, 0.0);
  r.gx.assign(xs.size(), 0.0);
  r.gx_mag.assign(xs.size(), 0.0);
  r.gw.assign(ws.size(), 0.0);
  r.gw_mag.assign(ws.size(), 0.0);
  r.gb.assign(c.O, 0.0);
  r.gb_mag.assign(c.O, 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t oi = static_cast<size_t>(((n * c.O + o) * Ho + oh) * Wo + ow);
          const double g = gos[oi];
          r.out[oi] = bs[o];
          r.out_mag[oi] = std::fabs(bs[o]);
          r.gb[o] += g;
          r.gb_mag[o] += std::fabs(g);
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t ih = oh * c.stride.h - c.padding.h + i * c.dilation.h;
                const int64_t iw = ow * c.stride.w - c.padding.w + j * c.dilation.w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t ch = (o / Og) * Cg + ci;
                const size_t xi = static_cast<size_t>(((n * c.C + ch) * c.H + ih) * c.W + iw);
                const size_t wi = static_cast<size_t>(((o * Cg + ci) * c.kh + i) * c.kw + j);
                r.out[oi] += xs[xi] * ws[wi];
                r.out_mag[oi] += std::fabs(xs[xi] * ws[wi]);
                r.gx[xi] += g * ws[wi];
                r.gx_mag[xi] += std::fabs(g * ws[wi]);
                r.gw[wi] += g * xs[xi];
                r.gw_mag[wi] += std::fabs(g * xs[xi]);
              }
        }
  return r;
}

Tensor run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  return mt::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
}

struct ConvInputs {
  Tensor x, w, b;
};
ConvInputs make_conv_inputs(const ConvCase& c, mt::DType dtype, bool non_contiguous) {
  ConvInputs in;
  in.x = random_tensor(Shape{c.N, c.C, c.H, c.W}, dtype, non_contiguous);
  in.w = random_tensor(Shape{c.O, c.C / c.groups, c.kh, c.kw}, dtype, non_contiguous, -1.0, 1.0);
  if (c.bias) in.b = random_tensor(Shape{c.O}, dtype, false);
  return in;
}

TEST(Conv2d, ForwardMatchesReferenceEveryDtypeAndLayout) {
  mt::manual_seed(1);
  for (const ConvCase& c : kConvCases) {
    for (mt::DType dtype : mt::testing::floating_dtypes()) {
      for (bool nc : {false, true}) {
        const ConvInputs in = make_conv_inputs(c, dtype, nc);
        const Tensor out = run_conv(in.x, in.w, in.b, c);
        EXPECT_EQ(out.dtype(), dtype);
        const ConvReference r = reference_conv(in.x, in.w, in.b, Tensor(), c);
        expect_close_mag(out, r.out_shape, r.out, r.out_mag,
                         std::string(c.name) + " " + std::string(mt::dtype_name(dtype)) +
                             (nc ? " non-contiguous" : ""));
      }
    }
  }
}

TEST(Conv2d, BackwardMatchesReferenceEveryDtype) {
  mt::manual_seed(2);
  for (const ConvCase& c : kConvCases) {
    for (mt::DType dtype : mt::testing::floating_dtypes()) {
      const bool nc = dtype == mt::kFloat32 || dtype == mt::kBFloat16;
      ConvInputs in = make_conv_inputs(c, dtype, nc);
      Tensor x = in.x.detach().requires_grad_();
      Tensor w = in.w.detach().requires_grad_();
      Tensor b = in.b.defined() ? in.b.detach().requires_grad_() : Tensor();
      const Tensor out = run_conv(x, w, b, c);
      // A transposed (non-contiguous) upstream gradient exercises the backward's layout handling.
      const Shape& s = out.shape();
      const Tensor go = random_tensor(Shape{s[0], s[1], s[3], s[2]}, dtype, false).transpose(2, 3);
      out.backward(go);
      const ConvReference r = reference_conv(in.x, in.w, in.b, go, c);
      const std::string what = std::string(c.name) + " " + std::string(mt::dtype_name(dtype));
      expect_close_mag(x.grad(), x.shape(), r.gx, r.gx_mag, what + " grad input");
      expect_close_mag(w.grad(), w.shape(), r.gw, r.gw_mag, what + " grad weight");
      if (c.bias) expect_close_mag(b.grad(), b.shape(), r.gb, r.gb_mag, what + " grad bias");
    }
  }
}

TEST(Conv2d, Gradcheck) {
  mt::manual_seed(3);
  const ConvCase cases[] = {
      {"basic", 2, 2, 5, 4, 3, 3, 2, 1, 1, 1, 1, true},
      {"groups stride dilation", 2, 4, 7, 6, 4, 3, 2, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {"depthwise", 1, 3, 5, 5, 3, 3, 3, 2, 1, 1, 3, true},
      {"pointwise", 2, 3, 3, 4, 2, 1, 1, 1, 0, 1, 1, true},
  };
  for (const ConvCase& c : cases) {
    for (bool nc : {false, true}) {
      ConvInputs in = make_conv_inputs(c, mt::kFloat64, nc);
      in.x.requires_grad_();
      in.w.requires_grad_();
      in.b.requires_grad_();
      auto fn = [&c](const std::vector<Tensor>& v) { return run_conv(v[0], v[1], v[2], c); };
      EXPECT_TRUE(mt::autograd::gradcheck(fn, {in.x, in.w, in.b})) << c.name;
    }
  }
}

TEST(Conv2d, UnbatchedInput) {
  mt::manual_seed(4);
  Tensor x = random_tensor(Shape{3, 6, 5}, mt::kFloat64, false).requires_grad_();
  Tensor w = random_tensor(Shape{4, 3, 3, 3}, mt::kFloat64, false).requires_grad_();
  const Tensor out = mt::conv2d(x, w, Tensor(), 1, 1);
  EXPECT_EQ(out.shape(), (Shape{4, 6, 5}));
  expect_close(out, mt::conv2d(x.unsqueeze(0), w, Tensor(), 1, 1).squeeze(0), "unbatched");
  EXPECT_TRUE(mt::autograd::gradcheck(
      [](const std::vector<Tensor>& v) { return mt::conv2d(v[0], v[1], Tensor(), 2, 1); }, {x, w}));
}

TEST(Conv2d, EmptyBatch) {
  Tensor x = mt::zeros({0, 2, 5, 5}, mt::kFloat32).requires_grad_();
  Tensor w = mt::ones({3, 2, 3, 3}, mt::kFloat32).requires_grad_();
  Tensor b = mt::ones({3}, mt::kFloat32).requires_grad_();
  const Tensor out = mt::conv2d(x, w, b);
  EXPECT_EQ(out.shape(), (Shape{0, 3, 3, 3}));
  out.sum().backward();
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_EQ(mt::abs(w.grad()).sum().item<float>(), 0.0f);
  EXPECT_EQ(mt::abs(b.grad()).sum().item<float>(), 0.0f);
}

TEST(Conv2d, KnownValues) {
  // A 3x3 image 1..9 with a 2x2 ones kernel, padding 1: each output sums its window.
  const Tensor x = mt::arange(1, 10, 1, mt::kFloat32).reshape(Shape{1, 1, 3, 3});
  const Tensor w = mt::ones({1, 1, 2, 2});
  const Tensor out = mt::conv2d(x, w, mt::tensor({0.5f}), 2, 1);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1.5f, 5.5f, 11.5f, 28.5f}));
}

TEST(Conv2d, Errors) {
  const Tensor x = mt::zeros({1, 4, 8, 8});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 3, 3, 3}));
      },
      {"conv2d",
       "Given groups=1, weight of size [2, 3, 3, 3], expected input[1, 4, 8, 8] "
       "to have 3 channels, but got 4 channels instead"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({3, 2, 3, 3}), Tensor(), 1, 0, 1, 2);
      },
      {"Given groups=2, expected weight to be divisible by 2 at dimension 0, but got "
       "weight of size [3, 2, 3, 3] instead"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), mt::zeros({3}));
      },
      {"Given weight of size [2, 4, 3, 3], expected bias to be 1-dimensional with 2 "
       "elements, but got bias of size [3] instead"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 9, 3}));
      },
      {"Calculated padded input size per channel: (8 x 8). Kernel size: (9 x 3). Kernel "
       "size can't be greater than actual input size"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), Tensor(), 1, 0, 4);
      },
      {"Kernel size: (9 x 9)"});
  expect_error(
      [&] {
        mt::conv2d(mt::zeros({4, 8}), mt::zeros({2, 4, 3, 3}));
      },
      {"Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
       "[4, 8]"});
  expect_error([&] { mt::conv2d(x, mt::zeros({2, 4, 3})); }, {"4-D weight", "[2, 4, 3]"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}, mt::kFloat64));
      },
      {"Input type (float32) and weight type (float64) should be the same"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), Tensor(), 0);
      },
      {"non-positive stride is not supported"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), Tensor(), 1, -1);
      },
      {"negative padding is not supported"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), Tensor(), 1, 0, {1, 0});
      },
      {"dilation should be greater than zero"});
  expect_error(
      [&] {
        mt::conv2d(x, mt::zeros({2, 4, 3, 3}), Tensor(), 1, 0, 1, 0);
      },
      {"non-positive groups is not supported"});
  expect_error(
      [&] {
        mt::conv2d(mt::zeros({1, 4, 8, 8}, mt::kInt64), mt::zeros({2, 4, 3, 3}));
      },
      {"conv2d", "floating-point", "int64"});
}

TEST(Conv2d, AutocastRunsInBFloat16) {
  mt::manual_seed(5);
  Tensor x = random_tensor(Shape{2, 3, 6, 6}, mt::kFloat32, true).requires_grad_();
  Tensor w = random_tensor(Shape{4, 3, 3, 3}, mt::kFloat32, false, -1.0, 1.0).requires_grad_();
  Tensor b = random_tensor(Shape{4}, mt::kFloat32, false).requires_grad_();
  Tensor out;
  {
    mt::amp::autocast ac(mt::kCPU, mt::kBFloat16);
    out = mt::conv2d(x, w, b, 1, 1);
  }
  EXPECT_EQ(out.dtype(), mt::kBFloat16);
  const ConvCase c{"autocast", 2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, true};
  const ConvReference r =
      reference_conv(x.to(mt::kBFloat16), w.to(mt::kBFloat16), b.to(mt::kBFloat16), Tensor(), c);
  expect_close_mag(out, r.out_shape, r.out, r.out_mag, "autocast conv2d");
  out.to(mt::kFloat32).sum().backward();
  EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(b.grad().dtype(), mt::kFloat32);
}

// float32 under "highest" is FMA only; under "high" TF32 (DEFAULT or TENSOR_OP) is allowed; half
// types ask for tensor cores; no dtype may let cuDNN down-convert float32 operands to float16.
TEST(Conv2d, CudnnMathTypeRule) {
  using mt::ConvMath;
  const auto Highest = mt::MatmulPrecision::Highest, High = mt::MatmulPrecision::High;
  EXPECT_EQ(mt::conv_requested_math(mt::kFloat32, Highest), ConvMath::Fma);
  EXPECT_EQ(mt::conv_requested_math(mt::kFloat32, High), ConvMath::Default);
  for (auto prec : {Highest, High}) {
    EXPECT_EQ(mt::conv_requested_math(mt::kFloat16, prec), ConvMath::TensorOp);
    EXPECT_EQ(mt::conv_requested_math(mt::kBFloat16, prec), ConvMath::TensorOp);
    EXPECT_EQ(mt::conv_requested_math(mt::kFloat64, prec), ConvMath::Default);
  }
  const ConvMath all[] = {ConvMath::Default, ConvMath::TensorOp, ConvMath::TensorOpAllowConversion,
                          ConvMath::Fma};
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16}) {
    for (auto prec : {Highest, High}) {
      for (ConvMath m : all) {
        const bool fp32_strict = dt == mt::kFloat32 && prec == Highest;
        const bool expected =
            m == ConvMath::Fma || (!fp32_strict && m != ConvMath::TensorOpAllowConversion);
        EXPECT_EQ(mt::conv_math_allowed(dt, prec, m), expected)
            << mt::dtype_name(dt) << (prec == Highest ? " highest " : " high ")
            << mt::conv_math_name(m);
      }
    }
  }
  // A value cuDNN might add later is refused rather than trusted.
  EXPECT_FALSE(mt::conv_math_allowed(mt::kFloat16, High, static_cast<ConvMath>(7)));
  EXPECT_STREQ(mt::conv_math_name(ConvMath::TensorOpAllowConversion),
               "TENSOR_OP_MATH_ALLOW_CONVERSION");
}

// The composed convolution the CUDA kernels fall back to when cuDNN offers no algorithm, here on
// the CPU: the same im2col/col2im index math and the same composition as on the GPU.
TEST(Conv2d, ComposedConvolutionMatchesTheConvolutionKernels) {
  mt::manual_seed(21);
  mt::testing::check_composed_convolution(mt::Device::cpu());
}

TEST(Conv2d, CudnnErrorDescribesTheCall) {
  const mt::Conv2dParams p{{2, 1}, {1, 0}, {1, 2}, 2};
  const std::string d =
      mt::describe_conv("conv2d backward weight", Shape{2, 4, 9, 9}, Shape{6, 2, 3, 3},
                        Shape{2, 6, 5, 5}, mt::kFloat16, p, mt::MatmulPrecision::Highest);
  EXPECT_EQ(d,
            "conv2d backward weight: input [2, 4, 9, 9], weight [6, 2, 3, 3], output [2, 6, 5, "
            "5], float16, stride [2, 1], padding [1, 0], dilation [1, 2], groups 2, float32 "
            "precision highest");
}

// ---- pooling reference ----------------------------------------------------------------------

struct PoolCase {
  const char* name;
  int64_t N, C, H, W;
  Size2 kernel, stride, padding, dilation;
  bool ceil_mode, count_include_pad;
  int64_t divisor_override;  // 0: none
};

const PoolCase kPoolCases[] = {
    {"2x2 stride 2", 2, 3, 8, 6, 2, 2, 0, 1, false, true, 0},
    {"odd size floor", 1, 2, 7, 5, 2, 2, 0, 1, false, true, 0},
    {"odd size ceil", 1, 2, 7, 5, 2, 2, 0, 1, true, true, 0},
    {"overlapping 3x3 stride 2", 2, 2, 9, 8, 3, 2, 0, 1, false, true, 0},
    {"overlapping ceil", 2, 2, 6, 6, 3, 2, 0, 1, true, true, 0},
    {"padding 1", 2, 2, 7, 6, 3, 2, 1, 1, false, true, 0},
    {"padding 1 ceil", 1, 3, 6, 7, 3, 2, 1, 1, true, true, 0},
    {"padding excluded", 2, 2, 7, 6, 3, 2, 1, 1, false, false, 0},
    {"padding excluded ceil", 1, 2, 5, 6, 2, 2, 1, 1, true, false, 0},
    {"non-square", 2, 2, 8, 9, {2, 3}, {1, 2}, {1, 0}, 1, false, true, 0},
    {"stride 1", 1, 2, 5, 5, 2, 1, 0, 1, false, true, 0},
    {"divisor override", 1, 2, 6, 6, 3, 2, 1, 1, true, true, 5},
    {"dilation 2 (max)", 2, 2, 9, 8, 3, 1, 1, 2, false, true, 0},
    {"dilation ceil (max)", 1, 2, 8, 7, 2, 2, 1, {2, 3}, true, true, 0},
};

// PyTorch's rule, written from its definition: ceil/floor of the window count, then drop a last
// window that would start in the right padding.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolReference {
  Shape out_shape;
  Vec out, gx;
};

// max: the largest in-image tap (padding never wins); avg: the sum of in-image taps over the
// number of taps inside the padded image (count_include_pad) or inside the image.
PoolReference reference_pool(const Tensor& x, const Tensor& go, const PoolCase& c, bool is_max) {
  const Vec xs = x.to_vector<double>();
  const int64_t Ho = pool_out(c.H, c.kernel.h, c.stride.h, c.padding.h, c.dilation.h, c.ceil_mode);
  const int64_t Wo = pool_out(c.W, c.kernel.w, c.stride.w, c.padding.w, c.dilation.w, c.ceil_mode);
  PoolReference r;
  r.out_shape = Shape{c.N, c.C, Ho, Wo};
  const Vec gos = go.defined() ? go.to_vector<double>() : Vec(r.out_shape.numel(), 0.0);
  r.out.assign(r.out_shape.numel(), 0.0);
  r.gx.assign(xs.size(), 0.0);
  for (int64_t plane = 0; plane < c.N * c.C; ++plane)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const size_t oi = static_cast<size_t>((plane * Ho + oh) * Wo + ow);
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t best_i = -1, in_image = 0, in_padded = 0;
        std::vector<size_t> taps;
        for (int64_t i = 0; i < c.kernel.h; ++i)
          for (int64_t j = 0; j < c.kernel.w; ++j) {
            const int64_t ih = oh * c.stride.h - c.padding.h + i * c.dilation.h;
            const int64_t iw = ow * c.stride.w - c.padding.w + j * c.dilation.w;
            if (ih >= -c.padding.h && ih < c.H + c.padding.h && iw >= -c.padding.w &&
                iw < c.W + c.padding.w)
              ++in_padded;
            if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
            const size_t xi = static_cast<size_t>((plane * c.H + ih) * c.W + iw);
            ++in_image;
            sum += xs[xi];
            taps.push_back(xi);
            if (xs[xi] > best) {
              best = xs[xi];
              best_i = static_cast<int64_t>(xi);
            }
          }
        if (is_max) {
          r.out[oi] = best;
          if (best_i >= 0) r.gx[best_i] += gos[oi];
        } else {
          const double div = c.divisor_override    ? static_cast<double>(c.divisor_override)
                             : c.count_include_pad ? static_cast<double>(in_padded)
                                                   : static_cast<double>(in_image);
          r.out[oi] = sum / div;
          for (size_t xi : taps) r.gx[xi] += gos[oi] / div;
        }
      }
  return r;
}

Tensor run_pool(const Tensor& x, const PoolCase& c, bool is_max) {
  if (is_max) return mt::max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
  std::optional<int64_t> div;
  if (c.divisor_override) div = c.divisor_override;
  return mt::avg_pool2d(x, c.kernel, c.stride, c.padding, c.ceil_mode, c.count_include_pad, div);
}

// Distinct values (a shuffled grid spaced by 0.05) so that max pooling has no ties and small
// perturbations never change the winner.
Tensor distinct_values(const Shape& shape, mt::DType dtype, bool non_contiguous, uint32_t seed) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (double& e : v) e = (e - static_cast<double>(v.size()) / 2) * 0.05;
  if (!non_contiguous) return mt::from_vector(v, shape).to(dtype);
  Shape t = shape;
  std::swap(t[2], t[3]);
  return mt::from_vector(v, t).to(dtype).transpose(2, 3);
}

TEST(Pool2d, ForwardBackwardMatchReferenceEveryDtype) {
  mt::manual_seed(6);
  uint32_t seed = 0;
  for (const PoolCase& c : kPoolCases) {
    const bool dilated = !(c.dilation == Size2(1));
    for (bool is_max : {true, false}) {
      if (!is_max && dilated) continue;  // avg_pool2d has no dilation
      if (is_max && (!c.count_include_pad || c.divisor_override)) continue;  // avg-only options
      for (mt::DType dtype : mt::testing::floating_dtypes()) {
        // Rounded to bfloat16 the grid may tie; kernel and reference both keep the first maximum.
        const bool nc = dtype != mt::kFloat64;
        Tensor x = is_max ? distinct_values(Shape{c.N, c.C, c.H, c.W}, dtype, nc, ++seed)
                          : random_tensor(Shape{c.N, c.C, c.H, c.W}, dtype, nc);
        x = x.detach().requires_grad_();
        const Tensor out = run_pool(x, c, is_max);
        EXPECT_EQ(out.dtype(), dtype);
        const Tensor go = random_tensor(out.shape(), dtype, true);
        out.backward(go);
        const PoolReference r = reference_pool(x, go, c, is_max);
        const std::string what = std::string(is_max ? "max " : "avg ") + c.name + " " +
                                 std::string(mt::dtype_name(dtype));
        ASSERT_EQ(out.shape(), r.out_shape) << what;
        expect_close(out, mt::from_vector(r.out, r.out_shape), what);
        expect_close(x.grad(), mt::from_vector(r.gx, x.shape()), what + " grad");
      }
    }
  }
}

TEST(Pool2d, Gradcheck) {
  for (const PoolCase& c : kPoolCases) {
    const bool dilated = !(c.dilation == Size2(1));
    Tensor xm = distinct_values(Shape{c.N, c.C, c.H, c.W}, mt::kFloat64, true, 7);
    xm.requires_grad_();
    if (c.count_include_pad && !c.divisor_override) {
      EXPECT_TRUE(mt::autograd::gradcheck(
          [&c](const std::vector<Tensor>& v) { return run_pool(v[0], c, true); }, {xm}))
          << c.name;
    }
    if (dilated) continue;
    Tensor xa = random_tensor(Shape{c.N, c.C, c.H, c.W}, mt::kFloat64, true);
    xa.requires_grad_();
    EXPECT_TRUE(mt::autograd::gradcheck(
        [&c](const std::vector<Tensor>& v) { return run_pool(v[0], c, false); }, {xa}))
        << c.name;
  }
}

TEST(Pool2d, OutputShapesAndKnownValues) {
  const Tensor x = mt::arange(0, 16, 1, mt::kFloat32).reshape(Shape{1, 1, 4, 4});
  EXPECT_EQ(mt::max_pool2d(x, 2).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(mt::avg_pool2d(x, 2).to_vector<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  // 5x5, kernel 2, stride 2: floor gives 2x2, ceil 3x3 with a one-element corner window.
  const Tensor y = mt::arange(0, 25, 1, mt::kFloat32).reshape(Shape{1, 1, 5, 5});
  EXPECT_EQ(mt::max_pool2d(y, 2).shape(), (Shape{1, 1, 2, 2}));
  const Tensor yc = mt::avg_pool2d(y, 2, std::nullopt, 0, /*ceil_mode=*/true);
  EXPECT_EQ(yc.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(yc.to_vector<float>()[8], 24.0f);
  // ceil_mode drops a window that would start in the right padding: 3 wide, kernel 2, stride 2,
  // padding 1 gives 2 windows either way.
  const Tensor z = mt::zeros({1, 1, 3, 3});
  EXPECT_EQ(mt::max_pool2d(z, 2, 2, 1, 1, true).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(mt::max_pool2d(mt::zeros({1, 1, 6, 6}), 3, 2, 0, 1, true).shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(mt::max_pool2d(mt::zeros({1, 1, 6, 6}), 3, 2, 0, 1, false).shape(),
            (Shape{1, 1, 2, 2}));
  // Padding with count_include_pad: the corner window of ones holds 1 of 4 cells.
  const Tensor ones = mt::ones({1, 1, 2, 2});
  EXPECT_EQ(mt::avg_pool2d(ones, 2, 2, 1).to_vector<float>(),
            (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
  EXPECT_EQ(mt::avg_pool2d(ones, 2, 2, 1, false, false).to_vector<float>(),
            (std::vector<float>{1, 1, 1, 1}));
  // Negative values: padding never wins a max.
  EXPECT_EQ(mt::max_pool2d(-ones, 2, 2, 1).to_vector<float>(),
            (std::vector<float>{-1, -1, -1, -1}));
  // Unbatched [C, H, W].
  EXPECT_EQ(mt::max_pool2d(mt::zeros({3, 4, 4}), 2).shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(mt::avg_pool2d(mt::zeros({3, 4, 4}), 2).shape(), (Shape{3, 2, 2}));
  // Ties go to the first maximum in row-major order, as PyTorch's argmax.
  Tensor tied = mt::ones({1, 1, 4, 4}).requires_grad_();
  mt::max_pool2d(tied, 2).sum().backward();
  EXPECT_EQ(tied.grad().to_vector<float>(),
            (std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0}));
  // NaN propagates through max pooling.
  Tensor n = mt::zeros({1, 1, 2, 2});
  n = mt::where(mt::arange(0, 4, 1, mt::kInt64).reshape(Shape{1, 1, 2, 2}) == 1,
                mt::full({1, 1, 2, 2}, std::nan("")), n);
  EXPECT_TRUE(std::isnan(mt::max_pool2d(n, 2).item<float>()));
}

TEST(Pool2d, Errors) {
  const Tensor x = mt::zeros({1, 2, 5, 5});
  expect_error([&] { mt::max_pool2d(x, 2, 2, 2); },
               {"max_pool2d", "pad should be smaller than or equal to half of kernel size"});
  expect_error([&] { mt::avg_pool2d(x, 3, 1, 2); },
               {"avg_pool2d", "pad should be smaller than or equal to half of kernel size"});
  expect_error([&] { mt::max_pool2d(x, 6); },
               {"Given input size: (2x5x5). Calculated output size: (2x0x0). Output size is too "
                "small"});
  expect_error([&] { mt::max_pool2d(x, 0); }, {"kernel size should be greater than zero"});
  expect_error([&] { mt::avg_pool2d(x, 2, 0); }, {"stride should be greater than zero"});
  expect_error([&] { mt::max_pool2d(x, 2, 2, 0, 0); }, {"dilation should be greater than zero"});
  expect_error([&] { mt::avg_pool2d(x, 2, 2, 0, false, true, 0); }, {"divisor must be not zero"});
  expect_error(
      [&] {
        mt::max_pool2d(mt::zeros({5, 5}), 2);
      },
      {"max_pool2d", "Expected 3D (unbatched) or 4D (batched)", "[5, 5]"});
  expect_error(
      [&] {
        mt::max_pool2d(mt::zeros({1, 2, 4, 4}, mt::kInt64), 2);
      },
      {"max_pool2d", "floating-point"});
}

// ---- modules --------------------------------------------------------------------------------

TEST(ConvModules, Conv2dInitShapesAndRepr) {
  mt::manual_seed(8);
  nn::Conv2d conv(6, 8, 3, nn::Conv2dOptions{.padding = 1, .groups = 2});
  EXPECT_EQ(conv->weight.shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(conv->bias.shape(), (Shape{8}));
  // kaiming_uniform(a = sqrt(5)) and the bias both give U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const double bound = 1.0 / std::sqrt(3.0 * 3 * 3);
  const double wmax = mt::abs(conv->weight).max().item<double>();
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.8 * bound);
  EXPECT_LE(mt::abs(conv->bias).max().item<double>(), bound);
  EXPECT_EQ(conv->parameters().size(), 2u);
  EXPECT_EQ(conv->extra_repr(),
            "6, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2");

  nn::Conv2d plain(3, 4, Size2(2, 3),
                   nn::Conv2dOptions{.stride = 2, .dilation = {1, 2}, .bias = false});
  EXPECT_FALSE(plain->bias.defined());
  EXPECT_EQ(plain->parameters().size(), 1u);
  EXPECT_EQ(plain->extra_repr(),
            "3, 4, kernel_size=(2, 3), stride=(2, 2), dilation=(1, 2), bias=False");
  const Tensor x = mt::randn({2, 3, 9, 9});
  expect_close(plain(x), mt::conv2d(x, plain->weight, Tensor(), 2, 0, {1, 2}), "module");

  expect_error([] { nn::Conv2d(8, 6, 3, nn::Conv2dOptions{.groups = 4}); },
               {"out_channels must be divisible by groups"});
  expect_error([] { nn::Conv2d(5, 8, 3, nn::Conv2dOptions{.groups = 2}); },
               {"in_channels must be divisible by groups"});
  expect_error([] { nn::Conv2d(5, 8, 3, nn::Conv2dOptions{.groups = 0}); },
               {"groups must be a positive integer"});
}

TEST(ConvModules, PoolsInSequential) {
  mt::manual_seed(9);
  nn::MaxPool2d mp(2);
  nn::AvgPool2d ap(3, nn::AvgPool2dOptions{.stride = 1, .padding = 1});
  EXPECT_EQ(mp->extra_repr(), "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False");
  EXPECT_EQ(ap->extra_repr(), "kernel_size=3, stride=1, padding=1");
  nn::MaxPool2d mp2(Size2(2, 3), nn::MaxPool2dOptions{.stride = Size2(1, 2), .ceil_mode = true});
  EXPECT_EQ(mp2->extra_repr(),
            "kernel_size=(2, 3), stride=(1, 2), padding=0, dilation=1, ceil_mode=True");

  nn::Sequential net(nn::Conv2d(1, 4, 3, nn::Conv2dOptions{.padding = 1}), nn::ReLU(), mp,
                     nn::Conv2d(4, 4, 3), ap, nn::Flatten(), nn::Linear(64, 3));
  const Tensor x = mt::randn({5, 1, 12, 12});
  const Tensor out = net(x);
  EXPECT_EQ(out.shape(), (Shape{5, 3}));
  out.sum().backward();
  for (const auto& [name, p] : net->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
  EXPECT_NE(net->repr().find("MaxPool2d(kernel_size=2"), std::string::npos) << net->repr();
}

}  // namespace
