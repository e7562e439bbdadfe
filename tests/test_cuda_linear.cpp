// The CUDA fused linear kernels (kernels/cuda/cublaslt_linear.cpp) against the CPU's composition
// (kernels/linear_composite.h): every epilogue (BIAS, GELU_BIAS, GELU_AUX_BIAS, BGRADB,
// DGELU_BGRAD, and the ReLU route: BIAS/DEFAULT GEMM + relu kernels) and every fallback
// (float64, strided operands, a broadcast bias, an aux leading dimension that is not a multiple
// of 8), forward and backward, with TF32 honoured for float32; NaN and infinities through every
// path; the float32 GELU epilogue against tanh-GELU in float64. Every test runs in strict mode
// (a cuBLASLt refusal throws) and checks through the stats (engine/fast_path_stats.h) that the
// epilogues it is about ran. Every test skips without a GPU.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/kernel_tables.h"
#include "linear_special_values.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using Act = mt::LinearActivation;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::kGpu;

namespace {

const char* act_name(Act a) { return a == Act::None ? "none" : a == Act::Relu ? "relu" : "gelu"; }

// GEMM tolerances for K-long dot products of values in [-2, 2] (see test_cuda_ops.cpp).
mt::testing::Tolerance gemm_tol(DType dt) {
  switch (dt) {
    case mt::kFloat32:
      return {1e-5, 1e-4};
    case mt::kFloat64:
      return {1e-12, 1e-11};
    case mt::kFloat16:
      return {4e-3, 2e-2};
    default:
      return {3e-2, 1e-1};
  }
}

struct PrecisionGuard {
  mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  ~PrecisionGuard() { mt::set_float32_matmul_precision(saved); }
};

constexpr const char* kPath = "cuda.linear";
const DType kLtDtypes[] = {mt::kFloat32, mt::kFloat16, mt::kBFloat16};

// Fresh stats for every test. Every test checks its results against the CPU; then, where cuBLASLt
// declined an epilogue for a case (the composed path ran), declined() reports the library's
// message as "[ LIBRARY  ]" (vendor-library behaviour, apart from a GPU run's verdict) and the
// test skips its checks of which epilogue ran; otherwise it checks them, so a test cannot pass on
// the composed path while it means to test an epilogue unless cuBLASLt said why.
class CudaLinear : public ::testing::Test {
 protected:
  void SetUp() override { mt::reset_fast_path_stats(); }
  static bool declined() { return mt::testing::report_library_refusals(kPath) > 0; }
};

// `epilogue`: cuBLASLt's name without the prefix ("GELU_AUX_BIAS"), or "relu_forward" /
// "relu_backward" for the ReLU route (the GEMM, then the relu kernels).
void expect_ran(const mt::FastPathStats& s, const char* epilogue, DType dt) {
  EXPECT_GT(s.ran(kPath, epilogue, dt), 0)
      << epilogue << " never ran in " << mt::dtype_name(dt) << "\n"
      << s.to_string();
}

// What the GELU epilogue may add to a float32 output y = gelu_tanh(z) beyond the GEMM's error:
// cuBLASLt does not state its GELU's accuracy, and a hardware tanh (tanh.approx.f32, relative
// error about 2^-11 per PTX) would be off by up to |z|/2 * 2^-10 (the argument is in
// Float32GeluEpilogueIsTanhGeluWithinItsErrorBound). `zmax` bounds |z|; nothing for half types,
// whose tolerances are far larger, or without GELU.
double gelu_allowance(DType dt, Act act, double zmax) {
  return dt == mt::kFloat32 && act == Act::GeluTanh ? 0.5 * zmax * std::ldexp(1.0, -10) : 0.0;
}
double max_abs(const Tensor& t) { return mt::amax(mt::abs(t.detach().cpu())).item<double>(); }

struct Layout {
  std::string name;
  int64_t out;          // N: 16 keeps the GELU aux on cuBLASLt, 13 forces the fallback
  bool strided;         // x and w as transposed views: fallback
  bool broadcast_bias;  // a [1] bias: fallback
};
const Layout kLayouts[] = {{"epilogue", 16, false, false},
                           {"odd N", 13, false, false},
                           {"strided", 16, true, false},
                           {"broadcast bias", 16, false, true}};

// linear(x, w1, b1, act) and linear_act_linear(x, w1, b1, act, w2, b2) of a special-values
// case on device `d` in `dt`, with their backward: the outputs and every gradient, in the order
// of kSpecialNames (undefined for an absent bias).
const char* const kSpecialNames[] = {"y",
                                     "grad x",
                                     "grad w",
                                     "grad b",
                                     "block y",
                                     "block grad x",
                                     "block grad w1",
                                     "block grad b1",
                                     "block grad w2",
                                     "block grad b2"};
std::vector<Tensor> special_results(const mt::testing::SpecialLinearCase& c, DType dt, Act act,
                                    bool with_bias, mt::Device d) {
  auto leaf = [&](const Tensor& t) { return t.to(d, dt).detach().requires_grad_(); };
  std::vector<Tensor> r;
  {
    const Tensor x = leaf(c.x), w = leaf(c.w1), b = with_bias ? leaf(c.b1) : Tensor();
    const Tensor y = F::linear(x, w, b, act);
    y.backward(c.gy1.to(d, dt));
    r = {y, x.grad(), w.grad(), with_bias ? b.grad() : Tensor()};
  }
  const Tensor x = leaf(c.x), w1 = leaf(c.w1), w2 = leaf(c.w2);
  const Tensor b1 = with_bias ? leaf(c.b1) : Tensor(), b2 = with_bias ? leaf(c.b2) : Tensor();
  const Tensor y = F::linear_act_linear(x, w1, b1, act, w2, b2);
  y.backward(c.gy2.to(d, dt));
  for (const Tensor& t : {y, x.grad(), w1.grad(), with_bias ? b1.grad() : Tensor(), w2.grad(),
                          with_bias ? b2.grad() : Tensor()})
    r.push_back(t);
  return r;
}

// CUDA against the CPU for one case: NaN and each infinity at the same places (expect_close's
// rule), finite values within GEMM tolerances (the CPU rounds half types once more). With GELU
// the finite values get float16's tolerance in every dtype: the epilogue's accuracy is not
// stated (Float32GeluEpilogueIsTanhGeluWithinItsErrorBound), and this test is about where the
// special values land.
void expect_special_match(const mt::testing::SpecialLinearCase& c, DType dt, Act act,
                          bool with_bias, const std::string& what) {
  const std::vector<Tensor> cpu = special_results(c, dt, act, with_bias, mt::Device::cpu());
  const std::vector<Tensor> gpu = special_results(c, dt, act, with_bias, kGpu);
  const auto tol = gemm_tol(act == Act::GeluTanh && dt == mt::kFloat32 ? mt::kFloat16 : dt);
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].defined()) continue;
    ASSERT_TRUE(gpu[i].defined() && gpu[i].is_cuda()) << what << " " << kSpecialNames[i];
    expect_close(gpu[i], cpu[i], tol.rtol * 4, tol.atol * 4, what + " " + kSpecialNames[i]);
  }
}

}  // namespace

// One test per dtype, activation and layout, so that one cuBLASLt refusal (strict mode throws)
// or mismatch is reported as its own case and does not hide the others.
struct LinearCase {
  DType dt;
  Act act;
  size_t layout;  // index into kLayouts
};
std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> out;
  for (DType dt : mt::testing::floating_dtypes())
    for (Act act : {Act::None, Act::Relu, Act::GeluTanh})
      for (size_t l = 0; l < std::size(kLayouts); ++l) out.push_back({dt, act, l});
  return out;
}
std::string linear_case_name(const ::testing::TestParamInfo<LinearCase>& info) {
  std::string name = std::string(mt::dtype_name(info.param.dt)) + "_" + act_name(info.param.act) +
                     "_" + kLayouts[info.param.layout].name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

class CudaLinearCase : public CudaLinear, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(CudaLinearCase, ForwardAndBackwardMatchCpu) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const DType dt = GetParam().dt;
  const Act act = GetParam().act;
  const Layout& l = kLayouts[GetParam().layout];
  const std::string what = std::string(mt::dtype_name(dt)) + " " + act_name(act) + " " + l.name;
  const Tensor x0 = mt::testing::random_tensor({3, 7, 24}, dt, l.strided);
  const Tensor w0 = mt::testing::random_tensor({l.out, 24}, dt, l.strided);
  const Tensor b0 = mt::testing::random_tensor({l.broadcast_bias ? 1 : l.out}, dt, false);
  auto leaf = [](const Tensor& t, mt::Device d) {
    // The same layout on both devices: copy the strided view's base, then re-view it.
    return t.to(d).detach().requires_grad_();
  };
  Tensor xc = leaf(x0, mt::Device::cpu()), wc = leaf(w0, mt::Device::cpu()),
         bc = leaf(b0, mt::Device::cpu());
  Tensor xg = leaf(x0, kGpu), wg = leaf(w0, kGpu), bg = leaf(b0, kGpu);
  if (l.strided) {  // to() made them contiguous; give the GPU operands strided layouts too
    xg = xg.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_();
    wg = wg.detach().t().contiguous().t().requires_grad_();
    EXPECT_FALSE(wg.is_contiguous()) << what;
  }
  const Tensor yc = F::linear(xc, wc, bc, act), yg = F::linear(xg, wg, bg, act);
  ASSERT_TRUE(yg.is_cuda()) << what;
  const auto tol = gemm_tol(dt);
  const double gelu_atol = gelu_allowance(dt, act, max_abs(F::linear(xc, wc, bc)));
  expect_close(yg, yc, tol.rtol, tol.atol + gelu_atol, what + " forward");
  const Tensor gy = mt::testing::random_tensor(yc.shape(), dt, false);
  mt::sum(yc * gy).backward();
  mt::sum(yg * gy.to(kGpu)).backward();
  expect_close(xg.grad(), xc.grad(), tol.rtol * 4, tol.atol * 4, what + " grad x");
  expect_close(wg.grad(), wc.grad(), tol.rtol * 4, tol.atol * 4, what + " grad w");
  expect_close(bg.grad(), bc.grad(), tol.rtol * 4, tol.atol * 8, what + " grad b");

  // The route this case is about, unless cuBLASLt declined it.
  if (declined()) return;
  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.fell_back(kPath, "NoAlgorithm"), 0) << what;
  if (dt == mt::kFloat64) {
    EXPECT_GT(s.fell_back(kPath, "UnsupportedDtype"), 0) << what;
  } else if (l.strided) {
    EXPECT_GT(s.fell_back(kPath, "NonUnitStride"), 0) << what;
  } else if (l.broadcast_bias) {
    EXPECT_GT(s.fell_back(kPath, "NonPackedBias"), 0) << what;
  } else if (act == Act::GeluTanh && l.out % 8 != 0) {
    EXPECT_GT(s.fell_back(kPath, "AuxLayout"), 0) << what;
  } else if (act == Act::GeluTanh) {
    expect_ran(s, "GELU_AUX_BIAS", dt);  // GELU with a backward to feed
  } else {
    expect_ran(s, "BIAS", dt);  // act None, and ReLU's GEMM
    if (act == Act::Relu) {
      EXPECT_GT(s.ran(kPath, "relu_forward", dt), 0) << what;
    }
    if (act == Act::None && l.out % 8 == 0) expect_ran(s, "BGRADB", dt);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeActivationAndLayout, CudaLinearCase,
                         ::testing::ValuesIn(linear_cases()), linear_case_name);

TEST_F(CudaLinear, TwoLayerBlockMatchesCpu) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  for (DType dt : mt::testing::floating_dtypes()) {
    for (Act act : {Act::Relu, Act::GeluTanh}) {
      for (int64_t hidden :
           {32, 20}) {  // 20: the GELU aux leading dimension is not a multiple of 8
        const std::string what = std::string(mt::dtype_name(dt)) + " " + act_name(act) +
                                 " hidden " + std::to_string(hidden);
        std::vector<Tensor> vals{mt::testing::random_tensor({9, 16}, dt, false),
                                 mt::testing::random_tensor({hidden, 16}, dt, false),
                                 mt::testing::random_tensor({hidden}, dt, false),
                                 mt::testing::random_tensor({8, hidden}, dt, false),
                                 mt::testing::random_tensor({8}, dt, false)};
        std::vector<Tensor> c, g;
        for (const Tensor& v : vals) {
          c.push_back(v.detach().requires_grad_());
          g.push_back(v.to(kGpu).detach().requires_grad_());
        }
        const Tensor yc = F::linear_act_linear(c[0], c[1], c[2], act, c[3], c[4]);
        const Tensor yg = F::linear_act_linear(g[0], g[1], g[2], act, g[3], g[4]);
        const auto tol = gemm_tol(dt);
        // The hidden layer's GELU error reaches the output through w2: sum_j |z_j| |w2_ij|.
        const double gelu_atol = gelu_allowance(
            dt, act, max_abs(F::linear(mt::abs(F::linear(c[0], c[1], c[2])), mt::abs(c[3]))));
        expect_close(yg, yc, tol.rtol * 4, tol.atol * 4 + gelu_atol, what + " forward");
        const Tensor gy = mt::testing::random_tensor(yc.shape(), dt, false);
        mt::sum(yc * gy).backward();
        mt::sum(yg * gy.to(kGpu)).backward();
        for (size_t i = 0; i < c.size(); ++i)
          expect_close(g[i].grad(), c[i].grad(), tol.rtol * 8, tol.atol * 8,
                       what + " grad " + std::to_string(i));
      }
    }
  }
  if (declined()) return;
  const mt::FastPathStats s = mt::fast_path_stats();
  for (DType dt : kLtDtypes) {
    expect_ran(s, "GELU_AUX_BIAS", dt);
    expect_ran(s, "DGELU_BGRAD", dt);  // act' and b1's gradient in the dx GEMM
    expect_ran(s, "DEFAULT", dt);      // ReLU's backward GEMM
    EXPECT_GT(s.ran(kPath, "relu_forward", dt), 0) << mt::dtype_name(dt);
    EXPECT_GT(s.ran(kPath, "relu_backward", dt), 0) << mt::dtype_name(dt);
  }
  EXPECT_GT(s.fell_back(kPath, "AuxLayout"), 0);  // hidden 20
  EXPECT_EQ(s.fell_back(kPath, "NoAlgorithm"), 0);
}

TEST_F(CudaLinear, ReluIsTheBiasGemmThenTheReluKernels) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  // ReLU never uses cuBLASLt's RELU epilogues (they zero NaN): the forward is the BIAS GEMM and
  // the relu kernel, with no aux on either device, and linear_backward_act is the DEFAULT GEMM,
  // relu_backward reading h and the column sums.
  const int64_t M = 5, K = 16, N = 40, N2 = 8;
  const Tensor x = mt::testing::random_tensor({M, K}, mt::kFloat32, false);
  const Tensor w = mt::testing::random_tensor({N, K}, mt::kFloat32, false);
  const Tensor b = mt::testing::random_tensor({N}, mt::kFloat32, false);
  const Tensor hc = mt::empty({M, N}), hg = mt::empty({M, N}, mt::TensorOptions(kGpu));
  mt::linear_forward_kernel(mt::kCPU)(hc, x, w, b, Act::Relu, true);
  const Tensor aux =
      mt::linear_forward_kernel(mt::kCUDA)(hg, x.to(kGpu), w.to(kGpu), b.to(kGpu), Act::Relu, true);
  EXPECT_FALSE(aux.defined());
  expect_close(hg, hc, 1e-5, 1e-5, "relu forward");
  const Tensor g = mt::testing::random_tensor({M, N2}, mt::kFloat32, false);
  const Tensor w2 = mt::testing::random_tensor({N2, N}, mt::kFloat32, false);
  const Tensor gz_c = mt::empty({M, N}), db_c = mt::empty({N});
  const Tensor gz_g = mt::empty({M, N}, mt::TensorOptions(kGpu)),
               db_g = mt::empty({N}, mt::TensorOptions(kGpu));
  mt::linear_backward_act_kernel(mt::kCPU)(gz_c, db_c, g, w2, hc, Tensor(), Act::Relu);
  mt::linear_backward_act_kernel(mt::kCUDA)(gz_g, db_g, g.to(kGpu), w2.to(kGpu), hg, Tensor(),
                                            Act::Relu);
  expect_close(gz_g, gz_c, 1e-5, 1e-5, "relu backward");
  expect_close(db_g, db_c, 1e-5, 1e-4, "relu backward bias");
  if (declined()) return;
  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.ran(kPath, "BIAS", mt::kFloat32), 1);
  EXPECT_EQ(s.ran(kPath, "DEFAULT", mt::kFloat32), 1);
  EXPECT_EQ(s.ran(kPath, "relu_forward", mt::kFloat32), 1);
  EXPECT_EQ(s.ran(kPath, "relu_backward", mt::kFloat32), 1);
  EXPECT_EQ(s.fell_back(kPath), 0) << s.to_string();
}

TEST_F(CudaLinear, Float32HonoursTheMatmulPrecision) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  const Tensor x = mt::rand({128, 256}, mt::kFloat64) * 2 - 1;
  const Tensor w = mt::rand({64, 256}, mt::kFloat64) * 2 - 1;
  const Tensor b = mt::rand({64}, mt::kFloat64);
  const Tensor exact = mt::linear(x, w, b);
  auto error = [&] {
    const Tensor y = F::linear(x.to(kGpu, mt::kFloat32), w.to(kGpu, mt::kFloat32),
                               b.to(kGpu, mt::kFloat32), Act::None);
    return mt::amax(mt::abs(y.cpu().to(mt::kFloat64) - exact)).item<double>();
  };
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const double full = error();
  mt::set_float32_matmul_precision(mt::MatmulPrecision::High);
  const double tf32 = error();
  EXPECT_LT(full, 1e-4);
  EXPECT_LT(tf32, 0.1);
  EXPECT_GT(tf32, full);  // TF32 really ran
}

TEST_F(CudaLinear, GradcheckFloat64OnCuda) {
  MT_REQUIRE_GPU();
  for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
    Tensor x = mt::testing::random_tensor({3, 5}, mt::kFloat64, true, -2, 2, kGpu);
    x = (x + mt::sign(x) * 0.1).detach().requires_grad_();
    const Tensor w =
        mt::testing::random_tensor({4, 5}, mt::kFloat64, false, -2, 2, kGpu).requires_grad_();
    const Tensor b =
        mt::testing::random_tensor({4}, mt::kFloat64, false, -2, 2, kGpu).requires_grad_();
    EXPECT_TRUE(mt::autograd::gradcheck(
        [act](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2], act); },
        {x, w, b}, 1e-7))
        << act_name(act);
  }
}

// NaN in x (and, for act None and ReLU, +inf in x and -inf/+inf in the bias): the CPU
// propagates them as PyTorch does (test_linear_nan.cpp), so CUDA must put them at the same
// places; in particular relu(NaN) is NaN and the gradient passes through a NaN output. One test
// per dtype, activation, bias and value set.
struct SpecialCase {
  DType dt;
  Act act;
  bool with_bias, with_inf;
};
std::vector<SpecialCase> special_cases() {
  std::vector<SpecialCase> out;
  for (bool with_inf : {false, true})
    for (DType dt : kLtDtypes)
      for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
        if (with_inf && act == Act::GeluTanh) continue;  // CudaLinearLibraryBehaviour
        for (bool with_bias : {false, true}) out.push_back({dt, act, with_bias, with_inf});
      }
  return out;
}
std::string special_case_name(const ::testing::TestParamInfo<SpecialCase>& info) {
  const SpecialCase& c = info.param;
  return std::string(mt::dtype_name(c.dt)) + "_" + act_name(c.act) + (c.with_bias ? "_bias" : "") +
         (c.with_inf ? "_nan_inf" : "_nan");
}

class CudaLinearSpecialValues : public CudaLinear,
                                public ::testing::WithParamInterface<SpecialCase> {};

TEST_P(CudaLinearSpecialValues, MatchCpuOnTheFusedPath) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const SpecialCase& k = GetParam();
  const mt::testing::SpecialLinearCase c = mt::testing::special_linear_case(k.with_inf);
  const std::string what = special_case_name({k, 0});
  expect_special_match(c, k.dt, k.act, k.with_bias, what);
  // The shapes are chosen so that nothing falls back: every value went through cuBLASLt, unless
  // cuBLASLt declined.
  if (declined()) return;
  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.fell_back(kPath), 0) << what << ":\n" << s.to_string();
  if (k.act == Act::Relu) {
    EXPECT_GT(s.ran(kPath, "relu_forward", k.dt), 0) << what;
    EXPECT_GT(s.ran(kPath, "relu_backward", k.dt), 0) << what;
  } else if (k.act == Act::GeluTanh) {
    expect_ran(s, k.with_bias ? "GELU_AUX_BIAS" : "GELU_AUX", k.dt);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeActivationAndBias, CudaLinearSpecialValues,
                         ::testing::ValuesIn(special_cases()), special_case_name);

// Tests whose suite name ends in LibraryBehaviour pin what a vendor library does where its
// documentation is silent. scripts/gpu/run.sh reports them apart from the verdict: a change
// there is news about the library, not a mantissa bug.
class CudaLinearLibraryBehaviour : public CudaLinear {};

// cuBLASLt does not document its GELU at +-inf. PyTorch's formulas, which the CPU follows, give
// gelu(+inf) = +inf, gelu(-inf) = NaN (-inf * 0) and a NaN derivative at both; this test holds
// the GELU_AUX(_BIAS) and DGELU(_BGRAD) epilogues to that.
TEST_F(CudaLinearLibraryBehaviour, GeluEpiloguesAtInfinityMatchPyTorch) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const mt::testing::SpecialLinearCase c = mt::testing::special_linear_case(/*with_inf=*/true);
  for (DType dt : kLtDtypes) {
    for (bool with_bias : {false, true}) {
      expect_special_match(
          c, dt, Act::GeluTanh, with_bias,
          std::string(mt::dtype_name(dt)) + " gelu" + (with_bias ? " bias" : "") + " nan+inf");
    }
    expect_ran(mt::fast_path_stats(), "DGELU_BGRAD", dt);
  }
}

TEST_F(CudaLinear, Float32GeluEpilogueIsTanhGeluWithinItsErrorBound) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  // Full FP32 products: the GEMM bound below does not hold for TF32's 10-bit mantissas.
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const int64_t M = 64, K = 256, N = 64;
  const Tensor x = mt::testing::random_tensor({M, K}, mt::kFloat32, false, -1, 1);
  const Tensor w = mt::testing::random_tensor({N, K}, mt::kFloat32, false, -1, 1);
  const Tensor b = mt::testing::random_tensor({N}, mt::kFloat32, false, -1, 1);
  const Tensor x64 = x.to(mt::kFloat64), w64 = w.to(mt::kFloat64), b64 = b.to(mt::kFloat64);
  // The exact pre-activation (float64 is exact enough: its own error is ~2^-29 of fp32's), its
  // tanh-GELU, and sum_k |x||w| + |b|, the scale of the GEMM's rounding error.
  const std::vector<double> z = mt::linear(x64, w64, b64).to_vector<double>();
  const std::vector<double> ref = mt::gelu(mt::linear(x64, w64, b64), "tanh").to_vector<double>();
  const std::vector<double> mag =
      mt::linear(mt::abs(x64), mt::abs(w64), mt::abs(b64)).to_vector<double>();
  // The bounds, and why:
  //  - GEMM: K fp32 products summed in any order, plus the bias, are within gamma * mag of z,
  //    gamma = n u / (1 - n u) with n = K + 1 and u = 2^-24 (Higham, "Accuracy and Stability of
  //    Numerical Algorithms", 3.1); this is what the aux (the pre-activation) is held to.
  //  - GELU's slope is at most 1.13 (|gelu_tanh'| peaks near 1.129), so the GEMM error reaches y
  //    at most 1.13 times larger.
  //  - The activation: cuBLASLt does not state its GELU's accuracy. The least accurate tanh it
  //    could use is the hardware tanh.approx.f32, whose relative error PTX documents as about
  //    2^-11; with |tanh| <= 1 we allow 2^-10 absolute, which y = z/2 (1 + tanh(.)) scales by
  //    |z|/2. The fp32 polynomial inside tanh adds a few ulps of it, far below that allowance.
  //  - Storing y in fp32: u |y|, allowed twice.
  const double u = std::ldexp(1.0, -24), n = static_cast<double>(K + 1);
  const double gamma = n * u / (1 - n * u);
  const double tanh_err = std::ldexp(1.0, -10);
  for (bool want_aux : {false, true}) {
    const std::string what = want_aux ? "GELU_AUX_BIAS" : "GELU_BIAS";
    const Tensor y = mt::empty({M, N}, mt::TensorOptions(kGpu));
    const Tensor aux = mt::linear_forward_kernel(mt::kCUDA)(y, x.to(kGpu), w.to(kGpu), b.to(kGpu),
                                                            Act::GeluTanh, want_aux);
    ASSERT_EQ(aux.defined(), want_aux) << what;
    const std::vector<double> yv = y.to_vector<double>();
    const std::vector<double> av = want_aux ? aux.to_vector<double>() : std::vector<double>();
    double worst = 0;  // the largest error / bound seen, for the log
    for (size_t i = 0; i < yv.size(); ++i) {
      const double gemm = gamma * mag[i];
      const double bound =
          1.13 * gemm + 0.5 * std::fabs(z[i]) * tanh_err + 2 * u * std::fabs(ref[i]);
      const double err = std::fabs(yv[i] - ref[i]);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << what << " element " << i << ": " << yv[i] << " vs tanh-GELU "
                            << ref[i] << " of " << z[i];
      if (want_aux) {
        // The aux is the GEMM's float32 result: the GEMM bound, plus its rounding on store.
        ASSERT_LE(std::fabs(av[i] - z[i]), gemm + u * std::fabs(z[i])) << what << " aux " << i;
      }
    }
    RecordProperty(what + " max error/bound", std::to_string(worst));
  }
  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.ran(kPath, "GELU_BIAS", mt::kFloat32), 1);
  EXPECT_EQ(s.ran(kPath, "GELU_AUX_BIAS", mt::kFloat32), 1);
}
