// Indexing and joining: gather, scatter_add, index_select, index_add, one_hot, cat, stack.
// Every op is compared with a plain-loop float64 reference on random non-contiguous inputs.
#include <algorithm>

#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

const std::vector<DType>& value_dtypes() {
  static const std::vector<DType> v{mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16,
                                    mt::kInt64,   mt::kInt32,   mt::kUInt8};
  return v;
}

std::string label(DType dt, int64_t dim) {
  return std::string(mt::dtype_name(dt)) + " dim " + std::to_string(dim);
}

// A non-contiguous view of `shape` into a larger tensor made by `make(big_shape)`: the last two
// dims are transposed and dim 0 skips every other element.
template <typename Make>
Tensor strided_view(const Shape& shape, Make make) {
  if (shape.size() == 0) return make(shape);
  Shape big = shape;
  if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
  big[0] *= 2;
  Tensor v = make(big).slice(0, 0, std::nullopt, 2);
  if (v.dim() >= 2) v = v.transpose(-1, -2);
  EXPECT_EQ(v.shape(), shape);
  if (std::all_of(shape.begin(), shape.end(), [](int64_t n) { return n > 1; })) {
    EXPECT_FALSE(v.is_contiguous());
  }
  return v;
}

Tensor make_input(const Shape& shape, DType dt, bool non_contiguous = true) {
  const bool fp = mt::is_floating(dt);
  const auto make = [&](const Shape& s) {
    return mt::testing::random_tensor(s, mt::kFloat64, false, fp ? -2.0 : 0.0, fp ? 2.0 : 50.0)
        .to(dt);
  };
  return non_contiguous ? strided_view(shape, make) : make(shape);
}

// Random int64 indices in [0, high).
Tensor random_index(const Shape& shape, int64_t high, bool non_contiguous = true) {
  const auto make = [&](const Shape& s) { return mt::randint(0, high, s); };
  return non_contiguous ? strided_view(shape, make) : make(shape);
}

std::vector<int64_t> unravel(int64_t lin, const Shape& s) {
  std::vector<int64_t> p(s.size());
  for (int64_t d = s.size() - 1; d >= 0; --d) {
    p[d] = lin % s[d];
    lin /= s[d];
  }
  return p;
}

int64_t ravel(const std::vector<int64_t>& p, const Shape& s) {
  int64_t lin = 0;
  for (int64_t d = 0; d < s.size(); ++d) lin = lin * s[d] + p[d];
  return lin;
}

Tensor ref_tensor(const std::vector<double>& v, const Shape& s) {
  return mt::from_vector<double>(v, s);
}

int64_t wrap(int64_t dim, int64_t ndim) { return dim < 0 ? dim + ndim : dim; }

Tensor f64_leaf(const Shape& shape, bool non_contiguous = true) {
  Tensor t = make_input(shape, mt::kFloat64, non_contiguous);
  t.requires_grad_();
  return t;
}

}  // namespace

// ---- gather -------------------------------------------------------------------------------------
TEST(Gather, MatchesReferenceAcrossDtypesAndDims) {
  mt::manual_seed(11);
  const Shape xs{4, 5, 6};
  for (DType dt : value_dtypes()) {
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const int64_t d = wrap(dim, 3);
      Shape is{3, 4, 5};
      is[d] = 7;  // larger than x along dim: allowed
      const Tensor x = make_input(xs, dt);
      const Tensor index = random_index(is, xs[d]);
      const Tensor out = mt::gather(x, dim, index);
      EXPECT_EQ(out.dtype(), dt);
      const auto xv = x.to_vector<double>();
      const auto iv = index.to_vector<int64_t>();
      std::vector<double> ref(is.numel());
      for (int64_t i = 0; i < is.numel(); ++i) {
        auto p = unravel(i, is);
        p[d] = iv[i];
        ref[i] = xv[ravel(p, xs)];
      }
      expect_close(out, ref_tensor(ref, is), 0, 0, "gather " + label(dt, dim));
    }
  }
}

TEST(Gather, BoolAndZeroDim) {
  mt::manual_seed(12);
  const Tensor x = make_input({3, 4}, mt::kFloat64) > 0.0;
  const Tensor index = mt::from_vector<int64_t>({3, 0, 1, 2, 2, 2}, Shape{3, 2});
  const Tensor out = mt::gather(x, 1, index);
  ASSERT_EQ(out.dtype(), mt::kBool);
  const auto xv = x.to_vector<double>();
  const std::vector<double> ref{xv[3], xv[0], xv[5], xv[6], xv[10], xv[10]};
  expect_close(out, ref_tensor(ref, {3, 2}), 0, 0, "bool gather");

  const Tensor s = mt::scalar_tensor(2.5, mt::kFloat64);
  const Tensor g = mt::gather(s, 0, mt::scalar_tensor(0, mt::kInt64));
  EXPECT_EQ(g.dim(), 0);
  EXPECT_EQ(g.item<double>(), 2.5);
}

TEST(Gather, Errors) {
  const Tensor x = mt::zeros({3, 5});
  expect_error(
      [&] {
        mt::gather(x, 1, mt::from_vector<int64_t>({0, 7}, Shape{1, 2}));
      },
      {"gather: index 7 is out of bounds for dimension 1 with size 5"});
  expect_error(
      [&] {
        mt::gather(x, 0, mt::from_vector<int64_t>({-1}, Shape{1, 1}));
      },
      {"gather: index -1 is out of bounds for dimension 0 with size 3"});
  expect_error(
      [&] {
        mt::gather(x, 1, mt::zeros({4, 2}, mt::kInt64));
      },
      {"gather: size does not match at dimension 0", "[4, 2]", "[3, 5]", "apart from dimension 1"});
  expect_error([&] { mt::gather(x, 1, mt::zeros({3}, mt::kInt64)); },
               {"gather: index tensor must have the same number of dimensions", "[3]", "[3, 5]"});
  expect_error(
      [&] {
        mt::gather(x, 1, mt::zeros({3, 2}, mt::kInt32));
      },
      {"gather: expected index to have dtype int64, got int32"});
  expect_error(
      [&] {
        mt::gather(x, 2, mt::zeros({3, 2}, mt::kInt64));
      },
      {"gather: dimension out of range"});
  // A bad index found by one of several threads is still reported (after the parallel loop).
  Tensor big = mt::zeros({2, 40000}, mt::kInt64);
  big[1].narrow(0, 39999, 1).fill_(123);
  expect_error(
      [&] {
        mt::gather(mt::zeros({2, 50}), 1, big);
      },
      {"gather: index 123 is out of bounds for dimension 1 with size 50"});
}

// ---- scatter_add --------------------------------------------------------------------------------
TEST(ScatterAdd, MatchesReferenceAcrossDtypesAndDims) {
  mt::manual_seed(21);
  const Shape xs{4, 5, 6};
  for (DType dt : value_dtypes()) {
    for (int64_t dim : {0, 1, -1}) {
      const int64_t d = wrap(dim, 3);
      Shape is{3, 4, 5};
      is[d] = 9;  // more entries than x has along dim, so indices repeat
      Shape ss = is;
      for (auto& v : ss) v += 1;  // src may be larger than index
      const Tensor x = make_input(xs, dt);
      const Tensor src = make_input(ss, dt);
      const Tensor index = random_index(is, xs[d]);
      const Tensor out = mt::scatter_add(x, dim, index, src);
      EXPECT_EQ(out.dtype(), dt);
      auto ref = x.to_vector<double>();
      const auto sv = src.to_vector<double>();
      const auto iv = index.to_vector<int64_t>();
      for (int64_t i = 0; i < is.numel(); ++i) {
        auto p = unravel(i, is);
        const double v = sv[ravel(p, ss)];
        p[d] = iv[i];
        ref[ravel(p, xs)] += v;
      }
      // uint8 wraps like the kernel does.
      if (dt == mt::kUInt8)
        for (auto& r : ref) r = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(r)));
      const Tensor expected = ref_tensor(ref, xs);
      const auto tol = mt::testing::tolerance_for(dt);
      // One rounding of a sum of up to ~9 terms of magnitude <= 2.
      expect_close(out, expected, tol.rtol, tol.atol * 4, "scatter_add " + label(dt, dim));
    }
  }
}

TEST(ScatterAdd, HalfAccumulatesInFloat) {
  // 3000 adds of 1 to one float16 element: rounding after each add would stall at 2048.
  const int64_t n = 3000;
  const Tensor x = mt::zeros({1}, mt::kFloat16);
  const Tensor src = mt::ones({n}, mt::kFloat16);
  const Tensor index = mt::zeros({n}, mt::kInt64);
  EXPECT_EQ(mt::scatter_add(x, 0, index, src).item<double>(), 3000.0);
  EXPECT_EQ(mt::index_add(x, 0, index, src).item<double>(), 3000.0);
  // bfloat16 would stall at 256; 3000 itself rounds to 3008 once.
  const Tensor bf = mt::zeros({1}, mt::kBFloat16);
  EXPECT_EQ(mt::index_add(bf, 0, index, src.to(mt::kBFloat16)).item<double>(), 3008.0);
}

TEST(ScatterAdd, LeavesInputUntouchedAndChecks) {
  const Tensor x = mt::zeros({3, 4});
  const Tensor src = mt::ones({2, 4});
  const Tensor index = mt::from_vector<int64_t>({0, 2, 2, 2, 1, 1, 0, 0}, Shape{2, 4});
  const Tensor out = mt::scatter_add(x, 0, index, src);
  EXPECT_EQ(x.to_vector<double>(), std::vector<double>(12, 0.0));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1}));

  expect_error(
      [&] {
        mt::scatter_add(x, 0, mt::from_vector<int64_t>({3}, Shape{1, 1}), src);
      },
      {"scatter_add: index 3 is out of bounds for dimension 0 with size 3"});
  expect_error(
      [&] {
        mt::scatter_add(x, 0, mt::zeros({2, 5}, mt::kInt64), mt::ones({2, 5}));
      },
      {"scatter_add: size does not match at dimension 1", "[2, 5]", "self [3, 4]"});
  expect_error(
      [&] {
        mt::scatter_add(x, 0, mt::zeros({3, 4}, mt::kInt64), src);
      },
      {"scatter_add: size does not match at dimension 0", "src [2, 4]"});
  expect_error(
      [&] {
        mt::scatter_add(x, 0, index, mt::ones({2, 4}, mt::kFloat64));
      },
      {"scatter_add: expected self and src to have the same dtype, got float32 and "
       "float64"});
}

// ---- index_select -------------------------------------------------------------------------------
TEST(IndexSelect, MatchesReferenceAcrossDtypesAndDims) {
  mt::manual_seed(31);
  const Shape xs{5, 6, 7};
  for (DType dt : value_dtypes()) {
    for (int64_t dim : {0, 1, 2, -2}) {
      for (DType index_dt : {mt::kInt64, mt::kInt32}) {
        const int64_t d = wrap(dim, 3);
        const Tensor x = make_input(xs, dt);
        // A strided 1-D index with repeats.
        const Tensor index = mt::randint(0, xs[d], {16}).slice(0, 0, std::nullopt, 2).to(index_dt);
        const Tensor out = mt::index_select(x, dim, index);
        Shape os = xs;
        os[d] = 8;
        ASSERT_EQ(out.shape(), os);
        const auto xv = x.to_vector<double>();
        const auto iv = index.to_vector<int64_t>();
        std::vector<double> ref(os.numel());
        for (int64_t i = 0; i < os.numel(); ++i) {
          auto p = unravel(i, os);
          p[d] = iv[p[d]];
          ref[i] = xv[ravel(p, xs)];
        }
        expect_close(out, ref_tensor(ref, os), 0, 0, "index_select " + label(dt, dim));
      }
    }
  }
}

TEST(IndexSelect, ZeroDimAndErrors) {
  const Tensor x = mt::arange(12, mt::kFloat32).reshape({3, 4});
  const Tensor row = mt::index_select(x, 0, mt::scalar_tensor(2, mt::kInt64));
  EXPECT_EQ(row.shape(), (Shape{1, 4}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(mt::index_select(x, 1, mt::zeros({0}, mt::kInt64)).shape(), (Shape{3, 0}));

  expect_error(
      [&] {
        mt::index_select(x, 1, mt::tensor<int64_t>({1, 4}));
      },
      {"index_select: index 4 is out of bounds for dimension 1 with size 4"});
  expect_error(
      [&] {
        mt::index_select(x, 0, mt::zeros({2, 2}, mt::kInt64));
      },
      {"index_select: index must be a 0-D or 1-D tensor, got shape [2, 2]"});
  expect_error([&] { mt::index_select(x, 0, mt::zeros({2}, mt::kFloat32)); },
               {"index_select: expected index to have dtype int64 or int32, got float32"});
}

// ---- index_add ----------------------------------------------------------------------------------
TEST(IndexAdd, MatchesReferenceAcrossDtypesAndDims) {
  mt::manual_seed(41);
  const Shape xs{5, 6, 7};
  for (DType dt : value_dtypes()) {
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = wrap(dim, 3);
      Shape ss = xs;
      ss[d] = 9;
      const Tensor x = make_input(xs, dt);
      const Tensor src = make_input(ss, dt);
      const Tensor index = random_index({9}, xs[d]);
      const Tensor out = mt::index_add(x, dim, index, src);
      auto ref = x.to_vector<double>();
      const auto sv = src.to_vector<double>();
      const auto iv = index.to_vector<int64_t>();
      for (int64_t i = 0; i < ss.numel(); ++i) {
        auto p = unravel(i, ss);
        const double v = sv[i];
        p[d] = iv[p[d]];
        ref[ravel(p, xs)] += v;
      }
      if (dt == mt::kUInt8)
        for (auto& r : ref) r = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(r)));
      const auto tol = mt::testing::tolerance_for(dt);
      expect_close(out, ref_tensor(ref, xs), tol.rtol, tol.atol * 4, "index_add " + label(dt, dim));
    }
  }
}

TEST(IndexAdd, Errors) {
  const Tensor x = mt::zeros({3, 4});
  expect_error(
      [&] {
        mt::index_add(x, 0, mt::tensor<int64_t>({0, 3}), mt::ones({2, 4}));
      },
      {"index_add: index 3 is out of bounds for dimension 0 with size 3"});
  expect_error(
      [&] {
        mt::index_add(x, 0, mt::tensor<int64_t>({0, 1, 2}), mt::ones({2, 4}));
      },
      {"index_add: number of indices (3) should be equal to source.size(0) (2)"});
  expect_error(
      [&] {
        mt::index_add(x, 0, mt::tensor<int64_t>({0, 1}), mt::ones({2, 5}));
      },
      {"index_add: source [2, 5] and self [3, 4] must have the same size apart from "
       "dimension 0"});
  expect_error([&] { mt::index_add(x, 1, mt::tensor<int64_t>({0}), mt::ones({3})); },
               {"index_add: source and self must have the same number of dimensions"});
}

// ---- one_hot ------------------------------------------------------------------------------------
TEST(OneHot, KnownVector) {
  const Tensor idx = mt::tensor<int64_t>({0, 2, 1, 2});
  const Tensor oh = mt::one_hot(idx);
  ASSERT_EQ(oh.dtype(), mt::kInt64);
  ASSERT_EQ(oh.shape(), (Shape{4, 3}));
  EXPECT_EQ(oh.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1}));

  // Non-contiguous 2-D input with an explicit class count.
  const Tensor idx2 = mt::from_vector<int64_t>({3, 0, 1, 4, 2, 2}, Shape{2, 3}).t();
  const Tensor oh2 = mt::one_hot(idx2, 6);
  ASSERT_EQ(oh2.shape(), (Shape{3, 2, 6}));
  const auto iv = idx2.to_vector<int64_t>();
  const auto ov = oh2.to_vector<int64_t>();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(ov[i * 6 + c], iv[i] == c ? 1 : 0);

  EXPECT_EQ(mt::one_hot(mt::zeros({0}, mt::kInt64), 4).shape(), (Shape{0, 4}));
}

TEST(OneHot, Errors) {
  expect_error(
      [] {
        mt::one_hot(mt::tensor<int64_t>({0, 3}), 3);
      },
      {"one_hot: class values must be smaller than num_classes"});
  expect_error(
      [] {
        mt::one_hot(mt::tensor<int64_t>({0, -1}));
      },
      {"one_hot: class values must be non-negative"});
  expect_error([] { mt::one_hot(mt::zeros({0}, mt::kInt64)); },
               {"one_hot: cannot infer the number of classes from an empty tensor"});
  expect_error([] { mt::one_hot(mt::zeros({2}, mt::kInt32)); },
               {"one_hot: expected an int64 index tensor, got int32"});
}

// ---- cat ----------------------------------------------------------------------------------------
namespace {
// Reference cat of float64 host copies along d.
std::vector<double> ref_cat(const std::vector<Tensor>& ts, int64_t d, const Shape& out_shape) {
  std::vector<double> out(out_shape.numel());
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    const auto v = t.to_vector<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      auto p = unravel(i, t.shape());
      p[d] += offset;
      out[ravel(p, out_shape)] = v[i];
    }
    offset += t.size(d);
  }
  return out;
}
}  // namespace

TEST(Cat, MatchesReferenceAcrossDtypesAndDims) {
  mt::manual_seed(51);
  for (DType dt : value_dtypes()) {
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const int64_t d = wrap(dim, 3);
      std::vector<Tensor> ts;
      Shape out_shape{3, 4, 5};
      out_shape[d] = 0;
      for (int64_t len : {2, 1, 3}) {
        Shape s{3, 4, 5};
        s[d] = len;
        ts.push_back(make_input(s, dt, len != 1));
        out_shape[d] += len;
      }
      const Tensor out = mt::cat(ts, dim);
      ASSERT_EQ(out.shape(), out_shape);
      EXPECT_EQ(out.dtype(), dt);
      expect_close(out, ref_tensor(ref_cat(ts, d, out_shape), out_shape), 0, 0,
                   "cat " + label(dt, dim));
    }
  }
}

TEST(Cat, MixedDtypesPromote) {
  mt::manual_seed(52);
  const Tensor a = make_input({2, 3}, mt::kFloat32);
  const Tensor b = make_input({2, 2}, mt::kFloat64);
  const Tensor c = mt::cat({a, b}, 1);
  ASSERT_EQ(c.dtype(), mt::kFloat64);
  expect_close(c, ref_tensor(ref_cat({a, b}, 1, {2, 5}), {2, 5}), 0, 0, "float32+float64");

  const Tensor i = mt::tensor<int64_t>({7, 8});
  const Tensor h = mt::tensor<float>({0.5f}).to(mt::kFloat16);
  const Tensor ih = mt::cat({i, h});
  EXPECT_EQ(ih.dtype(), mt::kFloat16);
  EXPECT_EQ(ih.to_vector<double>(), (std::vector<double>{7, 8, 0.5}));
  EXPECT_EQ(mt::cat({mt::tensor<bool>({true}), mt::tensor<int32_t>({3})}).dtype(), mt::kInt32);
}

TEST(Cat, ZeroSizeTensors) {
  const Tensor a = mt::ones({2, 0, 3});
  const Tensor b = mt::arange(24, mt::kFloat32).reshape({2, 4, 3});
  const Tensor c = mt::cat({a, b, a}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(c.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(mt::cat({a, a}, 0).shape(), (Shape{4, 0, 3}));
  // Legacy 1-D empty tensors are skipped next to tensors of any rank.
  const Tensor legacy = mt::zeros({0});
  EXPECT_EQ(mt::cat({legacy, b, legacy}, 2).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(mt::cat({legacy, legacy}).shape(), (Shape{0}));
}

TEST(Cat, Errors) {
  expect_error([] { mt::cat({}); }, {"cat: expected a non-empty list of tensors"});
  expect_error(
      [] {
        mt::cat({mt::ones({2, 3}), mt::ones({3, 3})}, 1);
      },
      {"cat: sizes of tensors must match except in dimension 1",
       "Expected size 2 but "
       "got size 3 for tensor number 1"});
  expect_error(
      [] {
        mt::cat({mt::ones({2, 3}), mt::ones({2, 3, 1})});
      },
      {"cat: tensors must have the same number of dimensions: got 2 and 3"});
  expect_error(
      [] {
        mt::cat({mt::ones({2}), mt::scalar_tensor(1.0)});
      },
      {"cat: zero-dimensional tensor (at position 1) cannot be concatenated"});
  expect_error([] { mt::cat({mt::ones({2, 3})}, 2); }, {"cat: dimension out of range"});
}

// ---- stack --------------------------------------------------------------------------------------
TEST(Stack, EveryDim) {
  mt::manual_seed(61);
  const Shape s{2, 3, 4};
  for (DType dt : {mt::kFloat32, mt::kFloat16, mt::kInt64}) {
    std::vector<Tensor> ts;
    for (int k = 0; k < 3; ++k) ts.push_back(make_input(s, dt, k != 1));
    for (int64_t dim : {0, 1, 2, 3, -1, -4}) {
      const int64_t d = wrap(dim, 4);
      const Tensor out = mt::stack(ts, dim);
      Shape os = s;
      os.insert(d, 3);
      ASSERT_EQ(out.shape(), os);
      std::vector<std::vector<double>> vals;
      for (const Tensor& t : ts) vals.push_back(t.to_vector<double>());
      std::vector<double> ref(os.numel());
      for (int64_t i = 0; i < os.numel(); ++i) {
        auto p = unravel(i, os);
        const int64_t k = p[d];
        p.erase(p.begin() + d);
        ref[i] = vals[k][ravel(p, s)];
      }
      expect_close(out, ref_tensor(ref, os), 0, 0, "stack " + label(dt, dim));
    }
  }
}

TEST(Stack, Errors) {
  expect_error(
      [] {
        mt::stack({mt::ones({2, 3}), mt::ones({2, 4})});
      },
      {"stack expects each tensor to be equal size, but got [2, 3] at entry 0 and "
       "[2, 4] at entry 1"});
  expect_error([] { mt::stack({}); }, {"stack: expected a non-empty list of tensors"});
  expect_error([] { mt::stack({mt::ones({2, 3})}, 3); }, {"stack: dimension out of range"});
}

// ---- gradients ----------------------------------------------------------------------------------
TEST(IndexingGrad, Gather) {
  mt::manual_seed(71);
  const Tensor x = f64_leaf({3, 4});
  for (int64_t dim : {0, 1, -1}) {
    const int64_t d = wrap(dim, 2);
    Shape is{2, 3};
    is[d] = 5;  // repeats: gradients of duplicates must add up
    const Tensor index = random_index(is, x.size(d));
    EXPECT_TRUE(mt::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return mt::gather(in[0], dim, index); }, {x}));
  }
}

TEST(IndexingGrad, ScatterAddBothInputs) {
  mt::manual_seed(72);
  const Tensor x = f64_leaf({3, 4});
  const Tensor src = f64_leaf({4, 5});  // larger than index: the rest gets zero gradient
  const Tensor index = random_index({3, 4}, 3);
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::scatter_add(in[0], 0, index, in[1]); },
      {x, src}));
  const Tensor index1 = random_index({3, 2}, 4);
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::scatter_add(in[0], -1, index1, in[1]); },
      {x, src}));
  // Only src requires grad.
  const Tensor plain = make_input({3, 4}, mt::kFloat64);
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::scatter_add(plain, 0, index, in[0]); },
      {src}));
}

TEST(IndexingGrad, IndexSelect) {
  mt::manual_seed(73);
  const Tensor x = f64_leaf({4, 3, 2});
  const Tensor index = mt::tensor<int64_t>({2, 0, 2, 3, 2});
  for (int64_t dim : {0, -3}) {
    EXPECT_TRUE(mt::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return mt::index_select(in[0], dim, index); }, {x}));
  }
  const Tensor index1 = mt::tensor<int32_t>({1, 1, 0});
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::index_select(in[0], 2, index1); }, {x}));
}

TEST(IndexingGrad, IndexAdd) {
  mt::manual_seed(74);
  const Tensor x = f64_leaf({3, 4});
  const Tensor src = f64_leaf({3, 5});
  const Tensor index = mt::tensor<int64_t>({3, 0, 3, 1, 3});
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return mt::index_add(in[0], 1, index, in[1]); },
      {x, src}));
}

TEST(IndexingGrad, Cat) {
  mt::manual_seed(75);
  const Tensor a = f64_leaf({2, 3});
  const Tensor b = make_input({2, 1}, mt::kFloat64);  // no grad
  const Tensor c = f64_leaf({2, 4});
  const Tensor empty = f64_leaf({2, 0}, false);
  for (int64_t dim : {1, -1}) {
    EXPECT_TRUE(mt::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return mt::cat({in[0], b, in[1], in[2]}, dim);
        },
        {a, c, empty}));
  }
  const Tensor r = f64_leaf({3, 3});
  EXPECT_TRUE(mt::autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return mt::cat({in[0], in[1].t()}, 1);
      },
      {r, a}));
}

TEST(IndexingGrad, CatMixedDtypesGivesEachInputItsDtype) {
  Tensor a = mt::ones({2}, mt::kFloat32);
  Tensor b = mt::ones({3}, mt::kFloat64);
  a.requires_grad_();
  b.requires_grad_();
  const Tensor out = mt::cat({a, b});
  ASSERT_TRUE(out.requires_grad());
  out.backward(mt::arange(5, mt::kFloat64));
  ASSERT_EQ(a.grad().dtype(), mt::kFloat32);
  ASSERT_EQ(b.grad().dtype(), mt::kFloat64);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 3, 4}));
}

TEST(IndexingGrad, Stack) {
  mt::manual_seed(76);
  const Tensor a = f64_leaf({2, 3}), b = f64_leaf({2, 3});
  const Tensor c = make_input({2, 3}, mt::kFloat64);
  for (int64_t dim : {0, 1, 2, -1}) {
    EXPECT_TRUE(mt::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return mt::stack({in[0], c, in[1]}, dim);
        },
        {a, b}));
  }
}
