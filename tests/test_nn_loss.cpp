// Loss functions and modules against plain-loop float64 references, for every reduction, with
// gradchecks in float64 and the argument errors.
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
namespace F = mantissa::nn::functional;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using nn::Reduction;
using Vec = std::vector<double>;

namespace {

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

const char* reduction_name(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Mean ? "mean" : "sum";
}

// Applies a reduction to per-element losses; `count` is the mean's divisor.
Tensor reduce_ref(const Vec& loss, const Shape& shape, Reduction r, double count) {
  if (r == Reduction::None) return mt::from_vector(loss, shape, mt::kFloat64);
  double s = 0;
  for (double v : loss) s += v;
  return mt::scalar_tensor(r == Reduction::Sum ? s : s / count, mt::kFloat64);
}

Tensor elementwise_loss_ref(const Tensor& x, const Tensor& t, Reduction r, bool l1) {
  const Vec xv = x.to_vector<double>(), tv = t.to_vector<double>();
  Vec loss(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    loss[i] = l1 ? std::fabs(xv[i] - tv[i]) : (xv[i] - tv[i]) * (xv[i] - tv[i]);
  return reduce_ref(loss, x.shape(), r, static_cast<double>(xv.size()));
}

// Cross entropy for input [N, C, d...] (class dim 1) and either int64 targets [N, d...] or
// probabilities shaped like the input.
Tensor cross_entropy_ref(const Tensor& input, const Tensor& target, Reduction r, double smoothing,
                         int64_t ignore_index) {
  const int64_t n = input.size(0), c = input.size(1), inner = input.numel() / (n * c);
  const Vec x = input.to_vector<double>(), tv = target.to_vector<double>();
  const bool probs = target.is_floating_point();
  const auto at = [&](int64_t i, int64_t k, int64_t j) { return (i * c + k) * inner + j; };
  Vec loss(n * inner);
  double valid = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < inner; ++j) {
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, x[at(i, k, j)]);
      for (int64_t k = 0; k < c; ++k) s += std::exp(x[at(i, k, j)] - mx);
      const auto logp = [&](int64_t k) { return x[at(i, k, j)] - mx - std::log(s); };
      double l = 0;
      if (probs) {
        for (int64_t k = 0; k < c; ++k)
          l -= logp(k) * (tv[at(i, k, j)] * (1 - smoothing) + smoothing / c);
      } else {
        const auto cls = static_cast<int64_t>(tv[i * inner + j]);
        if (cls != ignore_index) {
          double uniform = 0;
          for (int64_t k = 0; k < c; ++k) uniform -= logp(k) / c;
          l = -(1 - smoothing) * logp(cls) + smoothing * uniform;
          valid += 1;
        }
      }
      loss[i * inner + j] = l;
    }
  }
  Shape shape = input.shape();
  shape.erase(1);
  return reduce_ref(loss, shape, r, probs ? static_cast<double>(n * inner) : valid);
}

double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

// BCE with logits; pos_weight (optional) broadcasts along the last dim.
Tensor bce_ref(const Tensor& x, const Tensor& t, Reduction r, const Tensor& pos_weight) {
  const Vec xv = x.to_vector<double>(), tv = t.to_vector<double>();
  const Vec pw = pos_weight.defined() ? pos_weight.to_vector<double>() : Vec{1.0};
  Vec loss(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double w = pw[i % pw.size()];
    // -[w t log s(x) + (1 - t) log(1 - s(x))], with log s(x) = -softplus(-x).
    loss[i] = w * tv[i] * softplus(-xv[i]) + (1 - tv[i]) * softplus(xv[i]);
  }
  return reduce_ref(loss, x.shape(), r, static_cast<double>(xv.size()));
}

Tensor class_targets(const Shape& shape, int64_t classes) {
  return mt::randint(0, classes, shape, mt::kInt64);
}

// Rows of random class probabilities (each sums to 1 along dim 1).
Tensor prob_targets(const Shape& shape) { return mt::softmax(mt::randn(shape, mt::kFloat64), 1); }

std::vector<mt::DType> loss_dtypes() { return {mt::kFloat64, mt::kFloat32, mt::kBFloat16}; }

// Reductions over many reduced-precision elements round more than one op does.
void expect_loss_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const auto tol = mt::testing::tolerance_for(actual.dtype());
  const double k = mt::is_reduced_float(actual.dtype()) ? 3 : 2;
  expect_close(actual, expected, tol.rtol * k, tol.atol * k, what);
}

}  // namespace

TEST(Loss, MseAndL1MatchReference) {
  for (mt::DType dtype : loss_dtypes()) {
    const Tensor x = random_tensor({4, 5}, dtype, /*non_contiguous=*/true);
    const Tensor t = random_tensor({4, 5}, dtype, false);
    for (Reduction r : kReductions) {
      const std::string what =
          std::string(mt::dtype_name(dtype)) + " reduction " + reduction_name(r);
      expect_loss_close(F::mse_loss(x, t, r), elementwise_loss_ref(x, t, r, false), "mse " + what);
      expect_loss_close(nn::MSELoss(r)(x, t), elementwise_loss_ref(x, t, r, false), "MSELoss");
      expect_loss_close(F::l1_loss(x, t, r), elementwise_loss_ref(x, t, r, true), "l1 " + what);
      expect_loss_close(nn::L1Loss(r)(x, t), elementwise_loss_ref(x, t, r, true), "L1Loss");
    }
  }
}

// mse_loss is one node; it must equal the sub/mul/mean composition bit for bit, also past the sum
// kernel's 32768-element chunks, with gradients for both input and target.
TEST(Loss, MseEqualsComposition) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64}) {
    for (const Shape& shape : {Shape{20, 5}, Shape{3, 40000}, Shape{7}}) {
      for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
        const std::string what = std::string(mt::dtype_name(dtype)) + " " + reduction_name(r) +
                                 " numel " + std::to_string(shape.numel());
        const Tensor x0 = random_tensor(shape, dtype, false),
                     t0 = random_tensor(shape, dtype, false);
        const Tensor x = x0.detach().requires_grad_(), t = t0.detach().requires_grad_();
        const Tensor xr = x0.detach().requires_grad_(), tr = t0.detach().requires_grad_();
        const Tensor fused = F::mse_loss(x, t, r);
        const Tensor d = xr - tr;
        const Tensor ref = r == Reduction::Mean ? (d * d).mean() : (d * d).sum();
        (fused * 3.0).backward();
        (ref * 3.0).backward();
        EXPECT_EQ(fused.item<double>(), ref.item<double>()) << what;
        EXPECT_TRUE(mt::equal(x.grad(), xr.grad())) << what;
        EXPECT_TRUE(mt::equal(t.grad(), tr.grad())) << what;
      }
    }
  }
}

// What nll_loss and cross_entropy computed as compositions of ops (in-range targets): the one-node
// losses must give the same bits, forward and backward (the golden fp32 trajectories rely on it).
Tensor nll_composition(const Tensor& logp, const Tensor& target, Reduction r,
                       int64_t ignore_index) {
  const bool unbatched = logp.dim() == 1;
  const Tensor lp = unbatched ? logp.unsqueeze(0) : logp;
  const Tensor tg = unbatched ? target.reshape({1}) : target;
  Shape class_shape(lp.dim(), 1);
  class_shape[1] = lp.size(1);
  const Tensor class_index = mt::arange(lp.size(1), mt::kInt64).reshape(class_shape);
  const Tensor picked = mt::sum(mt::where(tg.unsqueeze(1) == class_index, lp, 0.0), {1});
  const Tensor weight = (tg != ignore_index).to(lp.dtype());
  Tensor loss = (0.0 - picked) * weight;
  if (unbatched) loss = loss.squeeze(0);
  if (r == Reduction::Mean) return loss.sum() / weight.sum();
  return r == Reduction::Sum ? loss.sum() : loss;
}

Tensor cross_entropy_composition(const Tensor& input, const Tensor& target, Reduction r,
                                 double smoothing, int64_t ignore_index) {
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const Tensor logp = mt::log_softmax(input, class_dim);
  Tensor loss = nll_composition(logp, target, Reduction::None, ignore_index);
  const Tensor valid = (target != ignore_index).to(logp.dtype());
  if (smoothing > 0.0) {
    const Tensor smooth =
        -mt::sum(logp, {class_dim}) / static_cast<double>(input.size(class_dim)) * valid;
    loss = loss * (1.0 - smoothing) + smooth * smoothing;
  }
  if (r == Reduction::Mean) return loss.sum() / valid.sum();
  return r == Reduction::Sum ? loss.sum() : loss;
}

TEST(Loss, CrossEntropyAndNllEqualCompositionBitForBit) {
  struct Case {
    Shape input;
    double smoothing;
    int64_t ignore_index;
  };
  const std::vector<Case> cases = {{{6, 5}, 0.0, -100},    {{6, 5}, 0.1, 2}, {{3, 4, 5}, 0.0, 1},
                                   {{3, 4, 5}, 0.2, -100}, {{5}, 0.0, -100}, {{5}, 0.1, 3}};
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64}) {
    for (const Case& c : cases) {
      Shape tshape = c.input;
      tshape.erase(c.input.size() == 1 ? 0 : 1);
      const int64_t classes = c.input[c.input.size() == 1 ? 0 : 1];
      const Tensor t = class_targets(tshape, classes);
      const Tensor x0 = random_tensor(c.input, dtype, /*non_contiguous=*/c.input.size() > 1, -3, 3);
      for (Reduction r : kReductions) {
        const std::string what = std::string(mt::dtype_name(dtype)) + " " +
                                 mt::detail::str_cat(c.input) + " " + reduction_name(r) +
                                 " smoothing " + std::to_string(c.smoothing);
        const Tensor x = x0.detach().requires_grad_(), xr = x0.detach().requires_grad_();
        const Tensor ce = F::cross_entropy(x, t, r, c.smoothing, c.ignore_index);
        const Tensor ref = cross_entropy_composition(xr, t, r, c.smoothing, c.ignore_index);
        EXPECT_TRUE(mt::equal(ce, ref)) << "cross_entropy " << what;
        (ce * 3.0).sum().backward();
        (ref * 3.0).sum().backward();
        EXPECT_TRUE(mt::equal(x.grad(), xr.grad())) << "cross_entropy grad " << what;

        const Tensor lp = mt::log_softmax(x0, c.input.size() == 1 ? 0 : 1);
        const Tensor l = lp.detach().requires_grad_(), lr = lp.detach().requires_grad_();
        const Tensor nll = F::nll_loss(l, t, r, c.ignore_index);
        const Tensor nll_ref = nll_composition(lr, t, r, c.ignore_index);
        EXPECT_TRUE(mt::equal(nll, nll_ref)) << "nll_loss " << what;
        (nll * 3.0).sum().backward();
        (nll_ref * 3.0).sum().backward();
        EXPECT_TRUE(mt::equal(l.grad(), lr.grad())) << "nll_loss grad " << what;
      }
    }
  }
}

// Every loss records one node (named as PyTorch names its backward where PyTorch has one) whose
// inputs are the leaves themselves.
TEST(Loss, EachLossRecordsOneNode) {
  const Tensor x = mt::randn({4, 3}).requires_grad_(), t = mt::randn({4, 3}).requires_grad_();
  const Tensor probs = mt::softmax(mt::randn({4, 3}), 1).requires_grad_();
  const Tensor bt = mt::rand({4, 3}).requires_grad_(), pw = mt::rand({3}).requires_grad_();
  const Tensor cls = mt::tensor<int64_t>({0, 2, 1, 2});
  for (Reduction r : kReductions) {
    const std::vector<std::pair<std::string, Tensor>> cases = {
        {"MseLossBackward0", F::mse_loss(x, t, r)},
        {"L1LossBackward0", F::l1_loss(x, t, r)},
        {"NllLossBackward0", F::nll_loss(x, cls, r)},
        {"CrossEntropyLossBackward0", F::cross_entropy(x, cls, r, 0.1)},
        {"CrossEntropyLossBackward0", F::cross_entropy(x, probs, r, 0.1)},
        {"BinaryCrossEntropyWithLogitsBackward0", F::binary_cross_entropy_with_logits(x, bt, r)},
        {"BinaryCrossEntropyWithLogitsBackward0",
         F::binary_cross_entropy_with_logits(x, bt, r, pw)},
    };
    for (const auto& [name, out] : cases) {
      const std::string what = name + " " + reduction_name(r);
      ASSERT_NE(out.grad_fn(), nullptr) << what;
      EXPECT_EQ(out.grad_fn()->name(), name) << what;
      for (const auto& edge : out.grad_fn()->next_edges) {
        if (edge.fn) {
          EXPECT_EQ(edge.fn->name(), "AccumulateGrad") << what;
        }
      }
    }
  }
}

// nn::functional's losses are mantissa's: same values and gradients, bit for bit.
TEST(Loss, FunctionalFormsCallTheAutogradOps) {
  const Tensor x0 = mt::randn({5, 4}), t0 = mt::randn({5, 4});
  const Tensor cls = mt::tensor<int64_t>({0, 3, 1, 2, 3}), bt = mt::rand({5, 4});
  using Loss = std::function<Tensor(const Tensor&)>;
  for (Reduction r : kReductions) {
    const std::vector<std::pair<Loss, Loss>> pairs = {
        {[&](const Tensor& x) { return mt::mse_loss(x, t0, r); },
         [&](const Tensor& x) { return F::mse_loss(x, t0, r); }},
        {[&](const Tensor& x) { return mt::l1_loss(x, t0, r); },
         [&](const Tensor& x) { return F::l1_loss(x, t0, r); }},
        {[&](const Tensor& x) { return mt::nll_loss(x, cls, r); },
         [&](const Tensor& x) { return F::nll_loss(x, cls, r); }},
        {[&](const Tensor& x) { return mt::cross_entropy(x, cls, r, 0.1); },
         [&](const Tensor& x) { return F::cross_entropy(x, cls, r, 0.1); }},
        {[&](const Tensor& x) { return mt::binary_cross_entropy_with_logits(x, bt, r); },
         [&](const Tensor& x) { return F::binary_cross_entropy_with_logits(x, bt, r); }},
    };
    for (size_t i = 0; i < pairs.size(); ++i) {
      const Tensor a = x0.detach().requires_grad_(), b = x0.detach().requires_grad_();
      const Tensor la = pairs[i].first(a), lb = pairs[i].second(b);
      EXPECT_TRUE(mt::equal(la, lb)) << i << " " << reduction_name(r);
      la.sum().backward();
      lb.sum().backward();
      EXPECT_TRUE(mt::equal(a.grad(), b.grad())) << i << " " << reduction_name(r);
    }
  }
}

TEST(Loss, CrossEntropyClassIndices) {
  struct Case {
    Shape input;
    double smoothing;
    int64_t ignore_index;
  };
  const std::vector<Case> cases = {{{6, 4}, 0.0, -100},    {{6, 4}, 0.1, -100},
                                   {{6, 4}, 0.0, 2},       {{6, 4}, 0.1, 1},
                                   {{3, 4, 5}, 0.0, -100}, {{3, 4, 5}, 0.1, 0}};
  for (mt::DType dtype : loss_dtypes()) {
    for (const Case& c : cases) {
      const Tensor x = random_tensor(c.input, dtype, /*non_contiguous=*/true, -3, 3);
      Shape tshape = c.input;
      tshape.erase(1);
      const Tensor t = class_targets(tshape, c.input[1]);
      for (Reduction r : kReductions) {
        const std::string what = std::string(mt::dtype_name(dtype)) + " reduction " +
                                 reduction_name(r) + " smoothing " + std::to_string(c.smoothing) +
                                 " ignore " + std::to_string(c.ignore_index);
        const Tensor ref = cross_entropy_ref(x, t, r, c.smoothing, c.ignore_index);
        expect_loss_close(F::cross_entropy(x, t, r, c.smoothing, c.ignore_index), ref, what);
        nn::CrossEntropyLoss module(nn::CrossEntropyOptions{r, c.smoothing, c.ignore_index});
        expect_loss_close(module(x, t), ref, "module " + what);
      }
    }
  }
  // An ignored target contributes nothing, even with the largest loss.
  const Tensor x = mt::from_vector<double>({10, -10, 0, 0}, Shape{2, 2});
  const Tensor t = mt::tensor<int64_t>({1, 0});
  EXPECT_NEAR(F::cross_entropy(x, t, Reduction::Mean, 0.0, 1).item<double>(), std::log(2.0), 1e-12);
}

TEST(Loss, CrossEntropyProbabilityTargets) {
  for (mt::DType dtype : loss_dtypes()) {
    for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 4}}) {
      for (double smoothing : {0.0, 0.1}) {
        const Tensor x = random_tensor(shape, dtype, true, -3, 3);
        const Tensor t = prob_targets(shape).to(dtype);
        for (Reduction r : kReductions) {
          const std::string what = std::string(mt::dtype_name(dtype)) + " " + reduction_name(r);
          expect_loss_close(F::cross_entropy(x, t, r, smoothing),
                            cross_entropy_ref(x, t, r, smoothing, -100), what);
        }
      }
    }
  }
}

TEST(Loss, BceWithLogitsMatchesReference) {
  for (mt::DType dtype : loss_dtypes()) {
    const Tensor x = random_tensor({4, 3}, dtype, true, -6, 6);
    const Tensor t = mt::rand({4, 3}, dtype);
    const Tensor pw = random_tensor({3}, dtype, false, 0.5, 3.0);
    for (Reduction r : kReductions) {
      const std::string what = std::string(mt::dtype_name(dtype)) + " " + reduction_name(r);
      expect_loss_close(F::binary_cross_entropy_with_logits(x, t, r), bce_ref(x, t, r, Tensor()),
                        what);
      expect_loss_close(F::binary_cross_entropy_with_logits(x, t, r, pw), bce_ref(x, t, r, pw),
                        what + " pos_weight");
      expect_loss_close(nn::BCEWithLogitsLoss(r, pw)(x, t), bce_ref(x, t, r, pw), "module");
    }
  }
}

TEST(Loss, BceWithLogitsExtremeLogitsStayFinite) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64, mt::kBFloat16}) {
    const Tensor x =
        mt::from_vector<double>({100, -100, 100, -100, 0}, std::nullopt, dtype).requires_grad_();
    const Tensor t = mt::from_vector<double>({0, 1, 1, 0, 1}, std::nullopt, dtype);
    const Tensor pw = mt::full({5}, 3.0, dtype);
    const Tensor loss = F::binary_cross_entropy_with_logits(x, t, Reduction::None, pw);
    expect_loss_close(loss, bce_ref(x, t, Reduction::None, pw), std::string(mt::dtype_name(dtype)));
    loss.sum().backward();
    for (double g : x.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g)) << dtype;
  }
}

TEST(Loss, BceWithLogitsGradientAtZeroLogits) {
  // d/dx = (1 - t) - w * sigmoid(-x), w = 1 + (pos_weight - 1) t: at x = 0 the kinks of the
  // stable formulation must not leak into the gradient (a zero-initialised head gives x = 0).
  const Tensor x = mt::zeros({4}, mt::kFloat64).requires_grad_();
  const Tensor t = mt::from_vector<double>({0, 1, 0.25, 1});
  const Tensor pw = mt::from_vector<double>({1, 1, 2, 3});
  F::binary_cross_entropy_with_logits(x, t, Reduction::Sum, pw).backward();
  const Vec tv = t.to_vector<double>(), pv = pw.to_vector<double>(),
            g = x.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], (1 - tv[i]) - (1 + (pv[i] - 1) * tv[i]) * 0.5, 1e-12) << i;
}

TEST(Loss, Gradcheck) {
  using mt::autograd::gradcheck;
  using Inputs = std::vector<Tensor>;
  const auto f64 = [](const Shape& s, double lo = -2, double hi = 2) {
    return random_tensor(s, mt::kFloat64, s.size() > 1, lo, hi).requires_grad_();
  };
  for (Reduction r : kReductions) {
    const Tensor x = f64({3, 4}), t = f64({3, 4});
    EXPECT_TRUE(gradcheck([r](const Inputs& in) { return F::mse_loss(in[0], in[1], r); }, {x, t}));
    EXPECT_TRUE(gradcheck([r](const Inputs& in) { return F::l1_loss(in[0], in[1], r); }, {x, t}));
    const Tensor cls = class_targets({3, 5}, 4);
    const Tensor x3 = f64({3, 4, 5});
    EXPECT_TRUE(
        gradcheck([&](const Inputs& in) { return F::cross_entropy(in[0], cls, r, 0.1, 2); }, {x3}));
    const Tensor probs = prob_targets({3, 4}).requires_grad_();
    EXPECT_TRUE(gradcheck([r](const Inputs& in) { return F::cross_entropy(in[0], in[1], r, 0.1); },
                          {x, probs}));
    // Broadcast input and target (PyTorch warns, and so do we).
    const Tensor row = f64({4});
    EXPECT_TRUE(
        gradcheck([r](const Inputs& in) { return F::mse_loss(in[0], in[1], r); }, {x, row}));
    EXPECT_TRUE(gradcheck([r](const Inputs& in) { return F::l1_loss(in[0], in[1], r); }, {x, row}));
    // nll_loss on log-probabilities (any values), batched, with extra dims, and unbatched.
    const Tensor cls2 = mt::tensor<int64_t>({0, 3, 2});
    EXPECT_TRUE(gradcheck([&](const Inputs& in) { return F::nll_loss(in[0], cls2, r); }, {x}));
    EXPECT_TRUE(gradcheck([&](const Inputs& in) { return F::nll_loss(in[0], cls2, r, 3); }, {x}));
    EXPECT_TRUE(gradcheck([&](const Inputs& in) { return F::nll_loss(in[0], cls, r, 1); }, {x3}));
    const Tensor one = mt::scalar_tensor(int64_t{2}, mt::kInt64);
    const Tensor x1 = f64({4});
    EXPECT_TRUE(gradcheck([&](const Inputs& in) { return F::nll_loss(in[0], one, r); }, {x1}));
    // cross_entropy without smoothing, and unbatched.
    EXPECT_TRUE(gradcheck([&](const Inputs& in) { return F::cross_entropy(in[0], cls2, r); }, {x}));
    EXPECT_TRUE(
        gradcheck([&](const Inputs& in) { return F::cross_entropy(in[0], one, r, 0.2); }, {x1}));
    EXPECT_TRUE(
        gradcheck([r](const Inputs& in) { return F::cross_entropy(in[0], in[1], r); }, {x, probs}));
    const Tensor bt = mt::rand({3, 4}, mt::kFloat64).requires_grad_();
    const Tensor pw = f64({4}, 0.5, 2.0);
    EXPECT_TRUE(gradcheck(
        [r](const Inputs& in) {
          return F::binary_cross_entropy_with_logits(in[0], in[1], r, in[2]);
        },
        {x, bt, pw}));
    EXPECT_TRUE(gradcheck(
        [r](const Inputs& in) { return F::binary_cross_entropy_with_logits(in[0], in[1], r); },
        {x, bt}));
  }
}

TEST(Loss, Errors) {
  const Tensor x = mt::randn({3, 4});
  expect_error(
      [&] {
        F::cross_entropy(x, mt::tensor<int64_t>({0, 4, 1}));
      },
      {"target 4 is out of bounds for 4 classes"});
  expect_error(
      [&] {
        F::cross_entropy(x, mt::tensor<int64_t>({0, -1, 1}));
      },
      {"target -1 is out of bounds"});
  expect_error(
      [&] {
        F::cross_entropy(x, mt::tensor<int64_t>({0, 1}));
      },
      {"expected target of shape [3]", "[2]"});
  expect_error(
      [&] {
        F::cross_entropy(x, mt::rand({3, 5}));
      },
      {"probability target of shape [3, 5]", "[3, 4]"});
  expect_error(
      [&] {
        F::cross_entropy(x, mt::tensor<int64_t>({0, 1, 2}), Reduction::Mean, 1.5);
      },
      {"label_smoothing", "1.5"});
  expect_error([] { nn::parse_reduction("avg"); }, {"invalid reduction 'avg'"});
  EXPECT_EQ(nn::parse_reduction("sum"), Reduction::Sum);
  EXPECT_EQ(nn::parse_reduction("none"), Reduction::None);
  EXPECT_EQ(nn::parse_reduction("mean"), Reduction::Mean);
  expect_error(
      [&] {
        F::binary_cross_entropy_with_logits(x, mt::rand({3, 5}));
      },
      {"target size ([3, 5])", "input size ([3, 4])"});
  expect_error(
      [&] {
        F::mse_loss(mt::tensor<int64_t>({1, 2}), mt::tensor<int64_t>({1, 2}));
      },
      {"mse_loss", "floating point"});
}

TEST(Loss, ModulePrinting) {
  EXPECT_EQ(nn::MSELoss()->repr(), "MSELoss()");
  EXPECT_EQ(nn::L1Loss(Reduction::Sum)->repr(), "L1Loss(reduction='sum')");
  EXPECT_EQ(nn::CrossEntropyLoss()->repr(), "CrossEntropyLoss()");
}
