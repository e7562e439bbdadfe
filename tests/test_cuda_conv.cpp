// CUDA convolution (cuDNN, kernels/cuda/conv_kernels.cu) and pooling (kernels/cuda/
// pool_kernels.cu) against the CPU kernels, the oracle: forward values and autograd gradients for
// every floating dtype over several stride/padding/dilation/groups configurations.
//
// Tolerances: convolutions sum C/groups*kh*kw products in a different order (and cuDNN may pick
// Winograd/FFT algorithms), so float32 gets rtol/atol 1e-4 on O(1) data, half types one or two
// units of their last place; TF32 (precision "high") about 1e-3 relative per product. The
// precision-contract tests compare float32 against float64 with elementwise bounds derived from
// sum(|x*w|) (reasons next to them), and a half grouped+dilated convolution either matches the
// CPU in every direction or fails with an error naming the call. Pooling
// visits windows in the CPU's order on both devices, so max pooling (values and indices) must
// match exactly and average pooling to rounding. Every test skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conv_composite_check.h"
#include "engine/kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Device;
using mt::DType;
using mt::Size2;
using mt::Tensor;
using mt::testing::all_dtypes;
using mt::testing::kGpu;

namespace {

mt::testing::Tolerance conv_tol(DType dt) {
  switch (dt) {
    case mt::kFloat64:
      return {1e-10, 1e-10};
    case mt::kFloat32:
      return {1e-4, 1e-4};
    case mt::kFloat16:
      return {4e-3, 4e-3};
    default:
      return {3e-2, 3e-2};  // bfloat16
  }
}

std::string dname(DType dt) { return std::string(mt::dtype_name(dt)); }

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> v{
      {2, 3, 9, 8, 4, 3, 3, 1, 0, 1, 1, true},
      {2, 4, 10, 9, 6, 3, 2, {2, 1}, {1, 2}, {1, 2}, 2, true},
      {1, 6, 7, 7, 6, 3, 3, 1, 1, 1, 6, false},  // depthwise
      {3, 5, 6, 5, 3, 1, 1, 1, 0, 1, 1, true},   // 1x1
      {2, 2, 11, 12, 4, 5, 3, {3, 2}, {2, 1}, {2, 3}, 1, false},
  };
  return v;
}

std::string conv_label(const ConvCase& k, DType dt) {
  return dname(dt) + " N" + std::to_string(k.n) + " C" + std::to_string(k.c) + " O" +
         std::to_string(k.o) + " k" + std::to_string(k.kh) + "x" + std::to_string(k.kw) + " s" +
         std::to_string(k.stride.h) + "," + std::to_string(k.stride.w) + " p" +
         std::to_string(k.padding.h) + "," + std::to_string(k.padding.w) + " d" +
         std::to_string(k.dilation.h) + "," + std::to_string(k.dilation.w) + " g" +
         std::to_string(k.groups);
}

struct ConvInputs {
  Tensor x, w, b;  // CPU; x non-contiguous
};
ConvInputs conv_inputs(const ConvCase& k, DType dt) {
  ConvInputs in;
  in.x = mt::testing::random_tensor({k.n, k.c, k.h, k.w}, dt, true, -1.0, 1.0);
  in.w = mt::testing::random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, dt, false, -1.0, 1.0);
  if (k.bias) in.b = mt::testing::random_tensor({k.o}, dt, false, -1.0, 1.0);
  return in;
}

Tensor run_conv(const ConvCase& k, const Tensor& x, const Tensor& w, const Tensor& b) {
  return mt::conv2d(x, w, b, k.stride, k.padding, k.dilation, k.groups);
}

// Forward on both devices, then backward of sum(out * g) for a random g; compares everything.
void check_conv(const ConvCase& k, DType dt, mt::testing::Tolerance tol, const std::string& what) {
  const ConvInputs in = conv_inputs(k, dt);
  Tensor xc = in.x.clone().requires_grad_(), wc = in.w.clone().requires_grad_();
  Tensor xg = in.x.to(kGpu).requires_grad_(), wg = in.w.to(kGpu).requires_grad_();
  Tensor bc, bg;
  if (k.bias) {
    bc = in.b.clone().requires_grad_();
    bg = in.b.to(kGpu).requires_grad_();
  }
  const Tensor yc = run_conv(k, xc, wc, bc), yg = run_conv(k, xg, wg, bg);
  ASSERT_TRUE(yg.is_cuda()) << what;
  mt::testing::expect_close(yg, yc, tol.rtol, tol.atol, what + " forward");
  const Tensor g = mt::testing::random_tensor(yc.shape(), dt, false, -1.0, 1.0);
  (yc * g).sum().backward();
  (yg * g.to(kGpu)).sum().backward();
  // Gradients sum over more terms (the batch, or every window a pixel is in): looser by 4x.
  const double rt = 4 * tol.rtol, at = 4 * tol.atol;
  mt::testing::expect_close(xg.grad(), xc.grad(), rt, at, what + " grad input");
  mt::testing::expect_close(wg.grad(), wc.grad(), rt, at, what + " grad weight");
  if (k.bias) mt::testing::expect_close(bg.grad(), bc.grad(), rt, at, what + " grad bias");
}

// Restores the float32 matmul precision however the test exits.
struct PrecisionGuard {
  mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  ~PrecisionGuard() { mt::set_float32_matmul_precision(saved); }
};

}  // namespace

TEST(CudaConv, ForwardAndBackwardMatchCpuEveryDtype) {
  MT_REQUIRE_GPU();
  PrecisionGuard guard;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  mt::manual_seed(1);
  for (DType dt : mt::testing::floating_dtypes())
    for (const ConvCase& k : conv_cases()) check_conv(k, dt, conv_tol(dt), conv_label(k, dt));
}

TEST(CudaConv, Float32WithTF32) {
  MT_REQUIRE_GPU();
  PrecisionGuard guard;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::High);
  mt::manual_seed(2);
  for (const ConvCase& k : conv_cases())
    check_conv(k, mt::kFloat32, {1e-3, 5e-3}, "tf32 " + conv_label(k, mt::kFloat32));
}

TEST(CudaConv, Float64AgainstAnIndependentReference) {
  MT_REQUIRE_GPU();
  // Direct loops in double for one strided, padded, dilated, grouped case: guards against the
  // CPU kernel and cuDNN agreeing on a wrong answer.
  const ConvCase k{2, 4, 7, 6, 4, 3, 2, {2, 1}, {1, 1}, {2, 1}, 2, true};
  mt::manual_seed(3);
  const ConvInputs in = conv_inputs(k, mt::kFloat64);
  const Tensor y = run_conv(k, in.x.to(kGpu), in.w.to(kGpu), in.b.to(kGpu)).cpu();
  const auto x = in.x.contiguous().to_vector<double>(), w = in.w.to_vector<double>(),
             b = in.b.to_vector<double>(), got = y.to_vector<double>();
  const int64_t Ho = y.size(2), Wo = y.size(3), cg = k.c / k.groups, og = k.o / k.groups;
  ASSERT_EQ(Ho, (k.h + 2 * 1 - 2 * (3 - 1) - 1) / 2 + 1);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double acc = b[o];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t ih = oh * k.stride.h - k.padding.h + i * k.dilation.h;
                const int64_t iw = ow * k.stride.w - k.padding.w + j * k.dilation.w;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                const int64_t c = (o / og) * cg + ci;
                acc += x[((n * k.c + c) * k.h + ih) * k.w + iw] *
                       w[((o * cg + ci) * k.kh + i) * k.kw + j];
              }
          const double v = got[((n * k.o + o) * Ho + oh) * Wo + ow];
          ASSERT_NEAR(v, acc, 1e-12) << "n" << n << " o" << o << " oh" << oh << " ow" << ow;
        }
}

// ---- float32 precision contract ----------------------------------------------------------
namespace {

// Asserts |actual - expected| <= local * mag + global * max(mag) elementwise, where mag is
// sum(|x*w|) over the terms of each expected value (float64, CPU).
void expect_within(const Tensor& actual, const Tensor& expected, const Tensor& mag, double local,
                   double global, const std::string& what) {
  ASSERT_TRUE(actual.is_cuda()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto a = actual.to_vector<double>(), e = expected.to_vector<double>(),
             m = mag.to_vector<double>();
  const double top = m.empty() ? 0.0 : *std::max_element(m.begin(), m.end());
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = local * m[i] + global * top;
    if (!(std::fabs(a[i] - e[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i]
                    << " (bound " << bound << ", |x*w| sum " << m[i] << ")";
    }
  }
}

// Float32 forward and gradients on the GPU under `precision`, against float64 on the CPU. The
// inputs are scaled by powers of two (exact in float32), so the range test sees the same values.
void check_fp32_contract(const ConvCase& k, mt::MatmulPrecision precision, double scale_x,
                         double scale_w, double local, double global, const std::string& what) {
  PrecisionGuard guard;
  mt::set_float32_matmul_precision(precision);
  const ConvInputs in = conv_inputs(k, mt::kFloat32);
  const Tensor x = in.x * scale_x, w = in.w * scale_w;
  const Tensor g = mt::testing::random_tensor(run_conv(k, x, w, Tensor()).shape(), mt::kFloat32,
                                              false, -1.0, 1.0);
  // Exact values, then the magnitudes: the same convolution of |x|, |w| and |g|.
  Tensor xd = x.to(mt::kFloat64).requires_grad_(), wd = w.to(mt::kFloat64).requires_grad_();
  const Tensor yd = run_conv(k, xd, wd, Tensor());
  (yd * g.to(mt::kFloat64)).sum().backward();
  Tensor xm = mt::abs(x.to(mt::kFloat64)).requires_grad_();
  Tensor wm = mt::abs(w.to(mt::kFloat64)).requires_grad_();
  const Tensor ym = run_conv(k, xm, wm, Tensor());
  (ym * mt::abs(g.to(mt::kFloat64))).sum().backward();

  Tensor xg = x.to(kGpu).requires_grad_(), wg = w.to(kGpu).requires_grad_();
  const Tensor yg = run_conv(k, xg, wg, Tensor());
  (yg * g.to(kGpu)).sum().backward();
  expect_within(yg, yd, ym, local, global, what + " forward");
  expect_within(xg.grad(), xd.grad(), xm.grad(), local, global, what + " grad input");
  expect_within(wg.grad(), wd.grad(), wm.grad(), local, global, what + " grad weight");
}

}  // namespace

// "highest" must be true float32 (FMA math). Summing K float32 products in any order errs by at
// most about K * 2^-24 * sum|x*w|; K <= 110 here (grad weight sums over batch and output pixels),
// so 2^-17 * sum|x*w| covers it, and the max-magnitude term allows Winograd/FFT transforms, whose
// error scales with the largest values. TF32 rounds both operands to 11 significant bits, an
// error near 2^-11 * sum|x*w| / sqrt(K) with random signs: about four times this bound for a
// typical element at K = 110 and eight times at the forward's K <= 30, so a TF32 (or float16)
// kernel fails here.
TEST(CudaConv, Float32HighestIsFullFloat32) {
  MT_REQUIRE_GPU();
  mt::manual_seed(11);
  const double b = std::ldexp(1.0, -17);
  for (const ConvCase& k : conv_cases())
    check_fp32_contract(k, mt::MatmulPrecision::Highest, 1.0, 1.0, b, b,
                        "highest " + conv_label(k, mt::kFloat32));
}

// "high" may use TF32 but must keep float32's exponent range: inputs near 2^20 overflow float16
// (max 65504) and weights near 2^-30 flush to zero in it (smallest subnormal 2^-24), so a kernel
// that down-converts to float16 (TENSOR_OP_MATH_ALLOW_CONVERSION) gives inf/NaN or zeros. Each
// TF32 product errs by at most 2 * 2^-10 relative (truncation of both operands, the worst
// conversion), hence 2^-9 * sum|x*w| plus float32 accumulation; transforms (Winograd) computed
// at TF32 precision add the 2^-11 * max term.
TEST(CudaConv, Float32HighKeepsFloat32Range) {
  MT_REQUIRE_GPU();
  mt::manual_seed(12);
  const double local = std::ldexp(1.0, -9) + std::ldexp(1.0, -17), global = std::ldexp(1.0, -11);
  for (const ConvCase& k : conv_cases()) {
    const std::string label = conv_label(k, mt::kFloat32);
    check_fp32_contract(k, mt::MatmulPrecision::High, 1.0, 1.0, local, global, "high " + label);
    check_fp32_contract(k, mt::MatmulPrecision::High, std::ldexp(1.0, 20), std::ldexp(1.0, -30),
                        local, global, "high, float16-range-breaking scales " + label);
  }
}

// Half types with groups and dilation, each direction through the kernel tables, in strict mode:
// cuDNN either runs it (matching the CPU) or the error names the direction, shapes, dtype and
// geometry. (Out of strict mode the composed convolution runs instead: ComposedConvolution...)
TEST(CudaConv, HalfGroupedDilatedRunsOrNamesTheCall) {
  MT_REQUIRE_GPU();
  // Strict: a call cuDNN cannot run is an error naming it, not the composed fallback.
  struct StrictGuard {
    bool saved = mt::strict_fast_paths();
    StrictGuard() { mt::set_strict_fast_paths(true); }
    ~StrictGuard() { mt::set_strict_fast_paths(saved); }
  } strict;
  mt::manual_seed(13);
  const ConvCase k{2, 4, 10, 9, 6, 3, 2, {2, 1}, {1, 2}, {1, 2}, 2, false};
  const mt::Conv2dParams p{{2, 1}, {1, 2}, {1, 2}, 2};
  const Device cpu = Device::cpu();
  for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const ConvInputs in = conv_inputs(k, dt);
    const Tensor x = in.x.contiguous(), w = in.w.contiguous();
    const Tensor y = mt::empty(run_conv(k, x, w, Tensor()).shape(), dt);
    const Tensor g = mt::testing::random_tensor(y.shape(), dt, false, -1.0, 1.0);
    const auto on_gpu = mt::TensorOptions(kGpu).dtype(dt);
    const Tensor yg = mt::empty(y.shape(), on_gpu), gxg = mt::empty(x.shape(), on_gpu),
                 gwg = mt::empty(w.shape(), on_gpu);
    const Tensor gx = mt::empty(x.shape(), dt), gw = mt::empty(w.shape(), dt);
    mt::conv2d_forward_kernel(cpu)(y, x, w, Tensor(), p);
    mt::conv2d_backward_input_kernel(cpu)(gx, g, w, p);
    mt::conv2d_backward_weight_kernel(cpu)(gw, g, x, p);
    const Tensor xd = x.to(kGpu), wd = w.to(kGpu), gd = g.to(kGpu);
    struct Direction {
      const char* op;
      std::function<void()> run;
      Tensor got, want;
      double tol_scale;
    };
    const Direction directions[] = {
        {"conv2d forward", [&] { mt::conv2d_forward_kernel(kGpu)(yg, xd, wd, Tensor(), p); }, yg, y,
         1.0},
        {"conv2d backward input", [&] { mt::conv2d_backward_input_kernel(kGpu)(gxg, gd, wd, p); },
         gxg, gx, 4.0},
        {"conv2d backward weight", [&] { mt::conv2d_backward_weight_kernel(kGpu)(gwg, gd, xd, p); },
         gwg, gw, 4.0},
    };
    for (const Direction& d : directions) {
      const std::string what = dname(dt) + " " + d.op;
      try {
        d.run();
      } catch (const mt::Error& e) {
        const std::string msg = e.what();
        for (const std::string& part :
             {std::string(d.op) + ": input ", mt::detail::str_cat("input ", x.shape()),
              mt::detail::str_cat("weight ", w.shape()), mt::detail::str_cat("output ", y.shape()),
              dname(dt), std::string("stride [2, 1]"), std::string("padding [1, 2]"),
              std::string("dilation [1, 2]"), std::string("groups 2"), std::string("cuDNN")}) {
          EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
        }
        RecordProperty(what, msg);
        std::printf("[ LIBRARY  ] cuda.conv declined %s: %s\n", what.c_str(), msg.c_str());
        continue;
      }
      const mt::testing::Tolerance tol = conv_tol(dt);
      mt::testing::expect_close(d.got, d.want, d.tol_scale * tol.rtol, d.tol_scale * tol.atol,
                                what);
    }
  }
}

// The composed convolution (im2col, bmm, col2im), which runs when cuDNN offers no algorithm,
// on the GPU against the CPU convolution.
TEST(CudaConv, ComposedConvolutionMatchesTheCpu) {
  MT_REQUIRE_GPU();
  PrecisionGuard guard;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  mt::manual_seed(22);
  mt::testing::check_composed_convolution(kGpu);
}

// cuDNN runs every convolution of the float32/float64 cases: the composed path is a fallback,
// not what the common shapes take. What cuDNN's heuristics offer is the library's choice, so this
// is reported apart from the verdict (scripts/gpu/run.sh: *LibraryBehaviour*).
TEST(CudaConvLibraryBehaviour, CudnnRunsTheCommonFloat32AndFloat64Shapes) {
  MT_REQUIRE_GPU();
  PrecisionGuard guard;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  mt::manual_seed(23);
  mt::reset_fast_path_stats();
  for (DType dt : {mt::kFloat32, mt::kFloat64})
    for (const ConvCase& k : conv_cases()) check_conv(k, dt, conv_tol(dt), conv_label(k, dt));
  const mt::FastPathStats s = mt::fast_path_stats();
  for (const char* d : {"forward", "backward_input", "backward_weight"}) {
    EXPECT_GT(s.ran("cuda.conv", d), 0) << d;
    EXPECT_EQ(s.fell_back("cuda.conv", d), 0) << d;
  }
}

// ---- pooling --------------------------------------------------------------------------------
namespace {

struct PoolCase {
  int64_t n, c, h, w;
  Size2 kernel, stride, padding, dilation;
  bool ceil_mode;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> v{
      {2, 3, 8, 8, 2, 2, 0, 1, false},
      {2, 2, 9, 7, 3, 2, 1, 1, true},
      {1, 3, 10, 11, {3, 2}, {2, 3}, {1, 1}, {2, 1}, false},
      {2, 2, 7, 9, 3, {1, 2}, {1, 0}, {1, 2}, true},
      {1, 2, 5, 5, 4, 3, 2, 1, true},
  };
  return v;
}

std::string pool_label(const PoolCase& k, DType dt) {
  return dname(dt) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + " k" +
         std::to_string(k.kernel.h) + "," + std::to_string(k.kernel.w) + " s" +
         std::to_string(k.stride.h) + "," + std::to_string(k.stride.w) + " p" +
         std::to_string(k.padding.h) + "," + std::to_string(k.padding.w) + " d" +
         std::to_string(k.dilation.h) + "," + std::to_string(k.dilation.w) +
         (k.ceil_mode ? " ceil" : "");
}

void expect_identical(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(g[i] == c[i] || (std::isnan(g[i]) && std::isnan(c[i])))) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << c[i];
      return;
    }
  }
}

mt::Pool2dParams pool_params(const PoolCase& k) {
  return {{k.kernel.h, k.kernel.w},
          {k.stride.h, k.stride.w},
          {k.padding.h, k.padding.w},
          {k.dilation.h, k.dilation.w},
          k.ceil_mode,
          true,
          0};
}

}  // namespace

TEST(CudaPool, MaxPoolValuesIndicesAndGradsMatchCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(4);
  for (DType dt : mt::testing::floating_dtypes()) {
    for (const PoolCase& k : pool_cases()) {
      const std::string what = pool_label(k, dt);
      // Whole numbers in [-3, 3]: many ties, so the first-maximum rule is exercised; one NaN.
      Tensor x = mt::randint(-3, 4, {k.n, k.c, k.h, k.w}, mt::kInt64).to(dt);
      x.select(0, 0).select(0, 0).select(0, 1).select(0, 2).fill_(std::nan(""));
      Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
      const Tensor yc = mt::max_pool2d(xc, k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
      const Tensor yg = mt::max_pool2d(xg, k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
      expect_identical(yg, yc, what + " forward");
      // Indices through the kernel tables (the op keeps them for backward only).
      const mt::Pool2dParams p = pool_params(k);
      const Tensor out_c = mt::empty(yc.shape(), dt), idx_c = mt::empty(yc.shape(), mt::kInt64);
      const Tensor out_g = mt::empty(yc.shape(), mt::TensorOptions(kGpu).dtype(dt));
      const Tensor idx_g = mt::empty(yc.shape(), mt::TensorOptions(kGpu).dtype(mt::kInt64));
      mt::max_pool2d_forward_kernel(Device::cpu())(out_c, idx_c, x, p);
      mt::max_pool2d_forward_kernel(kGpu)(out_g, idx_g, x.to(kGpu), p);
      expect_identical(idx_g, idx_c, what + " indices");
      const Tensor g = mt::testing::random_tensor(yc.shape(), dt, false);
      (yc * g).sum().backward();
      (yg * g.to(kGpu)).sum().backward();
      expect_identical(xg.grad(), xc.grad(), what + " grad");
    }
  }
}

TEST(CudaPool, AvgPoolMatchesCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(5);
  for (DType dt : mt::testing::floating_dtypes()) {
    for (const PoolCase& k : pool_cases()) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool include_pad = variant != 1;
        const std::optional<int64_t> divisor =
            variant == 2 ? std::optional<int64_t>(5) : std::nullopt;
        const std::string what =
            pool_label(k, dt) + (include_pad ? " include_pad" : "") + (divisor ? " divisor 5" : "");
        // avg_pool2d has no dilation.
        const Tensor x = mt::testing::random_tensor({k.n, k.c, k.h, k.w}, dt, true);
        Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
        const Tensor yc =
            mt::avg_pool2d(xc, k.kernel, k.stride, k.padding, k.ceil_mode, include_pad, divisor);
        const Tensor yg =
            mt::avg_pool2d(xg, k.kernel, k.stride, k.padding, k.ceil_mode, include_pad, divisor);
        // Same summation order and one division on both devices.
        mt::testing::expect_close(yg, yc, 1e-12, 1e-12, what + " forward");
        const Tensor g = mt::testing::random_tensor(yc.shape(), dt, false);
        (yc * g).sum().backward();
        (yg * g.to(kGpu)).sum().backward();
        mt::testing::expect_close(xg.grad(), xc.grad(), 1e-12, 1e-12, what + " grad");
      }
    }
  }
}
