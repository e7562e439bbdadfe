// linear_cross_entropy on CUDA (kernels/cuda/cross_entropy_kernels.cu, gemm_opmath in
// kernels/cuda/matmul_kernels.cu) against the CPU: every reduction, smoothing, an ignored and an
// out-of-range target (NaN there, where the CPU throws), several chunkings, float32, float64 and
// the half types, and under bfloat16 autocast. Every test skips without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "engine/kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mantissa::nn::functional;
using mt::DType;
using mt::Reduction;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::kGpu;

namespace {

struct Grads {
  Tensor loss, gx, gw, gb;
};

Grads run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& t, Reduction r,
          double ls, int64_t chunk, mt::Device device) {
  const Tensor x = x0.to(device).detach().requires_grad_();
  const Tensor w = w0.to(device).detach().requires_grad_();
  const Tensor b = b0.to(device).detach().requires_grad_();
  Grads g;
  g.loss = F::linear_cross_entropy(x, w, t.to(device), b, r, ls, -100, chunk);
  if (g.loss.dim() == 0) {
    g.loss.backward();
  } else {
    g.loss.backward(mt::ones_like(g.loss));
  }
  g.gx = x.grad().cpu();
  g.gw = w.grad().cpu();
  g.gb = b.grad().cpu();
  g.loss = g.loss.cpu();
  return g;
}

}  // namespace

TEST(CudaLinearCrossEntropy, MatchesTheCpuPerDtypeReductionAndChunking) {
  MT_REQUIRE_GPU();
  mt::manual_seed(17);
  const Tensor x = mt::randn({45, 24});
  const Tensor w = mt::randn({130, 24}) * 0.3;
  const Tensor b = mt::randn({130}) * 0.1;
  std::vector<int64_t> tv = mt::randint(0, 130, {45}, mt::kInt64).to_vector<int64_t>();
  tv[3] = -100;
  const Tensor t = mt::from_vector(tv, Shape{45});
  for (DType dt : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16}) {
    const double tol = dt == mt::kFloat64 ? 1e-12 : dt == mt::kFloat32 ? 1e-5 : 2e-2;
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      for (int64_t chunk : {0, 16}) {
        const std::string what = std::string(mt::dtype_name(dt)) + " reduction " +
                                 std::to_string(static_cast<int>(r)) + " chunk " +
                                 std::to_string(chunk);
        const Grads cpu = run(x.to(dt), w.to(dt), b.to(dt), t, r, 0.1, chunk, mt::kCPU);
        const Grads gpu = run(x.to(dt), w.to(dt), b.to(dt), t, r, 0.1, chunk, kGpu);
        expect_close(gpu.loss, cpu.loss, tol, tol, what + " loss");
        expect_close(gpu.gx, cpu.gx, tol, tol, what + " x.grad");
        expect_close(gpu.gw, cpu.gw, tol, tol, what + " w.grad");
        expect_close(gpu.gb, cpu.gb, tol, tol, what + " b.grad");
      }
    }
  }
}

TEST(CudaLinearCrossEntropy, AutocastMatchesTheCpuUnderBFloat16) {
  MT_REQUIRE_GPU();
  mt::manual_seed(19);
  const Tensor x = mt::randn({64, 32});
  const Tensor w = mt::randn({97, 32}) * 0.5;
  const Tensor b = mt::zeros({97});
  const Tensor t = mt::randint(0, 97, {64}, mt::kInt64);
  Grads cpu, gpu;
  {
    mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
    cpu = run(x, w, b, t, Reduction::Mean, 0.0, 16, mt::kCPU);
  }
  {
    mt::amp::autocast guard(kGpu, mt::amp::Precision::BFloat16);
    gpu = run(x, w, b, t, Reduction::Mean, 0.0, 16, kGpu);
  }
  EXPECT_EQ(gpu.loss.dtype(), mt::kFloat32);
  expect_close(gpu.loss, cpu.loss, 1e-4, 1e-4, "loss");
  expect_close(gpu.gx, cpu.gx, 2e-2, 1e-4, "x.grad");
  expect_close(gpu.gw, cpu.gw, 2e-2, 1e-4, "w.grad");
}

// A device cannot throw for a bad target: its row's loss is NaN, so the mean is, and the
// gradients carry it to the GradScaler's inf check.
TEST(CudaLinearCrossEntropy, OutOfRangeTargetIsNaN) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::randn({4, 3}).to(kGpu).requires_grad_();
  const Tensor w = mt::randn({5, 3}).to(kGpu).requires_grad_();
  const Tensor t = mt::from_vector(std::vector<int64_t>{0, 7, 1, 2}, Shape{4}).to(kGpu);
  const Tensor loss = F::linear_cross_entropy(x, w, t);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  loss.backward();
  EXPECT_TRUE(std::isnan(w.grad().cpu().sum().item<double>()));
}

// The opmath GEMM alone: float32 C from half operands, accumulated over two calls.
TEST(CudaLinearCrossEntropy, GemmOpmathAccumulatesInFloat32) {
  MT_REQUIRE_GPU();
  mt::manual_seed(23);
  for (DType dt : {mt::kBFloat16, mt::kFloat16, mt::kFloat32}) {
    const Tensor a = mt::randn({33, 40}).to(dt), b = mt::randn({40, 17}).to(dt);
    const Tensor want = mt::matmul(a.to(mt::kFloat64), b.to(mt::kFloat64)) * 2.0;
    const Tensor c = mt::empty({33, 17}, mt::TensorOptions(kGpu).dtype(mt::kFloat32));
    const Tensor ag = a.to(kGpu), bg = b.to(kGpu);
    mt::gemm_opmath_kernel(kGpu)(c, ag, bg, false);
    mt::gemm_opmath_kernel(kGpu)(c, ag.t().contiguous().t(), bg, true);
    expect_close(c.cpu(), want, 1e-5, 1e-4, std::string(mt::dtype_name(dt)));
  }
}
