// The CUDA reductions, softmax, indexing, matmul and optimizer kernels against the CPU kernels
// (the oracle): the same values, laid out the same way (contiguous or strided), run on both
// devices for every dtype each op supports. Also gradients computed on CUDA against CPU autograd,
// TF32 vs full float32 matmul, out-of-range index errors, and ten training steps of a small MLP
// that must follow the CPU's trajectory, also as a cross_entropy classification step captured in
// a CUDA graph (the loss must not sync the host). The table-driven sweep over every op x dtype on
// strided inputs, with gradcheck on CUDA, is tests/test_cuda_op_table.cpp; the fused linear
// epilogues are in tests/test_cuda_linear.cpp.
//
// Tolerances: integers and pure data movement (gather, index_select, max/min indices) must match
// exactly. Floating reductions accumulate in float on CUDA and in double on the CPU
// (kernels/cuda/reduce_kernels.cu), so float32 results are compared with rtol 1e-5 and an atol
// that grows with the number of elements folded; half types may round to the neighbouring value.
// Every test skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda/stream.h"
#include "engine/kernel_tables.h"
#include "engine/optimizer_kernel_tables.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Device;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::all_dtypes;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::kGpu;

namespace {

const std::vector<DType>& number_dtypes() {  // all but bool
  static const std::vector<DType> v{mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16,
                                    mt::kInt32,   mt::kInt64,   mt::kUInt8};
  return v;
}

std::string label(const std::string& op, DType dt, bool strided) {
  return op + " " + std::string(mt::dtype_name(dt)) + (strided ? " strided" : "");
}

// The same values on the CPU and on cuda:0 with the same layout: a strided pair is a transposed
// view of every other slice of a larger buffer, built identically on each device.
struct Pair {
  Tensor cpu, gpu;
};

Tensor strided_view(Tensor t, bool strided) {
  if (!strided) return t;
  t = t.slice(0, 0, std::nullopt, 2);
  return t.dim() >= 2 ? t.transpose(-1, -2) : t;
}

Tensor random_values(const Shape& shape, DType dt, double low, double high) {
  if (mt::is_floating(dt)) return (mt::rand(shape, mt::kFloat64) * (high - low) + low).to(dt);
  if (dt == mt::kBool) return mt::rand(shape, mt::kFloat64) < 0.5;
  const auto lo = dt == mt::kUInt8 ? std::max<int64_t>(0, static_cast<int64_t>(low))
                                   : static_cast<int64_t>(low);
  return mt::randint(lo, static_cast<int64_t>(high) + 1, shape, dt);
}

// integral_values: floating tensors hold whole numbers in [low, high] (many ties).
Pair device_pair(const Shape& shape, DType dt, bool strided, double low = -2.0, double high = 2.0,
                 bool integral_values = false) {
  Shape big = shape;
  if (strided && !big.empty()) {
    if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
    big[0] *= 2;
  }
  const Tensor base = integral_values && mt::is_floating(dt)
                          ? random_values(big, mt::kInt64, low, high).to(dt)
                          : random_values(big, dt, low, high);
  Pair p{strided_view(base, strided), strided_view(base.to(kGpu), strided)};
  EXPECT_EQ(p.cpu.shape(), shape);
  return p;
}

Pair from_cpu(const Tensor& cpu) { return {cpu, cpu.to(kGpu)}; }

void expect_match(const Tensor& gpu, const Tensor& cpu, double rtol, double atol,
                  const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  expect_close(gpu, cpu, rtol, atol, what);
}

void expect_identical(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const auto g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = g[i] == c[i] || (std::isnan(g[i]) && std::isnan(c[i]));
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << c[i];
      return;
    }
  }
}

// Tolerance for a reduction folding `count` elements of magnitude <= 2 (see the file comment).
mt::testing::Tolerance reduce_tol(DType dt, int64_t count) {
  const double n = static_cast<double>(std::max<int64_t>(count, 1));
  switch (dt) {
    case mt::kFloat32:
      return {1e-5, 1e-6 * n};
    case mt::kFloat64:
      return {1e-12, 1e-13 * n};
    case mt::kFloat16:
      return {2e-3, 1e-3 * std::sqrt(n)};
    case mt::kBFloat16:
      return {1.6e-2, 1e-2 * std::sqrt(n)};
    default:
      return {0, 0};
  }
}

struct ReduceCase {
  Shape shape;
  Shape dims;  // empty: all
  bool keepdim;
};

// Block-per-output and thread-per-output paths, inner dim reduced or kept, size-1 dims, all dims.
const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> v{{{6, 300}, {1}, false},  {{6, 300}, {0}, true},
                                         {{6, 300}, {}, false},   {{4, 5, 70}, {0, 2}, false},
                                         {{4, 5, 70}, {1}, true}, {{3, 1, 40}, {1, 2}, false},
                                         {{50, 3}, {0}, false},   {{40, 20}, {1}, false},
                                         {{2, 8, 16}, {}, true},  {{7}, {0}, false}};
  return v;
}

int64_t folded(const ReduceCase& c) {
  if (c.dims.empty()) return c.shape.numel();
  int64_t n = 1;
  for (int64_t d : c.dims) n *= c.shape[d];
  return n;
}

}  // namespace

// ---- reductions -------------------------------------------------------------------------------

TEST(CudaOps, SumAmaxAminEveryDtype) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    for (const ReduceCase& c : reduce_cases()) {
      for (bool strided : {false, true}) {
        const Pair x = device_pair(c.shape, dt, strided);
        const auto tol = reduce_tol(dt, folded(c));
        const std::string what =
            label("sum", dt, strided) + " dims " + std::to_string(c.dims.size());
        expect_match(mt::sum(x.gpu, c.dims, c.keepdim), mt::sum(x.cpu, c.dims, c.keepdim), tol.rtol,
                     tol.atol, what);
        expect_identical(mt::amax(x.gpu, c.dims, c.keepdim), mt::amax(x.cpu, c.dims, c.keepdim),
                         label("amax", dt, strided));
        expect_identical(mt::amin(x.gpu, c.dims, c.keepdim), mt::amin(x.cpu, c.dims, c.keepdim),
                         label("amin", dt, strided));
      }
    }
  }
}

TEST(CudaOps, MeanVarNormFloating) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    for (const ReduceCase& c : reduce_cases()) {
      for (bool strided : {false, true}) {
        const Pair x = device_pair(c.shape, dt, strided);
        const auto tol = reduce_tol(dt, folded(c));
        expect_match(mt::mean(x.gpu, c.dims, c.keepdim), mt::mean(x.cpu, c.dims, c.keepdim),
                     tol.rtol, tol.atol, label("mean", dt, strided));
        for (int64_t correction : {0, 1}) {
          expect_match(mt::var(x.gpu, c.dims, correction, c.keepdim),
                       mt::var(x.cpu, c.dims, correction, c.keepdim), tol.rtol, tol.atol,
                       label("var", dt, strided));
        }
        expect_match(mt::std(x.gpu, c.dims, 1, c.keepdim), mt::std(x.cpu, c.dims, 1, c.keepdim),
                     tol.rtol, tol.atol, label("std", dt, strided));
        const double inf = std::numeric_limits<double>::infinity();
        for (double p : {2.0, 1.0, 0.0, 3.0, 0.5, inf, -inf}) {
          // |x|^p sums: relative accuracy of a sum of positive terms.
          expect_match(mt::norm(x.gpu, p, c.dims, c.keepdim), mt::norm(x.cpu, p, c.dims, c.keepdim),
                       tol.rtol * 10, tol.atol, label("norm p=" + std::to_string(p), dt, strided));
        }
      }
    }
  }
}

TEST(CudaOps, LargeFloat32SumStaysAccurate) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::rand({1 << 18}, mt::kFloat64);  // [0, 1): no cancellation
  const double exact = mt::sum(x).item<double>();
  const Tensor xg = x.to(kGpu, mt::kFloat32);
  EXPECT_NEAR(mt::sum(xg).item<double>(), exact, 1e-5 * exact);
  EXPECT_NEAR(mt::mean(xg).item<double>(), exact / (1 << 18), 1e-5 * exact / (1 << 18));
  // One block per output and many outputs: [64, 4096] row sums and column sums.
  const Tensor m = mt::rand({64, 4096}, mt::kFloat64);
  expect_close(mt::sum(m.to(kGpu, mt::kFloat32), {1}), mt::sum(m, {1}), 1e-5, 1e-4, "rows");
  expect_close(mt::sum(m.to(kGpu, mt::kFloat32), {0}), mt::sum(m, {0}), 1e-5, 1e-4, "cols");
}

TEST(CudaOps, ExtremaPropagateNaN) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    Tensor x = random_values({4, 50}, mt::kFloat32, -2, 2);
    x.data<float>()[1 * 50 + 7] = std::nanf("");
    x.data<float>()[3 * 50 + 49] = std::nanf("");
    const Pair p = from_cpu(x.to(dt));
    for (const Shape& dims : {Shape{1}, Shape{0}, Shape{}}) {
      expect_identical(mt::amax(p.gpu, dims), mt::amax(p.cpu, dims), label("amax nan", dt, false));
      expect_identical(mt::amin(p.gpu, dims), mt::amin(p.cpu, dims), label("amin nan", dt, false));
    }
    const auto mx = mt::max(p.gpu, 1), mx_cpu = mt::max(p.cpu, 1);
    expect_identical(mx.values, mx_cpu.values, label("max nan values", dt, false));
    expect_identical(mx.indices, mx_cpu.indices, label("max nan indices", dt, false));
    const auto mn = mt::min(p.gpu, 1), mn_cpu = mt::min(p.cpu, 1);
    expect_identical(mn.indices, mn_cpu.indices, label("min nan indices", dt, false));
  }
}

TEST(CudaOps, MaxMinAlongDimTakeTheFirstOfTies) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    for (bool strided : {false, true}) {
      // Values in {0, 1, 2, 3} (or bool): every row has many ties.
      const Pair xi = device_pair({6, 7, 300}, dt, strided, 0.0, 3.0, true);
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          const auto g = mt::max(xi.gpu, dim, keepdim), c = mt::max(xi.cpu, dim, keepdim);
          expect_identical(g.values, c.values, label("max values", dt, strided));
          expect_identical(g.indices, c.indices, label("max indices", dt, strided));
          const auto gn = mt::min(xi.gpu, dim, keepdim), cn = mt::min(xi.cpu, dim, keepdim);
          expect_identical(gn.values, cn.values, label("min values", dt, strided));
          expect_identical(gn.indices, cn.indices, label("min indices", dt, strided));
        }
      }
      expect_identical(mt::argmax(xi.gpu), mt::argmax(xi.cpu), label("argmax", dt, strided));
      expect_identical(mt::argmin(xi.gpu), mt::argmin(xi.cpu), label("argmin", dt, strided));
    }
  }
}

TEST(CudaOps, AllFinite) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    for (bool strided : {false, true}) {
      const Pair x = device_pair({33, 70}, dt, strided);
      EXPECT_TRUE(mt::all_finite(x.gpu).item<bool>()) << label("all_finite", dt, strided);
    }
    for (float bad : {std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), std::nanf("")}) {
      Tensor x = random_values({33, 70}, mt::kFloat32, -2, 2);
      x.data<float>()[33 * 70 - 5] = bad;
      const Tensor g = x.to(kGpu, dt);
      EXPECT_FALSE(mt::all_finite(g).item<bool>()) << mt::dtype_name(dt) << " with " << bad;
      EXPECT_FALSE(mt::all_finite(g.t()).item<bool>()) << mt::dtype_name(dt) << " transposed";
    }
    EXPECT_TRUE(mt::all_finite(mt::empty({0, 3}, TensorOptions(kGpu).dtype(dt))).item<bool>());
  }
  EXPECT_TRUE(mt::all_finite(mt::ones({5}, TensorOptions(kGpu).dtype(mt::kInt32))).item<bool>());
}

// ---- softmax ----------------------------------------------------------------------------------

TEST(CudaOps, SoftmaxForwardAndBackwardEveryDim) {
  MT_REQUIRE_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // dim last (a block per row), a middle dim with few rows (blocks over strided rows), and
  // dim 0 of a wide tensor (a thread per row); a 3000-long row spans many block iterations.
  const std::vector<Case> cases{{{4, 33, 5}, 0}, {{4, 33, 5}, 1}, {{4, 33, 5}, 2},
                                {{2, 3000}, 1},  {{3, 3000}, 0},  {{7, 600, 9}, 1}};
  for (DType dt : mt::testing::floating_dtypes()) {
    const bool half = mt::is_reduced_float(dt);
    const double rtol = dt == mt::kFloat64 ? 1e-12 : dt == mt::kFloat32 ? 1e-5 : half ? 2e-2 : 0;
    const double atol = dt == mt::kFloat64 ? 1e-14 : dt == mt::kFloat32 ? 1e-6 : 2e-3;
    for (const Case& c : cases) {
      for (bool strided : {false, true}) {
        for (bool log : {false, true}) {
          const std::string what =
              label(log ? "log_softmax" : "softmax", dt, strided) + " dim " + std::to_string(c.dim);
          const Pair x = device_pair(c.shape, dt, strided, -4.0, 4.0);
          const Pair w = device_pair(c.shape, dt, false);
          Tensor xc = x.cpu.detach().requires_grad_(), xg = x.gpu.detach().requires_grad_();
          const Tensor yc = log ? mt::log_softmax(xc, c.dim) : mt::softmax(xc, c.dim);
          const Tensor yg = log ? mt::log_softmax(xg, c.dim) : mt::softmax(xg, c.dim);
          expect_match(yg, yc, rtol, atol, what);
          mt::sum(yc * w.cpu).backward();
          mt::sum(yg * w.gpu).backward();
          ASSERT_TRUE(xg.grad().defined()) << what;
          expect_match(xg.grad(), xc.grad(), rtol * 10, atol * 10, what + " grad");
        }
      }
    }
  }
}

TEST(CudaOps, SoftmaxRowWithNaNOrMinusInfinity) {
  MT_REQUIRE_GPU();
  Tensor x = random_values({3, 40}, mt::kFloat32, -2, 2);
  x.data<float>()[5] = std::nanf("");
  for (int i = 0; i < 40; ++i) x.data<float>()[80 + i] = -std::numeric_limits<float>::infinity();
  const Pair p = from_cpu(x);
  expect_close(mt::softmax(p.gpu, 1), mt::softmax(p.cpu, 1), 1e-5, 1e-6, "softmax nan");
  expect_close(mt::log_softmax(p.gpu, 1), mt::log_softmax(p.cpu, 1), 1e-5, 1e-6, "log_softmax nan");
}

// ---- indexing ---------------------------------------------------------------------------------

TEST(CudaOps, GatherAndIndexSelectEveryDtype) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    for (bool strided : {false, true}) {
      const Pair x = device_pair({5, 7, 9}, dt, strided);
      for (int64_t dim : {0, 1, 2}) {
        Shape ishape{4, 6, 8};
        const Pair idx = from_cpu(mt::randint(0, x.cpu.size(dim), ishape, mt::kInt64));
        expect_identical(mt::gather(x.gpu, dim, idx.gpu), mt::gather(x.cpu, dim, idx.cpu),
                         label("gather dim " + std::to_string(dim), dt, strided));
        const Pair sel = from_cpu(mt::randint(0, x.cpu.size(dim), {11}, mt::kInt64));
        expect_identical(mt::index_select(x.gpu, dim, sel.gpu),
                         mt::index_select(x.cpu, dim, sel.cpu),
                         label("index_select dim " + std::to_string(dim), dt, strided));
        // A strided index (every other element of a longer one).
        const Pair sel2 = from_cpu(
            mt::randint(0, x.cpu.size(dim), {22}, mt::kInt64).slice(0, 0, std::nullopt, 2));
        expect_identical(mt::index_select(x.gpu, dim, sel2.gpu),
                         mt::index_select(x.cpu, dim, sel2.cpu),
                         label("index_select strided index", dt, strided));
      }
    }
  }
}

TEST(CudaOps, ScatterAddAndIndexAddEveryDtype) {
  MT_REQUIRE_GPU();
  for (DType dt : number_dtypes()) {
    for (bool strided : {false, true}) {
      const Pair x = device_pair({5, 7, 9}, dt, strided);
      for (int64_t dim : {0, 1, 2}) {
        // Few distinct targets, so many additions land on one element.
        const Pair idx = from_cpu(mt::randint(0, 3, {4, 6, 8}, mt::kInt64));
        const Pair src = device_pair({4, 6, 8}, dt, strided);
        const std::string what = label("scatter_add dim " + std::to_string(dim), dt, strided);
        const Tensor g = mt::scatter_add(x.gpu, dim, idx.gpu, src.gpu);
        const Tensor c = mt::scatter_add(x.cpu, dim, idx.cpu, src.cpu);
        if (mt::is_floating(dt)) {
          expect_match(g, c, reduce_tol(dt, 64).rtol, reduce_tol(dt, 64).atol, what);
        } else {
          expect_identical(g, c, what);
        }
        Shape sshape = x.cpu.shape();
        sshape[dim] = 13;
        const Pair sel = from_cpu(mt::randint(0, x.cpu.size(dim), {13}, mt::kInt64));
        const Pair isrc = device_pair(sshape, dt, strided);
        const Tensor ga = mt::index_add(x.gpu, dim, sel.gpu, isrc.gpu);
        const Tensor ca = mt::index_add(x.cpu, dim, sel.cpu, isrc.cpu);
        const std::string what_a = label("index_add dim " + std::to_string(dim), dt, strided);
        if (mt::is_floating(dt)) {
          expect_match(ga, ca, reduce_tol(dt, 13).rtol, reduce_tol(dt, 13).atol, what_a);
        } else {
          expect_identical(ga, ca, what_a);
        }
      }
    }
  }
}

TEST(CudaOps, OutOfRangeIndicesAreErrors) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::zeros({4, 5}, TensorOptions(kGpu));
  const Tensor bad = mt::tensor<int64_t>({0, 7, 1, 2}).reshape({2, 2}).to(kGpu);
  expect_error([&] { mt::gather(x, 1, bad); },
               {"gather", "index 7", "out of bounds", "dimension 1", "size 5"});
  const Tensor neg = mt::tensor<int64_t>({0, -1}).to(kGpu);
  expect_error([&] { mt::index_select(x, 0, neg); },
               {"index_select", "index -1", "out of bounds", "dimension 0", "size 4"});
  const Tensor big = mt::tensor<int64_t>({4, 9, 1, 0}).reshape({2, 2}).to(kGpu);
  expect_error(
      [&] {
        mt::scatter_add(x, 0, big, mt::ones({2, 2}, TensorOptions(kGpu)));
      },
      {"scatter_add", "out of bounds", "dimension 0", "size 4"});
  const Tensor xh = mt::zeros({4, 5}, TensorOptions(kGpu).dtype(mt::kFloat16));
  expect_error(
      [&] {
        mt::index_add(xh, 1, mt::tensor<int64_t>({5}).to(kGpu),
                      mt::ones({4, 1}, TensorOptions(kGpu).dtype(mt::kFloat16)));
      },
      {"index_add", "index 5", "out of bounds", "dimension 1", "size 5"});
  // The device is still usable afterwards.
  EXPECT_EQ(mt::gather(x, 1, mt::zeros({4, 1}, TensorOptions(kGpu).dtype(mt::kInt64)))
                .sum()
                .item<float>(),
            0.0f);
}

// ---- matmul -----------------------------------------------------------------------------------

namespace {

mt::testing::Tolerance matmul_tol(DType dt, int64_t k) {
  const double n = static_cast<double>(std::max<int64_t>(k, 1));
  switch (dt) {
    case mt::kFloat32:
      return {1e-5, 1e-6 * n};
    case mt::kFloat64:
      return {1e-12, 1e-13 * n};
    case mt::kFloat16:
      return {2e-3, 1e-2};
    case mt::kBFloat16:
      return {1.6e-2, 5e-2};
    default:
      return {0, 0};
  }
}

// Restores the float32 matmul precision on scope exit.
struct PrecisionGuard {
  mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  ~PrecisionGuard() { mt::set_float32_matmul_precision(saved); }
};

}  // namespace

TEST(CudaOps, BmmLayoutsEveryDtype) {
  MT_REQUIRE_GPU();
  const int64_t B = 3, M = 17, K = 33, N = 9;
  for (DType dt : number_dtypes()) {
    const auto tol = matmul_tol(dt, K);
    auto check = [&](const Pair& a, const Pair& b, const std::string& layout) {
      const std::string what = std::string("bmm ") + std::string(mt::dtype_name(dt)) + " " + layout;
      const Tensor g = mt::bmm(a.gpu, b.gpu), c = mt::bmm(a.cpu, b.cpu);
      if (mt::is_floating(dt)) {
        expect_match(g, c, tol.rtol, tol.atol, what);
      } else {
        expect_identical(g, c, what);
      }
    };
    const Pair a = device_pair({B, M, K}, dt, false), b = device_pair({B, K, N}, dt, false);
    check(a, b, "contiguous");
    // Transposed matrices (dense columns): op T in cuBLAS.
    const Pair at = device_pair({B, M, K}, dt, true), bt = device_pair({B, K, N}, dt, true);
    check(at, bt, "transposed");
    check(a, bt, "mixed");
    // A broadcast batch (stride 0).
    const Pair b1 = device_pair({1, K, N}, dt, false);
    check(a, Pair{b1.cpu.expand({B, K, N}), b1.gpu.expand({B, K, N})}, "broadcast b");
    // Neither rows nor columns dense: packed into a contiguous copy first.
    const Pair big = device_pair({B, 2 * M, 2 * K}, dt, false);
    auto every_other = [](const Tensor& t) {
      return t.slice(1, 0, std::nullopt, 2).slice(2, 0, std::nullopt, 2);
    };
    check(Pair{every_other(big.cpu), every_other(big.gpu)}, b, "packed a");
    const Pair bigb = device_pair({1, 2 * K, 2 * N}, dt, false);
    check(a, Pair{every_other(bigb.cpu).expand({B, K, N}), every_other(bigb.gpu).expand({B, K, N})},
          "packed broadcast b");
    // mm, including size-1 dims whose strides mean nothing, and an empty inner dim.
    const Pair m1 = device_pair({1, K}, dt, false), m2 = device_pair({K, 1}, dt, true);
    const Tensor g = mt::mm(m1.gpu, m2.gpu), c = mt::mm(m1.cpu, m2.cpu);
    if (mt::is_floating(dt)) {
      expect_match(g, c, tol.rtol, tol.atol, "mm row x column");
    } else {
      expect_identical(g, c, "mm row x column");
    }
    const Tensor z = mt::bmm(mt::empty({2, 3, 0}, TensorOptions(kGpu).dtype(dt)),
                             mt::empty({2, 0, 4}, TensorOptions(kGpu).dtype(dt)));
    expect_identical(z, mt::zeros({2, 3, 4}, dt), label("K == 0", dt, false));
  }
}

TEST(CudaOps, Float32MatmulFullPrecisionAndTF32) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  const Tensor a = mt::rand({128, 256}, mt::kFloat64) * 2 - 1;
  const Tensor b = mt::rand({256, 192}, mt::kFloat64) * 2 - 1;
  const Tensor exact = mt::mm(a, b);
  const Tensor scale = mt::mm(mt::abs(a), mt::abs(b));  // bounds every |partial sum|
  auto rel_error = [&](const Tensor& r) {
    return mt::amax(mt::abs(r.cpu().to(mt::kFloat64) - exact) / scale).item<double>();
  };
  const Tensor ag = a.to(kGpu, mt::kFloat32), bg = b.to(kGpu, mt::kFloat32);
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const double full = rel_error(mt::mm(ag, bg));
  mt::set_float32_matmul_precision(mt::MatmulPrecision::High);
  const double tf32 = rel_error(mt::mm(ag, bg));
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  double tf32_autocast = 0;
  {
    mt::amp::autocast scope(kGpu, mt::amp::kTF32);
    tf32_autocast = rel_error(mt::mm(ag, bg));
  }
  EXPECT_LT(full, 1e-5);
  EXPECT_LT(tf32, 2e-3);  // 10-bit mantissa operands
  EXPECT_GT(tf32, full);  // TF32 really was used
  EXPECT_LT(tf32_autocast, 2e-3);
  EXPECT_GT(tf32_autocast, full);
  // After the scope, full precision again.
  EXPECT_LT(rel_error(mt::mm(ag, bg)), 1e-5);
}

// ---- gradients on CUDA against CPU autograd (float64) ------------------------------------------

TEST(CudaOps, Float64GradientsMatchCpuAutograd) {
  MT_REQUIRE_GPU();
  struct Case {
    std::string name;
    std::vector<Shape> shapes;
    std::function<Tensor(const std::vector<Tensor>&)> fn;
  };
  const Tensor idx = mt::randint(0, 6, {4, 3}, mt::kInt64);
  const std::vector<Case> cases{
      {"sum", {{4, 6}}, [](const std::vector<Tensor>& x) { return mt::sum(x[0], {1}); }},
      {"softmax", {{4, 6}}, [](const std::vector<Tensor>& x) { return mt::softmax(x[0], 1); }},
      {"log_softmax",
       {{4, 6}},
       [](const std::vector<Tensor>& x) { return mt::log_softmax(x[0], 0); }},
      {"mm", {{4, 6}, {6, 5}}, [](const std::vector<Tensor>& x) { return mt::mm(x[0], x[1]); }},
      {"gather",
       {{4, 6}},
       [idx](const std::vector<Tensor>& x) { return mt::gather(x[0], 1, idx.to(x[0].device())); }},
      {"norm", {{4, 6}}, [](const std::vector<Tensor>& x) { return mt::norm(x[0], 2.0, {1}); }},
      {"var", {{4, 6}}, [](const std::vector<Tensor>& x) { return mt::var(x[0], {0}); }},
      {"amax", {{4, 6}}, [](const std::vector<Tensor>& x) { return mt::amax(x[0], {1}); }},
      {"linear gelu_tanh",
       {{4, 6}, {8, 6}, {8}},
       [](const std::vector<Tensor>& x) {
         return mt::nn::functional::linear(x[0], x[1], x[2], mt::LinearActivation::GeluTanh);
       }},
      {"linear_act_linear relu",
       {{4, 6}, {8, 6}, {8}, {3, 8}, {3}},
       [](const std::vector<Tensor>& x) {
         return mt::nn::functional::linear_act_linear(x[0], x[1], x[2], mt::LinearActivation::Relu,
                                                      x[3], x[4]);
       }},
      {"layer_norm",
       {{4, 6}, {6}, {6}},
       [](const std::vector<Tensor>& x) {
         return mt::nn::functional::layer_norm(x[0], {6}, x[1], x[2]);
       }},
      // CopySlices and the refreshed view history (tests/test_view_inplace.cpp on the CPU).
      {"in-place through views",
       {{4, 6}, {6}, {3, 4}},
       [](const std::vector<Tensor>& x) {
         Tensor y = x[0] * 1;
         Tensor stale = y.narrow(1, 0, 3);
         y.select(0, 1).mul_(x[1]);
         y.t().narrow(0, 2, 3).add_(x[2].t());
         y.narrow(0, 3, 1).copy_(x[1] * x[1]);
         return y + stale.sum();
       }},
      {"expanded view of a base changed in place",
       {{4, 1}},
       [](const std::vector<Tensor>& x) {
         Tensor y = x[0] * 1;
         Tensor e = y.expand({4, 5});
         y.mul_(y.detach());
         return e;
       }},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> xc, xg;
    for (const Shape& s : c.shapes) {
      const Tensor v = mt::rand(s, mt::kFloat64) * 4 - 2;
      xc.push_back(v.clone().requires_grad_());
      xg.push_back(v.to(kGpu).requires_grad_());
    }
    const Tensor yc = c.fn(xc), yg = c.fn(xg);
    const Tensor w = mt::rand(yc.shape(), mt::kFloat64);
    mt::sum(yc * w).backward();
    mt::sum(yg * w.to(kGpu)).backward();
    for (size_t i = 0; i < xc.size(); ++i) {
      ASSERT_TRUE(xg[i].grad().defined()) << c.name;
      EXPECT_TRUE(xg[i].grad().is_cuda()) << c.name;
      expect_close(xg[i].grad(), xc[i].grad(), 1e-10, 1e-12, c.name + " grad " + std::to_string(i));
    }
  }
}

// ---- optimizer steps --------------------------------------------------------------------------

TEST(CudaOps, OptimizerStepsMatchCpuBitForBit) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    const bool exact = !mt::is_reduced_float(dt);
    auto compare = [&](const Tensor& g, const Tensor& c, const std::string& what) {
      if (exact) {
        expect_identical(g, c, what);
      } else {
        expect_match(g, c, 0, 0, what);  // same float math and rounding: identical as well
      }
    };
    const Shape shape{37, 29};
    for (int variant = 0; variant < 4; ++variant) {
      mt::SgdStepParams hp;
      hp.lr = 0.05;
      hp.momentum = variant == 0 ? 0.0 : 0.9;
      hp.dampening = variant == 2 ? 0.1 : 0.0;
      hp.weight_decay = variant >= 1 ? 1e-2 : 0.0;
      hp.nesterov = variant == 3;
      hp.maximize = variant == 2;
      hp.first_step = true;
      Pair p = device_pair(shape, dt, false), buf = device_pair(shape, dt, false);
      for (int step = 0; step < 3; ++step) {
        const Pair g = device_pair(shape, dt, false);
        hp.first_step = step == 0;
        const Tensor bc = hp.momentum != 0 ? buf.cpu : Tensor();
        const Tensor bg = hp.momentum != 0 ? buf.gpu : Tensor();
        mt::sgd_step_kernel(mt::kCPU)(p.cpu, g.cpu, bc, hp);
        mt::sgd_step_kernel(mt::kCUDA)(p.gpu, g.gpu, bg, hp);
      }
      const std::string what = label("sgd variant " + std::to_string(variant), dt, false);
      compare(p.gpu, p.cpu, what + " param");
      if (hp.momentum != 0) compare(buf.gpu, buf.cpu, what + " buffer");
    }
    for (int variant = 0; variant < 4; ++variant) {
      mt::AdamStepParams hp;
      hp.lr = 1e-2;
      hp.betas = {0.9, 0.999};
      hp.eps = 1e-8;
      hp.weight_decay = variant >= 1 ? 1e-2 : 0.0;
      hp.decoupled_weight_decay = variant == 2;
      hp.amsgrad = variant == 3;
      hp.maximize = variant == 1;
      hp.step = 1;
      Pair p = device_pair(shape, dt, false);
      Pair m1 = from_cpu(mt::zeros(shape, dt)), m2 = from_cpu(mt::zeros(shape, dt));
      Pair mx = from_cpu(mt::zeros(shape, dt));
      for (int step = 1; step <= 3; ++step) {
        const Pair g = device_pair(shape, dt, false);
        hp.step = step;
        mt::adam_step_kernel(mt::kCPU)(p.cpu, g.cpu, m1.cpu, m2.cpu, hp.amsgrad ? mx.cpu : Tensor(),
                                       hp);
        mt::adam_step_kernel(mt::kCUDA)(p.gpu, g.gpu, m1.gpu, m2.gpu,
                                        hp.amsgrad ? mx.gpu : Tensor(), hp);
      }
      const std::string what = label("adam variant " + std::to_string(variant), dt, false);
      compare(p.gpu, p.cpu, what + " param");
      compare(m1.gpu, m1.cpu, what + " exp_avg");
      compare(m2.gpu, m2.cpu, what + " exp_avg_sq");
      if (hp.amsgrad) compare(mx.gpu, mx.cpu, what + " max_exp_avg_sq");
    }
  }
}

// ---- training ---------------------------------------------------------------------------------

namespace {

using Mlp = mt::testing::ToyModel;
const mt::testing::ToyModelOptions kMlp{.name = "Mlp"};

}  // namespace

TEST(CudaOps, TrainingStepsFollowTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(0);
  auto cpu_model = std::make_shared<Mlp>(kMlp);
  mt::manual_seed(0);
  auto gpu_model = std::make_shared<Mlp>(kMlp);
  gpu_model->to(kGpu);
  mt::optim::SGD cpu_opt(cpu_model->parameters(), 0.05, {.momentum = 0.9});
  mt::optim::SGD gpu_opt(gpu_model->parameters(), 0.05, {.momentum = 0.9});
  mt::nn::MSELoss loss_fn;
  for (int step = 0; step < 10; ++step) {
    const Tensor x = mt::randn({20, 10}), y = mt::randn({20, 5});
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    const Tensor lc = loss_fn(cpu_model->forward(x), y);
    const Tensor lg = loss_fn(gpu_model->forward(x.to(kGpu)), y.to(kGpu));
    ASSERT_TRUE(lg.is_cuda());
    lc.backward();
    lg.backward();
    cpu_opt.step();
    gpu_opt.step();
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-5 * std::fabs(lc.item<double>()))
        << "step " << step;
  }
  const auto pc = cpu_model->named_parameters(), pg = gpu_model->named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(pg[i].second.is_cuda()) << pg[i].first;
    expect_close(pg[i].second, pc[i].second, 1e-5, 1e-6, pc[i].first);
  }
}

// ---- classification losses without host syncs ------------------------------------------------

// A classification step (MLP -> cross_entropy with label smoothing and an ignored target ->
// backward -> SGD) as a GraphedStep, against the same step run eagerly on a twin model: the
// capture only succeeds if nothing in the loss or its backward waits for the device.
TEST(CudaOps, CrossEntropyStepCapturesInAGraph) {
  MT_REQUIRE_GPU();
  namespace F = mantissa::nn::functional;
  mt::manual_seed(0);
  auto eager = std::make_shared<Mlp>(kMlp);
  mt::manual_seed(0);
  auto graphed = std::make_shared<Mlp>(kMlp);
  eager->to(kGpu);
  graphed->to(kGpu);
  mt::optim::SGD opt_e(eager->parameters(), 0.05, {.momentum = 0.9});
  mt::optim::SGD opt_g(graphed->parameters(), 0.05, {.momentum = 0.9});
  const auto step = [](Mlp& model, mt::optim::SGD& opt, const Tensor& x, const Tensor& t) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model.forward(x), t, mt::nn::Reduction::Mean, 0.1);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor static_x = mt::zeros({16, 10}, kGpu);
  Tensor static_t = mt::zeros({16}, TensorOptions(kGpu).dtype(mt::kInt64));
  Tensor static_loss = mt::zeros({}, kGpu);
  mantissa::cuda::GraphedStep graphed_step(
      [&] { static_loss.copy_(step(*graphed, opt_g, static_x, static_t).detach()); },
      /*warmup_steps=*/3);
  for (int i = 0; i < 8; ++i) {
    const Tensor x = mt::randn({16, 10});
    Tensor t = mt::randint(0, 5, {16}, mt::kInt64);
    t.select(0, i).fill_(-100);  // ignore_index
    const Tensor loss_e = step(*eager, opt_e, x.to(kGpu), t.to(kGpu));
    static_x.copy_(x);
    static_t.copy_(t);
    graphed_step();
    EXPECT_EQ(graphed_step.captured(), i >= 3);
    expect_close(static_loss.cpu(), loss_e.detach().cpu(), 1e-5, 1e-6,
                 "loss at step " + std::to_string(i));
    const auto pe = eager->parameters(), pg = graphed->parameters();
    for (size_t k = 0; k < pe.size(); ++k)
      expect_close(pg[k].cpu(), pe[k].cpu(), 1e-5, 1e-6,
                   "step " + std::to_string(i) + " parameter " + std::to_string(k));
  }
}

// Targets on the GPU are not range-checked on the host (that would sync): an out-of-range target
// makes its loss element NaN and, through backward, its row of the input gradient, so that a
// GradScaler skips the step; other rows are unaffected and an ignored target still counts 0.
TEST(CudaOps, CrossEntropyOutOfRangeTargetIsNaNOnTheGpu) {
  MT_REQUIRE_GPU();
  namespace F = mantissa::nn::functional;
  mt::manual_seed(1);
  const Tensor x = mt::randn({3, 4});
  const Tensor bad = mt::tensor<int64_t>({0, 4, -100}), good = mt::tensor<int64_t>({0, 3, -100});
  Tensor xg = x.to(kGpu).requires_grad_(), xc = x.clone().requires_grad_();
  const Tensor loss = F::cross_entropy(xg, bad.to(kGpu));
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  loss.backward();
  F::cross_entropy(xc, good).backward();  // same denominator (two non-ignored targets)
  const Tensor grad = xg.grad().cpu();
  expect_close(grad.select(0, 0), xc.grad().select(0, 0), 1e-5, 1e-6, "row with a valid target");
  for (double v : grad.select(0, 1).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  for (double v : grad.select(0, 2).to_vector<double>()) EXPECT_EQ(v, 0.0);

  // Per element, and the same from a captured graph.
  Tensor per_element;
  const Tensor xs = x.to(kGpu), ts = bad.to(kGpu);
  mantissa::cuda::Graph graph;
  mantissa::cuda::capture(graph, [&] {
    per_element = F::nll_loss(mt::log_softmax(xs, 1), ts, mt::nn::Reduction::None);
  });
  graph.replay();
  const auto v = per_element.cpu().to_vector<double>();
  const Tensor ref = F::cross_entropy(x, good, mt::nn::Reduction::None);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_NEAR(v[0], ref.to_vector<double>()[0], 1e-5);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 0.0);
  EXPECT_FALSE(std::signbit(v[2]));
}
