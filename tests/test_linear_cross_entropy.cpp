// linear_cross_entropy (autograd/ops/linear_cross_entropy.cpp), the chunked lm_head + loss:
//  - PyTorch 1.13's cross_entropy(linear(x, w, b), t) and its gradients in float64
//    (scripts/golden/make_linear_cross_entropy.py wrote tests/golden/linear_cross_entropy.txt),
//    for every reduction, smoothing, bias, ignored target, and several chunkings;
//  - the unfused ops in float32 and under bfloat16 autocast, where the products must be bf16's;
//  - peak memory against the unfused path; errors; retain_graph; no rows; all targets ignored.
// The float64 gradcheck and CUDA-against-CPU runs come from the op cases (tests/op_cases.cpp).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "engine/cpu_allocator.h"
#include "engine/kernel_tables.h"
#include "golden_file.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mantissa::nn::functional;
using mt::Reduction;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

using Named = std::map<std::string, Tensor>;

const std::map<std::string, Named>& golden() {
  static const std::map<std::string, Named> cases = [] {
    mt::testing::GoldenFormat format;
    format.dtype_column = true;
    std::map<std::string, Named> out;
    for (const auto& [name, c] : mt::testing::read_golden_file("linear_cross_entropy.txt", format))
      for (const auto& t : c.tensors)
        out[name][t.name] = t.dtype == "int64" ? t.f64().to(mt::kInt64) : t.f64();
    return out;
  }();
  return cases;
}

Tensor get(const Named& c, const std::string& name) {
  const auto it = c.find(name);
  return it == c.end() ? Tensor() : it->second;
}

struct Result {
  Tensor loss, gx, gw, gb;
};

// Runs `loss_fn` on leaf copies of x, w (and b) and backward with g (for an unreduced loss).
template <typename Fn>
Result run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, Fn&& loss_fn) {
  const Tensor x = x0.detach().requires_grad_();
  const Tensor w = w0.detach().requires_grad_();
  const Tensor b = b0.defined() ? b0.detach().requires_grad_() : Tensor();
  Result r;
  r.loss = loss_fn(x, w, b);
  if (r.loss.dim() == 0) {
    r.loss.backward();
  } else {
    r.loss.backward(g.to(r.loss.dtype()));
  }
  r.gx = x.grad();
  r.gw = w.grad();
  if (b.defined()) r.gb = b.grad();
  return r;
}

Reduction reduction_named(const std::string& name) {
  if (name.rfind("none", 0) == 0) return Reduction::None;
  if (name.rfind("mean", 0) == 0) return Reduction::Mean;
  return Reduction::Sum;
}

}  // namespace

TEST(LinearCrossEntropy, MatchesPyTorchInEveryChunking) {
  ASSERT_EQ(golden().size(), 12u) << "rerun scripts/golden/make_linear_cross_entropy.py";
  for (const auto& [name, c] : golden()) {
    const Reduction r = reduction_named(name);
    const double ls = name.find("_ls1_") != std::string::npos ? 0.1 : 0.0;
    for (int64_t chunk : {0, 1, 3, 7}) {
      const std::string what = name + " chunk_rows " + std::to_string(chunk);
      const Result got =
          run(get(c, "x"), get(c, "w"), get(c, "b"), get(c, "g"),
              [&](const Tensor& x, const Tensor& w, const Tensor& b) {
                return F::linear_cross_entropy(x, w, get(c, "t"), b, r, ls, -100, chunk);
              });
      EXPECT_EQ(got.loss.dtype(), mt::kFloat64) << what;
      expect_close(got.loss, get(c, "loss"), 1e-12, 1e-12, what + " loss");
      expect_close(got.gx, get(c, "x.grad"), 1e-12, 1e-12, what + " x.grad");
      expect_close(got.gw, get(c, "w.grad"), 1e-12, 1e-12, what + " w.grad");
      if (get(c, "b").defined()) expect_close(got.gb, get(c, "b.grad"), 1e-12, 1e-12, what + " b");
    }
  }
}

// float32 against linear + cross_entropy: rows over several chunks with a short last one, a
// leading batch dim, an ignored target.
TEST(LinearCrossEntropy, MatchesTheUnfusedOpsInFloat32) {
  mt::manual_seed(7);
  const Tensor x = mt::randn({3, 13, 16});
  const Tensor w = mt::randn({50, 16}) * 0.3;
  const Tensor b = mt::randn({50}) * 0.1;
  std::vector<int64_t> tv = mt::randint(0, 50, {3, 13}, mt::kInt64).to_vector<int64_t>();
  tv[17] = -100;
  const Tensor t = mt::from_vector(tv, Shape{3, 13});
  const Tensor g = mt::randn({3, 13});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (double ls : {0.0, 0.2}) {
      const Result want =
          run(x, w, b, g, [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
            const Tensor logits = F::linear(xx, ww, bb).reshape({-1, 50});
            const Tensor l = F::cross_entropy(logits, t.reshape({-1}), r, ls);
            return r == Reduction::None ? l.reshape({3, 13}) : l;
          });
      const Result got = run(x, w, b, g, [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
        return F::linear_cross_entropy(xx, ww, t, bb, r, ls, -100, 8);
      });
      const std::string what =
          "reduction " + std::to_string(static_cast<int>(r)) + " ls " + std::to_string(ls);
      expect_close(got.loss, want.loss, 1e-5, 1e-6, what + " loss");
      expect_close(got.gx, want.gx, 1e-5, 1e-6, what + " x.grad");
      expect_close(got.gw, want.gw, 1e-5, 1e-6, what + " w.grad");
      expect_close(got.gb, want.gb, 1e-5, 1e-6, what + " b.grad");
    }
  }
}

// Under bfloat16 autocast the logits are bf16 products and the loss is float32, as PyTorch's
// linear + cross_entropy there: close to that path, and measurably away from float32's.
TEST(LinearCrossEntropy, AutocastMultipliesInBFloat16AndReturnsAFloat32Loss) {
  mt::manual_seed(11);
  const Tensor x = mt::randn({64, 32});
  const Tensor w = mt::randn({97, 32}) * 0.5;
  const Tensor t = mt::randint(0, 97, {64}, mt::kInt64);
  const Tensor none;
  auto fused = [&](const Tensor& xx, const Tensor& ww, const Tensor&) {
    return F::linear_cross_entropy(xx, ww, t, Tensor(), Reduction::Mean, 0.0, -100, 16);
  };
  auto unfused = [&](const Tensor& xx, const Tensor& ww, const Tensor&) {
    return F::cross_entropy(F::linear(xx, ww), t);
  };
  Result got, want;
  {
    mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16);
    got = run(x, w, none, none, fused);
    want = run(x, w, none, none, unfused);
  }
  const Result fp32 = run(x, w, none, none, fused);
  EXPECT_EQ(got.loss.dtype(), mt::kFloat32);
  EXPECT_EQ(got.gw.dtype(), mt::kFloat32);  // the weight's own dtype, through autocast's cast
  expect_close(got.loss, want.loss, 1e-5, 1e-5, "loss");
  // Gradients: the same bf16-rounded logit gradients and products; only the rounding of the
  // chunks' sums differs (opmath here, once per GEMM in the unfused path).
  expect_close(got.gx, want.gx, 1e-2, 1e-4, "x.grad");
  expect_close(got.gw, want.gw, 1e-2, 1e-4, "w.grad");
  const double off = std::fabs(got.loss.item<double>() - fp32.loss.item<double>());
  const double tie = std::fabs(got.loss.item<double>() - want.loss.item<double>());
  EXPECT_GT(off, 1e-5) << "the bf16 products should move the loss away from float32's";
  EXPECT_LT(tie, off / 10) << "the fused and unfused autocast losses should agree";
}

// The reason for the op: only a chunk of logits at a time. The unfused path holds [N, V] logits,
// their log-softmax and their gradient; the fused one a [chunk, V] block and the gradients.
TEST(LinearCrossEntropy, PeakMemoryIsAFractionOfTheUnfusedPath) {
  mt::manual_seed(3);
  const int64_t N = 2048, V = 4096, C = 64;
  const Tensor x = mt::randn({N, C}).requires_grad_();
  const Tensor w = (mt::randn({V, C}) * 0.1).requires_grad_();
  const Tensor t = mt::randint(0, V, {N}, mt::kInt64);
  auto peak = [&](auto&& step) {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    const int64_t before = mt::cpu_memory_stats().allocated_bytes;
    mt::reset_cpu_peak_memory_stats();
    step();
    return mt::cpu_memory_stats().peak_allocated_bytes - before;
  };
  const int64_t unfused = peak([&] { F::cross_entropy(F::linear(x, w), t).backward(); });
  const Tensor gx_unfused = x.grad(), gw_unfused = w.grad();
  const int64_t fused = peak([&] {
    F::linear_cross_entropy(x, w, t, Tensor(), Reduction::Mean, 0.0, -100, 256).backward();
  });
  expect_close(x.grad(), gx_unfused, 1e-4, 1e-7, "x.grad");
  expect_close(w.grad(), gw_unfused, 1e-4, 1e-7, "w.grad");
  EXPECT_GE(unfused, N * V * 4 * 2) << "the unfused path holds at least logits and log-softmax";
  EXPECT_LE(fused * 8, unfused) << "fused peak " << fused << " B, unfused " << unfused << " B";
}

TEST(LinearCrossEntropy, RetainGraphAndFrozenOperands) {
  mt::manual_seed(5);
  const Tensor x = mt::randn({9, 4}).requires_grad_();
  const Tensor w = mt::randn({6, 4});  // frozen: no gradient is computed for it
  const Tensor t = mt::randint(0, 6, {9}, mt::kInt64);
  const Tensor loss = F::linear_cross_entropy(x, w, t, Tensor(), Reduction::Sum, 0.0, -100, 4);
  loss.backward({}, true);
  const Tensor once = x.grad().clone();
  loss.backward();
  expect_close(x.grad(), once * 2.0, 1e-6, 1e-7, "twice");
  EXPECT_FALSE(w.grad().defined());
  // No grad mode: nothing recorded.
  mt::autograd::NoGradGuard no_grad;
  EXPECT_FALSE(F::linear_cross_entropy(x, w, t).requires_grad());
}

// Every target ignored: the mean is NaN and the gradients zero, as PyTorch's; no rows at all.
TEST(LinearCrossEntropy, NoCountedTargetsAndNoRows) {
  const Tensor x = mt::randn({4, 3}).requires_grad_();
  const Tensor w = mt::randn({5, 3}).requires_grad_();
  const Tensor t = mt::full({4}, int64_t{-100}, mt::TensorOptions().dtype(mt::kInt64));
  const Tensor loss = F::linear_cross_entropy(x, w, t);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  loss.backward();
  expect_close(x.grad(), mt::zeros({4, 3}), 0, 0, "x.grad");
  expect_close(w.grad(), mt::zeros({5, 3}), 0, 0, "w.grad");

  const Tensor x0 = mt::randn({0, 3}).requires_grad_();
  const Tensor w0 = mt::randn({5, 3}).requires_grad_();
  const Tensor t0 = mt::zeros({0}, mt::TensorOptions().dtype(mt::kInt64));
  const Tensor sum = F::linear_cross_entropy(x0, w0, t0, Tensor(), Reduction::Sum);
  EXPECT_EQ(sum.item<double>(), 0.0);
  sum.backward();
  expect_close(w0.grad(), mt::zeros({5, 3}), 0, 0, "w.grad of no rows");
}

TEST(LinearCrossEntropy, RefusesBadOperandsByName) {
  const Tensor x = mt::randn({4, 3});
  const Tensor w = mt::randn({5, 3});
  const Tensor t = mt::randint(0, 5, {4}, mt::kInt64);
  expect_error(
      [&] {
        F::linear_cross_entropy(x, mt::randn({5, 2}), t);
      },
      {"linear_cross_entropy", "[5, 2]", "[4, 3]"});
  expect_error([&] { F::linear_cross_entropy(x, w, mt::randint(0, 5, {3}, mt::kInt64)); },
               {"linear_cross_entropy", "target of shape [4]", "[3]"});
  expect_error([&] { F::linear_cross_entropy(x, w, t.to(mt::kFloat32)); },
               {"linear_cross_entropy", "int64", "float32"});
  expect_error([&] { F::linear_cross_entropy(x, w.to(mt::kFloat64), t); },
               {"linear_cross_entropy", "float32", "float64"});
  expect_error([&] { F::linear_cross_entropy(x, w, t, mt::randn({4})); },
               {"linear_cross_entropy", "bias [5]", "[4]"});
  expect_error([&] { F::linear_cross_entropy(x, w, t, Tensor(), Reduction::Mean, 1.5); },
               {"linear_cross_entropy", "label_smoothing", "1.5"});
  expect_error([&] { F::linear_cross_entropy(x, w, t, Tensor(), Reduction::Mean, 0.0, -100, -2); },
               {"linear_cross_entropy", "chunk_rows", "-2"});
  const Tensor bad = mt::from_vector(std::vector<int64_t>{0, 1, 5, 2}, Shape{4});
  expect_error([&] { F::linear_cross_entropy(x, w, bad); },
               {"linear_cross_entropy", "target 5", "out of bounds", "5 classes"});
}

// The opmath GEMM the op accumulates with (engine/kernel_tables.h: gemm_opmath) on the CPU: float32
// C from bfloat16 (on the bf16 instructions where present), float16, float32 and strided operands,
// summed over two calls; float64 C for float64.
TEST(LinearCrossEntropy, GemmOpmathAccumulatesInOpmath) {
  mt::manual_seed(23);
  for (mt::DType dt : {mt::kBFloat16, mt::kFloat16, mt::kFloat32, mt::kFloat64}) {
    const Tensor a = mt::randn({33, 40}).to(dt), b = mt::randn({40, 17}).to(dt);
    const Tensor want = mt::matmul(a.to(mt::kFloat64), b.to(mt::kFloat64)) * 2.0;
    const mt::DType acc = dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32;
    const Tensor c = mt::empty({33, 17}, mt::TensorOptions().dtype(acc));
    mt::gemm_opmath_kernel(mt::kCPU)(c, a, b, false);
    mt::gemm_opmath_kernel(mt::kCPU)(c, a.t().contiguous().t(), b, true);
    EXPECT_EQ(c.dtype(), acc);
    expect_close(c, want, dt == mt::kFloat64 ? 1e-12 : 1e-5, 1e-4, std::string(mt::dtype_name(dt)));
  }
}
