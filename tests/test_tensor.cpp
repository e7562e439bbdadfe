// Tensor creation, views and strides, conversions, broadcasting, type promotion, printing and
// devices. Expected values are written out or computed here with plain loops.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "engine/cpu_allocator.h"
#include "kernels/layout.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

// 0, 1, 2, ... as float64 of `shape` (contiguous).
Tensor iota(const Shape& shape, mt::DType dtype = mt::kFloat64) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  return mt::from_vector(v, shape).to(dtype);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

// ---- creation -------------------------------------------------------------------------------

TEST(Creation, EmptyZerosOnesFull) {
  Tensor e = mt::empty({2, 3});
  EXPECT_EQ(e.shape(), (Shape{2, 3}));
  EXPECT_EQ(e.strides(), (Shape{3, 1}));
  EXPECT_EQ(e.dtype(), mt::kFloat32);
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.numel(), 6);
  EXPECT_EQ(e.nbytes(), 24);
  EXPECT_EQ(mt::empty({4}, mt::kInt32).dtype(), mt::kInt32);

  EXPECT_EQ(values(mt::zeros({2, 2})), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(values(mt::ones({3}, mt::kFloat16)), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(mt::ones({3}, mt::kFloat16).dtype(), mt::kFloat16);
  EXPECT_EQ(mt::zeros({1}).dtype(), mt::kFloat32);

  // full: the value's kind picks the dtype when none is given, as torch.full does.
  EXPECT_EQ(mt::full({2}, 7).dtype(), mt::kInt64);
  EXPECT_EQ(mt::full({2}, 2.5).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::full({2}, true).dtype(), mt::kBool);
  EXPECT_EQ(values(mt::full({2}, 2.5)), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(values(mt::full({2}, 2.5, mt::kInt32)), (std::vector<double>{2, 2}));
  EXPECT_EQ(values(mt::full({2, 0}, 1.0)).size(), 0u);

  Tensor s = mt::scalar_tensor(4.25);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<float>(), 4.25f);

  Tensor like = mt::ones_like(mt::zeros({2, 3}, mt::kFloat64));
  EXPECT_EQ(like.dtype(), mt::kFloat64);
  EXPECT_EQ(like.shape(), (Shape{2, 3}));
  EXPECT_EQ(mt::zeros_like(like, mt::kInt32).dtype(), mt::kInt32);
  EXPECT_EQ(values(mt::full_like(like, 3)), std::vector<double>(6, 3.0));
  expect_error([] { mt::empty({2, -1}); }, {"negative dimension", "[2, -1]"});
}

TEST(Creation, Arange) {
  Tensor a = mt::arange(5);
  EXPECT_EQ(a.dtype(), mt::kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(mt::arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(mt::arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(mt::arange(0, -5, -2).to_vector<int64_t>(), (std::vector<int64_t>{0, -2, -4}));
  EXPECT_EQ(mt::arange(3, 3).numel(), 0);

  Tensor f = mt::arange(0, 1, 0.25);
  EXPECT_EQ(f.dtype(), mt::kFloat32);
  EXPECT_EQ(values(f), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(values(mt::arange(5, 0, -1.5)), (std::vector<double>{5, 3.5, 2, 0.5}));
  EXPECT_EQ(values(mt::arange(0.5, 3)), (std::vector<double>{0.5, 1.5, 2.5}));
  Tensor d = mt::arange(0, 4, 1, mt::kFloat64);
  EXPECT_EQ(d.dtype(), mt::kFloat64);
  EXPECT_EQ(values(d), (std::vector<double>{0, 1, 2, 3}));

  expect_error([] { mt::arange(0, 10, 0); }, {"arange", "step must be nonzero"});
  expect_error([] { mt::arange(0, 10, -1); }, {"arange", "step sign"});
  expect_error([] { mt::arange(5, 0, 1); }, {"arange", "step sign"});
}

TEST(Creation, Linspace) {
  Tensor l = mt::linspace(-1, 2, 7);
  EXPECT_EQ(l.dtype(), mt::kFloat32);
  const auto v = values(l);
  ASSERT_EQ(v.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(v[i], -1 + 0.5 * i, 1e-6) << i;
  EXPECT_EQ(v.front(), -1.0);
  EXPECT_EQ(v.back(), 2.0);  // the end point is exact
  EXPECT_EQ(values(mt::linspace(3, 9, 1)), (std::vector<double>{3}));
  EXPECT_EQ(mt::linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(values(mt::linspace(0, 1, 5, mt::kFloat64)), (std::vector<double>{0, .25, .5, .75, 1}));
  EXPECT_EQ(values(mt::linspace(10, 0, 3)), (std::vector<double>{10, 5, 0}));
  expect_error([] { mt::linspace(0, 1, -2); }, {"linspace", "non-negative", "-2"});
}

TEST(Creation, FromVectorAndTensor) {
  Tensor t = mt::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), mt::kFloat32);
  EXPECT_EQ(values(t.select(1, 2)), (std::vector<double>{3, 6}));
  Tensor as_half = mt::from_vector<double>({0.1, 1e5}, std::nullopt, mt::kFloat16);
  EXPECT_EQ(as_half.dtype(), mt::kFloat16);
  EXPECT_EQ(as_half.to_vector<float>()[0], float(mt::Half(0.1f)));
  EXPECT_TRUE(std::isinf(as_half.to_vector<float>()[1]));
  EXPECT_EQ(mt::tensor<int32_t>({1, 2}).dtype(), mt::kInt32);
  EXPECT_EQ(mt::tensor<int64_t>({1, 2}).dtype(), mt::kInt64);
  EXPECT_EQ(mt::tensor<uint8_t>({1, 2}).dtype(), mt::kUInt8);
  EXPECT_EQ(mt::tensor<double>({1, 2}).dtype(), mt::kFloat64);
  Tensor b = mt::tensor<bool>({true, false, true});
  EXPECT_EQ(b.dtype(), mt::kBool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(mt::from_vector<float>({}).numel(), 0);
  Tensor g = mt::from_vector<float>({1, 2}, std::nullopt, mt::TensorOptions().requires_grad());
  EXPECT_TRUE(g.requires_grad());
  EXPECT_TRUE(g.is_leaf());
  expect_error(
      [] {
        mt::from_vector<float>({1, 2, 3, 4, 5}, Shape{2, 3});
      },
      {"from_vector", "[2, 3]", "needs 6 values, got 5"});
  expect_error(
      [] { mt::from_vector<int64_t>({1}, std::nullopt, mt::TensorOptions().requires_grad()); },
      {"floating"});
}

TEST(Creation, FromBlob) {
  float buffer[6] = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = mt::from_blob(buffer, {2, 3}, mt::kFloat32);
    EXPECT_EQ(t.data_ptr(), static_cast<void*>(buffer));  // no copy
    buffer[4] = 50;
    EXPECT_EQ(t[1][1].item<float>(), 50.0f);
    t[0][0].fill_(-1);
    EXPECT_EQ(buffer[0], -1.0f);
  }
  EXPECT_EQ(buffer[1], 2.0f);  // no deleter: memory untouched after the tensor dies

  // Strided: a column of a row-major buffer.
  Tensor col = mt::from_blob(buffer, {2}, {3}, mt::kFloat32);
  EXPECT_EQ(values(col), (std::vector<double>{-1, 4}));
  EXPECT_FALSE(col.is_contiguous());

  int deleted = 0;
  void* seen = nullptr;
  {
    Tensor view;
    {
      Tensor t = mt::from_blob(buffer, {6}, mt::kFloat32, mt::Device::cpu(), [&](void* p) {
        ++deleted;
        seen = p;
      });
      view = t.narrow(0, 2, 2);
    }
    EXPECT_EQ(deleted, 0) << "a view still references the memory";
    EXPECT_EQ(values(view), (std::vector<double>{3, 4}));
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(seen, static_cast<void*>(buffer));
}

// ---- views and strides ----------------------------------------------------------------------

// Element counts and byte sizes that overflow int64 are errors, not wrapped sizes (which gave a
// segfault for zeros({1 << 62}) and nonsense for expand({1 << 62, 4}).sum()).
TEST(Creation, SizesThatOverflowAreRefused) {
  const int64_t big = int64_t{1} << 62;
  expect_error([&] { mt::zeros({big}); }, {"empty", "[4611686018427387904]", "int64"});
  expect_error([&] { mt::empty({big, 4}); }, {"[4611686018427387904, 4]", "int64"});
  expect_error([&] { mt::empty({big, 4}, mt::kUInt8); }, {"int64"});
  expect_error([&] { mt::zeros({1}).expand({big, 4}); }, {"[4611686018427387904, 4]", "int64"});
  expect_error([&] { mt::empty_strided({2, 2}, {big, 1}); }, {"empty_strided", "int64"});
  float x = 0;
  expect_error([&] { mt::from_blob(&x, {big, 8}, mt::kFloat32); }, {"from_blob", "int64"});
  expect_error([&] { mt::from_blob(&x, {2, big, 8}, mt::kFloat32); }, {"int64"});
  expect_error([&] { (void)Shape({big, big}).numel(); }, {"more elements than int64"});
  // Large but countable: a view of one element expanded (no memory) is fine.
  EXPECT_EQ(mt::zeros({1}).expand({big}).numel(), big);
  EXPECT_EQ(mt::empty({big, 0}).numel(), 0);
}

TEST(Views, ViewAndReshape) {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.storage().get(), x.storage().get());
  EXPECT_EQ(values(v), values(x));
  EXPECT_EQ(x.view({-1}).shape(), (Shape{24}));
  EXPECT_EQ(x.view({2, 1, 12}).strides(), (Shape{12, 12, 1}));
  EXPECT_EQ(mt::scalar_tensor(1.0).view({1, 1}).shape(), (Shape{1, 1}));

  // A transposed tensor can't be flattened without a copy: view refuses, reshape copies.
  Tensor t = x.transpose(1, 2);
  expect_error([&] { t.view({24}); }, {"view", "[2, 4, 3]", "use reshape"});
  Tensor r = t.reshape({24});
  EXPECT_NE(r.storage().get(), x.storage().get());
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c)
      for (int b = 0; b < 3; ++b) want.push_back(a * 12 + b * 4 + c);
  EXPECT_EQ(values(r), want);
  // ... but splitting a transposed dim is a view.
  Tensor split = t.reshape({2, 2, 2, 3});
  EXPECT_EQ(split.storage().get(), x.storage().get());
  EXPECT_EQ(values(split), want);
  EXPECT_EQ(x.reshape({4, 6}).storage().get(), x.storage().get());

  expect_error([&] { x.view({5, -1}); }, {"view", "invalid for input of size 24"});
  expect_error([&] { x.view({-1, -1}); }, {"only one dimension can be inferred"});
  expect_error([&] { x.reshape({7}); }, {"reshape", "[7]", "24"});
}

TEST(Views, TransposePermuteT) {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t[3][2][1].item<double>(), 1 * 12 + 2 * 4 + 3);
  EXPECT_EQ(x.transpose(-1, -3).shape(), (Shape{4, 3, 2}));

  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  const auto pv = values(p);
  for (int c = 0; c < 4; ++c)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b) EXPECT_EQ(pv[c * 6 + a * 3 + b], a * 12 + b * 4 + c);
  expect_error([&] { x.permute({0, 0, 1}); }, {"permute", "repeated dim"});
  expect_error([&] { x.permute({0, 1}); }, {"permute", "number of dims"});

  Tensor m = iota({2, 3});
  EXPECT_EQ(m.t().shape(), (Shape{3, 2}));
  EXPECT_EQ(values(m.t()), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(iota({5}).t().shape() == (Shape{5}));
  expect_error([&] { x.t(); }, {"t: expects a tensor with <= 2 dimensions", "3D"});
  expect_error([&] { x.transpose(0, 3); }, {"transpose", "dimension out of range"});
}

TEST(Views, NarrowSliceSelect) {
  Tensor x = iota({4, 5});
  Tensor n = x.narrow(1, 1, 3);
  EXPECT_EQ(n.shape(), (Shape{4, 3}));
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_EQ(values(n.select(0, 2)), (std::vector<double>{11, 12, 13}));

  Tensor s = x.slice(1, 0, std::nullopt, 2);  // columns 0, 2, 4
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_EQ(s.strides(), (Shape{5, 2}));
  EXPECT_EQ(values(s.select(0, 1)), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(values(x.slice(1, -3, -1).select(0, 0)), (std::vector<double>{2, 3}));
  EXPECT_EQ(values(x.slice(1, 1, 100, 3).select(0, 0)), (std::vector<double>{1, 4}));
  EXPECT_EQ(values(x.slice(0, -2).select(1, 0)), (std::vector<double>{10, 15}));
  EXPECT_EQ(x.slice(0, 3, 1).shape(), (Shape{0, 5}));  // empty, as x[3:1]
  EXPECT_EQ(x.slice(0, -100, 2).shape(), (Shape{2, 5}));
  expect_error([&] { x.slice(0, 0, 2, 0); }, {"slice", "step must be positive"});

  Tensor row = x.select(0, -1);
  EXPECT_EQ(row.shape(), (Shape{5}));
  EXPECT_EQ(values(row), (std::vector<double>{15, 16, 17, 18, 19}));
  EXPECT_EQ(x[1][-2].item<double>(), 8);
  EXPECT_EQ(x.select(1, 4).strides(), (Shape{5}));
  expect_error([&] { x.select(0, 4); },
               {"select", "index 4 is out of bounds for dimension 0 with size 4"});
  expect_error([&] { x.select(1, -6); }, {"select", "index -6", "size 5"});
  expect_error([&] { mt::scalar_tensor(1.0).select(0, 0); }, {"select", "0-dim"});
}

TEST(Views, SqueezeUnsqueezeExpandFlatten) {
  Tensor x = iota({2, 1, 3, 1});
  EXPECT_EQ(x.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.squeeze(-1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 1, 3, 1}));  // size 2: unchanged
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(iota({2, 3}).unsqueeze(1).strides(), (Shape{3, 3, 1}));
  EXPECT_TRUE(iota({2, 3}).unsqueeze(2).is_contiguous());
  EXPECT_EQ(mt::scalar_tensor(1.0).unsqueeze(0).shape(), (Shape{1}));

  Tensor c = iota({3, 1});
  Tensor e = c.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.storage().get(), c.storage().get());
  const auto ev = values(e);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(ev[i], (i / 4) % 3);
  EXPECT_EQ(c.expand({-1, 5}).shape(), (Shape{3, 5}));
  EXPECT_TRUE(c.expand({3, 1}).is_same(c));
  expect_error([&] { c.expand({2, 4}); }, {"expand", "must match the existing size (3)", "[2, 4]"});
  expect_error([&] { c.expand({3}); }, {"expand", "number of sizes provided (1)"});

  Tensor f = iota({2, 3, 4});
  EXPECT_EQ(f.flatten().shape(), (Shape{24}));
  EXPECT_EQ(f.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(f.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(f.flatten().storage().get(), f.storage().get());
  EXPECT_EQ(values(f.transpose(0, 1).flatten()).size(), 24u);
  EXPECT_EQ(mt::scalar_tensor(2.0).flatten().shape(), (Shape{1}));
}

TEST(Views, ContiguousCopiesOnlyWhenNeeded) {
  Tensor x = iota({3, 4});
  EXPECT_TRUE(x.contiguous().is_same(x));
  Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_FALSE(c.is_same(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), x.storage().get());
  EXPECT_EQ(values(c), values(t));
  EXPECT_EQ(c.strides(), (Shape{3, 1}));
  // Size-1 dims don't break contiguity whatever their stride.
  Tensor one = x.narrow(0, 1, 1);
  EXPECT_TRUE(one.is_contiguous());
  EXPECT_TRUE(one.contiguous().is_same(one));
}

TEST(Views, SharedStorage) {
  Tensor x = mt::zeros({3, 4});
  x.select(0, 1).fill_(5);                  // row 1
  x.slice(1, 0, std::nullopt, 3).fill_(7);  // columns 0 and 3
  x.t()[2].add_(mt::ones({3}));             // column 2
  x.view({12}).narrow(0, 11, 1).fill_(-1);
  EXPECT_EQ(values(x), (std::vector<double>{7, 0, 1, 7, 7, 5, 6, 7, 7, 0, 1, -1}));
  Tensor y = x.transpose(0, 1);
  y.copy_(mt::full({4, 3}, 2.0));
  EXPECT_EQ(values(x), std::vector<double>(12, 2.0));
  // Writes through expand's stride-0 view are visible from every alias.
  Tensor base = mt::zeros({3});
  base.unsqueeze(0).expand({2, 3}).select(0, 1).fill_(4);
  EXPECT_EQ(values(base), (std::vector<double>{4, 4, 4}));
  EXPECT_GT(x.version(), 0u);
}

TEST(Views, Gradients) {
  // Each view squared: the gradient 2 * x must land on exactly the viewed elements.
  const Tensor x = (iota({3, 4, 5}) * 0.1 - 2.0).detach().requires_grad_(true);
  using View = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, View>> views = {
      {"view",
       [](const Tensor& t) {
         return t.view({12, -1});
       }},
      {"reshape copy", [](const Tensor& t) { return t.transpose(0, 1).reshape({-1}); }},
      {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
      {"permute",
       [](const Tensor& t) {
         return t.permute({1, 2, 0});
       }},
      {"narrow", [](const Tensor& t) { return t.narrow(2, 1, 3); }},
      {"slice", [](const Tensor& t) { return t.slice(1, -3, std::nullopt, 2); }},
      {"select", [](const Tensor& t) { return t.select(-1, -2); }},
      {"squeeze/unsqueeze",
       [](const Tensor& t) { return t.unsqueeze(1).narrow(0, 0, 1).squeeze(); }},
      {"expand",
       [](const Tensor& t) {
         return t.narrow(1, 2, 1).expand({2, 3, 4, 5});
       }},
      {"flatten", [](const Tensor& t) { return t.flatten(1); }},
      {"t", [](const Tensor& t) { return t[1].t(); }},
      {"contiguous", [](const Tensor& t) { return t.transpose(1, 2).contiguous(); }},
      {"clone", [](const Tensor& t) { return t.clone(); }},
      {"chain",
       [](const Tensor& t) { return t.transpose(0, 2).slice(0, 1, 4, 2).select(1, -1) * 2.0; }},
  };
  for (const auto& [name, v] : views) {
    try {
      EXPECT_TRUE(mt::autograd::gradcheck(
          [&, v = v](const std::vector<Tensor>& in) { return mt::square(v(in[0])); }, {x}))
          << name;
    } catch (const mt::Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
  }
  // Casts: the gradient comes back in the input's dtype.
  const Tensor h = mt::ones({3}, mt::TensorOptions(mt::kFloat64).requires_grad());
  h.to(mt::kFloat16).to(mt::kFloat32).backward(mt::full({3}, 0.5));
  EXPECT_EQ(h.grad().dtype(), mt::kFloat64);
  EXPECT_EQ(values(h.grad()), (std::vector<double>{0.5, 0.5, 0.5}));
}

// ---- conversions and values -----------------------------------------------------------------

TEST(Conversions, ToCloneDetach) {
  Tensor x = mt::from_vector<double>({1.5, -2.5, 3.0, 1e10});
  EXPECT_TRUE(x.to(mt::kFloat64).is_same(x));
  EXPECT_TRUE(x.to(mt::Device::cpu()).is_same(x));
  EXPECT_EQ(x.to(mt::kInt32).to_vector<int32_t>()[1], -2);  // truncation, as static_cast
  EXPECT_EQ(x.to(mt::kBool).to_vector<bool>(), (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(x.to(mt::kFloat16).to_vector<float>()[0], 1.5f);
  EXPECT_TRUE(std::isinf(x.to(mt::kFloat16).to_vector<float>()[3]));
  EXPECT_EQ(x.to(mt::kBFloat16).to_vector<float>()[3], float(mt::BFloat16(1e10f)));
  EXPECT_EQ(x.to(mt::Device::cpu(), mt::kFloat32).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::tensor<bool>({true, false}).to(mt::kFloat32).to_vector<float>(),
            (std::vector<float>{1, 0}));
  EXPECT_EQ(mt::tensor<int64_t>({-1, 300}).to(mt::kUInt8).to_vector<int64_t>(),
            (std::vector<int64_t>{255, 44}));

  Tensor c = x.clone();
  EXPECT_NE(c.storage().get(), x.storage().get());
  c.fill_(0);
  EXPECT_EQ(x.to_vector<double>()[0], 1.5);

  Tensor g = mt::ones({2}, mt::TensorOptions().requires_grad());
  Tensor y = g * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_EQ(d.storage().get(), y.storage().get());
  EXPECT_TRUE(y.requires_grad());
  EXPECT_TRUE(y.clone().requires_grad());
}

// Casts to integer types of values C++ leaves undefined (negative to unsigned, out of range, NaN,
// infinities): through int64 (NaN -> 0, saturating at its range), then wrapped, on every device.
// Every value below is exact in float64, float32, bfloat16 and float16 (1e20 becomes inf there,
// which saturates the same way).
TEST(Conversions, FloatToIntegerIsDefinedForEveryValue) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> in = {-1.5, -1,   -0.5,  0.5, 255,  256,         300,
                                  -300, 1e20, -1e20, inf, -inf, std::nan("")};
  const int64_t max = std::numeric_limits<int64_t>::max(),
                min = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> to_uint8 = {255, 255, 0, 0, 255, 0, 44, 212, 255, 0, 255, 0, 0};
  const std::vector<int64_t> to_int32 = {-1, -1, 0, 0, 255, 256, 300, -300, -1, 0, -1, 0, 0};
  const std::vector<int64_t> to_int64 = {-1, -1, 0, 0, 255, 256, 300, -300, max, min, max, min, 0};
  for (mt::DType from : {mt::kFloat64, mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    SCOPED_TRACE(mt::dtype_name(from));
    const Tensor x = mt::from_vector(in).to(from);
    EXPECT_EQ(x.to(mt::kUInt8).to_vector<int64_t>(), to_uint8);
    EXPECT_EQ(x.to(mt::kInt32).to_vector<int64_t>(), to_int32);
    EXPECT_EQ(x.to(mt::kInt64).to_vector<int64_t>(), to_int64);
    EXPECT_EQ(x.to(mt::kBool).to_vector<bool>(), std::vector<bool>(in.size(), true));
    // Non-contiguous sources take the general loop rather than a dense one.
    EXPECT_EQ(mt::stack({x, x}, 1).select(1, 0).to(mt::kUInt8).to_vector<int64_t>(), to_uint8);
  }
  // Scalars convert the same way; fills refuse what overflows, as PyTorch does (FillValues in
  // test_pointwise.cpp).
  mt::testing::expect_error([] { mt::full({2}, -1.5, mt::kUInt8); }, {"full: value -1.5", "uint8"});
  mt::testing::expect_error([] { mt::full({1}, std::nan(""), mt::kInt64); },
                            {"full: value nan", "int64"});
  EXPECT_EQ(mt::Scalar(inf).to<int32_t>(), -1);
  EXPECT_EQ(mt::Scalar(-300.5).to<uint8_t>(), 212);
}

TEST(Conversions, ItemAndToVector) {
  Tensor x = mt::from_vector<float>({1.75f, -3.0f}, Shape{2});
  EXPECT_EQ(x[0].item<float>(), 1.75f);
  EXPECT_EQ(x[0].item<double>(), 1.75);
  EXPECT_EQ(x[1].item<int64_t>(), -3);
  EXPECT_EQ(x[0].item<mt::Half>().x, mt::Half(1.75f).x);
  EXPECT_TRUE(x[1].item<bool>());
  EXPECT_EQ(mt::full({1, 1, 1}, 9).item<int32_t>(), 9);
  EXPECT_EQ(iota({2, 3}).t().to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(iota({2, 2}, mt::kUInt8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 3}));
}

// ---- broadcasting and type promotion --------------------------------------------------------

TEST(Broadcasting, Shapes) {
  Tensor a = iota({3, 1}), b = iota({1, 4});
  Tensor c = a + b;
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  const auto cv = values(c);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(cv[i * 4 + j], i + j);
  Tensor m = iota({2, 3}) * mt::from_vector<double>({10, 20, 30});
  EXPECT_EQ(values(m), (std::vector<double>{0, 20, 60, 30, 80, 150}));
  Tensor s = mt::scalar_tensor(2.0, mt::kFloat64) - iota({2, 3});
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(s)[5], -3);
  EXPECT_EQ((mt::scalar_tensor(1.0) + mt::scalar_tensor(2.0)).dim(), 0);
  EXPECT_EQ((iota({2, 1, 3}) + iota({4, 1})).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ((iota({0, 3}) + iota({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(mt::broadcast_shapes({5, 1, 4}, {3, 1}, "test"), (Shape{5, 3, 4}));
  expect_error([] { iota({2, 3}) + iota({4}); }, {"add", "[2, 3]", "[4]", "cannot be broadcast"});
  expect_error([] { iota({2, 3}) * iota({3, 2}); }, {"mul", "[2, 3]", "[3, 2]"});
  auto bt = mt::broadcast_tensors({iota({3, 1}), iota({4})});
  EXPECT_EQ(bt[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(bt[1].strides(), (Shape{0, 1}));
}

TEST(Promotion, PromoteTypesTable) {
  using mt::promote_types;
  EXPECT_EQ(promote_types(mt::kInt32, mt::kInt64), mt::kInt64);
  EXPECT_EQ(promote_types(mt::kUInt8, mt::kInt32), mt::kInt32);
  EXPECT_EQ(promote_types(mt::kUInt8, mt::kInt64), mt::kInt64);
  EXPECT_EQ(promote_types(mt::kBool, mt::kInt32), mt::kInt32);
  EXPECT_EQ(promote_types(mt::kBool, mt::kUInt8), mt::kUInt8);
  EXPECT_EQ(promote_types(mt::kInt64, mt::kFloat32), mt::kFloat32);
  EXPECT_EQ(promote_types(mt::kInt64, mt::kFloat16), mt::kFloat16);
  EXPECT_EQ(promote_types(mt::kFloat16, mt::kBFloat16), mt::kFloat32);
  EXPECT_EQ(promote_types(mt::kBFloat16, mt::kFloat16), mt::kFloat32);
  EXPECT_EQ(promote_types(mt::kFloat16, mt::kFloat32), mt::kFloat32);
  EXPECT_EQ(promote_types(mt::kFloat32, mt::kBFloat16), mt::kFloat32);
  EXPECT_EQ(promote_types(mt::kFloat32, mt::kFloat64), mt::kFloat64);
  EXPECT_EQ(promote_types(mt::kBFloat16, mt::kFloat64), mt::kFloat64);
  EXPECT_EQ(promote_types(mt::kBool, mt::kBool), mt::kBool);
  // Symmetric over every pair; a float8 type promotes only with itself, as in PyTorch.
  for (int i = 0; i < mt::kNumDTypes; ++i) {
    for (int j = 0; j < mt::kNumDTypes; ++j) {
      const mt::DType a(static_cast<mt::DType>(i)), b(static_cast<mt::DType>(j));
      if ((mt::is_float8(a) || mt::is_float8(b)) && a != b) {
        EXPECT_THROW(promote_types(a, b), mt::Error)
            << mt::dtype_name(a) << " " << mt::dtype_name(b);
        continue;
      }
      EXPECT_EQ(promote_types(a, b), promote_types(b, a));
    }
  }
  EXPECT_EQ(promote_types(mt::kFloat8E4M3FN, mt::kFloat8E4M3FN), mt::kFloat8E4M3FN);
}

TEST(Promotion, ResultTypeOfOps) {
  auto t = [](mt::DType d, Shape s = {2}) { return mt::zeros(s, d); };
  EXPECT_EQ((t(mt::kInt32) + t(mt::kInt64)).dtype(), mt::kInt64);
  EXPECT_EQ((t(mt::kUInt8) + t(mt::kInt32)).dtype(), mt::kInt32);
  EXPECT_EQ((t(mt::kBool) + t(mt::kInt32)).dtype(), mt::kInt32);
  EXPECT_EQ((t(mt::kInt32) + t(mt::kFloat32)).dtype(), mt::kFloat32);
  EXPECT_EQ((t(mt::kFloat16) + t(mt::kBFloat16)).dtype(), mt::kFloat32);
  EXPECT_EQ((t(mt::kFloat32) * t(mt::kFloat64)).dtype(), mt::kFloat64);
  EXPECT_EQ((t(mt::kInt32) / t(mt::kInt32)).dtype(), mt::kFloat32);  // true division
  // Tensor op Python-like scalar.
  EXPECT_EQ((t(mt::kInt32) * 2.5).dtype(), mt::kFloat32);
  EXPECT_EQ((t(mt::kInt32) * 2).dtype(), mt::kInt32);
  EXPECT_EQ((t(mt::kUInt8) + 300).dtype(), mt::kUInt8);
  EXPECT_EQ((t(mt::kFloat16) + 1.0).dtype(), mt::kFloat16);
  EXPECT_EQ((t(mt::kBFloat16) * 3).dtype(), mt::kBFloat16);
  EXPECT_EQ((t(mt::kBool) + 1).dtype(), mt::kInt64);
  EXPECT_EQ((t(mt::kBool) + 1.5).dtype(), mt::kFloat32);
  EXPECT_EQ((2.0 - t(mt::kInt64)).dtype(), mt::kFloat32);
  EXPECT_EQ((t(mt::kFloat64) + 1.0).dtype(), mt::kFloat64);
  // 0-d tensors rank below dimensioned ones within a category.
  EXPECT_EQ((t(mt::kFloat64, {}) + t(mt::kFloat32, {3})).dtype(), mt::kFloat32);
  EXPECT_EQ((t(mt::kInt64, {}) + t(mt::kFloat16, {3})).dtype(), mt::kFloat16);
  EXPECT_EQ((t(mt::kInt64, {}) + t(mt::kInt32, {3})).dtype(), mt::kInt32);
  EXPECT_EQ((t(mt::kFloat64, {}) + t(mt::kInt32, {3})).dtype(), mt::kFloat64);
  EXPECT_EQ((t(mt::kFloat16, {}) + t(mt::kInt32, {3})).dtype(), mt::kFloat16);
  EXPECT_EQ((t(mt::kFloat64, {}) + t(mt::kFloat32, {})).dtype(), mt::kFloat64);
  EXPECT_EQ((t(mt::kFloat64, {}) + 1.0).dtype(), mt::kFloat64);
  EXPECT_EQ((t(mt::kInt32, {}) + 1.0).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::result_type(t(mt::kInt32, {}), t(mt::kBool, {4})), mt::kInt32);
  EXPECT_EQ(mt::result_type(t(mt::kInt32), mt::Scalar(true)), mt::kInt32);
  // Values follow the promoted dtype: int tensor * 2.5 computes in float.
  EXPECT_EQ(values(mt::tensor<int32_t>({1, 3}) * 2.5), (std::vector<double>{2.5, 7.5}));
  EXPECT_EQ(values(mt::tensor<uint8_t>({250}) + 10), (std::vector<double>{4}));  // wraps
}

// ---- printing -------------------------------------------------------------------------------

TEST(Printing, MatchesPyTorchRepr) {
  auto str = [](const Tensor& t) {
    std::ostringstream os;
    os << t;
    return os.str();
  };
  EXPECT_EQ(str(mt::from_vector<float>({1.5, 2.25, 3, 4}, Shape{2, 2})),
            "tensor([[1.5000, 2.2500],\n        [3.0000, 4.0000]])");
  EXPECT_EQ(str(mt::tensor<float>({1, 2, 3}, mt::kFloat16)),
            "tensor([1., 2., 3.], dtype=torch.float16)");
  EXPECT_EQ(str(mt::tensor<float>({0.5, -1}, mt::kBFloat16)),
            "tensor([ 0.5000, -1.0000], dtype=torch.bfloat16)");
  EXPECT_EQ(str(mt::tensor<int64_t>({-1, 20, 3})), "tensor([-1, 20,  3])");
  EXPECT_EQ(str(mt::tensor<int32_t>({7})), "tensor([7], dtype=torch.int32)");
  EXPECT_EQ(str(mt::tensor<bool>({true, false, true})), "tensor([ True, False,  True])");
  EXPECT_EQ(str(mt::tensor<float>({1e-5f, 1.0f})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(str(mt::tensor<float>({1, 2000})), "tensor([1.0000e+00, 2.0000e+03])");
  EXPECT_EQ(str(mt::tensor<double>({1, 2.5})), "tensor([1.0000, 2.5000], dtype=torch.float64)");
  EXPECT_EQ(str(mt::tensor<float>({1, NAN, -INFINITY})), "tensor([1., nan, -inf])");
  EXPECT_EQ(str(mt::tensor<float>({0.25, NAN})), "tensor([0.2500,    nan])");
  EXPECT_EQ(str(mt::zeros({3})), "tensor([0., 0., 0.])");
  EXPECT_EQ(str(mt::scalar_tensor(3.5)), "tensor(3.5000)");
  EXPECT_EQ(str(mt::scalar_tensor(7)), "tensor(7)");
  EXPECT_EQ(str(mt::zeros({0})), "tensor([])");
  EXPECT_EQ(str(mt::zeros({2, 0})), "tensor([], size=(2, 0))");
  EXPECT_EQ(str(mt::zeros({0}, mt::kInt64)), "tensor([], dtype=torch.int64)");
  EXPECT_EQ(str(iota({2, 2, 2}, mt::kInt64)),
            "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");

  Tensor leaf = mt::ones({2}, mt::TensorOptions().requires_grad());
  EXPECT_EQ(str(leaf), "tensor([1., 1.], requires_grad=True)");
  EXPECT_EQ(str(leaf + leaf), "tensor([2., 2.], grad_fn=<AddBackward0>)");
  EXPECT_EQ(str(mt::ones({2}, mt::TensorOptions(mt::kFloat16).requires_grad())),
            "tensor([1., 1.], dtype=torch.float16, requires_grad=True)");

  // Rows wrap at 80 columns; suffixes move to their own line when they don't fit.
  EXPECT_EQ(str(mt::arange(20.0)),
            "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "        14., 15., 16., 17., 18., 19.])");
  EXPECT_EQ(
      str(mt::tensor<float>({-1.5, 2.25, -3.125, 4.5, -5.75, 6.0625, -7.5, 8.25}, mt::kFloat16)),
      "tensor([-1.5000,  2.2500, -3.1250,  4.5000, -5.7500,  6.0625, -7.5000,  8.2500],\n"
      "       dtype=torch.float16)");

  // More than 1000 elements: summarised with "...", the format chosen from the shown values.
  EXPECT_EQ(str(mt::arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(str(mt::arange(10000).view({100, 100})),
            "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
            "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
            "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
            "        ...,\n"
            "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
            "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
            "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]])");
  Tensor big = mt::zeros({2000});
  big.narrow(0, 1000, 1).fill_(123456.0);  // hidden by the summary: doesn't change the format
  EXPECT_EQ(str(big), "tensor([0., 0., 0.,  ..., 0., 0., 0.])");
  EXPECT_EQ(Tensor().str(), "[ undefined Tensor ]");
}

// ---- devices --------------------------------------------------------------------------------

TEST(Devices, Parsing) {
  EXPECT_EQ(mt::Device("cpu"), mt::Device::cpu());
  EXPECT_EQ(mt::Device("cuda"), mt::Device::cuda(0));
  EXPECT_EQ(mt::Device("cuda:1"), mt::Device::cuda(1));
  EXPECT_EQ(mt::Device("cuda:12").index(), 12);
  EXPECT_EQ(mt::Device("cuda:1").str(), "cuda:1");
  EXPECT_EQ(mt::Device("cpu").str(), "cpu");
  EXPECT_TRUE(mt::Device("cuda").is_cuda());
  EXPECT_FALSE(mt::Device::cpu() == mt::Device::cuda(0));
  EXPECT_FALSE(mt::Device::cuda(0) == mt::Device::cuda(1));
  std::ostringstream os;
  os << mt::Device::cuda(2) << ' ' << mt::kCPU;
  EXPECT_EQ(os.str(), "cuda:2 cpu");
  for (const char* bad :
       {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "CPU", "", "cpu:0", "cuda:1a"})
    expect_error([&] { mt::Device d(bad); }, {"invalid device string", bad});
}

TEST(Devices, QueriesOnThisMachine) {
  const int n = mt::cuda::device_count();
  EXPECT_EQ(mt::cuda::is_available(), n > 0);
  if (!mt::cuda::is_compiled()) {
    EXPECT_EQ(n, 0);
  }
  EXPECT_EQ(mt::try_gpu(), n > 0 ? mt::Device::cuda(0) : mt::Device::cpu());
  EXPECT_EQ(mt::try_gpu(n), mt::Device::cpu());  // one past the last GPU
  EXPECT_EQ(mt::try_gpu(-1), mt::Device::cpu());
  const auto all = mt::try_all_gpus();
  if (n == 0) {
    EXPECT_EQ(all, (std::vector<mt::Device>{mt::Device::cpu()}));
  } else {
    ASSERT_EQ(static_cast<int>(all.size()), n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(all[i], mt::Device::cuda(i));
  }
  EXPECT_EQ(mt::ones({2}, mt::try_gpu()).device(), mt::try_gpu());
}

// ---- random ---------------------------------------------------------------------------------

TEST(Random, ManualSeedReproducible) {
  try {
    mt::manual_seed(42);
    const auto a = values(mt::rand({100}));
    const auto b = values(mt::randn({7, 3}));
    mt::manual_seed(42);
    EXPECT_EQ(values(mt::rand({100})), a);
    EXPECT_EQ(values(mt::randn({7, 3})), b);
    mt::manual_seed(43);
    EXPECT_NE(values(mt::rand({100})), a);
    for (double v : a) EXPECT_TRUE(v >= 0.0 && v < 1.0) << v;
    // A separate generator with the same seed gives the same stream as the default one.
    mt::Generator gen(42);
    mt::manual_seed(42);
    EXPECT_EQ(values(mt::rand({100}, {}, &gen)), values(mt::rand({100})));
  } catch (const mt::Error& e) {
    if (std::string(e.what()).find("has no kernel") == std::string::npos) throw;
    GTEST_SKIP() << "random kernels not registered yet: " << e.what();
  }
}

// The CPU allocator's statistics: a freed small block is cached on its thread (counted in the
// calling thread's cached_bytes) and the next tensor of its size class reuses it (a cache hit).
TEST(CpuAllocatorStats, FreedBlocksAreCachedAndReused) {
  mt::cpu_empty_cache();
  const mt::CpuMemoryStats start = mt::cpu_memory_stats();
  { const Tensor t = mt::empty({1000}); }  // 4000 bytes: the 4 KiB class
  const mt::CpuMemoryStats freed = mt::cpu_memory_stats();
  if (freed.cached_bytes == start.cached_bytes) GTEST_SKIP() << "this build does not cache";
  EXPECT_EQ(freed.cached_bytes, start.cached_bytes + 4096);
  EXPECT_EQ(freed.allocated_bytes, start.allocated_bytes);
  const Tensor again = mt::empty({1000});
  const mt::CpuMemoryStats reused = mt::cpu_memory_stats();
  EXPECT_EQ(reused.num_allocations, freed.num_allocations + 1);
  EXPECT_EQ(reused.num_cache_hits, freed.num_cache_hits + 1);
  EXPECT_EQ(reused.cached_bytes, start.cached_bytes);
  EXPECT_EQ(reused.allocated_bytes, start.allocated_bytes + 4096);
  EXPECT_GE(reused.peak_allocated_bytes, reused.allocated_bytes);
}

// ---- elementwise layout (kernels/layout.h, shared by the CPU and CUDA loops) -----------------

TEST(Layout, MergesDenseDimsOutermostFirstAndKeepsTheRowMajorOrder) {
  const Tensor a = mt::zeros({2, 3, 4});
  const Tensor t = mt::zeros({4, 3, 2}).permute({2, 1, 0});  // no dims can merge
  const mt::Layout<2> l(a.shape(), {&a, &t});
  ASSERT_EQ(l.ndim, 3);
  EXPECT_EQ(l.numel, 24);
  EXPECT_EQ(l.sizes[0], 2);
  EXPECT_EQ(l.sizes[2], 4);
  EXPECT_EQ(l.strides[0][0], 48);  // bytes of float32, outermost first
  EXPECT_EQ(l.strides[0][2], 4);
  EXPECT_EQ(l.strides[1][0], 4);
  EXPECT_EQ(l.strides[1][2], 24);
  EXPECT_FALSE(l.dense({4, 4}));

  const Tensor b = mt::zeros({2, 1, 3, 4});
  const mt::Layout<2> merged(b.shape(), {&b, &b});
  ASSERT_EQ(merged.ndim, 1);  // the size-1 dim is dropped and the rest merge into one run
  EXPECT_EQ(merged.sizes[0], 24);
  EXPECT_TRUE(merged.dense({4, 4}));
}

TEST(Layout, BroadcastOperandsKeepStrideZeroAndSplitTheMerge) {
  const Tensor out = mt::zeros({3, 4});
  const Tensor row = mt::zeros({4}).expand({3, 4});
  const mt::Layout<2> l(out.shape(), {&out, &row});
  ASSERT_EQ(l.ndim, 2);
  EXPECT_EQ(l.strides[1][0], 0);
  EXPECT_EQ(l.strides[1][1], 4);
  std::vector<int64_t> runs;
  l.for_each_run(2, 10, [&](char* const* p, const int64_t* s, int64_t n) {
    EXPECT_EQ(s[0], 4);
    EXPECT_EQ(s[1], 4);
    runs.push_back((p[0] - l.base[0]) / 4);
    runs.push_back(n);
  });
  EXPECT_EQ(runs, (std::vector<int64_t>{2, 2, 4, 4, 8, 2}));  // (first element, length) pairs
}

TEST(Layout, SingleElementIsDenseAndHugeBroadcastsNeedInt64) {
  const Tensor s = mt::zeros({1, 1}, mt::TensorOptions().dtype(mt::kFloat16));
  const mt::Layout<1> one(s.shape(), {&s});
  EXPECT_EQ(one.ndim, 1);
  EXPECT_EQ(one.numel, 1);
  EXPECT_TRUE(one.dense({2}));
  EXPECT_TRUE(one.fits_int32());

  const Tensor big = mt::zeros({1}).expand({int64_t(1) << 16, int64_t(1) << 16});
  const mt::Layout<1> l(big.shape(), {&big});
  EXPECT_EQ(l.numel, int64_t(1) << 32);
  EXPECT_FALSE(l.fits_int32());
  const Tensor wide = mt::zeros({1}).expand({int64_t(1) << 16, 2});
  const mt::Layout<1> w(wide.shape(), {&wide});
  EXPECT_TRUE(w.fits_int32());
}
