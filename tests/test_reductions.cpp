// Reductions and softmax against float64 references computed here with plain loops over the
// (already rounded) input values, on contiguous and non-contiguous inputs of every floating
// dtype; integer sums, NaN and tie semantics, error messages, and gradients via gradcheck.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Input layouts: dense, or one of two strided views of a larger buffer.
enum Layout : int {
  kDense = 0,
  kSliced = 1,    // last two dims transposed, every other element of dim 0 skipped
  kReversed = 2,  // dims in reverse memory order, every other element of the innermost skipped
};

Tensor random_tensor(const Shape& shape, mt::DType dtype, int layout, double low = -2.0,
                     double high = 2.0) {
  auto fill = [&](const Shape& s) {
    return (mt::rand(s, mt::kFloat64) * (high - low) + low).to(dtype);
  };
  if (layout == kDense || shape.size() == 0) return fill(shape);
  Tensor v;
  if (layout == kSliced) {
    Shape big = shape;
    if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
    big[0] *= 2;
    v = fill(big).slice(0, 0, std::nullopt, 2);
    if (v.dim() >= 2) v = v.transpose(-1, -2);
  } else {
    Shape big;
    for (int64_t d = shape.size() - 1; d >= 0; --d) big.push_back(shape[d]);
    big[big.size() - 1] *= 2;
    v = fill(big).slice(-1, 0, std::nullopt, 2);
    Shape order;
    for (int64_t d = v.dim() - 1; d >= 0; --d) order.push_back(d);
    v = v.permute(order);
  }
  EXPECT_EQ(v.shape(), shape);
  EXPECT_FALSE(v.is_contiguous());
  return v;
}

// ---- the reference: input values grouped by the output element they reduce into ----------
struct Groups {
  Shape keep, result;
  std::vector<std::vector<double>> values;  // per output (row-major over keep), in input order
};

std::vector<bool> reduced_mask(int64_t ndim, const std::vector<int64_t>& dims) {
  std::vector<bool> red(ndim, dims.empty());
  for (int64_t d : dims) red[d < 0 ? d + ndim : d] = true;
  return red;
}

Groups group(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const auto v = x.to_vector<double>();
  const std::vector<bool> red = reduced_mask(x.dim(), dims);
  Groups g;
  for (int64_t d = 0; d < x.dim(); ++d) {
    g.keep.push_back(red[d] ? 1 : x.size(d));
    if (!red[d] || keepdim) g.result.push_back(red[d] ? 1 : x.size(d));
  }
  g.values.resize(g.keep.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t rest = i, out = 0, mult = 1;
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      const int64_t c = rest % x.size(d);
      rest /= x.size(d);
      if (!red[d]) out += c * mult;
      mult *= g.keep[d];
    }
    g.values[out].push_back(v[i]);
  }
  return g;
}

Tensor reference(const Groups& g, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& vals : g.values) out.push_back(f(vals));
  return mt::from_vector<double>(out, g.result);
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / double(v.size()); }
double ref_var(const std::vector<double>& v, int64_t correction) {
  const double m = ref_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(0.0, double(v.size()) - double(correction));
}
double ref_norm(const std::vector<double>& v, double p) {
  double s = 0;
  if (std::isinf(p)) {
    s = p > 0 ? 0.0 : kInf;
    for (double x : v) s = p > 0 ? std::max(s, std::fabs(x)) : std::min(s, std::fabs(x));
    return s;
  }
  for (double x : v) s += p == 0 ? (x != 0) : std::pow(std::fabs(x), p);
  return p == 0 ? s : std::pow(s, 1.0 / p);
}
// Index of the first max (min), NaN counting as the max (min).
int64_t ref_arg(const std::vector<double>& v, bool is_max) {
  int64_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return i;
    if (is_max ? v[i] > v[best] : v[i] < v[best]) best = i;
  }
  return best;
}

struct Case {
  Shape shape;
  std::vector<int64_t> dims;
};
// Dim combinations over a few shapes: single, negative, several, all, size-1 dims.
std::vector<Case> cases() {
  return {{{3, 4, 5}, {}},
          {{3, 4, 5}, {0}},
          {{3, 4, 5}, {1}},
          {{3, 4, 5}, {2}},
          {{3, 4, 5}, {-1}},
          {{3, 4, 5}, {0, 2}},
          {{3, 4, 5}, {-1, 0}},
          {{3, 4, 5}, {1, 2}},
          {{3, 4, 5}, {0, 1, 2}},
          {{7}, {}},
          {{7}, {0}},
          {{4, 1, 3}, {1}},
          {{4, 1, 3}, {0, 1}},
          {{2, 3, 2, 4}, {1, 3}},
          {{2, 3, 2, 4}, {-2}},
          {{6, 50}, {0}},
          {{6, 50}, {1}}};
}

std::string describe(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::string s = "dtype " + std::string(mt::dtype_name(x.dtype())) + " shape " +
                  mt::detail::str_cat(x.shape()) + (x.is_contiguous() ? "" : " (strided)") +
                  " dims [";
  for (int64_t d : dims) s += std::to_string(d) + " ";
  return s + "] keepdim " + std::to_string(keepdim);
}

// Runs `check` over every case x dtype x contiguity x keepdim.
template <typename Check>
void for_all_cases(Check&& check) {
  for (const Case& c : cases())
    for (mt::DType dt : mt::testing::floating_dtypes())
      for (int layout : {kDense, kSliced, kReversed})
        for (bool keepdim : {false, true}) {
          const Tensor x = random_tensor(c.shape, dt, layout);
          check(x, c.dims, keepdim, describe(x, c.dims, keepdim));
        }
}

}  // namespace

// ---- values ---------------------------------------------------------------------------------
TEST(Reductions, SumMatchesReference) {
  for_all_cases(
      [](const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const std::string& what) {
        const Tensor out = mt::sum(x, Shape(dims), keepdim);
        EXPECT_EQ(out.dtype(), x.dtype()) << what;
        expect_close(out, reference(group(x, dims, keepdim), ref_sum), what);
      });
}

TEST(Reductions, MeanMatchesReference) {
  for_all_cases(
      [](const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const std::string& what) {
        const Tensor out = mt::mean(x, Shape(dims), keepdim);
        EXPECT_EQ(out.dtype(), x.dtype()) << what;
        expect_close(out, reference(group(x, dims, keepdim), ref_mean), what);
      });
}

TEST(Reductions, AmaxAminAreExact) {
  for_all_cases([](const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                   const std::string& what) {
    const Groups g = group(x, dims, keepdim);
    auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
    auto mn = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    expect_close(mt::amax(x, Shape(dims), keepdim), reference(g, mx), 0, 0, "amax " + what);
    expect_close(mt::amin(x, Shape(dims), keepdim), reference(g, mn), 0, 0, "amin " + what);
  });
}

TEST(Reductions, VarStdMatchReference) {
  for (int64_t correction : {0, 1, 2}) {
    for_all_cases([&](const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                      const std::string& what) {
      const Groups g = group(x, dims, keepdim);
      if (g.values[0].size() <= size_t(correction)) return;  // divisor <= 0: covered below
      const std::string w = what + " correction " + std::to_string(correction);
      expect_close(mt::var(x, Shape(dims), correction, keepdim),
                   reference(g, [&](const auto& v) { return ref_var(v, correction); }), "var " + w);
      expect_close(mt::std(x, Shape(dims), correction, keepdim),
                   reference(g, [&](const auto& v) { return std::sqrt(ref_var(v, correction)); }),
                   "std " + w);
    });
  }
  // One element with Bessel's correction: 0/0, as in PyTorch.
  EXPECT_TRUE(std::isnan(mt::var(mt::tensor<float>({3.0f})).item<float>()));
}

TEST(Reductions, NormMatchesReference) {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    for_all_cases([&](const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                      const std::string& what) {
      const std::string w = what + " p " + std::to_string(p);
      expect_close(
          mt::norm(x, p, Shape(dims), keepdim),
          reference(group(x, dims, keepdim), [&](const auto& v) { return ref_norm(v, p); }),
          "norm " + w);
    });
  }
}

// The infinity norm of dense float32 and bfloat16 tensors (the float8 scales' maxima) has a path
// of its own (the largest magnitude bit pattern): over all, over the last dim and over a matrix's
// rows, small and large enough to split over threads, it gives the values of the general
// reduction (which a strided input takes), NaN where a NaN is, +0 for zeros of either sign.
TEST(Reductions, InfinityNormOfDenseTensorsIsTheGeneralReductions) {
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    for (int64_t n : {int64_t(5), int64_t(1) << 18}) {
      const Tensor x = (mt::randn({n, 3}) * 100.0).to(dt);
      for (const Shape& dims : {Shape{}, Shape{1}, Shape{0}}) {
        const Tensor dense = mt::norm(x, kInf, dims, /*keepdim=*/true);
        const Tensor strided = mt::norm(x.t().contiguous().t(), kInf, dims, true);
        ASSERT_FALSE(x.t().contiguous().t().is_contiguous());
        EXPECT_TRUE(mt::equal(dense, strided)) << dt << " n " << n << " dims " << dims;
        EXPECT_TRUE(mt::equal(dense, mt::amax(mt::abs(x), dims, true))) << dt << " dims " << dims;
      }
    }
    const Tensor special =
        mt::from_vector<double>({-0.0, 0.0, -3, 2, kInf, -7, kNaN, 1, -0.0, -0.0, 0.0, -0.0},
                                Shape{4, 3})
            .to(dt);
    const auto rows = mt::norm(special, kInf, Shape{1}).to_vector<double>();
    EXPECT_EQ(rows[0], 3.0);
    EXPECT_EQ(rows[1], kInf);
    EXPECT_TRUE(std::isnan(rows[2]));
    EXPECT_EQ(rows[3], 0.0);
    EXPECT_FALSE(std::signbit(rows[3]));
    const auto cols = mt::norm(special, kInf, Shape{0}).to_vector<double>();
    EXPECT_TRUE(std::isnan(cols[0]));
    EXPECT_EQ(cols[1], kInf);
    EXPECT_EQ(cols[2], 7.0);
    EXPECT_TRUE(std::isnan(mt::norm(special, kInf).item<double>()));
  }
}

TEST(Reductions, MaxMinAlongDimWithIndices) {
  for (const Case& c : cases()) {
    if (c.dims.size() != 1) continue;
    for (mt::DType dt : mt::testing::floating_dtypes())
      for (int layout : {kDense, kSliced, kReversed})
        for (bool keepdim : {false, true})
          for (bool is_max : {true, false}) {
            const Tensor x = random_tensor(c.shape, dt, layout);
            const std::string what = describe(x, c.dims, keepdim) + (is_max ? " max" : " min");
            const Groups g = group(x, c.dims, keepdim);
            auto r = is_max ? mt::max(x, c.dims[0], keepdim) : mt::min(x, c.dims[0], keepdim);
            EXPECT_EQ(r.indices.dtype(), mt::kInt64);
            const Tensor want_idx =
                reference(g, [&](const auto& v) { return double(ref_arg(v, is_max)); });
            const Tensor want_val =
                reference(g, [&](const auto& v) { return v[ref_arg(v, is_max)]; });
            expect_close(r.values, want_val, 0, 0, what);
            expect_close(r.indices, want_idx, 0, 0, what);
            const Tensor arg =
                is_max ? mt::argmax(x, c.dims[0], keepdim) : mt::argmin(x, c.dims[0], keepdim);
            expect_close(arg, want_idx, 0, 0, "arg " + what);
          }
  }
}

TEST(Reductions, FullMaxMinArgmax) {
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    const Tensor x = random_tensor({5, 6, 7}, dt, kSliced);
    const auto v = x.to_vector<double>();
    EXPECT_EQ(x.max().dim(), 0);
    EXPECT_EQ(x.max().item<double>(), *std::max_element(v.begin(), v.end()));
    EXPECT_EQ(x.min().item<double>(), *std::min_element(v.begin(), v.end()));
    EXPECT_EQ(x.argmax().item<int64_t>(), ref_arg(v, true));
    EXPECT_EQ(mt::argmin(x).item<int64_t>(), ref_arg(v, false));
    EXPECT_EQ(mt::argmax(x, std::nullopt, true).shape(), (Shape{1, 1, 1}));
  }
}

TEST(Reductions, SoftmaxMatchesReference) {
  const std::vector<Shape> shapes{{3, 4, 5}, {7}, {2, 3, 300}, {16, 1000}, {4, 1, 3}};
  for (const Shape& shape : shapes)
    for (int64_t dim = -int64_t(shape.size()); dim < int64_t(shape.size()); ++dim)
      for (mt::DType dt : mt::testing::floating_dtypes())
        for (int layout : {kDense, kSliced, kReversed})
          for (bool log : {false, true}) {
            const Tensor x = random_tensor(shape, dt, layout, -8.0, 8.0);
            const std::string what = describe(x, {dim}, true) + (log ? " log_softmax" : " softmax");
            // Reference: group rows along `dim`, then scatter back to x's layout.
            const Groups g = group(x, {dim}, true);
            const int64_t d = dim < 0 ? dim + x.dim() : dim;
            std::vector<double> want(x.numel()), row_max, row_sum;
            for (const auto& row : g.values) {
              row_max.push_back(*std::max_element(row.begin(), row.end()));
              double s = 0;
              for (double v : row) s += std::exp(v - row_max.back());
              row_sum.push_back(s);
            }
            std::vector<size_t> seen(g.values.size(), 0);
            for (int64_t i = 0; i < x.numel(); ++i) {
              int64_t rest = i, out = 0, mult = 1;
              for (int64_t k = x.dim() - 1; k >= 0; --k) {
                const int64_t c = rest % x.size(k);
                rest /= x.size(k);
                if (k != d) out += c * mult;
                mult *= g.keep[k];
              }
              const double v = g.values[out][seen[out]++], mx = row_max[out], s = row_sum[out];
              want[i] = log ? v - mx - std::log(s) : std::exp(v - mx) / s;
            }
            const Tensor out = log ? x.log_softmax(dim) : x.softmax(dim);
            EXPECT_EQ(out.dtype(), dt);
            expect_close(out, mt::from_vector<double>(want, x.shape()), what);
          }
}

TEST(Reductions, LargeFloat32SumsStayAccurate) {
  // 1e5 elements: a float accumulator would drift by ~1e-4 relative.
  const Tensor x = random_tensor({100000}, mt::kFloat32, kDense, 0.0, 1.0);
  expect_close(x.sum(), reference(group(x, {}, false), ref_sum), "sum 1e5");
  expect_close(x.mean(), reference(group(x, {}, false), ref_mean), "mean 1e5");
  // Chunked full reduction, reductions over the batch dim (inner dim kept), and long rows.
  const Tensor m = random_tensor({300, 500}, mt::kFloat32, kDense);
  expect_close(m.mean(), reference(group(m, {}, false), ref_mean), "mean [300,500]");
  expect_close(m.sum(Shape{0}), reference(group(m, {0}, false), ref_sum), "sum dim 0");
  expect_close(m.t().sum(Shape{1}), reference(group(m.t(), {1}, false), ref_sum), "sum t dim 1");
  expect_close(mt::var(m, Shape{0}),
               reference(group(m, {0}, false), [](const auto& v) { return ref_var(v, 1); }),
               "var dim 0");
  const Tensor big = random_tensor({3, 70000}, mt::kFloat32, kDense);
  expect_close(big.sum(Shape{1}), reference(group(big, {1}, false), ref_sum), "sum long rows");
  auto r = mt::max(big, 1);
  expect_close(
      r.indices,
      reference(group(big, {1}, false), [](const auto& v) { return double(ref_arg(v, true)); }), 0,
      0, "argmax long rows");
}

TEST(Reductions, ZeroDimAndSizeOne) {
  const Tensor s = mt::scalar_tensor(3.5, mt::kFloat64);
  EXPECT_EQ(s.sum().dim(), 0);
  EXPECT_EQ(s.sum().item<double>(), 3.5);
  EXPECT_EQ(mt::sum(s, Shape{0}).item<double>(), 3.5);
  EXPECT_EQ(mt::sum(s, Shape{-1}, true).shape(), Shape{});
  EXPECT_EQ(mt::mean(s).item<double>(), 3.5);
  EXPECT_EQ(s.max().item<double>(), 3.5);
  auto r = mt::max(s, 0);
  EXPECT_EQ(r.values.item<double>(), 3.5);
  EXPECT_EQ(r.indices.item<int64_t>(), 0);
  EXPECT_EQ(s.softmax(0).item<double>(), 1.0);
  EXPECT_EQ(s.log_softmax(-1).item<double>(), 0.0);
  EXPECT_EQ(mt::norm(s).item<double>(), 3.5);
  const Tensor one = mt::full({1, 1}, 2.0, mt::kFloat32);
  EXPECT_EQ(mt::amax(one, Shape{0, 1}).item<float>(), 2.0f);
  EXPECT_EQ(mt::max(one, 1, true).indices.shape(), (Shape{1, 1}));
  // Sums over empty dims are 0; the mean of nothing is NaN.
  const Tensor e = mt::zeros({0, 3});
  EXPECT_EQ(e.sum(Shape{0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(e.sum(Shape{1}).shape(), Shape{0});
  EXPECT_TRUE(std::isnan(e.mean().item<float>()));
}

TEST(Reductions, IntegerAndBoolSums) {
  const Tensor i32 = mt::from_vector<int32_t>({1, -2, 3, 2000000000, 2000000000, 6}, Shape{2, 3});
  const Tensor s = i32.sum();
  EXPECT_EQ(s.dtype(), mt::kInt64);
  EXPECT_EQ(s.item<int64_t>(), 4000000008);  // no int32 overflow
  EXPECT_EQ(i32.t().sum(Shape{1}).to_vector<int64_t>(),
            (std::vector<int64_t>{2000000001, 1999999998, 9}));
  const Tensor b = mt::from_vector<bool>({true, false, true, true}, Shape{2, 2});
  EXPECT_EQ(b.sum().dtype(), mt::kInt64);
  EXPECT_EQ(b.sum().item<int64_t>(), 3);
  EXPECT_EQ(b.sum(Shape{1}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  const Tensor u8 = mt::full({300}, 200, mt::kUInt8);
  EXPECT_EQ(u8.sum().item<int64_t>(), 60000);
  const Tensor i64 = mt::randint(-1000, 1000, {5, 7});
  int64_t total = 0;
  for (int64_t v : i64.to_vector<int64_t>()) total += v;
  EXPECT_EQ(i64.sum().item<int64_t>(), total);
  // An explicit dtype: int32 stays int32; float32 summed as float64.
  EXPECT_EQ(mt::sum(i32, {}, false, mt::kInt32).dtype(), mt::kInt32);
  const Tensor f = random_tensor({4, 5}, mt::kFloat32, kSliced);
  const Tensor f64 = mt::sum(f, Shape{1}, false, mt::kFloat64);
  EXPECT_EQ(f64.dtype(), mt::kFloat64);
  expect_close(f64, reference(group(f, {1}, false), ref_sum), "sum dtype float64");
  // Integer amax/max and all_finite work too.
  EXPECT_EQ(mt::amax(i32).item<int32_t>(), 2000000000);
  EXPECT_EQ(mt::max(i32, 1).indices.to_vector<int64_t>(), (std::vector<int64_t>{2, 0}));
  EXPECT_TRUE(mt::all_finite(i32).item<bool>());
}

TEST(Reductions, NaNPropagationAndTies) {
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    const Tensor x = mt::from_vector<double>({1, kNaN, 3, 3, 5, 5, -kInf, 2}, Shape{2, 4}).to(dt);
    EXPECT_TRUE(std::isnan(x.max().item<double>()));
    EXPECT_TRUE(std::isnan(x.min().item<double>()));
    const auto am = mt::amax(x, Shape{1}).to_vector<double>();
    EXPECT_TRUE(std::isnan(am[0]));
    EXPECT_EQ(am[1], 5);
    auto r = mt::max(x, 1);
    EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));  // NaN, then first 5
    EXPECT_EQ(mt::min(x, 1).indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(x.argmax().item<int64_t>(), 1);
    // Ties: the first index wins, also when the tied values are in different lanes/chunks.
    Tensor t = mt::zeros({3, 100}, dt);
    t.select(1, 37).fill_(1.0);
    t.select(1, 90).fill_(1.0);
    EXPECT_EQ(mt::max(t, 1).indices.to_vector<int64_t>(), (std::vector<int64_t>(3, 37)));
    EXPECT_EQ(mt::max(t.t(), 0).indices.to_vector<int64_t>(), (std::vector<int64_t>(3, 37)));
    EXPECT_EQ(mt::min(t, 1).indices.to_vector<int64_t>(), (std::vector<int64_t>(3, 0)));
    EXPECT_EQ(t.argmax().item<int64_t>(), 37);
    // all_finite
    EXPECT_FALSE(mt::all_finite(x).item<bool>());
    EXPECT_TRUE(mt::all_finite(random_tensor({30, 40}, dt, kSliced)).item<bool>());
    Tensor inf = random_tensor({50, 40}, dt, kSliced);
    inf.select(0, 49).select(0, 3).fill_(kInf);
    EXPECT_FALSE(mt::all_finite(inf).item<bool>());
    EXPECT_TRUE(mt::all_finite(mt::zeros({0}, dt)).item<bool>());
  }
  // Softmax of a row with NaN is NaN.
  const auto sm =
      mt::from_vector<double>({1, kNaN, 2, 1, 2, 3}, Shape{2, 3}).softmax(1).to_vector<double>();
  EXPECT_TRUE(std::isnan(sm[0]) && std::isnan(sm[2]));
  EXPECT_FALSE(std::isnan(sm[3]));
}

TEST(Reductions, Errors) {
  const Tensor x = mt::rand({2, 3});
  expect_error([&] { mt::sum(x, Shape{2}); }, {"sum", "dimension out of range", "got 2"});
  expect_error([&] { mt::mean(x, Shape{-3}); }, {"mean", "dimension out of range"});
  expect_error([&] { mt::amax(x, Shape{1, -1}); }, {"amax", "dim 1 appears multiple times"});
  expect_error([&] { x.softmax(2); }, {"softmax", "dimension out of range"});
  expect_error([&] { mt::max(x, 5); }, {"max", "dimension out of range"});
  expect_error([&] { mt::mean(mt::arange(5)); },
               {"mean(): could not infer output dtype", "Got: Long"});
  expect_error([&] { mt::zeros({0, 3}).max(); }, {"max(): Expected reduction dim to be specified"});
  expect_error([&] { mt::argmax(mt::zeros({0})); }, {"argmax(): Expected reduction dim"});
  expect_error(
      [&] {
        mt::amax(mt::zeros({0, 3}), Shape{0});
      },
      {"amax(): Expected reduction dim 0 to have non-zero size"});
  expect_error([&] { mt::max(mt::zeros({2, 0}), 1); }, {"max(): Expected reduction dim 1"});
  expect_error([&] { mt::var(mt::arange(5)); }, {"std and var only support floating point"});
  expect_error([&] { mt::norm(mt::arange(5)); }, {"norm", "floating point"});
  expect_error([&] { mt::softmax(mt::arange(5), 0); }, {"softmax", "floating point"});
}

// ---- gradients ------------------------------------------------------------------------------
namespace {
Tensor grad_input(const Shape& shape, int layout = kSliced, double low = -2.0, double high = 2.0) {
  Tensor x = random_tensor(shape, mt::kFloat64, layout, low, high);
  x.requires_grad_();
  return x;
}
void check_grad(const std::string& what, const std::function<Tensor(const Tensor&)>& f,
                const Tensor& x) {
  SCOPED_TRACE(what);
  try {
    EXPECT_TRUE(
        mt::autograd::gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}));
  } catch (const mt::Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}
}  // namespace

TEST(ReductionGrad, SumMeanVarStdNorm) {
  const std::vector<std::vector<int64_t>> dim_sets{{}, {0}, {-1}, {0, 2}, {1}};
  for (const auto& dims : dim_sets)
    for (bool keepdim : {false, true}) {
      const Shape ds(dims);
      const std::string w =
          "dims " + mt::detail::str_cat(ds) + " keepdim " + std::to_string(keepdim);
      const Tensor x = grad_input({3, 4, 5}, keepdim ? kReversed : kSliced);
      check_grad(
          "sum " + w, [&](const Tensor& t) { return mt::sum(t, ds, keepdim); }, x);
      check_grad(
          "mean " + w, [&](const Tensor& t) { return mt::mean(t, ds, keepdim); }, x);
      check_grad(
          "var " + w, [&](const Tensor& t) { return mt::var(t, ds, 1, keepdim); }, x);
      check_grad(
          "var0 " + w, [&](const Tensor& t) { return mt::var(t, ds, 0, keepdim); }, x);
      check_grad(
          "std " + w, [&](const Tensor& t) { return mt::std(t, ds, 1, keepdim); }, x);
      check_grad(
          "amax " + w, [&](const Tensor& t) { return mt::amax(t, ds, keepdim); }, x);
      check_grad(
          "amin " + w, [&](const Tensor& t) { return mt::amin(t, ds, keepdim); }, x);
      for (double p : {2.0, 1.0, 3.0, 1.5, kInf, -kInf})
        check_grad(
            "norm p " + std::to_string(p) + " " + w,
            [&](const Tensor& t) { return mt::norm(t, p, ds, keepdim); }, x);
    }
  // |x| away from 0 for p < 1, whose derivative blows up there.
  check_grad(
      "norm p 0.5", [](const Tensor& t) { return mt::norm(t, 0.5, Shape{1}); },
      grad_input({3, 4}, kReversed, 0.5, 2.0));
  const Tensor x = grad_input({4, 5});
  check_grad(
      "max()", [](const Tensor& t) { return t.max(); }, x);
  check_grad(
      "min()", [](const Tensor& t) { return t.min(); }, x);
}

TEST(ReductionGrad, MaxMinAlongDim) {
  for (int layout : {kSliced, kReversed}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        const Tensor x = grad_input({3, 4, 5}, layout);
        const std::string w = "dim " + std::to_string(dim) + " keepdim " + std::to_string(keepdim);
        check_grad(
            "max " + w, [&](const Tensor& t) { return mt::max(t, dim, keepdim).values; }, x);
        check_grad(
            "min " + w, [&](const Tensor& t) { return mt::min(t, dim, keepdim).values; }, x);
      }
    }
  }
}

TEST(ReductionGrad, SoftmaxLogSoftmax) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{6}, Shape{2, 3, 4, 2}})
    for (int64_t dim = -int64_t(shape.size()); dim < int64_t(shape.size()); ++dim) {
      const Tensor x = grad_input(shape, dim % 2 == 0 ? kSliced : kReversed);
      const std::string w = mt::detail::str_cat(shape) + " dim " + std::to_string(dim);
      // Weighted so the gradient of a sum over the softmax dim is not trivially zero.
      const Tensor wts = random_tensor(shape, mt::kFloat64, kDense);
      check_grad(
          "softmax " + w, [&](const Tensor& t) { return t.softmax(dim) * wts; }, x);
      check_grad(
          "log_softmax " + w, [&](const Tensor& t) { return t.log_softmax(dim) * wts; }, x);
    }
}

TEST(ReductionGrad, TiesAndExpandedGrads) {
  // amax/max(): ties share the gradient evenly.
  Tensor x = mt::from_vector<double>({1, 3, 3, 2, 3, 0}, Shape{2, 3});
  x.requires_grad_();
  mt::amax(x, Shape{1}).sum().backward();
  expect_close(x.grad(), mt::from_vector<double>({0, 0.5, 0.5, 0, 1, 0}, Shape{2, 3}), 0, 0,
               "amax ties");
  Tensor y = mt::from_vector<double>({1, 3, 3, 2, 3, 0}, Shape{2, 3});
  y.requires_grad_();
  y.max().backward();
  expect_close(y.grad(), mt::from_vector<double>({0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0}, Shape{2, 3}),
               1e-15, 1e-15, "max() ties");
  // max(dim): only the returned (first) index gets it.
  Tensor z = mt::from_vector<double>({1, 3, 3, 2, 3, 0}, Shape{2, 3});
  z.requires_grad_();
  (mt::max(z, 1).values * 2.0).sum().backward();
  expect_close(z.grad(), mt::from_vector<double>({0, 2, 0, 0, 2, 0}, Shape{2, 3}), 0, 0,
               "max(dim) ties");
  // sum with a wider dtype: the gradient comes back in the input's dtype.
  Tensor f = random_tensor({3, 4}, mt::kFloat32, kSliced);
  f.requires_grad_();
  mt::sum(f, Shape{0}, false, mt::kFloat64).sum().backward();
  EXPECT_EQ(f.grad().dtype(), mt::kFloat32);
  expect_close(f.grad(), mt::ones({3, 4}), 0, 0, "sum(dtype) grad");
  // A softmax whose incoming gradient is stride-0 (the gradient of sum) and half types.
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    Tensor s = random_tensor({4, 6}, dt, kSliced);
    s.requires_grad_();
    s.log_softmax(1).sum().backward();
    // d/dx sum(log_softmax) = 1 - D * softmax
    const Tensor want = 1.0 - s.detach().to(mt::kFloat64).softmax(1) * 6.0;
    const auto tol = mt::testing::tolerance_for(dt);
    expect_close(s.grad(), want, tol.rtol * 8, tol.atol * 8, "log_softmax grad");
  }
}
