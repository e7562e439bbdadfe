// Layer norm on its kernels (layer_norm_forward / layer_norm_backward): the CPU kernel against
// the composite it replaced (mean, centre, variance, rsqrt: recorded elementwise ops, so its
// gradients come from autograd), gradcheck in float64, the saved statistics' dtype, half types
// computed in float, autocast running it in float32, and the CUDA kernel against the CPU.
#include <cmath>
#include <string>

#include "engine/kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::random_tensor;

namespace {

// The composite layer_norm was before it had kernels (kept here as the reference).
Tensor composite_layer_norm(const Tensor& x, const Shape& normalized, const Tensor& w,
                            const Tensor& b, double eps) {
  Shape dims;
  for (int64_t i = x.dim() - static_cast<int64_t>(normalized.size()); i < x.dim(); ++i)
    dims.push_back(i);
  const Tensor mu = mt::mean(x, dims, true);
  const Tensor centered = x - mu;
  Tensor y = centered * mt::rsqrt(mt::mean(centered * centered, dims, true) + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

struct Case {
  Shape shape;
  Shape normalized;
  bool affine;
  bool strided;
};

const Case kCases[] = {{{4, 7}, {7}, true, false},           {{3, 5, 6}, {5, 6}, true, true},
                       {{2, 3, 33}, {33}, false, true},      {{1, 1024}, {1024}, true, false},
                       {{5, 3, 2, 4}, {2, 4}, false, false}, {{6, 1}, {1}, true, false}};

}  // namespace

TEST(LayerNormKernel, MatchesCompositeValuesAndGradients) {
  for (const Case& c : kCases) {
    for (DType dt : {mt::kFloat64, mt::kFloat32}) {
      const std::string what = std::string(mt::dtype_name(dt)) + " " + mt::detail::str_cat(c.shape);
      const Tensor x0 = random_tensor(c.shape, dt, c.strided) * 3.0 + 1.5;
      Tensor w0, b0;
      if (c.affine) {
        w0 = random_tensor(c.normalized, dt, false);
        b0 = random_tensor(c.normalized, dt, false);
      }
      auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().requires_grad_() : t; };
      Tensor x1 = leaf(x0), w1 = leaf(w0), b1 = leaf(b0);
      Tensor x2 = leaf(x0), w2 = leaf(w0), b2 = leaf(b0);
      const Tensor y1 = F::layer_norm(x1, c.normalized, w1, b1, 1e-5);
      const Tensor y2 = composite_layer_norm(x2, c.normalized, w2, b2, 1e-5);
      const double rtol = dt == mt::kFloat64 ? 1e-10 : 1e-5,
                   atol = dt == mt::kFloat64 ? 1e-10 : 1e-5;
      expect_close(y1, y2, rtol, atol, what + " forward");
      EXPECT_EQ(y1.dtype(), dt);
      const Tensor gy = random_tensor(y1.shape(), dt, false);
      mt::sum(y1 * gy).backward();
      mt::sum(y2 * gy).backward();
      expect_close(x1.grad(), x2.grad(), rtol * 10, atol * 10, what + " grad x");
      if (c.affine) {
        expect_close(w1.grad(), w2.grad(), rtol * 10, atol * 10, what + " grad w");
        expect_close(b1.grad(), b2.grad(), rtol * 10, atol * 10, what + " grad b");
      }
    }
  }
}

// Rows split across the worker pool and the weight/bias gradients summed in fixed blocks of
// rows: enough rows for both (and a row length with a tail after the 16-lane sums), against the
// composite in float64, and the same bits with one thread as with the pool.
TEST(LayerNormKernel, LargeInputsMatchAndDoNotDependOnTheThreadCount) {
  const int64_t rows = 3000, cols = 100;  // 300 K elements: above the pool's grain
  const Tensor x0 = random_tensor({rows, cols}, mt::kFloat32, false) * 3.0 + 1.5;
  const Tensor w0 = random_tensor({cols}, mt::kFloat32, false);
  const Tensor b0 = random_tensor({cols}, mt::kFloat32, false);
  const Tensor gy = random_tensor({rows, cols}, mt::kFloat32, false);
  auto run = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(),
           bl = b.detach().requires_grad_();
    const Tensor y = x.dtype() == mt::kFloat64 ? composite_layer_norm(xl, {cols}, wl, bl, 1e-5)
                                               : F::layer_norm(xl, {cols}, wl, bl, 1e-5);
    mt::sum(y * gy.narrow(0, 0, x.size(0)).to(x.dtype())).backward();
    return std::vector<Tensor>{y.detach(), xl.grad(), wl.grad(), bl.grad()};
  };
  const auto got = run(x0, w0, b0);
  const auto want = run(x0.to(mt::kFloat64), w0.to(mt::kFloat64), b0.to(mt::kFloat64));
  const char* names[] = {"forward", "grad x", "grad w", "grad b"};
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i].to(mt::kFloat64), want[i], 1e-5, i < 2 ? 1e-5 : 1e-3, names[i]);
  // A row's result does not depend on how the rows were split: 10 rows alone (one thread,
  // below the pool's grain) give the bits they got in the large call.
  const auto few = run(x0.narrow(0, 1234, 10).contiguous(), w0, b0);
  EXPECT_TRUE(mt::equal(few[0], got[0].narrow(0, 1234, 10))) << "forward";
}

TEST(LayerNormKernel, Gradcheck) {
  for (const Case& c : kCases) {
    if (c.shape.numel() > 200) continue;  // finite differences are slow
    const Tensor x = random_tensor(c.shape, mt::kFloat64, c.strided).requires_grad_();
    if (c.affine) {
      const Tensor w = random_tensor(c.normalized, mt::kFloat64, false).requires_grad_();
      const Tensor b = random_tensor(c.normalized, mt::kFloat64, false).requires_grad_();
      EXPECT_TRUE(mt::autograd::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return F::layer_norm(in[0], c.normalized, in[1], in[2], 1e-5);
          },
          {x, w, b}))
          << mt::detail::str_cat(c.shape);
    } else {
      EXPECT_TRUE(mt::autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return F::layer_norm(in[0], c.normalized); }, {x}))
          << mt::detail::str_cat(c.shape);
    }
  }
}

// mantissa::layer_norm is one node on the leaves, and nn::functional::layer_norm is it.
TEST(LayerNormKernel, OneNodeAndTheFunctionalFormIsTheOp) {
  const Tensor x0 = random_tensor({3, 5, 6}, mt::kFloat32, true);
  const Tensor w = random_tensor({5, 6}, mt::kFloat32, false).requires_grad_();
  const Tensor b = random_tensor({5, 6}, mt::kFloat32, false).requires_grad_();
  const Tensor x = x0.detach().requires_grad_(), xf = x0.detach().requires_grad_();
  const Tensor y = mt::layer_norm(x, {5, 6}, w, b);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "NativeLayerNormBackward0");
  ASSERT_EQ(y.grad_fn()->next_edges.size(), 3u);
  for (const auto& edge : y.grad_fn()->next_edges) EXPECT_EQ(edge.fn->name(), "AccumulateGrad");
  const Tensor yf = F::layer_norm(xf, {5, 6}, w, b);
  EXPECT_TRUE(mt::equal(y, yf));
  const Tensor g = mt::randn(y.shape());
  (y * g).sum().backward();
  const Tensor gw = w.grad().clone(), gb = b.grad().clone();
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  (yf * g).sum().backward();
  EXPECT_TRUE(mt::equal(x.grad(), xf.grad()));
  EXPECT_TRUE(mt::equal(gw, w.grad()));
  EXPECT_TRUE(mt::equal(gb, b.grad()));
}

TEST(LayerNormKernel, SavesStatisticsInOpmath) {
  for (DType dt : mt::testing::floating_dtypes()) {
    const Tensor x = random_tensor({3, 10}, dt, false);
    const Tensor out = mt::empty({3, 10}, dt);
    const DType stat = dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32;
    const Tensor mean = mt::empty({3}, stat), rstd = mt::empty({3}, stat);
    mt::layer_norm_forward_kernel(mt::kCPU)(out, mean, rstd, x, Tensor(), Tensor(), 1e-5);
    const Tensor x64 = x.to(mt::kFloat64);
    expect_close(mean, mt::mean(x64, {1}), 1e-6, 1e-6, "mean");
    expect_close(rstd, mt::rsqrt(mt::var(x64, {1}, 0) + 1e-5), 1e-5, 1e-5, "rstd");
  }
}

TEST(LayerNormKernel, HalfTypesComputeInFloat) {
  for (DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const Tensor x = random_tensor({4, 64}, dt, true) + 8.0;  // |mean| >> std
    const Tensor w = random_tensor({64}, dt, false), b = random_tensor({64}, dt, false);
    const Tensor y = F::layer_norm(x, {64}, w, b);
    EXPECT_EQ(y.dtype(), dt);
    // The float32 result of the same (rounded) inputs, rounded once.
    const Tensor ref =
        F::layer_norm(x.to(mt::kFloat32), {64}, w.to(mt::kFloat32), b.to(mt::kFloat32)).to(dt);
    const auto tol = mt::testing::tolerance_for(dt);
    expect_close(y, ref, tol.rtol, tol.atol, std::string(mt::dtype_name(dt)));
  }
}

TEST(LayerNormKernel, RunsInFloat32UnderAutocast) {
  const Tensor x = random_tensor({2, 8}, mt::kFloat16, false);
  mt::amp::autocast scope(mt::Device::cpu(), mt::kFloat16);
  const Tensor y = F::layer_norm(x, {8});
  EXPECT_EQ(y.dtype(), mt::kFloat32);
}

TEST(LayerNormKernel, Errors) {
  mt::testing::expect_error(
      [] {
        F::layer_norm(mt::zeros({2, 4}, mt::kInt64), {4});
      },
      {"layer_norm", "floating"});
  mt::testing::expect_error(
      [] {
        F::layer_norm(mt::zeros({2, 4}), {4}, mt::ones({4}, mt::kFloat64));
      },
      {"layer_norm", "dtype"});
}

TEST(LayerNormKernel, CudaMatchesCpu) {
  MT_REQUIRE_GPU();
  const mt::Device gpu = mt::testing::kGpu;
  for (const Case& c : kCases) {
    for (DType dt : mt::testing::floating_dtypes()) {
      const std::string what = std::string(mt::dtype_name(dt)) + " " + mt::detail::str_cat(c.shape);
      const Tensor x0 = random_tensor(c.shape, dt, c.strided) * 3.0 + 1.5;
      const Tensor w0 = c.affine ? random_tensor(c.normalized, dt, false) : Tensor();
      const Tensor b0 = c.affine ? random_tensor(c.normalized, dt, false) : Tensor();
      auto leaf = [](const Tensor& t, mt::Device d) {
        return t.defined() ? t.to(d).detach().requires_grad_() : t;
      };
      Tensor xc = leaf(x0, mt::Device::cpu()), wc = leaf(w0, mt::Device::cpu()),
             bc = leaf(b0, mt::Device::cpu());
      Tensor xg = leaf(x0, gpu), wg = leaf(w0, gpu), bg = leaf(b0, gpu);
      const Tensor yc = F::layer_norm(xc, c.normalized, wc, bc);
      const Tensor yg = F::layer_norm(xg, c.normalized, wg, bg);
      ASSERT_TRUE(yg.is_cuda());
      const bool half = mt::is_reduced_float(dt);
      const double rtol = dt == mt::kFloat64 ? 1e-10 : dt == mt::kFloat32 ? 1e-5 : 2e-2;
      const double atol = dt == mt::kFloat64 ? 1e-10 : dt == mt::kFloat32 ? 1e-5 : half ? 2e-2 : 0;
      expect_close(yg, yc, rtol, atol, what + " forward");
      const Tensor gy = random_tensor(yc.shape(), dt, false);
      mt::sum(yc * gy).backward();
      mt::sum(yg * gy.to(gpu)).backward();
      expect_close(xg.grad(), xc.grad(), rtol * 10, atol * 10, what + " grad x");
      if (c.affine) {
        // Column sums over all rows: the error grows with the row count.
        expect_close(wg.grad(), wc.grad(), rtol * 10, atol * 20, what + " grad w");
        expect_close(bg.grad(), bc.grad(), rtol * 10, atol * 20, what + " grad b");
      }
    }
  }
}

TEST(LayerNormKernel, CudaGradcheckFloat64) {
  MT_REQUIRE_GPU();
  const mt::Device gpu = mt::testing::kGpu;
  const Tensor x = random_tensor({3, 4, 5}, mt::kFloat64, true, -2, 2, gpu).requires_grad_();
  const Tensor w = random_tensor({4, 5}, mt::kFloat64, false, -2, 2, gpu).requires_grad_();
  const Tensor b = random_tensor({4, 5}, mt::kFloat64, false, -2, 2, gpu).requires_grad_();
  EXPECT_TRUE(mt::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::layer_norm(in[0], {4, 5}, in[1], in[2]);
      },
      {x, w, b}));
}
