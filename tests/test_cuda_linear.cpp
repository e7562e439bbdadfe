// The CUDA fused linear kernels (kernels/cuda/cublaslt_linear.cpp) against the CPU's composition
// (kernels/linear_composite.h): every epilogue (BIAS, RELU_BIAS, RELU_AUX_BIAS, GELU_AUX_BIAS,
// BGRADB, DRELU_BGRAD, DGELU_BGRAD) and every fallback (float64, strided operands, a broadcast
// bias, an aux leading dimension that is not a multiple of 8), forward and backward, with TF32
// honoured for float32. Every test skips without a GPU.
#include <string>
#include <vector>

#include "engine/kernel_tables.h"
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

}  // namespace

TEST(CudaLinear, ForwardAndBackwardMatchCpuEveryDtypeActivationAndLayout) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  for (DType dt : mt::testing::floating_dtypes()) {
    for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
      for (const Layout& l : kLayouts) {
        const std::string what =
            std::string(mt::dtype_name(dt)) + " " + act_name(act) + " " + l.name;
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
        expect_close(yg, yc, tol.rtol, tol.atol, what + " forward");
        const Tensor gy = mt::testing::random_tensor(yc.shape(), dt, false);
        mt::sum(yc * gy).backward();
        mt::sum(yg * gy.to(kGpu)).backward();
        expect_close(xg.grad(), xc.grad(), tol.rtol * 4, tol.atol * 4, what + " grad x");
        expect_close(wg.grad(), wc.grad(), tol.rtol * 4, tol.atol * 4, what + " grad w");
        expect_close(bg.grad(), bc.grad(), tol.rtol * 4, tol.atol * 8, what + " grad b");
      }
    }
  }
}

TEST(CudaLinear, TwoLayerBlockUsesTheMaskAndMatchesCpu) {
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
        expect_close(yg, yc, tol.rtol * 4, tol.atol * 4, what + " forward");
        const Tensor gy = mt::testing::random_tensor(yc.shape(), dt, false);
        mt::sum(yc * gy).backward();
        mt::sum(yg * gy.to(kGpu)).backward();
        for (size_t i = 0; i < c.size(); ++i)
          expect_close(g[i].grad(), c[i].grad(), tol.rtol * 8, tol.atol * 8,
                       what + " grad " + std::to_string(i));
      }
    }
  }
}

TEST(CudaLinear, ReluMaskKernelRoundTrip) {
  MT_REQUIRE_GPU();
  // linear_forward with want_aux returns cuBLASLt's bit mask on CUDA (uint8, rows of
  // ceil(N / 128) * 16 bytes), which linear_backward_act turns into the same gradient as the
  // CPU's composition reading h.
  const int64_t M = 5, K = 16, N = 40, N2 = 8;
  const Tensor x = mt::testing::random_tensor({M, K}, mt::kFloat32, false);
  const Tensor w = mt::testing::random_tensor({N, K}, mt::kFloat32, false);
  const Tensor b = mt::testing::random_tensor({N}, mt::kFloat32, false);
  const Tensor hc = mt::empty({M, N}), hg = mt::empty({M, N}, mt::TensorOptions(kGpu));
  mt::linear_forward_kernel(mt::kCPU)(hc, x, w, b, Act::Relu, true);
  const Tensor mask =
      mt::linear_forward_kernel(mt::kCUDA)(hg, x.to(kGpu), w.to(kGpu), b.to(kGpu), Act::Relu, true);
  expect_close(hg, hc, 1e-5, 1e-5, "relu forward");
  ASSERT_TRUE(mask.defined());
  EXPECT_EQ(mask.dtype(), mt::kUInt8);
  EXPECT_EQ(mask.shape(), (Shape{M, 16}));
  const Tensor g = mt::testing::random_tensor({M, N2}, mt::kFloat32, false);
  const Tensor w2 = mt::testing::random_tensor({N2, N}, mt::kFloat32, false);
  const Tensor gz_c = mt::empty({M, N}), db_c = mt::empty({N});
  const Tensor gz_g = mt::empty({M, N}, mt::TensorOptions(kGpu)),
               db_g = mt::empty({N}, mt::TensorOptions(kGpu));
  mt::linear_backward_act_kernel(mt::kCPU)(gz_c, db_c, g, w2, hc, Tensor(), Act::Relu);
  mt::linear_backward_act_kernel(mt::kCUDA)(gz_g, db_g, g.to(kGpu), w2.to(kGpu), hg, mask,
                                            Act::Relu);
  expect_close(gz_g, gz_c, 1e-5, 1e-5, "drelu");
  expect_close(db_g, db_c, 1e-5, 1e-4, "drelu bgrad");
}

TEST(CudaLinear, Float32HonoursTheMatmulPrecision) {
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

TEST(CudaLinear, GradcheckFloat64OnCuda) {
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
