// mm, bmm, matmul and linear against float64 triple-loop references written here, over every
// operand layout the BLAS path distinguishes (row-major, transposed, padded rows, strided
// columns that must be packed, stride-0 broadcast batches), every dtype, torch.matmul's rank
// combinations, error messages, and gradients by finite differences.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/gemm/sgemm.h"
#include "kernels/linear_composite.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;

namespace {

// How an operand's last two dims sit in memory.
enum class Layout { kContiguous, kTransposed, kPadded, kStrided };
const Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kPadded,
                           Layout::kStrided};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kTransposed:
      return "transposed";
    case Layout::kPadded:
      return "padded";
    case Layout::kStrided:
      return "strided";
  }
  return "?";
}

Tensor uniform_values(const Shape& shape, mt::DType dtype) {
  return (mt::rand(shape, mt::kFloat64) * 4.0 - 2.0).to(dtype);
}

// A random tensor of `shape` (>= 2-D) whose last two dims have layout `l`.
Tensor make_operand(const Shape& shape, mt::DType dtype, Layout l) {
  const int64_t n = shape.size();
  Shape big = shape;
  switch (l) {
    case Layout::kContiguous:
      return uniform_values(shape, dtype);
    case Layout::kTransposed:
      std::swap(big[n - 1], big[n - 2]);
      return uniform_values(big, dtype).transpose(-1, -2);
    case Layout::kPadded:  // rows further apart than their length, and a storage offset
      big[n - 1] += 3;
      return uniform_values(big, dtype).narrow(-1, 1, shape[n - 1]);
    case Layout::kStrided:  // neither dim has unit stride: GEMM cannot read it directly
      big[n - 1] *= 2;
      return uniform_values(big, dtype).slice(-1, 0, std::nullopt, 2);
  }
  return Tensor();
}

// Row-major float64 copy of a tensor with its shape.
struct Host {
  Shape shape;
  std::vector<double> v;
  explicit Host(const Tensor& t) : shape(t.shape()), v(t.to_vector<double>()) {}
};

// The reference result and, per element, sum_k |a_ik * b_kj| (scales the accumulation error).
struct Reference {
  Tensor value, magnitude;
};

// torch.matmul semantics with plain loops: 1-D operands promoted and the added dim dropped,
// batch dims broadcast.
Reference reference_matmul(const Tensor& ta, const Tensor& tb) {
  const Host a(ta), b(tb);
  Shape as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(0, 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as[as.size() - 1], N = bs[bs.size() - 1];
  const int64_t nbatch = std::max(as.size(), bs.size()) - 2;
  Shape batch(nbatch, 1);
  for (int64_t d = 0; d < nbatch; ++d) {
    const int64_t da = d - (nbatch - (as.size() - 2)), db = d - (nbatch - (bs.size() - 2));
    const int64_t sa = da >= 0 ? as[da] : 1, sb = db >= 0 ? bs[db] : 1;
    batch[d] = std::max(sa, sb);
  }
  // Batch index -> element offset of each operand's matrix, honouring size-1 broadcast.
  auto matrix_offset = [&](const Shape& s, int64_t flat, int64_t matrix_size) {
    const int64_t sdims = s.size() - 2;
    int64_t off = 0, mult = matrix_size;
    for (int64_t d = nbatch - 1; d >= 0; --d) {
      const int64_t idx = flat % batch[d];
      flat /= batch[d];
      const int64_t sd = d - (nbatch - sdims);
      if (sd < 0) continue;
      if (s[sd] != 1) off += idx * mult;
      mult *= s[sd];
    }
    return off;
  };
  const int64_t B = batch.numel();
  std::vector<double> out(B * M * N), mag(B * M * N);
  for (int64_t bi = 0; bi < B; ++bi) {
    const int64_t oa = matrix_offset(as, bi, M * K), ob = matrix_offset(bs, bi, K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0, m = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = a.v[oa + i * K + k] * b.v[ob + k * N + j];
          acc += p;
          m += std::fabs(p);
        }
        out[(bi * M + i) * N + j] = acc;
        mag[(bi * M + i) * N + j] = m;
      }
  }
  Shape out_shape = batch;
  if (a.shape.size() > 1) out_shape.push_back(M);
  if (b.shape.size() > 1) out_shape.push_back(N);
  return {mt::from_vector(out, out_shape), mt::from_vector(mag, out_shape)};
}

// Within the dtype's tolerance plus the accumulation error of a K-term sum in the GEMM's
// accumulator (float32 for every type but float64).
// `extra` scales an additional allowance of extra * magnitude (for a second rounding).
void expect_matches(const Tensor& actual, const Reference& ref, int64_t K, const std::string& what,
                    double extra = 0.0) {
  ASSERT_EQ(actual.shape(), ref.value.shape()) << what;
  const auto tol = mt::testing::tolerance_for(actual.dtype());
  const double acc_eps = actual.dtype() == mt::kFloat64 ? DBL_EPSILON : FLT_EPSILON;
  const auto got = actual.to_vector<double>(), want = ref.value.to_vector<double>(),
             mag = ref.magnitude.to_vector<double>();
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound =
        tol.atol + tol.rtol * std::fabs(want[i]) + (2.0 * K * acc_eps + extra) * mag[i];
    if (!(std::fabs(got[i] - want[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i]
                    << " (bound " << bound << ")";
    }
  }
}

std::string describe(mt::DType t, Layout la, Layout lb) {
  return std::string(mt::dtype_name(t)) + " " + layout_name(la) + " x " + layout_name(lb);
}

// Runs fn, skipping the test while an op it depends on is still a placeholder.
#define SKIP_IF_PENDING(stmt)                                           \
  try {                                                                 \
    stmt;                                                               \
  } catch (const mt::Error& e) {                                        \
    if (std::string(e.what()).find("pending") != std::string::npos)     \
      GTEST_SKIP() << "depends on an op not written yet: " << e.what(); \
    throw;                                                              \
  }

Tensor leaf(const Shape& shape) { return uniform_values(shape, mt::kFloat64).requires_grad_(); }
Tensor leaf(Tensor t) { return t.detach().requires_grad_(); }

}  // namespace

// ---- mm ---------------------------------------------------------------------------------------
TEST(Mm, MatchesReferenceForEveryLayoutAndDtype) {
  mt::manual_seed(1);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        const Tensor a = make_operand({7, 13}, dt, la), b = make_operand({13, 5}, dt, lb);
        const Tensor out = mt::mm(a, b);
        EXPECT_EQ(out.dtype(), dt);
        EXPECT_TRUE(out.is_contiguous());
        expect_matches(out, reference_matmul(a, b), 13, describe(dt, la, lb));
      }
    }
  }
}

TEST(Mm, LargeEnoughForThreadedPacking) {
  mt::manual_seed(2);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    const Tensor a = make_operand({150, 300}, dt, Layout::kStrided);
    const Tensor b = make_operand({300, 140}, dt, Layout::kTransposed);
    expect_matches(mt::mm(a, b), reference_matmul(a, b), 300, std::string(mt::dtype_name(dt)));
  }
}

// The CPU's own loop for small float32 products against a double-precision reference (and, for
// the sizes it computes itself, bit for bit against the in-order float sum), for every
// transpose combination, with dense and wider-than-the-matrix leading dims, on both sides of the
// size where sgemm() hands over to OpenBLAS.
TEST(Mm, SmallSgemmMatchesReferenceOnBothSidesOfTheCutover) {
  mt::manual_seed(9);
  const int shapes[][3] = {{1, 1, 1},    {20, 10, 10}, {20, 5, 10}, {10, 10, 20}, {3, 17, 9},
                           {33, 9, 2},   {7, 4, 3},    {6, 9, 5},   {5, 16, 7},   {32, 32, 32},
                           {32, 32, 33}, {5, 129, 4},  {40, 60, 50}};
  int small = 0, large = 0;
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2];
    (mt::cpu::sgemm_is_small(M, N, K) ? small : large) += 1;
    for (int pad : {0, 2}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          // Stored as op(X)^T when transposed, with 3 spare columns per row.
          const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K,
                    b_cols = tb ? K : N;
          const Tensor a = mt::randn({a_rows, a_cols + 3}), b = mt::randn({b_rows, b_cols + 3});
          const float* pa = a.data<float>();
          const float* pb = b.data<float>();
          std::vector<float> c(size_t(M) * (N + pad) + pad, -7.0f);
          mt::cpu::sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                         pa, a_cols + 3, pb, b_cols + 3, c.data(), N + pad);
          for (int i = 0; i < M; ++i) {
            for (int j = 0; j < N; ++j) {
              double want = 0, scale = 0;
              float in_order = 0;  // what the small loop computes: products rounded, k in order
              for (int k = 0; k < K; ++k) {
                const float x = ta ? pa[k * (a_cols + 3) + i] : pa[i * (a_cols + 3) + k];
                const float y = tb ? pb[j * (b_cols + 3) + k] : pb[k * (b_cols + 3) + j];
                want += double(x) * y;
                scale += std::abs(double(x) * y);
                const volatile float product = x * y;
                in_order = in_order + product;
              }
              const float got = c[size_t(i) * (N + pad) + j];
              ASSERT_NEAR(got, want, 1e-6 * K * (scale + 1))
                  << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " pad=" << pad;
              if (mt::cpu::sgemm_is_small(M, N, K)) {
                ASSERT_EQ(got, in_order)
                    << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " pad=" << pad;
              }
            }
            // The padding columns (and whatever follows C) are not written.
            for (int p = 0; p < pad; ++p) EXPECT_EQ(c[size_t(i) * (N + pad) + N + p], -7.0f);
          }
        }
      }
    }
  }
  EXPECT_GT(small, 3);
  EXPECT_GT(large, 2);
}

TEST(Mm, IntegerDtypesAreExact) {
  mt::manual_seed(3);
  for (mt::DType dt : {mt::kInt32, mt::kInt64, mt::kUInt8}) {
    const Tensor a = mt::randint(0, 5, {6, 9}, dt), b = mt::randint(0, 5, {4, 9}, dt).t();
    const Tensor out = mt::mm(a, b);
    EXPECT_EQ(out.dtype(), dt);
    const Tensor want = reference_matmul(a, b).value;
    EXPECT_EQ(out.to_vector<double>(), want.to_vector<double>()) << mt::dtype_name(dt);
  }
}

TEST(Mm, EmptyDims) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kInt64}) {
    const Tensor z = mt::mm(mt::ones({3, 0}, dt), mt::ones({0, 4}, dt));
    EXPECT_EQ(z.shape(), (Shape{3, 4}));
    EXPECT_EQ(z.to_vector<double>(), std::vector<double>(12, 0.0));
    EXPECT_EQ(mt::mm(mt::ones({0, 5}, dt), mt::ones({5, 4}, dt)).shape(), (Shape{0, 4}));
    EXPECT_EQ(mt::mm(mt::ones({2, 5}, dt), mt::ones({5, 0}, dt)).shape(), (Shape{2, 0}));
  }
}

TEST(Mm, MethodsMatchFunctions) {
  const Tensor a = uniform_values({3, 4}, mt::kFloat64), b = uniform_values({4, 2}, mt::kFloat64);
  EXPECT_TRUE(mt::equal(a.mm(b), mt::mm(a, b)));
  EXPECT_TRUE(mt::equal(a.matmul(b), mt::mm(a, b)));
}

TEST(Mm, Errors) {
  const Tensor a = mt::ones({20, 10}), b = mt::ones({5, 10});
  mt::testing::expect_error([&] { mt::mm(a, b); }, {"mm", "[20, 10]", "[5, 10]"});
  mt::testing::expect_error(
      [&] {
        mt::mm(a, mt::ones({10, 3}, mt::kFloat64));
      },
      {"mm", "same dtype", "float32", "float64"});
  mt::testing::expect_error(
      [&] {
        mt::mm(mt::ones({2, 3, 4}), mt::ones({4, 2}));
      },
      {"mm", "[2, 3, 4]"});
  mt::testing::expect_error(
      [&] {
        mt::mm(mt::ones({2, 2}, mt::kBool), mt::ones({2, 2}, mt::kBool));
      },
      {"bool"});
}

// ---- bmm --------------------------------------------------------------------------------------
TEST(Bmm, MatchesReferenceForEveryLayoutAndDtype) {
  mt::manual_seed(4);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        const Tensor a = make_operand({3, 6, 11}, dt, la), b = make_operand({3, 11, 4}, dt, lb);
        expect_matches(mt::bmm(a, b), reference_matmul(a, b), 11, describe(dt, la, lb));
      }
    }
  }
}

TEST(Bmm, BroadcastBatchStrideZero) {
  mt::manual_seed(5);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (Layout l : kLayouts) {
      const Tensor a = make_operand({1, 5, 8}, dt, l).expand({4, 5, 8});
      const Tensor b = make_operand({4, 8, 3}, dt, Layout::kTransposed);
      ASSERT_EQ(a.stride(0), 0);
      expect_matches(mt::bmm(a, b), reference_matmul(a, b), 8,
                     describe(dt, l, Layout::kTransposed));
      expect_matches(mt::bmm(b.transpose(1, 2), a.transpose(1, 2)),
                     reference_matmul(b.transpose(1, 2), a.transpose(1, 2)), 8,
                     describe(dt, Layout::kTransposed, l) + " (broadcast second)");
    }
  }
}

TEST(Bmm, IntegerAndSliced) {
  mt::manual_seed(6);
  const Tensor a = mt::randint(-4, 5, {6, 3, 7}).slice(0, 0, std::nullopt, 2);
  const Tensor b = mt::randint(-4, 5, {3, 2, 7}).transpose(1, 2);
  EXPECT_EQ(mt::bmm(a, b).to_vector<double>(), reference_matmul(a, b).value.to_vector<double>());
}

TEST(Bmm, Errors) {
  mt::testing::expect_error(
      [&] {
        mt::bmm(mt::ones({2, 3, 4}), mt::ones({3, 4, 5}));
      },
      {"bmm", "[2, 3, 4]", "[3, 4, 5]"});
  mt::testing::expect_error(
      [&] {
        mt::bmm(mt::ones({2, 3, 4}), mt::ones({2, 5, 5}));
      },
      {"bmm", "[2, 3, 4]", "[2, 5, 5]"});
  mt::testing::expect_error([&] { mt::bmm(mt::ones({3, 4}), mt::ones({4, 5})); }, {"bmm", "3-D"});
  mt::testing::expect_error(
      [&] {
        mt::bmm(mt::ones({2, 3, 4}, mt::kFloat16), mt::ones({2, 4, 5}, mt::kBFloat16));
      },
      {"bmm", "same dtype", "float16", "bfloat16"});
}

// ---- matmul -----------------------------------------------------------------------------------
TEST(Matmul, EveryRankCombination) {
  mt::manual_seed(7);
  const int64_t M = 4, K = 6, N = 3;
  // Batch dims chosen to broadcast against each other: [3] with [2, 3] and [2, 1] with [1].
  auto shape_a = [&](int rank) -> Shape {
    switch (rank) {
      case 1:
        return {K};
      case 2:
        return {M, K};
      case 3:
        return {3, M, K};
      default:
        return {2, 1, M, K};
    }
  };
  auto shape_b = [&](int rank) -> Shape {
    switch (rank) {
      case 1:
        return {K};
      case 2:
        return {K, N};
      case 3:
        return {1, K, N};
      default:
        return {2, 3, K, N};
    }
  };
  for (mt::DType dt : {mt::kFloat64, mt::kFloat32, mt::kFloat16}) {
    for (int ra = 1; ra <= 4; ++ra) {
      for (int rb = 1; rb <= 4; ++rb) {
        for (bool transposed : {false, true}) {
          const Layout l = transposed ? Layout::kTransposed : Layout::kContiguous;
          const Tensor a =
              ra == 1 ? uniform_values(shape_a(ra), dt) : make_operand(shape_a(ra), dt, l);
          const Tensor b =
              rb == 1 ? uniform_values(shape_b(rb), dt) : make_operand(shape_b(rb), dt, l);
          const std::string what = std::string(mt::dtype_name(dt)) + " rank " + std::to_string(ra) +
                                   " x rank " + std::to_string(rb) +
                                   (transposed ? " transposed" : "");
          const Tensor out = mt::matmul(a, b);
          expect_matches(out, reference_matmul(a, b), K, what);
        }
      }
    }
  }
}

TEST(Matmul, DotIsZeroDim) {
  const Tensor a = mt::tensor<double>({1, 2, 3}), b = mt::tensor<double>({4, -5, 6});
  const Tensor d = mt::matmul(a, b);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<double>(), 12.0);
}

TEST(Matmul, Errors) {
  mt::testing::expect_error(
      [&] {
        mt::matmul(mt::ones({2, 3, 4}), mt::ones({5, 2}));
      },
      {"matmul", "[2, 3, 4]", "[5, 2]"});
  mt::testing::expect_error([&] { mt::matmul(mt::ones({3}), mt::ones({4})); },
                            {"matmul", "[3]", "[4]"});
  mt::testing::expect_error([&] { mt::matmul(mt::ones({}), mt::ones({4})); }, {"matmul", "0D"});
  mt::testing::expect_error(
      [&] {
        mt::matmul(mt::ones({2, 2, 3}), mt::ones({3, 3, 2}));
      },
      {"matmul", "[2, 2, 3]", "[3, 3, 2]"});
  mt::testing::expect_error(
      [&] {
        mt::matmul(mt::ones({2, 3}), mt::ones({3}, mt::kFloat64));
      },
      {"matmul", "same dtype"});
}

// ---- linear -----------------------------------------------------------------------------------
TEST(Linear, MatchesReferenceForEveryRankAndDtype) {
  mt::manual_seed(8);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (const Shape& xs : {Shape{5}, Shape{4, 5}, Shape{2, 3, 5}, Shape{2, 2, 2, 5}}) {
      for (bool with_bias : {false, true}) {
        const Tensor x =
            xs.size() >= 2 ? make_operand(xs, dt, Layout::kTransposed) : uniform_values(xs, dt);
        const Tensor w = make_operand({7, 5}, dt, Layout::kPadded);
        const Tensor bias = with_bias ? uniform_values({7}, dt) : Tensor();
        const Tensor out = mt::linear(x, w, bias);
        Reference ref = reference_matmul(x, w.t());
        if (with_bias) ref.value = ref.value + bias.to(mt::kFloat64);
        std::string what =
            std::string(mt::dtype_name(dt)) + " x" + std::to_string(xs.size()) + "-D";
        // The bias is added to the rounded product: one more rounding for half types.
        const double extra = with_bias ? mt::testing::tolerance_for(dt).rtol : 0.0;
        expect_matches(out, ref, 5, what + (with_bias ? " with bias" : ""), extra);
      }
    }
  }
}

TEST(Linear, Errors) {
  mt::testing::expect_error(
      [&] {
        mt::linear(mt::ones({3, 4}), mt::ones({2, 5}));
      },
      {"linear", "[3, 4]", "[2, 5]"});
  mt::testing::expect_error(
      [&] {
        mt::linear(mt::ones({3, 4}), mt::ones({2, 4}), mt::ones({3}));
      },
      {"linear", "bias", "[3]"});
  mt::testing::expect_error(
      [&] {
        mt::linear(mt::ones({3, 4}), mt::ones({2, 4}), mt::ones({2}, mt::kFloat64));
      },
      {"linear", "float64"});
  mt::testing::expect_error(
      [&] {
        mt::linear(mt::ones({3, 4}), mt::ones({2, 4}, mt::kFloat16));
      },
      {"linear", "same dtype"});
}

// ---- gradients --------------------------------------------------------------------------------
TEST(LinalgGrad, Mm) {
  mt::manual_seed(9);
  const Tensor a = leaf(make_operand({3, 4}, mt::kFloat64, Layout::kTransposed));
  const Tensor b = leaf({4, 2});
  EXPECT_TRUE(mt::autograd::gradcheck([](const auto& in) { return mt::mm(in[0], in[1]); }, {a, b}));
  // Through a non-contiguous view of a leaf, and with one input not requiring grad.
  const Tensor big = leaf({4, 6});
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const auto& in) { return mt::mm(in[0].slice(1, 0, std::nullopt, 2).t(), in[1]); },
      {big, uniform_values({4, 5}, mt::kFloat64)}));
}

TEST(LinalgGrad, Bmm) {
  mt::manual_seed(10);
  const Tensor a = leaf({2, 3, 4}), b = leaf({2, 4, 2});
  EXPECT_TRUE(
      mt::autograd::gradcheck([](const auto& in) { return mt::bmm(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(
      mt::autograd::gradcheck([](const auto& in) { return mt::bmm(in[0].transpose(1, 2), in[1]); },
                              {leaf({2, 4, 3}), leaf({2, 4, 2})}));
}

TEST(LinalgGrad, MatmulRankCombinations) {
  mt::manual_seed(11);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}},       {{3}, {3, 2}},       {{2, 3}, {3}},
      {{2, 3}, {3, 2}}, {{2, 2, 3}, {3}},    {{2, 2, 3}, {3, 2}},
      {{3}, {2, 3, 2}}, {{2, 3}, {2, 3, 2}}, {{2, 2, 3}, {2, 3, 2}}};
  for (const auto& [sa, sb] : cases) {
    EXPECT_TRUE(mt::autograd::gradcheck([](const auto& in) { return mt::matmul(in[0], in[1]); },
                                        {leaf(sa), leaf(sb)}))
        << sa << " @ " << sb;
  }
}

TEST(LinalgGrad, MatmulBroadcastBatch) {
  mt::manual_seed(12);
  // Gradients of a broadcast batch operand are summed over the batch (needs sum).
  SKIP_IF_PENDING(
      EXPECT_TRUE(mt::autograd::gradcheck([](const auto& in) { return mt::matmul(in[0], in[1]); },
                                          {leaf({2, 1, 2, 3}), leaf({3, 3, 2})})));
  SKIP_IF_PENDING(EXPECT_TRUE(mt::autograd::gradcheck(
      [](const auto& in) { return mt::matmul(in[0], in[1]); }, {leaf({3, 2}), leaf({2, 2, 2})})));
}

TEST(LinalgGrad, LinearWithoutBias) {
  mt::manual_seed(13);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    EXPECT_TRUE(mt::autograd::gradcheck([](const auto& in) { return mt::linear(in[0], in[1]); },
                                        {leaf(xs), leaf({2, 4})}))
        << xs;
  }
  // A frozen weight, and an input that needs no gradient (only the other operand is saved).
  auto fn = [](const auto& in) { return mt::linear(in[0], in[1]); };
  EXPECT_TRUE(mt::autograd::gradcheck(fn, {leaf({2, 3, 4}), uniform_values({2, 4}, mt::kFloat64)}));
  EXPECT_TRUE(mt::autograd::gradcheck(fn, {uniform_values({2, 3, 4}, mt::kFloat64), leaf({2, 4})}));
}

TEST(LinalgGrad, LinearWithBias) {
  mt::manual_seed(14);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    SKIP_IF_PENDING(EXPECT_TRUE(
        mt::autograd::gradcheck([](const auto& in) { return mt::linear(in[0], in[1], in[2]); },
                                {leaf(xs), leaf({2, 4}), leaf({2})})));
  }
}

TEST(LinalgGrad, HalfGradientsKeepDtype) {
  const Tensor a = uniform_values({3, 4}, mt::kFloat16).requires_grad_();
  const Tensor b = uniform_values({4, 2}, mt::kFloat16).requires_grad_();
  mt::mm(a, b).backward(mt::ones({3, 2}, mt::kFloat16));
  EXPECT_EQ(a.grad().dtype(), mt::kFloat16);
  EXPECT_EQ(b.grad().dtype(), mt::kFloat16);
  // grad_a[i][k] = sum_j b[k][j] with an all-ones upstream gradient.
  const auto bv = b.to_vector<double>(), ga = a.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(ga[i * 4 + k], bv[k * 2] + bv[k * 2 + 1], 4e-3);
}

// ---- fused linear + activation (linear_forward / linear_backward_* kernels) --------------------

namespace {

using Act = mt::LinearActivation;
using mt::testing::expect_close;

Tensor unfused(const Tensor& x, const Tensor& w, const Tensor& b, Act act) {
  const Tensor z = b.defined() ? mt::matmul(x, w.t()) + b : mt::matmul(x, w.t());
  switch (act) {
    case Act::None:
      return z;
    case Act::Relu:
      return mt::relu(z);
    case Act::GeluTanh:
      return mt::gelu(z, "tanh");
  }
  return z;
}

const char* act_label(Act a) {
  return a == Act::None ? "none" : a == Act::Relu ? "relu" : "gelu_tanh";
}

}  // namespace

TEST(LinearFused, MatchesUnfusedCompositionEveryDtypeAndLayout) {
  mt::manual_seed(21);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
      for (bool strided : {false, true}) {
        for (bool with_bias : {false, true}) {
          const std::string what = std::string(mt::dtype_name(dt)) + " " + act_label(act) +
                                   (strided ? " strided" : "") + (with_bias ? " bias" : "");
          const Tensor x = mt::testing::random_tensor({2, 5, 7}, dt, strided);
          const Tensor w = mt::testing::random_tensor({6, 7}, dt, strided);
          const Tensor b = with_bias ? mt::testing::random_tensor({6}, dt, false) : Tensor();
          const Tensor y = mt::nn::functional::linear(x, w, b, act);
          ASSERT_EQ(y.shape(), (Shape{2, 5, 6})) << what;
          // The reference in float64 from the same (rounded) operands.
          const Tensor ref = unfused(x.to(mt::kFloat64), w.to(mt::kFloat64),
                                     with_bias ? b.to(mt::kFloat64) : Tensor(), act);
          const auto tol = mt::testing::tolerance_for(dt);
          // Half types round after the GEMM and again after the bias, as mm + add does.
          const double scale = mt::is_reduced_float(dt) ? 4.0 : 1.0;
          expect_close(y, ref, tol.rtol * scale, tol.atol * scale * 7, what);
        }
      }
    }
  }
}

TEST(LinearFused, GradientsMatchUnfusedAndGradcheck) {
  mt::manual_seed(22);
  for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
    for (bool strided : {false, true}) {
      const std::string what = std::string(act_label(act)) + (strided ? " strided" : "");
      auto fused = [act](const std::vector<Tensor>& in) {
        return mt::nn::functional::linear(in[0], in[1], in[2], act);
      };
      // Values away from ReLU's kink, so finite differences do not straddle it.
      Tensor x = mt::testing::random_tensor({3, 4, 5}, mt::kFloat64, strided);
      x = (x + mt::sign(x) * 0.1).detach().requires_grad_();
      const Tensor w = mt::testing::random_tensor({3, 5}, mt::kFloat64, strided).requires_grad_();
      const Tensor b = mt::testing::random_tensor({3}, mt::kFloat64, false).requires_grad_();
      EXPECT_TRUE(mt::autograd::gradcheck(fused, {x, w, b}, 1e-7)) << what;
      // Against autograd through the unfused ops.
      const Tensor gy = mt::rand({3, 4, 3}, mt::kFloat64);
      Tensor x1 = x.detach().requires_grad_(), w1 = w.detach().requires_grad_(),
             b1 = b.detach().requires_grad_();
      Tensor x2 = x.detach().requires_grad_(), w2 = w.detach().requires_grad_(),
             b2 = b.detach().requires_grad_();
      mt::sum(fused({x1, w1, b1}) * gy).backward();
      mt::sum(unfused(x2, w2, b2, act) * gy).backward();
      expect_close(x1.grad(), x2.grad(), 1e-12, 1e-12, what + " grad x");
      expect_close(w1.grad(), w2.grad(), 1e-12, 1e-12, what + " grad w");
      expect_close(b1.grad(), b2.grad(), 1e-12, 1e-12, what + " grad b");
    }
  }
}

TEST(LinearFused, BroadcastBiasAndFrozenOperands) {
  mt::manual_seed(23);
  // A 0-d and a [1] bias broadcast over the outputs; their gradient sums every output.
  for (const Shape& bs : {Shape{}, Shape{1}}) {
    EXPECT_TRUE(mt::autograd::gradcheck(
        [](const auto& in) {
          return mt::nn::functional::linear(in[0], in[1], in[2], Act::GeluTanh);
        },
        {leaf({3, 4}), leaf({2, 4}), leaf(bs)}))
        << bs;
  }
  auto fn = [](const auto& in) {
    return mt::nn::functional::linear(in[0], in[1], in[2], Act::Relu);
  };
  EXPECT_TRUE(
      mt::autograd::gradcheck(fn, {leaf({3, 4}), uniform_values({2, 4}, mt::kFloat64), leaf({2})}));
  EXPECT_TRUE(mt::autograd::gradcheck(
      fn, {uniform_values({3, 4}, mt::kFloat64), leaf({2, 4}), uniform_values({2}, mt::kFloat64)}));
}

TEST(LinearFused, TwoLayerBlockMatchesUnfused) {
  mt::manual_seed(24);
  for (Act act : {Act::Relu, Act::GeluTanh, Act::None}) {
    for (bool with_b1 : {true, false}) {
      const std::string what = std::string(act_label(act)) + (with_b1 ? " b1" : "");
      auto fused = [act, with_b1](const std::vector<Tensor>& in) {
        return mt::nn::functional::linear_act_linear(in[0], in[1], with_b1 ? in[2] : Tensor(), act,
                                                     in[3], in[4]);
      };
      Tensor x = mt::testing::random_tensor({2, 3, 5}, mt::kFloat64, true);
      x = (x + mt::sign(x) * 0.1).detach().requires_grad_();
      std::vector<Tensor> in{x, leaf({4, 5}), leaf({4}), leaf({2, 4}), leaf({2})};
      EXPECT_TRUE(mt::autograd::gradcheck(fused, in, 1e-7)) << what;
      auto reference = [act, with_b1](const std::vector<Tensor>& v) {
        return unfused(unfused(v[0], v[1], with_b1 ? v[2] : Tensor(), act), v[3], v[4], Act::None);
      };
      std::vector<Tensor> a, r;
      for (const Tensor& t : in) {
        a.push_back(t.detach().requires_grad_());
        r.push_back(t.detach().requires_grad_());
      }
      const Tensor ya = fused(a), yr = reference(r);
      expect_close(ya, yr, 1e-12, 1e-12, what + " forward");
      const Tensor gy = mt::rand(ya.shape(), mt::kFloat64);
      mt::sum(ya * gy).backward();
      mt::sum(yr * gy).backward();
      for (size_t i = 0; i < a.size(); ++i) {
        if (i == 2 && !with_b1) continue;
        expect_close(a[i].grad(), r[i].grad(), 1e-12, 1e-12, what + " grad " + std::to_string(i));
      }
    }
  }
}

TEST(LinearFused, KernelAuxIsThePreActivationOnTheCpu) {
  const Tensor x = uniform_values({3, 4}, mt::kFloat32), w = uniform_values({5, 4}, mt::kFloat32);
  const Tensor b = uniform_values({5}, mt::kFloat32);
  const Tensor out = mt::empty({3, 5});
  const Tensor aux = mt::linear_forward_kernel(mt::kCPU)(out, x, w, b, Act::GeluTanh, true);
  ASSERT_TRUE(aux.defined());
  expect_close(aux, mt::linear(x, w, b), 1e-6, 1e-6, "pre-activation");
  expect_close(out, mt::gelu(aux, "tanh"), 1e-6, 1e-6, "output");
  // ReLU needs no aux on the CPU: its backward reads the output.
  EXPECT_FALSE(mt::linear_forward_kernel(mt::kCPU)(out, x, w, b, Act::Relu, true).defined());
  // Without a backward to feed (inference) no aux is made at all.
  EXPECT_FALSE(mt::linear_forward_kernel(mt::kCPU)(out, x, w, b, Act::GeluTanh, false).defined());
  expect_close(out, mt::gelu(aux, "tanh"), 1e-6, 1e-6, "output without aux");
}

// The CPU's direct path (SGEMM plus one fused pass) for dense float32/float16/bfloat16 layers
// must equal the kernel composition it replaces bit for bit: forward, weight and input gradients,
// with and without bias and ReLU. The two large shapes make the bias/ReLU passes big enough to be
// split across the worker pool (by rows forward, by columns for the bias sums); the small ones
// are a ToyModel's layers, whose rows are shorter than a vector register.
TEST(LinearFused, CpuDirectPathEqualsComposition) {
  mt::manual_seed(23);
  const int64_t shapes[][3] = {
      {19, 33, 17}, {20, 10, 10}, {20, 10, 5}, {512, 8, 4100}, {512, 4100, 8}};  // M, K, N
  for (const auto& shape : shapes) {
    for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
      for (Act act : {Act::None, Act::Relu}) {
        for (bool with_bias : {false, true}) {
          const int64_t M = shape[0], K = shape[1], N = shape[2];
          const std::string what = std::string(mt::dtype_name(dt)) + " " + act_label(act) +
                                   (with_bias ? " bias " : " ") + std::to_string(M) + "x" +
                                   std::to_string(K) + "x" + std::to_string(N);
          const Tensor x = (mt::randn({M, K}) * 3.0).to(dt), w = mt::randn({N, K}).to(dt);
          const Tensor b = with_bias ? mt::randn({N}).to(dt) : Tensor();
          auto fresh = [&](const Shape& s) { return mt::empty(s, mt::TensorOptions().dtype(dt)); };
          const Tensor y = fresh({M, N}), y_ref = fresh({M, N});
          mt::linear_forward_kernel(mt::kCPU)(y, x, w, b, act, true);
          mt::linear_composite::forward(y_ref, x, w, b, act, true);
          EXPECT_TRUE(mt::equal(y, y_ref)) << what << " forward";

          const Tensor g = mt::randn({M, N}).to(dt);
          const Tensor gw = fresh({N, K}), gw_ref = fresh({N, K});
          const Tensor gb = with_bias ? fresh({N}) : Tensor(),
                       gb_ref = with_bias ? fresh({N}) : Tensor();
          mt::linear_backward_weight_kernel(mt::kCPU)(gw, gb, g, x);
          mt::linear_composite::backward_weight(gw_ref, gb_ref, g, x);
          EXPECT_TRUE(mt::equal(gw, gw_ref)) << what << " grad w";
          if (with_bias) {
            EXPECT_TRUE(mt::equal(gb, gb_ref)) << what << " grad b";
          }

          // The previous layer's pre-activation gradient, its ReLU read from that layer's output h.
          const Tensor w0 = mt::randn({N, K}).to(dt), h = mt::relu(mt::randn({M, K})).to(dt);
          const Tensor gp = fresh({M, K}), gp_ref = fresh({M, K});
          const Tensor gb0 = with_bias ? fresh({K}) : Tensor(),
                       gb0_ref = with_bias ? fresh({K}) : Tensor();
          mt::linear_backward_act_kernel(mt::kCPU)(gp, gb0, g, w0, h, Tensor(), act);
          mt::linear_composite::backward_act(gp_ref, gb0_ref, g, w0, h, Tensor(), act);
          EXPECT_TRUE(mt::equal(gp, gp_ref)) << what << " grad pre";
          if (with_bias) {
            EXPECT_TRUE(mt::equal(gb0, gb0_ref)) << what << " grad b0";
          }
        }
      }
    }
  }
}

// NaN, infinities, overflow to infinity when rounded, and subnormals through the GEMM epilogue
// of a small layer: the same bits as the composition (compared as bits: NaN != NaN).
TEST(LinearFused, SpecialValuesMatchTheCompositionBitForBit) {
  mt::manual_seed(29);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto bits = [](const Tensor& t) {
    const std::vector<float> v = t.to(mt::kFloat32).to_vector<float>();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    std::vector<float> xv = mt::randn({20, 10}).to_vector<float>();
    xv[3] = nan;
    xv[17] = inf;
    xv[42] = -inf;
    xv[55] = 3e38f;   // products overflow
    xv[71] = 1e-39f;  // subnormal
    xv[88] = 7e4f;    // beyond float16's range once rounded
    const Tensor x = mt::from_vector(xv, Shape{20, 10}).to(dt);
    const Tensor w = mt::randn({10, 10}).to(dt), b = mt::randn({10}).to(dt);
    auto fresh = [&](const Shape& s) { return mt::empty(s, mt::TensorOptions().dtype(dt)); };
    for (Act act : {Act::None, Act::Relu}) {
      const std::string what = std::string(mt::dtype_name(dt)) + " " + act_label(act);
      const Tensor y = fresh({20, 10}), y_ref = fresh({20, 10});
      mt::linear_forward_kernel(mt::kCPU)(y, x, w, b, act, true);
      mt::linear_composite::forward(y_ref, x, w, b, act, true);
      EXPECT_EQ(bits(y), bits(y_ref)) << what << " forward";
      const Tensor gw = fresh({10, 10}), gw_ref = fresh({10, 10});
      const Tensor gb = fresh({10}), gb_ref = fresh({10});
      mt::linear_backward_weight_kernel(mt::kCPU)(gw, gb, x, x);
      mt::linear_composite::backward_weight(gw_ref, gb_ref, x, x);
      EXPECT_EQ(bits(gw), bits(gw_ref)) << what << " grad w";
      EXPECT_EQ(bits(gb), bits(gb_ref)) << what << " grad b";
      const Tensor gp = fresh({20, 10}), gp_ref = fresh({20, 10});
      const Tensor gb0 = fresh({10}), gb0_ref = fresh({10});
      mt::linear_backward_act_kernel(mt::kCPU)(gp, gb0, x, w, y_ref, Tensor(), act);
      mt::linear_composite::backward_act(gp_ref, gb0_ref, x, w, y_ref, Tensor(), act);
      EXPECT_EQ(bits(gp), bits(gp_ref)) << what << " grad pre";
      EXPECT_EQ(bits(gb0), bits(gb0_ref)) << what << " grad b0";
    }
  }
}

TEST(LinearFused, Errors) {
  mt::testing::expect_error(
      [] {
        mt::nn::functional::linear(mt::ones({2, 3}), mt::ones({4, 5}), Tensor(), Act::Relu);
      },
      {"linear", "cannot be multiplied", "[2, 3]", "[4, 5]"});
  mt::testing::expect_error(
      [] {
        mt::nn::functional::linear(mt::ones({2, 3}, mt::kInt64), mt::ones({4, 3}, mt::kInt64),
                                   Tensor(), Act::GeluTanh);
      },
      {"linear", "gelu_tanh", "floating"});
}
