// logsumexp, prod, cumsum/cumprod, any/all, topk, sort, split/chunk/repeat, einsum, addmm and
// baddbmm against PyTorch: every program here is also in scripts/golden/make_reduce.py, whose
// results (forward values, gradients, or a refusal) are committed in tests/golden/reduce.txt.
// Then the properties the golden cases are too small to show (long slices, strided inputs,
// views) and the errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "golden_file.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;

namespace {

constexpr double kInf = INFINITY;
constexpr double kNaN = NAN;

using mt::testing::GoldenCase;
using mt::testing::GoldenTensor;

std::map<std::string, GoldenCase> load_cases() {
  mt::testing::GoldenFormat format;
  format.dtype_column = true;
  return mt::testing::read_golden_file("reduce.txt", format);
}

// The values of make_reduce.py's vals(): the same libm sin, so the same doubles.
std::vector<double> vals(int64_t n, double shift = 0.0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::sin(1.7 * double(i) + 0.3) * 2 + shift);
  return v;
}
Tensor cnst(const std::vector<double>& values, const Shape& shape, DType dtype = mt::kFloat64) {
  return mt::from_vector(values, shape).to(dtype);
}
Tensor leaf(const std::vector<double>& values, const Shape& shape, DType dtype = mt::kFloat64) {
  return cnst(values, shape, dtype).detach().requires_grad_();
}
Tensor weights(const Tensor& t) {
  std::vector<double> w;
  for (int64_t i = 0; i < t.numel(); ++i) w.push_back(double((i % 7) - 3) / 2);
  return mt::from_vector(w, t.shape()).to(t.dtype());
}
void backward(const std::vector<Tensor>& outs) {
  Tensor loss;
  for (const Tensor& o : outs) {
    const Tensor l = (o * weights(o)).sum();
    loss = loss.defined() ? loss + l : l;
  }
  loss.backward();
}

using Outputs = std::map<std::string, Tensor>;
using Program = std::function<Outputs()>;
constexpr DType F = mt::kFloat32;
constexpr DType D = mt::kFloat64;

// "p0", "x1.grad": built by appending (GCC 12 misreads `"p" + std::to_string(i)` under -O3).
std::string numbered(const char* prefix, size_t i, const char* suffix) {
  std::string s = prefix;
  s += std::to_string(i);
  s += suffix;
  return s;
}

Outputs lse(DType dt, const Shape& dims, bool keepdim, const Shape& shape) {
  Tensor x = leaf(vals(shape.numel()), shape, dt), y = mt::logsumexp(x, dims, keepdim);
  backward({y});
  return {{"y", y}, {"x.grad", x.grad()}};
}
Outputs prod_dim(const std::vector<double>& v, const Shape& shape, int64_t dim,
                 bool keepdim = false, DType dt = D) {
  Tensor x = leaf(v, shape, dt), y = mt::prod(x, dim, keepdim);
  backward({y});
  return {{"y", y}, {"x.grad", x.grad()}};
}
Outputs prod_all(const std::vector<double>& v, const Shape& shape) {
  Tensor x = leaf(v, shape), y = mt::prod(x);
  backward({y});
  return {{"y", y}, {"x.grad", x.grad()}};
}
Outputs scan(bool prod, const std::vector<double>& v, const Shape& shape, int64_t dim,
             DType dt = D) {
  Tensor x = leaf(v, shape, dt), y = prod ? mt::cumprod(x, dim) : mt::cumsum(x, dim);
  backward({y});
  return {{"y", y}, {"x.grad", x.grad()}};
}
Outputs sort_case(const std::vector<double>& v, const Shape& shape, int64_t dim, bool descending,
                  DType dt = D) {
  Tensor x = leaf(v, shape, dt);
  auto [values, indices] = mt::sort(x, dim, descending, true);
  backward({values});
  return {{"values", values}, {"indices", indices}, {"x.grad", x.grad()}};
}
Outputs topk_case(const std::vector<double>& v, const Shape& shape, int64_t k, int64_t dim,
                  bool largest, DType dt = D) {
  Tensor x = leaf(v, shape, dt);
  auto [values, indices] = mt::topk(x, k, dim, largest);
  backward({values});
  return {{"values", values}, {"indices", indices}, {"x.grad", x.grad()}};
}
Outputs parts_out(const std::vector<Tensor>& parts, const Tensor& x) {
  Outputs out;
  for (size_t i = 0; i < parts.size(); ++i) out[numbered("p", i, "")] = parts[i];
  if (x.defined()) out["x.grad"] = x.grad();
  return out;
}
Outputs repeat_case(const std::vector<double>& v, const Shape& shape, const Shape& reps,
                    DType dt = D) {
  Tensor x = leaf(v, shape, dt), y = x.repeat(reps);
  backward({y});
  return {{"y", y}, {"x.grad", x.grad()}};
}
Outputs operands_case(const std::vector<Shape>& shapes, DType dt,
                      const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
  std::vector<Tensor> xs;
  for (size_t k = 0; k < shapes.size(); ++k)
    xs.push_back(leaf(vals(shapes[k].numel(), 0.1 * double(k)), shapes[k], dt));
  Tensor y = fn(xs);
  backward({y});
  Outputs out{{"y", y}};
  for (size_t k = 0; k < xs.size(); ++k) out[numbered("x", k, ".grad")] = xs[k].grad();
  return out;
}
Outputs einsum_case(const std::string& eq, const std::vector<Shape>& shapes, DType dt = D) {
  return operands_case(shapes, dt,
                       [eq](const std::vector<Tensor>& x) { return mt::einsum(eq, x); });
}

const std::vector<double> kTies = {1.0, 3.0, 3.0, 2.0, 3.0, 1.0, 2.0, 2.0, 2.0,
                                   2.0, 2.0, 2.0, -1., 0.5, -1., 0.5, -1., 4.0};

// The programs of make_reduce.py, by case name.
const std::map<std::string, Program>& programs() {
  static const std::map<std::string, Program> all = {
      {"logsumexp_dim1_f64",
       [] {
         return lse(D, {1}, false, {3, 4});
       }},
      {"logsumexp_dims_keepdim_f64",
       [] {
         return lse(D, {0, -1}, true, {2, 3, 4});
       }},
      {"logsumexp_dim0_f32",
       [] {
         return lse(F, {0}, false, {4, 5});
       }},
      {"logsumexp_large_f32",
       [] {
         Tensor x = leaf({100.0, 101.0, 99.5, -3.0, 88.0, 89.0}, {2, 3}, F);
         Tensor y = mt::logsumexp(x, {1});
         backward({y});
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"logsumexp_infinities_f64",
       [] {
         Tensor x =
             leaf({-kInf, -kInf, -kInf, 0.0, -kInf, 1.0, kInf, 1.0, 2.0, -kInf, kInf, 0.5}, {4, 3});
         Tensor y = mt::logsumexp(x, {1});
         backward({y});
         return Outputs{{"y", y}, {"x.grad", x.grad()}};
       }},
      {"logsumexp_int_input",
       [] {
         return Outputs{{"y", mt::logsumexp(cnst({1, 2, 3, 4, 5, 6}, {2, 3}, mt::kInt64), {1})}};
       }},

      {"prod_all_f64",
       [] {
         return prod_all(vals(6), {2, 3});
       }},
      {"prod_all_one_zero_f64",
       [] {
         return prod_all({1.5, -2.0, 0.0, 3.0, 0.5, 2.0}, {2, 3});
       }},
      {"prod_all_two_zeros_f64",
       [] {
         return prod_all({1.5, 0.0, 2.0, 3.0, 0.0, 2.0}, {2, 3});
       }},
      {"prod_dim1_zeros_f64",
       [] {
         return prod_dim(
             {1.5, -2.0, 0.5, 3.0, 2.0, 0.0, -1.5, 0.5, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0},
             {4, 4}, 1);
       }},
      {"prod_dim0_keepdim_zeros_f64",
       [] {
         return prod_dim({1.5, 0.0, 2.0, -1.0, 3.0, 0.0, 0.5, 2.0, 0.0}, {3, 3}, -2, true);
       }},
      {"prod_dim_f32",
       [] {
         return prod_dim(vals(12), {3, 4}, 1, false, F);
       }},
      {"prod_dim_zeros_f32",
       [] {
         return prod_dim({1.5, 0.0, 2.0, -1.0, 3.0, 0.25}, {2, 3}, 1, false, F);
       }},
      {"prod_int32",
       [] {
         const Tensor x = cnst({1, 2, 3, -4, 5, 6}, {2, 3}, mt::kInt32);
         return Outputs{{"all", mt::prod(x)}, {"dim", mt::prod(x, 0)}};
       }},
      {"prod_bool",
       [] {
         const Tensor x = cnst({1, 0, 1, 1}, {2, 2}, mt::kBool);
         return Outputs{{"all", mt::prod(x)}, {"dim", mt::prod(x, 1)}};
       }},
      {"prod_dtype_arg",
       [] {
         return Outputs{{"y", mt::prod(cnst({1.5, 2.5, -3.0, 4.0}, {2, 2}, F), 1, false, D)}};
       }},

      {"cumsum_dim1_f64",
       [] {
         return scan(false, vals(12), {3, 4}, 1);
       }},
      {"cumsum_dim0_f32",
       [] {
         return scan(false, vals(12), {3, 4}, -2, F);
       }},
      {"cumsum_3d_f64",
       [] {
         return scan(false, vals(24), {2, 3, 4}, 1);
       }},
      {"cumsum_int_and_bool",
       [] {
         const Tensor x = cnst({1, 2, 3, -4, 5, 6}, {2, 3}, mt::kInt32);
         return Outputs{{"int", mt::cumsum(x, 1)},
                        {"bool", mt::cumsum(cnst({1, 0, 1, 1}, {4}, mt::kBool), 0)},
                        {"as_f64", mt::cumsum(x, 0, D)}};
       }},
      {"cumprod_dim1_f64",
       [] {
         return scan(true, vals(12), {3, 4}, 1);
       }},
      {"cumprod_zeros_f64",
       [] {
         return scan(true, {0.0, 2.0, -1.5, 3.0, 1.5, 2.0, 0.0, -3.0, 2.0, 0.0,
                            0.5, 0.0, -1.0, 2.0, 0.5, 0.0, 1.5, -0.5, 2.0, 1.25},
                     {5, 4}, 1);
       }},
      {"cumprod_zeros_dim0_f32",
       [] {
         return scan(true, {1.5, 0.0, 2.0, 0.0, 3.0, -1.0, 2.0, 0.5, 0.0, 1.0, 2.0, 3.0}, {4, 3}, 0,
                     F);
       }},
      {"cumprod_int",
       [] {
         return Outputs{{"y", mt::cumprod(cnst({1, 2, 3, -4, 0, 6}, {2, 3}, mt::kInt64), 1)}};
       }},

      {"any_all_float",
       [] {
         const Tensor x = cnst({0.0, 0.0, 0.0, 1.5, 0.0, kNaN, 2.0, -1.0, 3.0}, {3, 3});
         return Outputs{{"any", mt::any(x)},
                        {"all", mt::all(x)},
                        {"any1", mt::any(x, 1)},
                        {"all1", mt::all(x, 1)},
                        {"any0k", mt::any(x, 0, true)},
                        {"all_neg", mt::all(x, -1, true)}};
       }},
      {"any_all_uint8_and_bool",
       [] {
         const Tensor u = cnst({0, 1, 2, 0, 0, 0}, {2, 3}, mt::kUInt8);
         const Tensor b = cnst({1, 0, 1, 1}, {2, 2}, mt::kBool);
         return Outputs{{"u_any", mt::any(u, 1)},
                        {"u_all", mt::all(u)},
                        {"b_any", mt::any(b, 0)},
                        {"b_all", mt::all(b, 1)}};
       }},
      {"any_all_empty",
       [] {
         const Tensor e = mt::zeros({0, 3});
         return Outputs{{"any", mt::any(e)},
                        {"all", mt::all(e)},
                        {"any0", mt::any(e, 0)},
                        {"all0", mt::all(e, 0)}};
       }},

      {"sort_ties_ascending_f64",
       [] {
         return sort_case(kTies, {3, 6}, 1, false);
       }},
      {"sort_ties_descending_f64",
       [] {
         return sort_case(kTies, {3, 6}, -1, true);
       }},
      {"sort_dim0_f32",
       [] {
         return sort_case(kTies, {6, 3}, 0, true, F);
       }},
      {"sort_nan_f64",
       [] {
         return sort_case({1.0, kNaN, 3.0, kNaN, 2.0, -kInf, kInf, 0.0}, {2, 4}, 1, false);
       }},
      {"sort_nan_descending_f32",
       [] {
         return sort_case({1.0, kNaN, 3.0, kNaN, 2.0, -kInf, kInf, 0.0}, {2, 4}, 1, true, F);
       }},
      {"sort_int",
       [] {
         auto [v, i] = mt::sort(cnst({3, 1, 2, 1, 3, 0}, {2, 3}, mt::kInt32), 1, false, true);
         return Outputs{{"values", v}, {"indices", i}};
       }},
      {"topk_largest_f64",
       [] {
         return topk_case(vals(18), {3, 6}, 3, 1, true);
       }},
      {"topk_smallest_dim0_f32",
       [] {
         return topk_case(vals(18), {6, 3}, 2, 0, false, F);
       }},
      {"topk_ties_f64",
       [] {
         return topk_case(kTies, {3, 6}, 4, 1, true);
       }},
      {"topk_ties_smallest_f64",
       [] {
         return topk_case(kTies, {3, 6}, 3, -1, false);
       }},
      {"topk_nan_f64",
       [] {
         return topk_case({1.0, 3.0, kNaN, 3.0, 2.0, 0.5}, {2, 3}, 2, 1, true);
       }},
      {"topk_all_f64", [] { return topk_case(vals(6), {6}, 6, 0, true); }},
      {"topk_k_too_large_refused",
       [] {
         return Outputs{{"out", mt::topk(mt::ones({2, 3}), 4, 1).values}};
       }},

      {"split_size",
       [] {
         Tensor x = leaf(vals(15), {3, 5});
         const auto parts = mt::split(x, 2, 1);
         backward(parts);
         return parts_out(parts, x);
       }},
      {"split_sizes",
       [] {
         Tensor x = leaf(vals(12), {6, 2});
         const auto parts = mt::split(x, std::vector<int64_t>{1, 0, 3, 2}, 0);
         backward(parts);
         return parts_out(parts, x);
       }},
      {"split_larger_than_dim",
       [] {
         return parts_out(mt::split(cnst(vals(6), {2, 3}), 5, -1), Tensor());
       }},
      {"split_sizes_wrong_sum_refused",
       [] {
         return Outputs{{"out", mt::split(mt::ones({4, 2}), std::vector<int64_t>{1, 2}, 0)[0]}};
       }},
      {"chunk_uneven",
       [] {
         Tensor x = leaf(vals(10), {5, 2});
         const auto parts = mt::chunk(x, 3, 0);
         backward(parts);
         return parts_out(parts, x);
       }},
      {"chunk_fewer_than_asked",
       [] {
         return parts_out(mt::chunk(cnst(vals(12), {2, 6}), 4, 1), Tensor());
       }},
      {"chunk_zero_refused",
       [] {
         return Outputs{{"out", mt::chunk(mt::ones({4}), 0)[0]}};
       }},
      {"repeat_2d",
       [] {
         return repeat_case(vals(6), {2, 3}, {2, 3});
       }},
      {"repeat_new_dims",
       [] {
         return repeat_case(vals(3), {3}, {2, 1, 2});
       }},
      {"repeat_size_one_dims_f32",
       [] {
         return repeat_case(vals(4), {4, 1}, {1, 3}, F);
       }},
      {"repeat_ones_copies",
       [] {
         return repeat_case(vals(4), {2, 2}, {1, 1});
       }},
      {"repeat_too_few_dims_refused",
       [] {
         return Outputs{{"out", mt::ones({2, 3}).repeat({2})}};
       }},

      {"einsum_matmul",
       [] {
         return einsum_case("ij,jk->ik", {{3, 4}, {4, 2}});
       }},
      {"einsum_batch_transposed_f32",
       [] {
         return einsum_case("bij,bjk->bki", {{2, 3, 4}, {2, 4, 5}}, F);
       }},
      {"einsum_attention",
       [] {
         return einsum_case("bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}});
       }},
      {"einsum_implicit",
       [] {
         return einsum_case("kj,ji", {{3, 4}, {4, 2}});
       }},
      {"einsum_outer",
       [] {
         return einsum_case("i,j->ij", {{3}, {4}});
       }},
      {"einsum_dot",
       [] {
         return einsum_case("i,i->", {{5}, {5}});
       }},
      {"einsum_trace",
       [] {
         return einsum_case("ii->", {{3, 3}});
       }},
      {"einsum_diagonal",
       [] {
         return einsum_case("ii->i", {{3, 3}});
       }},
      {"einsum_sum_and_transpose",
       [] {
         return einsum_case("ijk->kj", {{2, 3, 4}});
       }},
      {"einsum_three_operands",
       [] {
         return einsum_case("ij,jk,kl->li", {{2, 3}, {3, 4}, {4, 5}});
       }},
      {"einsum_ellipsis_broadcast",
       [] {
         return einsum_case("...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}});
       }},
      {"einsum_ellipsis_summed",
       [] {
         return einsum_case("...ij->j", {{2, 3, 4}});
       }},
      {"einsum_spaces_and_uppercase",
       [] {
         return einsum_case("Ab , bC -> CA", {{2, 3}, {3, 4}});
       }},
      {"einsum_wrong_operand_count_refused",
       [] {
         return Outputs{{"out", mt::einsum("ij,jk->ik", {mt::ones({2, 2})})}};
       }},
      {"einsum_wrong_dims_refused",
       [] {
         return Outputs{{"out", mt::einsum("ijk->i", {mt::ones({2, 2})})}};
       }},

      {"addmm_default",
       [] {
         return operands_case({{3, 2}, {3, 4}, {4, 2}}, D, [](const std::vector<Tensor>& x) {
           return mt::addmm(x[0], x[1], x[2]);
         });
       }},
      {"addmm_scaled_broadcast",
       [] {
         return operands_case({{2}, {3, 4}, {4, 2}}, D, [](const std::vector<Tensor>& x) {
           return mt::addmm(x[0], x[1], x[2], 0.5, -2.0);
         });
       }},
      {"addmm_f32",
       [] {
         return operands_case({{1, 2}, {3, 4}, {4, 2}}, F, [](const std::vector<Tensor>& x) {
           return mt::addmm(x[0], x[1], x[2], 2.0, 0.25);
         });
       }},
      {"addmm_beta_zero_ignores_nan",
       [] {
         const Tensor x = cnst({kNaN, 1.0}, {2});
         Tensor a = leaf(vals(6), {3, 2}), b = leaf(vals(4), {2, 2});
         Tensor y = mt::addmm(x, a, b, 0, 1.5);
         backward({y});
         return Outputs{{"y", y}, {"a.grad", a.grad()}, {"b.grad", b.grad()}};
       }},
      {"baddbmm_scaled",
       [] {
         return operands_case(
             {{2, 3, 2}, {2, 3, 4}, {2, 4, 2}}, D,
             [](const std::vector<Tensor>& x) { return mt::baddbmm(x[0], x[1], x[2], 0.75, 1.5); });
       }},
      {"baddbmm_broadcast_f32",
       [] {
         return operands_case({{3, 1}, {2, 3, 4}, {2, 4, 2}}, F, [](const std::vector<Tensor>& x) {
           return mt::baddbmm(x[0], x[1], x[2], -1.0, 2.0);
         });
       }},
      {"addmm_shapes_refused",
       [] {
         return Outputs{{"out", mt::addmm(mt::ones({2}), mt::ones({3, 4}), mt::ones({3, 2}))}};
       }},
  };
  return all;
}

// Values match within the dtype's rounding (float32 results went through float32 arithmetic on
// both sides, in different orders); NaN matches NaN and infinities match exactly.
void expect_matches(const Tensor& actual, const GoldenTensor& golden, const std::string& what) {
  EXPECT_EQ(std::string(mt::dtype_name(actual.dtype())), golden.dtype) << what;
  ASSERT_EQ(actual.shape(), golden.shape) << what;
  const std::vector<double> a = actual.to_vector<double>();
  const double rtol = actual.dtype() == mt::kFloat32 ? 2e-6 : 1e-12;
  const double atol = actual.dtype() == mt::kFloat32 ? 2e-6 : 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = golden.values[i];
    if (std::isnan(e) || std::isinf(e)) {
      EXPECT_TRUE(std::isnan(e) ? std::isnan(a[i]) : a[i] == e)
          << what << " [" << i << "]: " << a[i] << " vs " << e;
    } else {
      EXPECT_NEAR(a[i], e, atol + rtol * std::fabs(e)) << what << " [" << i << "]";
    }
  }
}

class ReduceGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ReduceGolden, MatchesPyTorch) {
  static const std::map<std::string, GoldenCase> cases = load_cases();
  const auto found = cases.find(GetParam());
  ASSERT_NE(found, cases.end()) << "no golden record for " << GetParam()
                                << "; rerun scripts/golden/make_reduce.py";
  const GoldenCase& golden = found->second;
  if (golden.raises) {
    EXPECT_THROW(programs().at(GetParam())(), mt::Error);
    return;
  }
  const Outputs out = programs().at(GetParam())();
  ASSERT_EQ(out.size(), golden.tensors.size());
  for (const GoldenTensor& expected : golden.tensors) {
    const std::string& name = expected.name;
    ASSERT_TRUE(out.count(name)) << name;
    ASSERT_TRUE(out.at(name).defined()) << name << " is undefined";
    expect_matches(out.at(name), expected, GetParam() + ": " + name);
  }
}

std::vector<std::string> program_names() {
  std::vector<std::string> names;
  for (const auto& [name, program] : programs()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, ReduceGolden, ::testing::ValuesIn(program_names()),
                         [](const auto& info) { return info.param; });

TEST(ReduceOps, EveryGoldenCaseHasAProgram) {
  for (const auto& [name, golden] : load_cases()) EXPECT_TRUE(programs().count(name)) << name;
}

}  // namespace

// Long slices with many ties, read through a transposed (strided) view: the merge sort runs
// many merge widths, and its order must be std::stable_sort's.
TEST(ReduceOps, SortOfLongStridedSlicesIsStable) {
  const int64_t rows = 5, n = 1037;
  const Tensor base = mt::randint(0, 9, {n, rows}, mt::kInt64).to(mt::kFloat32);
  const Tensor x = base.t();  // [rows, n], stride 1 along dim 0
  for (bool descending : {false, true}) {
    auto [values, indices] = mt::sort(x, 1, descending);
    const auto xv = x.contiguous().to_vector<float>();
    const auto vv = values.to_vector<float>();
    const auto iv = indices.to_vector<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const float va = xv[r * n + a], vb = xv[r * n + b];
        return descending ? va > vb : va < vb;
      });
      for (int64_t k = 0; k < n; ++k) {
        ASSERT_EQ(iv[r * n + k], order[k]) << "row " << r << " position " << k;
        ASSERT_EQ(vv[r * n + k], xv[r * n + order[k]]);
      }
    }
  }
}

// Scans of a strided input along a long dim accumulate in order, in double for float32.
TEST(ReduceOps, CumsumOfStridedInputAccumulatesInDouble) {
  const Tensor x = mt::testing::random_tensor({300, 4}, mt::kFloat32, true, -1, 1).t();
  const Tensor y = mt::cumsum(x, 1);
  const auto xv = x.contiguous().to_vector<float>();
  const auto yv = y.to_vector<float>();
  for (int64_t r = 0; r < 4; ++r) {
    double acc = 0;
    for (int64_t k = 0; k < 300; ++k) {
      acc += xv[r * 300 + k];
      ASSERT_EQ(yv[r * 300 + k], static_cast<float>(acc)) << r << ", " << k;
    }
  }
}

// split and chunk record one node for all pieces (PyTorch's SplitBackward0), whose backward
// writes each piece's gradient into one tensor, zeros where a piece got none; a piece changed in
// place still differentiates through the view rules.
TEST(ReduceOps, SplitIsOneNodeForAllPieces) {
  const Tensor x = mt::randn({2, 9}).requires_grad_();
  const auto parts = mt::split(x, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_NE(parts[i].grad_fn(), nullptr);
    EXPECT_EQ(parts[i].grad_fn()->name(), "SplitBackward0");
    EXPECT_EQ(parts[i].grad_fn(), parts[0].grad_fn());
  }
  EXPECT_EQ(mt::split(x, std::vector<int64_t>{4, 5}, 1)[1].grad_fn()->name(),
            "SplitWithSizesBackward0");
  EXPECT_EQ(mt::chunk(x, 3, 1)[2].grad_fn()->name(), "SplitBackward0");
  // Pieces 0 and 2 used: piece 1's columns get zeros.
  mt::sum(parts[0] * 2.0 + parts[2] * 3.0).backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 9; ++c) EXPECT_EQ(g[r * 9 + c], c < 3 ? 2.0f : c < 6 ? 0.0f : 3.0f);
  // In place through a piece of a non-leaf: the base's history is rewritten as for narrow.
  const Tensor leaf = mt::randn({4, 2}).requires_grad_();
  const Tensor y = leaf * 1.0;
  auto halves = mt::chunk(y, 2, 0);
  halves[1].mul_(5.0);
  mt::sum(y).backward();
  const std::vector<float> gl = leaf.grad().to_vector<float>();
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(gl[i], i < 4 ? 1.0f : 5.0f) << i;
}

TEST(ReduceOps, SplitAndChunkAreViewsAndRepeatCopies) {
  const Tensor x = mt::arange(12, mt::TensorOptions().dtype(mt::kFloat32)).reshape({3, 4});
  for (const Tensor& p : mt::split(x, 3, 1)) EXPECT_EQ(p.storage(), x.storage());
  for (const Tensor& p : mt::chunk(x, 2, 0)) EXPECT_EQ(p.storage(), x.storage());
  EXPECT_EQ(mt::chunk(mt::zeros({0, 2}), 3, 0).size(), 3u);
  for (const Shape& reps : {Shape{1, 1}, Shape{2, 1}, Shape{1, 1, 1}}) {
    const Tensor r = x.repeat(reps);
    EXPECT_NE(r.storage(), x.storage()) << reps;
    EXPECT_TRUE(mt::equal(r.reshape({-1}).narrow(0, 0, 12), x.reshape({-1}))) << reps;
  }
}

TEST(ReduceOps, ResultDtypes) {
  const Tensor i = mt::ones({2, 3}, mt::TensorOptions().dtype(mt::kInt32));
  EXPECT_EQ(mt::prod(i).dtype(), mt::kInt64);
  EXPECT_EQ(mt::cumsum(i, 0).dtype(), mt::kInt64);
  EXPECT_EQ(mt::cumprod(i, 0, mt::kFloat32).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::any(i).dtype(), mt::kBool);
  EXPECT_EQ(mt::all(i.to(mt::kUInt8), 0).dtype(), mt::kUInt8);
  EXPECT_EQ(mt::logsumexp(i, {0}).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::sort(i, 0).indices.dtype(), mt::kInt64);
  EXPECT_EQ(mt::topk(i.to(mt::kFloat16), 1).values.dtype(), mt::kFloat16);
}

TEST(ReduceOps, ErrorsNameTheOpAndValues) {
  const Tensor x = mt::ones({2, 3});
  mt::testing::expect_error([&] { mt::topk(x, 4, 1); }, {"topk", "k = 4", "[2, 3]"});
  mt::testing::expect_error(
      [&] {
        mt::split(x, std::vector<int64_t>{1, 3}, 1);
      },
      {"split_with_sizes", "sum exactly to 3", "[1, 3]"});
  mt::testing::expect_error([&] { mt::chunk(x, 0); }, {"chunk", "got: 0"});
  mt::testing::expect_error([&] { x.repeat({2}); }, {"repeat", "[2]", "[2, 3]"});
  mt::testing::expect_error([&] { mt::prod(x, 2); }, {"prod", "dimension out of range"});
  mt::testing::expect_error([&] { mt::einsum("ij,jk", {x}); },
                            {"einsum", "fewer operands", "ij,jk"});
  mt::testing::expect_error([&] { mt::einsum("ii->i", {x}); },
                            {"einsum", "subscript i is repeated", "2 != 3"});
  mt::testing::expect_error(
      [&] {
        mt::einsum("ij,kj->ik", {x, mt::ones({2, 2})});
      },
      {"einsum", "do not broadcast", "subscript j"});
  mt::testing::expect_error([&] { mt::einsum("i$", {x}); }, {"einsum", "invalid subscript"});
  mt::testing::expect_error([&] { mt::addmm(x, x, x); }, {"mm", "[2, 3]"});
  mt::testing::expect_error(
      [&] {
        mt::baddbmm(mt::ones({5}), mt::ones({1, 2, 3}), mt::ones({1, 3, 4}));
      },
      {"expand"});
}
