// nn modules, layers and init: the Module API (registration, traversal, train/eval, to(),
// state dicts, printing), every layer against a plain-loop float64 reference, and the init
// formulas. Losses are in test_nn_loss.cpp.
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using Vec = std::vector<double>;

namespace {

// The ToyModel of the README, registering its layers in the constructor.
using mt::testing::ToyModel;

// A module with its own parameter, a float buffer and an integer buffer.
struct Stats : nn::Module {
  Tensor scale, running, count;
  Stats() : nn::Module("Stats") {
    scale = register_parameter("scale", mt::ones({3}));
    running = register_buffer("running", mt::zeros({3}));
    count = register_buffer("count", mt::zeros({}, mt::kInt64));
  }
};

// Linear(4, 6) -> Stats-holding child -> Sequential(Linear(6, 3), ReLU).
struct Net : nn::Module {
  nn::Linear first{nullptr};
  std::shared_ptr<Stats> stats;
  nn::Sequential block{nullptr};
  Net() : nn::Module("Net") {
    first = register_module("first", nn::Linear(4, 6));
    stats = register_module("stats", std::make_shared<Stats>());
    block = register_module("block", nn::Sequential(nn::Linear(6, 3), nn::ReLU()));
  }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, _] : named) out.push_back(n);
  return out;
}

// y[..., o] = sum_i x[..., i] * w[o, i] + b[o], in float64 over the tensors' values.
Tensor linear_ref(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  const Vec xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const Vec bv = b.defined() ? b.to_vector<double>() : Vec(out, 0.0);
  Vec y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[o];
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = acc;
    }
  Shape shape = x.shape();
  shape[shape.size() - 1] = out;
  return mt::from_vector(y, shape, mt::kFloat64);
}

// Layer norm over the last `k` dims of x, with optional weight and bias of that trailing shape.
Tensor layer_norm_ref(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  int64_t inner = 1;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t rows = x.numel() / inner;
  const Vec xv = x.to_vector<double>();
  const Vec wv = w.defined() ? w.to_vector<double>() : Vec(inner, 1.0);
  const Vec bv = b.defined() ? b.to_vector<double>() : Vec(inner, 0.0);
  Vec y(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += xv[r * inner + i];
    mean /= inner;
    for (int64_t i = 0; i < inner; ++i) var += std::pow(xv[r * inner + i] - mean, 2);
    var /= inner;
    for (int64_t i = 0; i < inner; ++i)
      y[r * inner + i] = (xv[r * inner + i] - mean) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return mt::from_vector(y, x.shape(), mt::kFloat64);
}

Tensor map_ref(const Tensor& x, double (*f)(double)) {
  Vec v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return mt::from_vector(v, x.shape(), mt::kFloat64);
}

// Softmax (or log-softmax) along the last dim.
Tensor softmax_ref(const Tensor& x, bool log) {
  const int64_t n = x.size(-1), rows = x.numel() / n;
  Vec v = x.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[r * n + i]);
    for (int64_t i = 0; i < n; ++i) s += std::exp(v[r * n + i] - mx);
    for (int64_t i = 0; i < n; ++i)
      v[r * n + i] = log ? v[r * n + i] - mx - std::log(s) : std::exp(v[r * n + i] - mx) / s;
  }
  return mt::from_vector(v, x.shape(), mt::kFloat64);
}

// Sets t's values (a parameter) without recording history.
void assign(Tensor t, const Tensor& values) {
  mt::autograd::NoGradGuard no_grad;
  t.copy_(values);
}

double sample_std(const Vec& v) {
  double mean = 0, var = 0;
  for (double e : v) mean += e;
  mean /= static_cast<double>(v.size());
  for (double e : v) var += (e - mean) * (e - mean);
  return std::sqrt(var / static_cast<double>(v.size()));
}

}  // namespace

// ---- Module API -----------------------------------------------------------------------------
TEST(Module, RegistrationAndTraversalOrder) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(names_of(net->named_parameters()),
            (std::vector<std::string>{"first.weight", "first.bias", "stats.scale", "block.0.weight",
                                      "block.0.bias"}));
  const auto params = net->parameters();
  ASSERT_EQ(params.size(), 5u);
  EXPECT_TRUE(params[0].is_same(net->first->weight));
  EXPECT_TRUE(params[4].is_same((*net->block)[0]->named_parameters()[1].second));
  for (const Tensor& p : params) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  EXPECT_TRUE(net->named_parameters(/*recurse=*/false).empty());
  EXPECT_EQ(names_of(net->named_buffers()),
            (std::vector<std::string>{"stats.running", "stats.count"}));
  EXPECT_TRUE(net->buffers()[0].is_same(net->stats->running));
  EXPECT_FALSE(net->stats->running.requires_grad());

  std::vector<std::string> child_names;
  for (const auto& [n, c] : net->named_children()) child_names.push_back(n);
  EXPECT_EQ(child_names, (std::vector<std::string>{"first", "stats", "block"}));
  EXPECT_EQ(net->children().size(), 3u);
  std::vector<std::string> module_names, types;
  for (const auto& [n, m] : net->named_modules()) {
    module_names.push_back(n);
    types.push_back(m->type_name());
  }
  EXPECT_EQ(module_names,
            (std::vector<std::string>{"", "first", "stats", "block", "block.0", "block.1"}));
  EXPECT_EQ(types,
            (std::vector<std::string>{"Net", "Linear", "Stats", "Sequential", "Linear", "ReLU"}));
}

TEST(Module, RegistrationErrors) {
  nn::Module m;
  m.register_parameter("w", mt::zeros({2}));
  expect_error([&] { m.register_parameter("w", mt::zeros({2})); }, {"'w' already exists"});
  expect_error([&] { m.register_parameter("a.b", mt::zeros({2})); }, {"must not contain '.'"});
  expect_error([&] { m.register_module("empty", nn::Linear(nullptr)); }, {"'empty' is empty"});
  // A parameter registered without requires_grad stays frozen.
  Tensor frozen = m.register_parameter("frozen", mt::zeros({2}), /*requires_grad=*/false);
  EXPECT_FALSE(frozen.requires_grad());
  EXPECT_EQ(m.parameters().size(), 2u);
}

TEST(Module, SharedParametersAreListedOnce) {
  // Tied weights (one Linear registered twice): like PyTorch, parameters() lists each tensor
  // once, so an optimizer accepts it; state_dict keeps every name.
  nn::Linear shared(3, 3);
  nn::Module m;
  m.register_module("a", shared);
  m.register_module("b", shared);
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"a.weight", "a.bias"}));
  EXPECT_NO_THROW(mt::optim::SGD(m.parameters(), 0.1));
  EXPECT_EQ(m.state_dict().keys(),
            (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"}));
}

TEST(Module, TrainEvalIsRecursive) {
  auto net = std::make_shared<Net>();
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (const auto& [n, m] : net->named_modules()) EXPECT_FALSE(m->is_training()) << n;
  net->train();
  for (const auto& [n, m] : net->named_modules()) EXPECT_TRUE(m->is_training()) << n;

  nn::Sequential seq(nn::Linear(8, 8), nn::Dropout(0.5));
  const Tensor x = mt::randn({64, 8});
  seq->eval();
  const Tensor y0 = seq(x), y1 = seq(x);
  EXPECT_TRUE(mt::equal(y0, y1));
  EXPECT_TRUE(mt::equal(y0, (*seq)[0]->forward(x)));
  seq->train();
  const auto v = seq(x).to_vector<double>(), ref = y0.to_vector<double>();
  int zeros = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0.0) {
      ++zeros;
    } else {
      EXPECT_NEAR(v[i], 2.0 * ref[i], 1e-5);
    }
  }
  EXPECT_GT(zeros, 150);
  EXPECT_LT(zeros, 362);
}

TEST(Module, ToDtypeKeepsTensorIdentity) {
  mt::manual_seed(1);
  auto model = std::make_shared<ToyModel>();
  Tensor w = model->net1->weight;  // a handle taken before to()
  const Vec w0 = w.to_vector<double>();
  mt::optim::SGD optimizer(model->parameters(), /*lr=*/0.1);
  model->forward(mt::randn({4, 10})).sum().backward();  // grads exist before the conversion
  model->to(mt::kFloat64);
  EXPECT_EQ(w.dtype(), mt::kFloat64);
  EXPECT_TRUE(w.is_same(model->parameters()[0]));
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_EQ(w.grad().dtype(), mt::kFloat64);
  EXPECT_EQ(w.to_vector<double>(), w0);  // float32 values are exact in float64
  for (const Tensor& p : model->parameters()) EXPECT_EQ(p.dtype(), mt::kFloat64);

  // The optimizer made before to() updates the converted tensors.
  optimizer.zero_grad();
  model->forward(mt::randn({4, 10}, mt::kFloat64)).sum().backward();
  const Vec g = w.grad().to_vector<double>();
  optimizer.step();
  const Vec w1 = w.to_vector<double>();
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_DOUBLE_EQ(w1[i], w0[i] - 0.1 * g[i]);

  // Integer buffers are left alone; float buffers follow.
  Stats s;
  s.to(mt::kFloat64);
  EXPECT_EQ(s.count.dtype(), mt::kInt64);
  EXPECT_EQ(s.running.dtype(), mt::kFloat64);
  EXPECT_EQ(s.scale.dtype(), mt::kFloat64);
  expect_error([&] { s.to(mt::kInt32); }, {"only floating point dtypes"});
  s.to(mt::Device::cpu(), mt::kFloat16);
  EXPECT_EQ(s.scale.dtype(), mt::kFloat16);
  EXPECT_EQ(s.count.dtype(), mt::kInt64);
}

TEST(Module, ToMissingDeviceFailsClearly) {
  if (mt::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  nn::Linear lin(2, 2);
  expect_error([&] { lin->to(mt::Device::cuda(0)); }, {"device cuda:0 requested"});
  EXPECT_EQ(lin->weight.device(), mt::Device::cpu());  // nothing was half-converted
}

TEST(Module, ZeroGrad) {
  nn::Linear lin(3, 2);
  lin(mt::randn({5, 3})).sum().backward();
  ASSERT_TRUE(lin->weight.grad().defined());
  lin->zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(lin->weight.grad().to_vector<double>(), Vec(6, 0.0));
  EXPECT_EQ(lin->bias.grad().to_vector<double>(), Vec(2, 0.0));
  lin->zero_grad();
  EXPECT_FALSE(lin->weight.grad().defined());
  EXPECT_FALSE(lin->bias.grad().defined());
}

TEST(Module, StateDictOrderAndValues) {
  auto net = std::make_shared<Net>();
  // As PyTorch: each module's parameters, then its buffers, then its children's.
  const nn::StateDict sd = net->state_dict();
  EXPECT_EQ(sd.keys(),
            (std::vector<std::string>{"first.weight", "first.bias", "stats.scale", "stats.running",
                                      "stats.count", "block.0.weight", "block.0.bias"}));
  EXPECT_TRUE(mt::equal(sd.at("first.weight"), net->first->weight));
  EXPECT_FALSE(sd.at("first.weight").requires_grad());
  expect_error([&] { (void)sd.at("nope"); }, {"no key 'nope'"});
}

TEST(Module, LoadStateDictRoundTrip) {
  auto a = std::make_shared<Net>(), b = std::make_shared<Net>();
  {
    mt::autograd::NoGradGuard no_grad;
    a->stats->running.fill_(3.0);
    a->stats->count.fill_(7);
  }
  b->load_state_dict(a->state_dict());
  for (const auto& [name, t] : a->state_dict()) {
    EXPECT_TRUE(mt::equal(t, b->state_dict().at(name))) << name;
    EXPECT_FALSE(t.storage() == b->state_dict().at(name).storage()) << name << " is shared";
  }
  EXPECT_EQ(b->stats->count.item<int64_t>(), 7);
  // Loading copies: changing the source afterwards leaves b alone.
  assign(a->first->weight, mt::zeros({6, 4}));
  EXPECT_NE(b->first->weight.to_vector<double>(), Vec(24, 0.0));
  EXPECT_TRUE(b->first->weight.requires_grad() && b->first->weight.is_leaf());
}

TEST(Module, LoadStateDictErrors) {
  auto model = std::make_shared<ToyModel>();
  auto source = std::make_shared<ToyModel>();
  nn::StateDict missing;
  for (const auto& [n, t] : source->state_dict())
    if (n != "net2.bias") missing.insert(n, t);
  expect_error([&] { model->load_state_dict(missing); },
               {"missing key(s)", "\"net2.bias\"", "ToyModel"});

  nn::StateDict extra = source->state_dict();
  extra.insert("net3.weight", mt::zeros({1}));
  expect_error([&] { model->load_state_dict(extra); }, {"unexpected key(s)", "\"net3.weight\""});

  nn::StateDict bad = source->state_dict();
  bad.insert("net1.weight", mt::zeros({3, 3}));
  expect_error([&] { model->load_state_dict(bad); },
               {"size mismatch for net1.weight", "[3, 3]", "[10, 10]"});

  // strict=false loads what matches and skips the rest.
  model->load_state_dict(missing, /*strict=*/false);
  EXPECT_TRUE(mt::equal(model->net1->weight, source->net1->weight));
  EXPECT_FALSE(mt::equal(model->net2->bias, source->net2->bias));
  model->load_state_dict(extra, /*strict=*/false);
  EXPECT_TRUE(mt::equal(model->net2->bias, source->net2->bias));
}

TEST(Module, Printing) {
  ToyModel toy;  // a module not owned by a shared_ptr prints (and traverses) as well
  std::ostringstream os;
  os << toy;
  EXPECT_EQ(os.str(),
            "ToyModel(\n"
            "  (net1): Linear(in_features=10, out_features=10, bias=True)\n"
            "  (relu): ReLU()\n"
            "  (net2): Linear(in_features=10, out_features=5, bias=True)\n"
            ")");
  EXPECT_EQ(toy.named_modules().size(), 4u);

  nn::Module outer("Outer");
  outer.register_module("body", nn::Sequential(nn::Linear(4, 8, /*bias=*/false), nn::GELU("tanh"),
                                               nn::Dropout(0.25), nn::LayerNorm(8)));
  outer.register_module("head", nn::Softmax(1));
  EXPECT_EQ(outer.repr(),
            "Outer(\n"
            "  (body): Sequential(\n"
            "    (0): Linear(in_features=4, out_features=8, bias=False)\n"
            "    (1): GELU(approximate='tanh')\n"
            "    (2): Dropout(p=0.25)\n"
            "    (3): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
            "  )\n"
            "  (head): Softmax(dim=1)\n"
            ")");
}

TEST(Module, ToyModelTrainsWithSgd) {
  mt::manual_seed(0);
  auto model = std::make_shared<ToyModel>();
  // A learnable target: a fixed random linear map of fixed inputs.
  const Tensor x = mt::randn({32, 10});
  const Tensor target = mt::matmul(x, mt::randn({10, 5})) * 0.3;
  nn::MSELoss loss_fn;
  mt::optim::SGD optimizer(model->parameters(), /*lr=*/0.05);
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    Tensor loss = loss_fn(model->forward(x), target);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

// ---- Linear -----------------------------------------------------------------------------------
TEST(Linear, DefaultInitRanges) {
  mt::manual_seed(3);
  nn::Linear lin(100, 300);
  const double bound = 1.0 / std::sqrt(100.0);
  for (const Tensor& t : {lin->weight, lin->bias}) {
    const Vec v = t.to_vector<double>();
    double lo = 1, hi = -1;
    for (double e : v) {
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -0.9 * bound);  // the whole range is used, not a narrower one
    EXPECT_GT(hi, 0.9 * bound);
  }
  EXPECT_NEAR(sample_std(lin->weight.to_vector<double>()), bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_EQ(lin->weight.shape(), (Shape{300, 100}));
}

TEST(Linear, ForwardMatchesReference) {
  for (mt::DType dtype : mt::testing::floating_dtypes()) {
    nn::Linear lin(7, 5);
    lin->to(dtype);
    const double scale = mt::is_reduced_float(dtype) ? 8 : 1;  // accumulation over 7 products
    const auto tol = mt::testing::tolerance_for(dtype);
    for (const Shape& shape : {Shape{6, 7}, Shape{3, 4, 7}}) {
      const Tensor x = random_tensor(shape, dtype, /*non_contiguous=*/true);
      const Tensor y = lin(x);
      EXPECT_EQ(y.dtype(), dtype);
      expect_close(y, linear_ref(x, lin->weight, lin->bias), tol.rtol * scale, tol.atol * scale,
                   "Linear " + std::string(mt::dtype_name(dtype)));
    }
  }
  nn::Linear nobias(7, 5, /*bias=*/false);
  EXPECT_FALSE(nobias->bias.defined());
  EXPECT_EQ(nobias->parameters().size(), 1u);
  const Tensor x = random_tensor({2, 3, 7}, mt::kFloat32, true);
  expect_close(nobias(x), linear_ref(x, nobias->weight, Tensor()));
}

TEST(Linear, Errors) {
  nn::Linear lin(4, 3);
  expect_error([&] { lin(mt::zeros({2, 5})); }, {"Linear", "last dimension 4", "[2, 5]"});
  expect_error([&] { nn::Linear(0, 3); }, {"must be positive"});
}

// ---- activations, dropout, softmax, flatten --------------------------------------------------
TEST(Layers, ActivationModulesMatchFunctionalAndReference) {
  const Tensor x = random_tensor({4, 6}, mt::kFloat64, true, -4, 4);
  struct Case {
    Tensor module_out, functional_out;
    double (*ref)(double);
    const char* name;
  };
  const std::vector<Case> cases = {
      {nn::ReLU()(x), nn::functional::relu(x), [](double v) { return v > 0 ? v : 0.0; }, "relu"},
      {nn::SiLU()(x), nn::functional::silu(x), [](double v) { return v / (1 + std::exp(-v)); },
       "silu"},
      {nn::Sigmoid()(x), nn::functional::sigmoid(x),
       [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid"},
      {nn::Tanh()(x), nn::functional::tanh(x), [](double v) { return std::tanh(v); }, "tanh"},
      {nn::GELU()(x), nn::functional::gelu(x),
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, "gelu"},
      {nn::GELU("tanh")(x), nn::functional::gelu(x, "tanh"),
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       },
       "gelu tanh"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(mt::equal(c.module_out, c.functional_out)) << c.name;
    expect_close(c.module_out, map_ref(x, c.ref), 1e-12, 1e-12, c.name);
  }
  expect_error([] { nn::GELU("fast"); }, {"approximate must be"});
}

TEST(Layers, Dropout) {
  mt::manual_seed(5);
  const double p = 0.3;
  nn::Dropout drop(p);
  const Tensor x = mt::ones({200000});
  const Vec v = drop(x).to_vector<double>();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0.0) {
      ++zeros;
    } else {
      ASSERT_NEAR(e, 1.0 / (1.0 - p), 1e-6);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(v.size()), p, 0.01);
  drop->eval();
  EXPECT_TRUE(mt::equal(drop(x), x));
  drop->train();
  EXPECT_TRUE(mt::equal(nn::Dropout(0.0)(x), x));
  EXPECT_EQ(nn::Dropout(1.0)(x).to_vector<double>(), Vec(v.size(), 0.0));
  expect_error([] { nn::Dropout(1.5); }, {"between 0 and 1", "1.5"});
}

TEST(Layers, SoftmaxLogSoftmaxFlatten) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64}) {
    const Tensor x = random_tensor({3, 5}, dtype, true, -5, 5);
    expect_close(nn::Softmax(1)(x), softmax_ref(x, false), "Softmax");
    expect_close(nn::LogSoftmax(-1)(x), softmax_ref(x, true), "LogSoftmax");
  }
  const Tensor x = random_tensor({2, 3, 4}, mt::kFloat32, true);
  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 12}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).shape(), (Shape{6, 4}));
  EXPECT_EQ(nn::Flatten()(x).to_vector<double>(), x.to_vector<double>());
}

// ---- LayerNorm --------------------------------------------------------------------------------
TEST(LayerNorm, MatchesReference) {
  for (mt::DType dtype : {mt::kFloat64, mt::kFloat32}) {
    for (const Shape& normalized : {Shape{5}, Shape{4, 5}}) {
      for (bool affine : {true, false}) {
        nn::LayerNorm ln(normalized, 1e-5, affine);
        EXPECT_EQ(ln->parameters().size(), affine ? 2u : 0u);
        if (affine) {
          assign(ln->weight, mt::randn(normalized));
          assign(ln->bias, mt::randn(normalized));
        }
        ln->to(dtype);
        const Tensor x = random_tensor({3, 4, 5}, dtype, /*non_contiguous=*/true, -3, 3);
        const int64_t k = normalized.size();
        expect_close(ln(x), layer_norm_ref(x, k, ln->weight, ln->bias, 1e-5),
                     std::string("LayerNorm k=") + std::to_string(k) + (affine ? " affine" : ""));
      }
    }
  }
  // A constant row: the variance is 0 and eps keeps the result finite (zeros).
  const Tensor c = mt::full({2, 4}, 3.0);
  EXPECT_EQ(nn::LayerNorm(4)(c).to_vector<double>(), Vec(8, 0.0));
}

TEST(LayerNorm, Gradcheck) {
  const Tensor x = random_tensor({3, 4, 5}, mt::kFloat64, true).requires_grad_();
  const Tensor w = random_tensor({4, 5}, mt::kFloat64, false).requires_grad_();
  const Tensor b = random_tensor({4, 5}, mt::kFloat64, false).requires_grad_();
  EXPECT_TRUE(mt::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return nn::functional::layer_norm(in[0], {4, 5}, in[1], in[2], 1e-5);
      },
      {x, w, b}));
  const Tensor x1 = random_tensor({2, 6}, mt::kFloat64, true).requires_grad_();
  EXPECT_TRUE(mt::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return nn::functional::layer_norm(in[0], {6}); }, {x1}));
}

TEST(LayerNorm, Errors) {
  expect_error([] { nn::LayerNorm(4)(mt::zeros({2, 5})); }, {"normalized_shape", "[2, 5]"});
  expect_error(
      [] {
        nn::functional::layer_norm(mt::zeros({2, 4}), {4}, mt::ones({3}));
      },
      {"weight of shape [3]"});
  expect_error(
      [] {
        nn::functional::layer_norm(mt::zeros({2, 4}), {4}, mt::ones({4}), mt::zeros({2}));
      },
      {"bias of shape [2]"});
}

// ---- Sequential -------------------------------------------------------------------------------
TEST(Sequential, NamingForwardAndHooks) {
  nn::Sequential seq(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  seq->push_back("out", nn::Sigmoid());
  ASSERT_EQ(seq->size(), 4u);
  std::vector<std::string> names;
  for (const auto& [n, _] : seq->named_children()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0", "1", "2", "out"}));
  EXPECT_EQ(names_of(seq->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));

  const Tensor x = random_tensor({3, 4}, mt::kFloat32, true);
  Tensor manual = x;
  for (size_t i = 0; i < seq->size(); ++i) manual = (*seq)[i]->forward(manual);

  std::vector<std::string> calls;
  std::vector<int> handles;
  for (size_t i = 0; i < seq->size(); ++i) {
    handles.push_back(
        (*seq)[i]->register_forward_hook([&calls, i](nn::Module& m, const Tensor& out) {
          std::ostringstream os;
          os << i << ":" << m.type_name() << out.shape();
          calls.push_back(os.str());
        }));
  }
  int seq_calls = 0;
  seq->register_forward_hook([&](nn::Module&, const Tensor&) { ++seq_calls; });
  const Tensor y = seq(x);
  EXPECT_TRUE(mt::equal(y, manual));
  EXPECT_EQ(calls, (std::vector<std::string>{"0:Linear[3, 8]", "1:ReLU[3, 8]", "2:Linear[3, 2]",
                                             "3:Sigmoid[3, 2]"}));
  EXPECT_EQ(seq_calls, 1);
  (*seq)[1]->remove_forward_hook(handles[1]);
  calls.clear();
  seq(x);
  EXPECT_EQ(calls.size(), 3u);
}

// ---- init -------------------------------------------------------------------------------------
TEST(Init, CalculateGain) {
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("sigmoid"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("selu"), 0.75);
  expect_error([] { nn::init::calculate_gain("swish"); }, {"unsupported nonlinearity 'swish'"});
}

TEST(Init, XavierAndKaimingBoundsAndStd) {
  mt::manual_seed(11);
  // [out, in, kh, kw]: fan_in = 40 * 9, fan_out = 60 * 9.
  Tensor w = mt::empty({60, 40, 3, 3});
  EXPECT_EQ(nn::init::fan_in_and_fan_out(w), (std::pair<int64_t, int64_t>{360, 540}));
  const double fan_in = 360, fan_out = 540;
  struct Case {
    std::function<void(Tensor&)> init;
    double std, bound;  // bound 0: normal
    const char* name;
  };
  const double xu = std::sqrt(6.0 / (fan_in + fan_out));
  const std::vector<Case> cases = {
      {[](Tensor& t) { nn::init::xavier_uniform_(t); }, xu / std::sqrt(3.0), xu, "xavier_uniform"},
      {[](Tensor& t) { nn::init::xavier_uniform_(t, 2.0); }, 2 * xu / std::sqrt(3.0), 2 * xu,
       "xavier_uniform gain 2"},
      {[](Tensor& t) { nn::init::xavier_normal_(t); }, std::sqrt(2.0 / (fan_in + fan_out)), 0,
       "xavier_normal"},
      {[](Tensor& t) { nn::init::kaiming_uniform_(t, 0, "fan_in", "relu"); },
       std::sqrt(2.0 / fan_in), std::sqrt(6.0 / fan_in), "kaiming_uniform relu"},
      {[](Tensor& t) { nn::init::kaiming_uniform_(t, 0, "fan_out", "relu"); },
       std::sqrt(2.0 / fan_out), std::sqrt(6.0 / fan_out), "kaiming_uniform fan_out"},
      {[](Tensor& t) { nn::init::kaiming_uniform_(t, std::sqrt(5.0)); }, 1 / std::sqrt(3 * fan_in),
       1 / std::sqrt(fan_in), "kaiming_uniform a=sqrt(5)"},
      {[](Tensor& t) { nn::init::kaiming_normal_(t, 0, "fan_in", "relu"); },
       std::sqrt(2.0 / fan_in), 0, "kaiming_normal"},
      {[](Tensor& t) { nn::init::kaiming_normal_(t, 0.1, "fan_out"); },
       std::sqrt(2.0 / 1.01 / fan_out), 0, "kaiming_normal leaky fan_out"},
  };
  for (const Case& c : cases) {
    c.init(w);
    const Vec v = w.to_vector<double>();
    EXPECT_NEAR(sample_std(v), c.std, 0.02 * c.std) << c.name;
    if (c.bound > 0) {
      for (double e : v) ASSERT_LE(std::fabs(e), c.bound) << c.name;
    }
  }
  // Initialisers write through requires_grad leaves without recording history.
  Tensor p = mt::zeros({3, 4}).requires_grad_();
  nn::init::xavier_uniform_(p);
  EXPECT_TRUE(p.is_leaf());
  nn::init::constant_(p, 0.5);
  EXPECT_EQ(p.to_vector<double>(), Vec(12, 0.5));
  nn::init::zeros_(p);
  EXPECT_EQ(p.to_vector<double>(), Vec(12, 0.0));
  nn::init::ones_(p);
  EXPECT_EQ(p.to_vector<double>(), Vec(12, 1.0));
}

TEST(Init, Errors) {
  Tensor v = mt::zeros({5});
  expect_error([&] { nn::init::fan_in_and_fan_out(v); }, {"fewer than 2 dimensions", "[5]"});
  expect_error([&] { nn::init::xavier_uniform_(v); }, {"fan in and fan out"});
  expect_error([&] { nn::init::kaiming_normal_(v); }, {"fan in and fan out"});
  Tensor m = mt::zeros({2, 2});
  expect_error([&] { nn::init::kaiming_uniform_(m, 0, "fan_avg"); }, {"mode must be", "fan_avg"});
}
