// Autocast: the cast policy of every op under each precision, scoping rules, the weight-cast
// cache, TF32 and tensor-core emulation on the CPU, and AMP training against float32.
#include <cmath>
#include <stdexcept>
#include <thread>

#include "test_util.h"

namespace mt = mantissa;
using mt::amp::autocast;
using mt::amp::Precision;

namespace {

mt::Tensor f32(const mt::Shape& s) { return mt::randn(s); }

// Runs `fn` inside a CPU autocast scope of `p` and returns the output dtype.
template <typename Fn>
mt::DType dtype_under(Precision p, Fn&& fn) {
  autocast guard(mt::kCPU, p);
  return fn().dtype();
}

const std::vector<Precision>& precisions() {
  static const std::vector<Precision> v{Precision::Float32, mt::amp::kTF32, Precision::Float16,
                                        Precision::BFloat16};
  return v;
}

}  // namespace

TEST(Autocast, PolicyTableMatchesPyTorchLists) {
  using mt::amp::CastPolicy;
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::mm), CastPolicy::LowerPrecision);
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::linear), CastPolicy::LowerPrecision);
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::conv2d), CastPolicy::LowerPrecision);
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::softmax), CastPolicy::Float32);
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::cross_entropy), CastPolicy::Float32);
  EXPECT_EQ(mt::amp::cast_policy(mt::OpId::cat), CastPolicy::Promote);
}

TEST(Autocast, LowerPrecisionOpsOutputDtypePerPrecision) {
  const mt::Tensor a = f32({4, 3}), b = f32({3, 5}), a3 = f32({2, 4, 3}), b3 = f32({2, 3, 5});
  const mt::Tensor w = f32({5, 3}), bias = f32({5});
  for (Precision p : precisions()) {
    SCOPED_TRACE(std::string(p.name()));
    const mt::DType want = p.dtype();  // float32 for float32 and tf32
    EXPECT_EQ(dtype_under(p, [&] { return mt::mm(a, b); }), want);
    EXPECT_EQ(dtype_under(p, [&] { return mt::bmm(a3, b3); }), want);
    EXPECT_EQ(dtype_under(p, [&] { return mt::matmul(a3, b); }), want);
    EXPECT_EQ(dtype_under(p, [&] { return mt::linear(a, w, bias); }), want);
  }
}

TEST(Autocast, Float32OpsOutputFloat32ForHalfInputs) {
  for (mt::DType half : {mt::kFloat16, mt::kBFloat16}) {
    const mt::Tensor x = mt::rand({4, 6}).to(half) + 0.5;
    const mt::Tensor t = mt::rand({4, 6}).to(half);
    const mt::Tensor labels = mt::tensor<int64_t>({0, 5, 2, 3});
    for (Precision p : {Precision(Precision::Float16), Precision(Precision::BFloat16)}) {
      SCOPED_TRACE(std::string(p.name()) + " on " + std::string(mt::dtype_name(half)));
      auto check = [&](auto fn) { EXPECT_EQ(dtype_under(p, fn), mt::kFloat32); };
      check([&] { return mt::exp(x); });
      check([&] { return mt::log(x); });
      check([&] { return mt::pow(x, 2.0); });
      check([&] { return mt::pow(x, t); });
      check([&] { return mt::sum(x); });
      check([&] { return mt::norm(x); });
      check([&] { return mt::softmax(x, 1); });
      check([&] { return mt::log_softmax(x, 1); });
      check([&] { return mt::nn::functional::layer_norm(x, {6}); });
      check([&] { return mt::nn::functional::mse_loss(x, t); });
      check([&] { return mt::nn::functional::l1_loss(x, t); });
      check([&] { return mt::nn::functional::cross_entropy(x, labels); });
      check([&] { return mt::nn::functional::nll_loss(x, labels); });
      check([&] { return mt::nn::functional::binary_cross_entropy_with_logits(x, t); });
    }
  }
}

TEST(Autocast, PromoteAndUnlistedOps) {
  const mt::Tensor h = mt::rand({2, 3}).to(mt::kFloat16), s = mt::rand({2, 3});
  autocast guard(mt::kCPU, mt::kFloat16);
  EXPECT_EQ(mt::cat({h, s}).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::stack({h, s}).dtype(), mt::kFloat32);
  EXPECT_EQ((h + s).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::relu(h).dtype(), mt::kFloat16);  // not in the table: input dtype
  EXPECT_EQ(mt::relu(s).dtype(), mt::kFloat32);
  // mean is on neither of PyTorch's lists: it keeps its input's dtype, on every device.
  const mt::Tensor b = mt::rand({2, 3}).to(mt::kBFloat16);
  for (Precision p : {Precision(Precision::Float16), Precision(Precision::BFloat16)}) {
    autocast inner(mt::kCPU, p);
    EXPECT_EQ(mt::mean(b).dtype(), mt::kBFloat16);
    EXPECT_EQ(mt::mean(h, {1}).dtype(), mt::kFloat16);
    EXPECT_EQ(mt::mean(s).dtype(), mt::kFloat32);
  }
}

TEST(Autocast, Float64AndIntegersAreNeverCast) {
  const mt::Tensor a = mt::randn({3, 3}, mt::kFloat64), b = mt::randn({3, 3}, mt::kFloat64);
  const mt::Tensor i = mt::randint(0, 5, {3, 3}), j = mt::randint(0, 5, {3, 3});
  for (Precision p : {Precision(Precision::Float16), Precision(Precision::BFloat16)}) {
    autocast guard(mt::kCPU, p);
    EXPECT_EQ(mt::mm(a, b).dtype(), mt::kFloat64);
    EXPECT_EQ(mt::softmax(a, 0).dtype(), mt::kFloat64);
    EXPECT_EQ(mt::mm(i, j).dtype(), mt::kInt64);
  }
}

TEST(Autocast, DefaultsAndState) {
  EXPECT_EQ(mt::amp::default_precision(mt::kCPU), Precision::BFloat16);
  EXPECT_EQ(mt::amp::default_precision(mt::kCUDA), Precision::Float16);
  EXPECT_FALSE(mt::amp::is_autocast_enabled(mt::kCPU));
  {
    autocast guard(mt::kCPU);
    EXPECT_TRUE(mt::amp::is_autocast_enabled(mt::kCPU));
    EXPECT_EQ(mt::amp::current_precision(mt::kCPU), Precision::BFloat16);
    EXPECT_EQ(mt::mm(f32({2, 2}), f32({2, 2})).dtype(), mt::kBFloat16);
    EXPECT_FALSE(mt::amp::is_autocast_enabled(mt::kCUDA));
  }
  EXPECT_FALSE(mt::amp::is_autocast_enabled(mt::kCPU));
  EXPECT_EQ(mt::amp::current_precision(mt::kCPU), Precision::Float32);
  {
    autocast off(mt::kCPU, mt::kFloat16, /*enabled=*/false);
    EXPECT_EQ(mt::mm(f32({2, 2}), f32({2, 2})).dtype(), mt::kFloat32);
  }
  mt::testing::expect_error([] { Precision p(mt::kInt64); }, {"unsupported precision", "int64"});
  mt::testing::expect_error([] { Precision::parse("fp8"); }, {"unknown precision 'fp8'"});
  EXPECT_EQ(Precision::parse("bf16"), Precision::BFloat16);
}

TEST(Autocast, StateRestoredAfterThrowingScope) {
  try {
    autocast guard(mt::kCPU, mt::kFloat16);
    EXPECT_TRUE(mt::amp::is_autocast_enabled(mt::kCPU));
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(mt::amp::is_autocast_enabled(mt::kCPU));
  EXPECT_EQ(mt::mm(f32({2, 2}), f32({2, 2})).dtype(), mt::kFloat32);
  EXPECT_EQ(mt::amp::autocast_cache_size(), 0u);
}

TEST(Autocast, NestedScopes) {
  const mt::Tensor a = f32({3, 3});
  autocast outer(mt::kCPU, mt::kFloat16);
  EXPECT_EQ(mt::mm(a, a).dtype(), mt::kFloat16);
  {
    autocast inner(mt::kCPU, mt::kFloat16, /*enabled=*/false);
    EXPECT_EQ(mt::mm(a, a).dtype(), mt::kFloat32);
    {
      autocast innermost(mt::kCPU, mt::kBFloat16);
      EXPECT_EQ(mt::mm(a, a).dtype(), mt::kBFloat16);
    }
    EXPECT_EQ(mt::mm(a, a).dtype(), mt::kFloat32);
  }
  EXPECT_EQ(mt::mm(a, a).dtype(), mt::kFloat16);
}

TEST(Autocast, WeightCastOncePerScopeAndKeepsHistory) {
  mt::nn::Linear layer(4, 3);
  const mt::Tensor x = f32({5, 4});
  mt::Tensor y1, y2;
  {
    autocast guard(mt::kCPU, mt::kFloat16);
    y1 = layer(x);
    EXPECT_EQ(mt::amp::autocast_cache_size(), 2u);  // weight and bias, once each
    y2 = layer(x);
    EXPECT_EQ(mt::amp::autocast_cache_size(), 2u);
    {
      autocast nested(mt::kCPU, mt::kFloat16);
      (void)layer(x);
      EXPECT_EQ(mt::amp::autocast_cache_size(), 2u);  // shared with the outermost scope
    }
    EXPECT_EQ(mt::amp::autocast_cache_size(), 2u);
  }
  EXPECT_EQ(mt::amp::autocast_cache_size(), 0u);
  EXPECT_EQ(y1.dtype(), mt::kFloat16);
  (y1.to(mt::kFloat32).sum() + y2.to(mt::kFloat32).sum()).backward();
  // Both uses backpropagate through the one cached cast into the float32 weight.
  ASSERT_TRUE(layer->weight.grad().defined());
  EXPECT_EQ(layer->weight.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(layer->bias.grad().dtype(), mt::kFloat32);
  const auto gb = layer->bias.grad().to_vector<float>();
  for (float g : gb) EXPECT_FLOAT_EQ(g, 10.0f);  // 5 rows, two outputs
  // Inputs that are not weights (no grad) are cast every time, never cached.
  {
    autocast guard(mt::kCPU, mt::kFloat16);
    mt::autograd::NoGradGuard no_grad;
    (void)layer(x);
    EXPECT_EQ(mt::amp::autocast_cache_size(), 0u);
  }
}

TEST(Autocast, BackwardRunsInForwardDtype) {
  mt::Tensor w = mt::randn({4, 4}).requires_grad_();
  mt::Tensor x = mt::randn({2, 4});
  mt::Tensor out;
  {
    autocast guard(mt::kCPU, mt::kBFloat16);
    out = mt::mm(x, w);
  }
  ASSERT_EQ(out.dtype(), mt::kBFloat16);
  ASSERT_NE(out.grad_fn(), nullptr);
  out.sum().backward();
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
}

TEST(Autocast, Tf32MatmulErrorIsAboutOneThousandth) {
  mt::manual_seed(3);
  const mt::Tensor a = mt::randn({64, 256}), b = mt::randn({256, 64});
  const mt::Tensor ref = mt::mm(a.to(mt::kFloat64), b.to(mt::kFloat64));
  auto rel_error = [&](const mt::Tensor& c) {
    return (mt::norm(c.to(mt::kFloat64) - ref) / mt::norm(ref)).item<double>();
  };
  const double full = rel_error(mt::mm(a, b));
  double scoped = 0.0;
  {
    autocast guard(mt::kCPU, mt::amp::kTF32);
    const mt::Tensor c = mt::mm(a, b);
    EXPECT_EQ(c.dtype(), mt::kFloat32);
    scoped = rel_error(c);
  }
  EXPECT_LT(full, 1e-6);
  EXPECT_GT(scoped, 5e-5);
  EXPECT_LT(scoped, 3e-3);
  EXPECT_NEAR(rel_error(mt::mm(a, b)), full, 0.0);  // the scope restored full precision
  // The global setting does the same everywhere until reset.
  mt::set_float32_matmul_precision("high");
  const double global = rel_error(mt::mm(a, b));
  mt::set_float32_matmul_precision("highest");
  EXPECT_DOUBLE_EQ(global, scoped);
  mt::testing::expect_error([] { mt::set_float32_matmul_precision("low"); }, {"invalid precision"});
}

TEST(Autocast, CpuEmulatesTensorCoreNumerics) {
  // Operands rounded to the low-precision type, float32 accumulation, one rounding at the end.
  mt::manual_seed(4);
  const mt::Tensor a = mt::randn({8, 64}), b = mt::randn({64, 8});
  for (mt::DType low : {mt::kFloat16, mt::kBFloat16}) {
    mt::Tensor c;
    {
      autocast guard(mt::kCPU, Precision(low));
      c = mt::mm(a, b);
    }
    ASSERT_EQ(c.dtype(), low);
    const auto av = a.to(low).to_vector<double>(), bv = b.to(low).to_vector<double>();
    const auto cv = c.to_vector<double>();
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        double acc = 0.0;
        for (int k = 0; k < 64; ++k) acc += av[i * 64 + k] * bv[k * 8 + j];
        const double rounded = mt::scalar_tensor(acc, mt::kFloat64).to(low).item<double>();
        // float32 accumulation may move the exact sum by a few float32 ulps before rounding.
        EXPECT_NEAR(cv[i * 8 + j], rounded, std::abs(rounded) * (low == mt::kFloat16 ? 1e-3 : 8e-3))
            << "element " << i << "," << j;
      }
    }
  }
}

namespace {

// Trains a model on a fixed regression task and returns the final loss (mean of the last 10).
double train(std::shared_ptr<mt::nn::SequentialImpl> model, Precision p, int steps) {
  mt::manual_seed(11);
  const mt::Tensor teacher = mt::randn({model->named_parameters()[0].second.size(1), 4}) * 0.5;
  mt::optim::SGD opt(model->parameters(), 0.05, {.momentum = 0.9});
  mt::amp::GradScaler scaler(p.kind() == Precision::Float16);
  mt::nn::MSELoss loss_fn;
  double tail = 0.0;
  for (int step = 0; step < steps; ++step) {
    const mt::Tensor x = mt::randn({32, teacher.size(0)});
    const mt::Tensor y = mt::tanh(x.matmul(teacher));
    mt::Tensor loss;
    {
      autocast guard(mt::kCPU, p, p.kind() != Precision::Float32);
      loss = loss_fn(model->forward(x), y);
    }
    EXPECT_EQ(loss.dtype(), mt::kFloat32);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    if (step >= steps - 10) tail += loss.item<float>() / 10.0;
  }
  return tail;
}

std::shared_ptr<mt::nn::SequentialImpl> make(bool toy) {
  mt::manual_seed(5);
  if (toy) {
    return std::make_shared<mt::nn::SequentialImpl>(mt::nn::Linear(10, 10), mt::nn::ReLU(),
                                                    mt::nn::Linear(10, 4));
  }
  return std::make_shared<mt::nn::SequentialImpl>(mt::nn::Linear(16, 64), mt::nn::ReLU(),
                                                  mt::nn::Linear(64, 64), mt::nn::GELU(),
                                                  mt::nn::Linear(64, 4));
}

}  // namespace

TEST(Autocast, AmpTrainingMatchesFloat32) {
  for (bool toy : {true, false}) {
    const double reference = train(make(toy), Precision::Float32, 300);
    for (Precision p : {Precision(Precision::Float16), Precision(Precision::BFloat16)}) {
      SCOPED_TRACE(std::string(toy ? "toy " : "mlp ") + std::string(p.name()));
      const double got = train(make(toy), p, 300);
      EXPECT_LT(std::abs(got - reference), 1e-2 * reference + 1e-4)
          << "float32 " << reference << ", " << p.name() << " " << got;
    }
  }
}

// Autocast casts at the op boundary (autograd/autocast_wrapper.h). The reference is what
// PyTorch's autocast computes, written out by hand: each weight cast once per scope with its own
// node, shared by every use, and the layers run on the cast tensors.
namespace {

struct TwoLayers {
  mt::Tensor w1, b1, w2, b2;
  TwoLayers() {
    mt::manual_seed(7);
    w1 = mt::randn({16, 10}).requires_grad_();
    b1 = mt::randn({16}).requires_grad_();
    w2 = mt::randn({5, 16}).requires_grad_();
    b2 = mt::randn({5}).requires_grad_();
  }
  std::vector<mt::Tensor> params() const { return {w1, b1, w2, b2}; }
  // The reference's casts: each weight cast once, with history, shared by every use.
  std::vector<mt::Tensor> casts(mt::DType dtype) const {
    std::vector<mt::Tensor> out;
    for (const auto& p : params()) out.push_back(p.to(dtype));
    return out;
  }
  void zero_grad() const {
    for (const auto& p : params()) p.set_grad(mt::Tensor());
  }
};

// y for one input, fused (linear_act_linear) or layer by layer, on the given weight tensors.
mt::Tensor mlp(const mt::Tensor& x, const std::vector<mt::Tensor>& w, bool fused) {
  namespace F = mt::nn::functional;
  if (fused) return mt::linear_act_linear(x, w[0], w[1], mt::LinearActivation::Relu, w[2], w[3]);
  return F::linear(F::relu(F::linear(x, w[0], w[1])), w[2], w[3]);
}

// Loss and gradients of a step over `inputs` (each through the two layers, MSE summed), under
// autocast, or with explicit casts shared by all uses (the reference).
std::vector<mt::Tensor> step(const TwoLayers& m, const std::vector<mt::Tensor>& inputs,
                             const mt::Tensor& target, mt::DType dtype, bool fused,
                             bool reference) {
  namespace F = mt::nn::functional;
  m.zero_grad();
  mt::Tensor loss;
  if (reference) {
    const std::vector<mt::Tensor> cast = m.casts(dtype);
    for (const auto& x : inputs) {
      const mt::Tensor l = F::mse_loss(mlp(x.to(dtype), cast, fused).to(mt::kFloat32), target);
      loss = loss.defined() ? loss + l : l;
    }
  } else {
    autocast guard(mt::kCPU, dtype);
    for (const auto& x : inputs) {
      const mt::Tensor y = mlp(x, m.params(), fused);
      EXPECT_EQ(y.dtype(), dtype);
      const mt::Tensor l = F::mse_loss(y, target);
      loss = loss.defined() ? loss + l : l;
    }
  }
  loss.backward();
  std::vector<mt::Tensor> out{loss.detach()};
  for (const auto& p : m.params()) out.push_back(p.grad());
  return out;
}

void expect_same_bits(const std::vector<mt::Tensor>& a, const std::vector<mt::Tensor>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << what << " " << i;
    EXPECT_EQ(a[i].dtype(), mt::kFloat32) << what << " " << i;
    EXPECT_TRUE(mt::equal(a[i], b[i])) << what << ": loss/grad " << i << " differs";
  }
}

}  // namespace

TEST(AutocastMatchesExplicitCasts, LinearLayersMatchSharedCastsBitForBit) {
  const TwoLayers m;
  const mt::Tensor x = mt::randn({20, 10}), target = mt::randn({20, 5});
  for (mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    for (bool fused : {true, false}) {
      const std::string what =
          std::string(mt::dtype_name(dtype)) + (fused ? " fused" : " layer by layer");
      expect_same_bits(step(m, {x}, target, dtype, fused, false),
                       step(m, {x}, target, dtype, fused, true), what);
    }
  }
}

TEST(AutocastMatchesExplicitCasts, WeightsUsedTwiceInOneScopeSumGradientsInTheAutocastDtype) {
  // The second use finds the first use's cast in the cache, so both gradients are summed in
  // bfloat16 before the cast's backward widens them, as with PyTorch's cached cast. Summing
  // them in float32 instead would change the bits.
  const TwoLayers m;
  const mt::Tensor x1 = mt::randn({20, 10}), x2 = mt::randn({20, 10});
  const mt::Tensor target = mt::randn({20, 5});
  for (bool fused : {true, false}) {
    const std::string what = fused ? "fused" : "layer by layer";
    expect_same_bits(step(m, {x1, x2}, target, mt::kBFloat16, fused, false),
                     step(m, {x1, x2}, target, mt::kBFloat16, fused, true), what);
  }
}

TEST(AutocastMatchesExplicitCasts, EachWeightReachesTheOpThroughOneCastNode) {
  const TwoLayers m;
  const mt::Tensor x = mt::randn({4, 10});
  mt::Tensor y, y2;
  {
    autocast guard(mt::kCPU, mt::kBFloat16);
    y = mlp(x, m.params(), true);
    y2 = mlp(x, m.params(), true);
    EXPECT_EQ(mt::amp::autocast_cache_size(), 4u);
  }
  // Inputs: x (cast, no grad), then a cast node per weight, the same for both uses.
  const auto node = y.grad_fn(), node2 = y2.grad_fn();
  ASSERT_EQ(node->next_edges.size(), 5u);
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(node->next_edges[i].fn->name(), "ToCopyBackward0");
    EXPECT_EQ(node->next_edges[i].fn, node2->next_edges[i].fn);
  }
  const auto grads = mt::autograd::grad({y.to(mt::kFloat32).sum()}, {m.w1, m.b2}, {}, true);
  EXPECT_EQ(grads[0].dtype(), mt::kFloat32);
  EXPECT_EQ(grads[1].dtype(), mt::kFloat32);
  y.to(mt::kFloat32).sum().backward();
  EXPECT_TRUE(mt::equal(grads[0], m.w1.grad()));
  EXPECT_TRUE(mt::equal(grads[1], m.b2.grad()));
}

TEST(AutocastMatchesExplicitCasts, EveryLinearKernelPathMatchesSharedCasts) {
  // Every form of the fused kernels (activations, 3-d and strided inputs, broadcast biases)
  // gives the bits of the cast weights, gradients included.
  mt::manual_seed(11);
  const mt::Tensor w = mt::randn({6, 8}).requires_grad_();
  const mt::Tensor b_full = mt::randn({6}).requires_grad_();
  const mt::Tensor b_one = mt::randn({1}).requires_grad_();
  const mt::Tensor x_plain = mt::randn({5, 8});
  const mt::Tensor x_3d = mt::randn({2, 3, 8});
  const mt::Tensor x_strided = mt::randn({8, 5}).t();
  struct Case {
    const char* name;
    mt::Tensor x, b;
    mt::LinearActivation act;
  };
  const Case cases[] = {
      {"plain", x_plain, b_full, mt::LinearActivation::None},
      {"relu", x_plain, b_full, mt::LinearActivation::Relu},
      {"gelu", x_plain, b_full, mt::LinearActivation::GeluTanh},
      {"3-d relu", x_3d, b_full, mt::LinearActivation::Relu},
      {"strided input", x_strided, b_full, mt::LinearActivation::Relu},
      {"broadcast bias", x_plain, b_one, mt::LinearActivation::None},
  };
  for (mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    for (const Case& c : cases) {
      auto run = [&](bool reference) {
        w.set_grad(mt::Tensor());
        c.b.set_grad(mt::Tensor());
        mt::Tensor y;
        if (reference) {
          y = mt::linear_act(c.x.to(dtype), w.to(dtype), c.b.to(dtype), c.act);
        } else {
          autocast guard(mt::kCPU, dtype);
          y = mt::linear_act(c.x, w, c.b, c.act);
        }
        const mt::Tensor gy = mt::ones_like(y).to(mt::kFloat32) * 0.37f;
        mt::sum(y.to(mt::kFloat32) * gy).backward();
        return std::vector<mt::Tensor>{y.to(mt::kFloat32), w.grad(), c.b.grad()};
      };
      const std::string what = std::string(mt::dtype_name(dtype)) + " " + c.name;
      expect_same_bits(run(false), run(true), what);
    }
  }
}

TEST(AutocastMatchesExplicitCasts, FrozenWeightsOtherOpsAndNestedScopesMatchSharedCasts) {
  namespace F = mt::nn::functional;
  TwoLayers m;
  const mt::Tensor x = mt::randn({20, 10}), x2 = mt::randn({20, 10}), x3 = mt::randn({20, 16});
  const mt::Tensor target = mt::randn({20, 5});
  const auto grads = [&] {
    std::vector<mt::Tensor> g;
    for (const auto& p : m.params()) g.push_back(p.grad());
    return g;
  };
  // A frozen first-layer weight is cast as an input (no cache); its bias through the cache.
  {
    m.w1.requires_grad_(false);
    m.zero_grad();
    {
      autocast guard(mt::kCPU, mt::kBFloat16);
      F::mse_loss(mlp(x, m.params(), true), target).backward();
    }
    const auto direct = grads();
    m.zero_grad();
    const std::vector<mt::Tensor> cast = m.casts(mt::kBFloat16);
    F::mse_loss(mlp(x.to(mt::kBFloat16), cast, true).to(mt::kFloat32), target).backward();
    const auto reference = grads();
    EXPECT_FALSE(direct[0].defined());
    for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(mt::equal(direct[i], reference[i])) << i;
    m.w1.requires_grad_(true);
  }
  // A second use of W1 through mm, and a nested float16 scope using every weight again.
  m.zero_grad();
  {
    autocast guard(mt::kCPU, mt::kBFloat16);
    mt::Tensor loss = F::mse_loss(mlp(x, m.params(), true), target);
    loss = loss + mt::mean(mt::mm(x3, m.w1));  // the leaf itself: the cached cast
    {
      autocast nested(mt::kCPU, mt::kFloat16);
      loss = loss + F::mse_loss(mlp(x2, m.params(), false), target);
    }
    loss.backward();
  }
  const auto direct = grads();
  m.zero_grad();
  {
    const std::vector<mt::Tensor> bf = m.casts(mt::kBFloat16), hf = m.casts(mt::kFloat16);
    mt::Tensor loss = F::mse_loss(mlp(x.to(mt::kBFloat16), bf, true).to(mt::kFloat32), target);
    loss = loss + mt::mean(mt::mm(x3.to(mt::kBFloat16), bf[0]).to(mt::kFloat32));
    loss = loss + F::mse_loss(mlp(x2.to(mt::kFloat16), hf, false).to(mt::kFloat32), target);
    loss.backward();
  }
  expect_same_bits(direct, grads(), "mm reuse and nested float16 scope");
}

TEST(AutocastMatchesExplicitCasts, WeightUpdatedInsideTheScopeKeepsItsOwnGradientPath) {
  // A step between two uses in one scope: the second use casts the updated weight anew (the
  // cache checks the weight's version) and both uses' gradients reach the weight.
  namespace F = mt::nn::functional;
  TwoLayers m;
  const mt::Tensor x = mt::randn({20, 10}), target = mt::randn({20, 5});
  m.zero_grad();
  autocast guard(mt::kCPU, mt::kBFloat16);
  const mt::Tensor first = F::mse_loss(mlp(x, m.params(), true), target);
  {
    mt::autograd::NoGradGuard no_grad;
    m.w1.add_(mt::ones_like(m.w1));  // w1 is not saved: x needs no gradient
  }
  const mt::Tensor second = F::mse_loss(mlp(x, m.params(), true), target);
  const auto w1_cast = [](const mt::Tensor& loss) {
    return loss.grad_fn()->next_edges[0].fn->next_edges[0].fn->next_edges[1].fn;
  };
  ASSERT_EQ(w1_cast(first)->name(), "ToCopyBackward0");
  EXPECT_NE(w1_cast(first), w1_cast(second));
  (first + second).backward();
  EXPECT_TRUE(m.w1.grad().defined());
  EXPECT_NE(mt::all_finite(m.w1.grad()).item<float>(), 0.0f);
}

TEST(AutocastMatchesExplicitCasts, ManyWeightsAreFoundThroughTheCacheIndex) {
  // Past 32 entries the cache is indexed by a hash map; a second pass must still find and share
  // every weight's cast.
  namespace F = mt::nn::functional;
  mt::manual_seed(5);
  std::vector<mt::Tensor> params;
  for (int i = 0; i < 20; ++i) {
    params.push_back((mt::randn({4, 4}) * 0.5).requires_grad_());
    params.push_back(mt::randn({4}).requires_grad_());
  }
  const mt::Tensor x = mt::randn({3, 4});
  auto run = [&](bool reference) {
    for (const auto& p : params) p.set_grad(mt::Tensor());
    std::vector<mt::Tensor> w = params;
    if (reference) {
      for (auto& p : w) p = p.to(mt::kBFloat16);
    }
    mt::Tensor loss;
    {
      autocast guard(mt::kCPU, mt::kBFloat16, !reference);
      for (int pass = 0; pass < 2; ++pass) {
        mt::Tensor h = reference ? x.to(mt::kBFloat16) : x;
        for (size_t i = 0; i < w.size(); i += 2) h = F::linear(h, w[i], w[i + 1]);
        const mt::Tensor l = mt::sum(h.to(mt::kFloat32));
        loss = loss.defined() ? loss + l : l;
      }
      if (!reference) {
        EXPECT_EQ(mt::amp::autocast_cache_size(), params.size());
      }
    }
    loss.backward();
    std::vector<mt::Tensor> out{loss.detach()};
    for (const auto& p : params) out.push_back(p.grad());
    return out;
  };
  expect_same_bits(run(false), run(true), "40 weights, two passes");
}

TEST(AutocastMatchesExplicitCasts, ActivationInputsAreCastWithTheirGradients) {
  // A float32 activation (not a weight) is cast on every use; its gradient comes back through the
  // cast's backward in float32.
  TwoLayers m;
  const mt::Tensor a = mt::randn({20, 10}).requires_grad_();
  const mt::Tensor target = mt::randn({20, 5});
  for (mt::DType dtype : {mt::kBFloat16, mt::kFloat16}) {
    for (bool fused : {true, false}) {
      auto run = [&](bool reference) {
        m.zero_grad();
        a.set_grad(mt::Tensor());
        const mt::Tensor x = a * 2.0f;  // a non-leaf activation
        mt::Tensor loss;
        if (reference) {
          const std::vector<mt::Tensor> cast = m.casts(dtype);
          loss =
              mt::nn::functional::mse_loss(mlp(x.to(dtype), cast, fused).to(mt::kFloat32), target);
        } else {
          autocast guard(mt::kCPU, dtype);
          loss = mt::nn::functional::mse_loss(mlp(x, m.params(), fused), target);
        }
        loss.backward();
        std::vector<mt::Tensor> out{loss.detach(), a.grad()};
        for (const auto& p : m.params()) out.push_back(p.grad());
        return out;
      };
      const std::string what =
          std::string(mt::dtype_name(dtype)) + (fused ? " fused" : " layer by layer");
      expect_same_bits(run(false), run(true), what);
    }
  }
}

TEST(AutocastMatchesExplicitCasts, BackwardOnAnotherThreadWhileTheScopeRunsForward) {
  // Autocast never edits a recorded graph: a graph built in a scope can be backpropagated on
  // another thread while the scope goes on recording ops that reuse its cached weight casts.
  namespace F = mt::nn::functional;
  const TwoLayers m;
  const mt::Tensor x1 = mt::randn({20, 10}), x2 = mt::randn({20, 10});
  const mt::Tensor target = mt::randn({20, 5});
  const auto grads = [&] {
    std::vector<mt::Tensor> g;
    for (const auto& p : m.params()) g.push_back(p.grad());
    return g;
  };
  m.zero_grad();
  {
    autocast guard(mt::kCPU, mt::kBFloat16);
    F::mse_loss(mlp(x1, m.params(), true), target).backward();
    F::mse_loss(mlp(x2, m.params(), false), target).backward();
  }
  const auto sequential = grads();
  m.zero_grad();
  {
    autocast guard(mt::kCPU, mt::kBFloat16);
    const mt::Tensor first = F::mse_loss(mlp(x1, m.params(), true), target);
    std::thread backward([&] { first.backward(); });
    for (int i = 0; i < 50; ++i) (void)mlp(x2, m.params(), i % 2 == 0);
    const mt::Tensor second = F::mse_loss(mlp(x2, m.params(), false), target);
    backward.join();
    second.backward();
  }
  expect_same_bits(grads(), sequential, "backward on a second thread");
}
