// Sizes that only a GPU run can check: more than 2^31 elements, and more than 65,535 reduction
// outputs, softmax rows and layer-norm rows. A kernel that indexes in 32 bits, or that puts rows
// on gridDim.y/z (at most 65,535), passes every small test and fails only here.
//
// The 2^31-element test uses a uint8 tensor of about 2.15 GB whose values are known in closed
// form (arange wraps modulo 256), so no CPU copy of it is needed: small slices are copied back,
// including ones past element 2^31, and sums are checked against exact formulas. The other tests
// compare against the CPU kernels (the oracle) on random data.
//
// Tolerances: integer results and indices must match exactly. Float32 sums accumulate in float on
// CUDA and in double on the CPU, so a sum of k terms of magnitude <= 2 may differ by k * 2 * 2^-24
// at worst (recursive summation); atol = 1e-6 * k covers that with a margin of eight, rtol 1e-5
// the rounding of large results. Softmax and layer norm rows are short (<= 48 elements), so their
// float32 results agree to a few ulps: rtol 1e-5 with a small atol, ten times that for gradients,
// whose formulas subtract nearly equal terms. Every test skips without a GPU.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device_properties.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::expect_close;
using mt::testing::kGpu;
namespace F = mt::nn::functional;

namespace {

constexpr int64_t kTwo31 = int64_t{1} << 31;
constexpr int64_t kManyRows = 70000;  // more than gridDim.y's 65,535

// Sum of (i & 255) for i in [0, m).
int64_t wrapped_prefix_sum(int64_t m) {
  const int64_t r = m % 256;
  return m / 256 * (255 * 256 / 2) + r * (r - 1) / 2;
}

// Random float32 values in [low, high), drawn on the GPU (the CPU generator would take seconds
// for the larger shapes here) and returned on the CPU.
Tensor random_cpu(const Shape& shape, double low, double high) {
  return (mt::rand(shape, TensorOptions(kGpu).dtype(mt::kFloat32)) * (high - low) + low)
      .to(mt::Device::cpu());
}

void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const auto g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] != c[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << c[i];
      return;
    }
  }
}

// Checks t[i] == expected(i) for i in [start, start + len) of the 1-D CUDA tensor t.
template <typename Expected>
void expect_slice(const Tensor& t, int64_t start, int64_t len, const Expected& expected,
                  const std::string& what) {
  const std::vector<double> v = t.narrow(0, start, len).to_vector<double>();
  for (int64_t k = 0; k < len; ++k) {
    const double e = static_cast<double>(expected(start + k));
    if (v[static_cast<size_t>(k)] != e) {
      ADD_FAILURE() << what << ": element " << start + k << " is " << v[static_cast<size_t>(k)]
                    << ", expected " << e;
      return;
    }
  }
}

// The slices that an int32 index would get wrong: both sides of 2^31, and the very end.
template <typename Expected>
void expect_slices(const Tensor& t, const Expected& expected, const std::string& what) {
  const int64_t n = t.numel();
  expect_slice(t, 0, 4096, expected, what + " head");
  expect_slice(t, kTwo31 - 4096, 8192, expected, what + " around 2^31");
  expect_slice(t, n - 4099, 4099, expected, what + " tail");
}

}  // namespace

// ---- more than 2^31 elements ------------------------------------------------------------------

TEST(CudaLarge, Uint8PastTwoToThe31) {
  MT_REQUIRE_GPU();
  // [R, C] with C odd, so every 256 consecutive rows of a column hold each residue once.
  constexpr int64_t C = 999;
  const int64_t R = (kTwo31 + (int64_t{1} << 20)) / C + 1;
  const int64_t n = R * C;  // 2^31 + about 2^20, not a multiple of 16: the packs have a tail
  // Peak: x and its float16 cast, 3n bytes (about 6.5 GB), plus headroom for the rest.
  constexpr int64_t kNeed = int64_t{8} << 30;
  const mt::cuda::DeviceProperties props = mt::cuda::device_properties(0);
  const int64_t available = props.free_memory + mt::cuda::memory_stats(0).cached_bytes;
  if (available < kNeed) {
    GTEST_SKIP() << "needs 8 GiB of free device memory for a " << n << "-element tensor, "
                 << props.name << " has " << available / (1 << 20) << " MiB";
  }
  const auto wrapped = [](int64_t i) { return i & 255; };
  {
    // arange: the generator kernel with 64-bit offsets.
    Tensor x = mt::arange(0, n, 1, TensorOptions(kGpu).dtype(mt::kUInt8));
    ASSERT_EQ(x.numel(), n);
    expect_slices(x, wrapped, "arange uint8");

    // Sums: all of it (few outputs, many elements), per row (R > 65,535 outputs) and per
    // column (C outputs of R elements each, read C bytes apart).
    EXPECT_EQ(mt::sum(x).item<int64_t>(), wrapped_prefix_sum(n)) << "sum of all";
    const Tensor grid = x.view({R, C});
    const std::vector<int64_t> rows = mt::sum(grid, {1}).to_vector<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(rows.size()), R);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t e = wrapped_prefix_sum((r + 1) * C) - wrapped_prefix_sum(r * C);
      if (rows[static_cast<size_t>(r)] != e) {
        ADD_FAILURE() << "row sum " << r << " is " << rows[static_cast<size_t>(r)] << ", expected "
                      << e;
        break;
      }
    }
    const std::vector<int64_t> cols = mt::sum(grid, {0}).to_vector<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(cols.size()), C);
    for (int64_t j = 0; j < C; ++j) {
      int64_t e = R / 256 * (255 * 256 / 2);
      for (int64_t r = R / 256 * 256; r < R; ++r) e += (r * C + j) & 255;
      if (cols[static_cast<size_t>(j)] != e) {
        ADD_FAILURE() << "column sum " << j << " is " << cols[static_cast<size_t>(j)]
                      << ", expected " << e;
        break;
      }
    }

    // A broadcast add (strided operands, 64-bit offsets), wrapping modulo 256 like the CPU.
    {
      const Tensor p = mt::arange(0, C, 1, TensorOptions(kGpu).dtype(mt::kUInt8));
      const Tensor y = (grid + p).view({n});
      ASSERT_EQ(y.dtype(), mt::kUInt8);
      const auto sum = [&](int64_t i) { return (i + ((i % C) & 255)) & 255; };
      expect_slices(y, sum, "broadcast add");
    }

    // A transposing copy (the copy kernel on strided operands, 64-bit offsets).
    {
      const Tensor t = grid.transpose(0, 1).contiguous().view({n});
      const auto transposed = [&](int64_t i) { return ((i % R) * C + i / R) & 255; };
      expect_slices(t, transposed, "transposed copy");
    }

    // A cast (the copy kernel, dense 8-element packs and a scalar tail).
    {
      const Tensor h = x.to(mt::kFloat16);
      expect_slices(h, wrapped, "cast to float16");
    }

    // fill on a view one byte in (misaligned for packs: the strided path), then on everything.
    x.narrow(0, 1, n - 1).fill_(200);
    const auto filled_from_1 = [](int64_t i) { return i == 0 ? 0 : 200; };
    expect_slices(x, filled_from_1, "fill from element 1");
    x.fill_(7);
    const auto sevens = [](int64_t) { return 7; };
    expect_slices(x, sevens, "fill");
  }
  mt::cuda::empty_cache();  // hand the gigabytes back for the next tests
}

// ---- more than 65,535 reduction outputs -------------------------------------------------------

TEST(CudaLarge, ReductionsOverManyOutputsAndFewLongOnes) {
  MT_REQUIRE_GPU();
  // [N, 3] and [3, N]: a thread per output (3 elements) and few outputs of N elements (split
  // across blocks); [N, 40]: a block per output for N outputs.
  for (const Shape& shape :
       {Shape{kManyRows, 3}, Shape{3, kManyRows}, Shape{kManyRows, 40}, Shape{40, kManyRows}}) {
    const Tensor xc = random_cpu(shape, -2, 2);
    const Tensor xg = xc.to(kGpu);
    const Tensor ic = mt::randint(0, 100, shape, mt::kInt32);
    const Tensor ig = ic.to(kGpu);
    for (int64_t dim : {0, 1}) {
      const std::string what = mt::detail::str_cat(shape) + " dim " + std::to_string(dim);
      const double k = static_cast<double>(shape[dim]);
      expect_close(mt::sum(xg, {dim}), mt::sum(xc, {dim}), 1e-5, 1e-6 * k, what + " sum");
      expect_close(mt::mean(xg, {dim}), mt::mean(xc, {dim}), 1e-5, 1e-6, what + " mean");
      // Variance of values in [-2, 2]: Welford partials merged across threads and chunks.
      expect_close(mt::var(xg, {dim}), mt::var(xc, {dim}), 1e-5, 1e-6, what + " var");
      expect_equal(mt::sum(ig, {dim}), mt::sum(ic, {dim}), what + " int32 sum");
      expect_equal(mt::amax(xg, {dim}), mt::amax(xc, {dim}), what + " amax");
    }
  }
  // All of a large float32 tensor: every element folded, through the split path.
  const Tensor big = random_cpu({4, 1 << 20}, -2, 2);
  expect_close(mt::sum(big.to(kGpu)), mt::sum(big), 1e-5, 1e-6 * static_cast<double>(big.numel()),
               "sum of 4M");
}

TEST(CudaLarge, ArgmaxOverManyRows) {
  MT_REQUIRE_GPU();
  // Whole numbers in [0, 20): many ties, and the first index among equals must win, also when
  // the equal values sit in different chunks of a split reduction ([3, N] along dim 1).
  for (const Shape& shape :
       {Shape{kManyRows, 37}, Shape{kManyRows, 5}, Shape{37, kManyRows}, Shape{3, kManyRows}}) {
    const Tensor xc = mt::randint(0, 20, shape, mt::kInt64).to(mt::kFloat32);
    const Tensor xg = xc.to(kGpu);
    for (int64_t dim : {0, 1}) {
      const std::string what = mt::detail::str_cat(shape) + " dim " + std::to_string(dim);
      const mt::ValuesIndices mg = mt::max(xg, dim), mc = mt::max(xc, dim);
      expect_equal(mg.values, mc.values, what + " max values");
      expect_equal(mg.indices, mc.indices, what + " max indices");
      const mt::ValuesIndices ng = mt::min(xg, dim), nc = mt::min(xc, dim);
      expect_equal(ng.indices, nc.indices, what + " min indices");
      expect_equal(mt::argmax(xg, dim), mt::argmax(xc, dim), what + " argmax");
    }
  }
}

// ---- more than 65,535 softmax and layer-norm rows ---------------------------------------------

TEST(CudaLarge, SoftmaxOverManyRows) {
  MT_REQUIRE_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // Contiguous rows (a block per row), strided rows (a thread per row), and rows of a 3-D tensor.
  const std::vector<Case> cases{
      {{kManyRows, 40}, 1}, {{40, kManyRows}, 0}, {{2, kManyRows, 3}, 2}, {{2, 5, kManyRows}, 1}};
  for (const Case& c : cases) {
    const Tensor x0 = random_cpu(c.shape, -4, 4);
    const Tensor w0 = random_cpu(c.shape, -2, 2);
    for (bool log : {false, true}) {
      const std::string what = std::string(log ? "log_softmax " : "softmax ") +
                               mt::detail::str_cat(c.shape) + " dim " + std::to_string(c.dim);
      Tensor xc = x0.detach().requires_grad_(), xg = x0.to(kGpu).detach().requires_grad_();
      const Tensor yc = log ? mt::log_softmax(xc, c.dim) : mt::softmax(xc, c.dim);
      const Tensor yg = log ? mt::log_softmax(xg, c.dim) : mt::softmax(xg, c.dim);
      expect_close(yg, yc, 1e-5, 1e-6, what);
      mt::sum(yc * w0).backward();
      mt::sum(yg * w0.to(kGpu)).backward();
      ASSERT_TRUE(xg.grad().defined()) << what;
      expect_close(xg.grad(), xc.grad(), 1e-4, 1e-5, what + " grad");
    }
  }
}

TEST(CudaLarge, LayerNormOverManyRows) {
  MT_REQUIRE_GPU();
  // 70,000 rows: more rows than gridDim.y allows. 8.4M rows: more than 65,535 chunks of 128 rows
  // for the weight and bias gradients, whose chunks must then grow.
  for (const Shape& shape : {Shape{kManyRows, 48}, Shape{8'400'000, 4}}) {
    const std::string what = mt::detail::str_cat(shape);
    const int64_t M = shape[0], N = shape[1];
    // Each row is +-linspace(-1.5, 1.5) plus noise: a spread of at least about 0.5 in every row,
    // so no row of millions is ill-conditioned (a row of nearly equal values would amplify the
    // float32 rounding of x - mean beyond any fixed tolerance), and the random sign keeps the
    // weight gradient's column sums near sqrt(M) rather than M.
    const Tensor coin = mt::randint(0, 2, {M, 1}, TensorOptions(kGpu).dtype(mt::kFloat32));
    const Tensor sign = (coin * 2.0 - 1.0).to(mt::Device::cpu());
    const Tensor x0 = random_cpu(shape, -0.25, 0.25) + sign * mt::linspace(-1.5, 1.5, N);
    const Tensor w0 = random_cpu({N}, -2, 2), b0 = random_cpu({N}, -2, 2);
    auto leaf = [](const Tensor& t, mt::Device d) { return t.to(d).detach().requires_grad_(); };
    Tensor xc = leaf(x0, mt::Device::cpu()), wc = leaf(w0, mt::Device::cpu()),
           bc = leaf(b0, mt::Device::cpu());
    Tensor xg = leaf(x0, kGpu), wg = leaf(w0, kGpu), bg = leaf(b0, kGpu);
    const Tensor yc = F::layer_norm(xc, {N}, wc, bc);
    const Tensor yg = F::layer_norm(xg, {N}, wg, bg);
    // Row-wise results: all of them for 70,000 rows; for millions, the first and last rows
    // (copying and comparing every row would take the CPU seconds).
    const auto expect_rows = [M](const Tensor& g, const Tensor& c, double rtol, double atol,
                                 const std::string& label) {
      if (M <= kManyRows) return expect_close(g, c, rtol, atol, label);
      for (int64_t start : {int64_t{0}, M - 4096})
        expect_close(g.narrow(0, start, 4096), c.narrow(0, start, 4096), rtol, atol, label);
    };
    expect_rows(yg, yc, 1e-5, 1e-5, what + " forward");
    // Upstream gradient of ones: the bias gradient is then M exactly on both devices (sums of
    // whole numbers below 2^24 are exact in float), so a dropped chunk of rows cannot hide.
    const Tensor ones = mt::ones(shape);
    mt::sum(yc * ones).backward();
    mt::sum(yg * ones.to(kGpu)).backward();
    expect_rows(xg.grad(), xc.grad(), 1e-4, 1e-4, what + " grad x");
    expect_equal(bg.grad(), bc.grad(), what + " grad b");
    EXPECT_EQ(bg.grad().to_vector<double>()[0], static_cast<double>(M)) << what;
    // Column sums of M normalised values: the float32 error grows with M (see the file comment).
    expect_close(wg.grad(), wc.grad(), 1e-5, 1e-6 * static_cast<double>(M), what + " grad w");
  }
}
