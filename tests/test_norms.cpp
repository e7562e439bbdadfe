// BatchNorm1d/2d, GroupNorm and RMSNorm against PyTorch: every program here is also in
// scripts/golden/make_norms.py, whose inputs and results (outputs, gradients, running statistics
// after two training steps, eval outputs) are committed in tests/golden/norms.txt. The programs
// run in float64 (tight) and float32 (float32 tolerance); the rest checks the modules' buffers,
// autocast and the errors.
#include <functional>
#include <limits>
#include <map>

#include "golden_file.h"
#include "runner/config/config.h"
#include "runner/training/model_builder.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::DType;
using mt::Shape;
using mt::Tensor;

namespace {

using Tensors = std::map<std::string, Tensor>;

struct GoldenCase {
  Tensors in, out;
};

std::map<std::string, GoldenCase> load_cases() {
  mt::testing::GoldenFormat format;
  format.tensor_kinds = {"in", "out"};
  std::map<std::string, GoldenCase> cases;
  for (const auto& [name, c] : mt::testing::read_golden_file("norms.txt", format))
    cases[name] = GoldenCase{c.tensors_by_name("in"), c.tensors_by_name("out")};
  return cases;
}

const std::map<std::string, GoldenCase>& golden() {
  static const std::map<std::string, GoldenCase> cases = load_cases();
  return cases;
}

// A fresh leaf (the golden inputs themselves stay untouched).
Tensor leaf(const Tensor& t, DType dt) { return t.to(dt).detach().requires_grad_(); }

void assign(Tensor& param, const Tensor& value) {
  mt::autograd::NoGradGuard no_grad;
  param.copy_(value);
}

// Two training steps (backward of sum(y * gy) each) and an eval forward, as the script does.
Tensors run_batch_norm(nn::BatchNormImpl& bn, const Tensors& in, DType dt) {
  bn.to(dt);
  if (bn.affine) {
    assign(bn.weight, in.at("weight"));
    assign(bn.bias, in.at("bias"));
  }
  Tensors out;
  bn.train();
  for (const std::string step : {"1", "2"}) {
    const Tensor x = leaf(in.at("x" + step), dt);
    const Tensor y = bn.forward(x);
    (y * in.at("gy" + step).to(dt)).sum().backward();
    out["y" + step] = y;
    out["x" + step + ".grad"] = x.grad();
  }
  if (bn.affine) {
    out["weight.grad"] = bn.weight.grad();
    out["bias.grad"] = bn.bias.grad();
  }
  for (const auto& [name, buffer] : bn.named_buffers()) out[name] = buffer;
  bn.eval();
  out["y_eval"] = bn.forward(in.at("x_eval").to(dt));
  return out;
}

// One forward and backward of sum(y * gy), with the parameters given in `in`.
Tensors run_affine(nn::UnaryModule& m, const Tensors& in, DType dt) {
  m.to(dt);
  for (auto& [name, p] : m.named_parameters()) assign(p, in.at(name));
  const Tensor x = leaf(in.at("x"), dt);
  const Tensor y = m.forward(x);
  (y * in.at("gy").to(dt)).sum().backward();
  Tensors out{{"y", y}, {"x.grad", x.grad()}};
  for (const auto& [name, p] : m.named_parameters()) out[name + ".grad"] = p.grad();
  return out;
}

using Program = std::function<Tensors(const Tensors&, DType)>;

template <typename Make>
Program batch_norm(Make make) {
  return [make](const Tensors& in, DType dt) {
    auto bn = make();
    return run_batch_norm(*bn, in, dt);
  };
}
template <typename Make>
Program affine(Make make) {
  return [make](const Tensors& in, DType dt) {
    auto m = make();
    return run_affine(*m, in, dt);
  };
}

const std::map<std::string, Program>& programs() {
  static const std::map<std::string, Program> all = {
      {"batch_norm1d_2d_input", batch_norm([] { return nn::BatchNorm1d(4); })},
      {"batch_norm1d_3d_input", batch_norm([] { return nn::BatchNorm1d(3, 1e-3, 0.3); })},
      {"batch_norm2d", batch_norm([] { return nn::BatchNorm2d(3); })},
      {"batch_norm2d_momentum_none",
       batch_norm([] { return nn::BatchNorm2d(2, 1e-5, std::nullopt); })},
      {"batch_norm2d_no_affine", batch_norm([] { return nn::BatchNorm2d(3, 1e-5, 0.1, false); })},
      {"batch_norm2d_no_running_stats",
       batch_norm([] { return nn::BatchNorm2d(2, 1e-5, 0.1, true, false); })},
      {"group_norm_3d", affine([] { return nn::GroupNorm(3, 6); })},
      {"group_norm_4d", affine([] { return nn::GroupNorm(2, 4, 1e-3); })},
      {"group_norm_no_affine", affine([] { return nn::GroupNorm(1, 3, 1e-5, false); })},
      {"group_norm_instance_like", affine([] { return nn::GroupNorm(4, 4); })},
      {"rms_norm", affine([] { return nn::RMSNorm(8, 1e-6); })},
      {"rms_norm_default_eps", affine([] {
         return nn::RMSNorm(Shape{2, 4});
       })},
      {"rms_norm_no_weight", affine([] { return nn::RMSNorm(6, 1e-5, false); })},
  };
  return all;
}

std::vector<std::string> program_names() {
  std::vector<std::string> names;
  for (const auto& [name, program] : programs()) names.push_back(name);
  return names;
}

void check_against_golden(const std::string& name, DType dt, double rtol, double atol) {
  const auto found = golden().find(name);
  ASSERT_NE(found, golden().end())
      << "no golden record for " << name << "; rerun scripts/golden/make_norms.py";
  const Tensors out = programs().at(name)(found->second.in, dt);
  ASSERT_EQ(out.size(), found->second.out.size()) << name;
  for (const auto& [key, expected] : found->second.out) {
    ASSERT_TRUE(out.count(key)) << name << ": no result " << key;
    ASSERT_TRUE(out.at(key).defined()) << name << ": " << key << " is undefined";
    if (out.at(key).dtype() != mt::kInt64) {
      EXPECT_EQ(out.at(key).dtype(), dt) << name << ": " << key;
    }
    mt::testing::expect_close(out.at(key), expected, rtol, atol, name + ": " + key);
  }
}

class NormsGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(NormsGolden, Float64MatchesPyTorch) {
  check_against_golden(GetParam(), mt::kFloat64, 1e-10, 1e-12);
}
TEST_P(NormsGolden, Float32MatchesPyTorch) {
  check_against_golden(GetParam(), mt::kFloat32, 2e-5, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, NormsGolden, ::testing::ValuesIn(program_names()),
                         [](const auto& info) { return info.param; });

TEST(Norms, EveryGoldenCaseHasAProgram) {
  for (const auto& [name, g] : golden()) EXPECT_TRUE(programs().count(name)) << name;
  EXPECT_EQ(golden().size(), programs().size());
}

TEST(Norms, BatchNormStateDictHasPyTorchNames) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(bn->state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  EXPECT_EQ(bn->num_batches_tracked.dtype(), mt::kInt64);
  EXPECT_EQ(bn->num_batches_tracked.dim(), 0);
  nn::BatchNorm1d plain(3, 1e-5, 0.1, false, false);
  EXPECT_EQ(plain->state_dict().size(), 0u);
  // Buffers are no parameters: an optimizer never sees them.
  EXPECT_EQ(bn->parameters().size(), 2u);
  // A state dict round trip restores the running statistics.
  bn->forward(mt::randn({4, 3, 2, 2}));
  nn::BatchNorm2d other(3);
  other->load_state_dict(bn->state_dict());
  mt::testing::expect_close(other->running_var, bn->running_var, 0, 0, "running_var");
  EXPECT_EQ(other->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Norms, ModulesPrintLikePyTorch) {
  std::ostringstream a, b, c;
  a << *nn::BatchNorm2d(8);
  b << *nn::GroupNorm(2, 8);
  c << *nn::RMSNorm(16);
  EXPECT_EQ(a.str(),
            "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(b.str(), "GroupNorm(2, 8, eps=1e-05, affine=True)");
  EXPECT_EQ(c.str(), "RMSNorm((16,), eps=None, elementwise_affine=True)");
}

// Under bfloat16 autocast a float32 BatchNorm takes the bfloat16 activations as they are, keeps
// its statistics and buffers in float32 and returns bfloat16; group_norm and rms_norm run in
// float32 (autocast's float32 list, as layer_norm).
TEST(Norms, AutocastBFloat16) {
  const Tensor x = mt::randn({8, 4, 3, 3}) * 3 + 1;
  nn::BatchNorm2d bn(4), ref(4);
  Tensor y;
  {
    mt::amp::autocast scope(mt::kCPU, mt::amp::Precision::BFloat16);
    const Tensor xb = x.to(mt::kBFloat16).requires_grad_();
    y = bn->forward(xb);
    y.to(mt::kFloat32).sum().backward();
    EXPECT_EQ(xb.grad().dtype(), mt::kBFloat16);
    EXPECT_EQ(mt::group_norm(xb, 2).dtype(), mt::kFloat32);
    EXPECT_EQ(mt::rms_norm(xb, {3}).dtype(), mt::kFloat32);
  }
  EXPECT_EQ(y.dtype(), mt::kBFloat16);
  EXPECT_EQ(bn->running_mean.dtype(), mt::kFloat32);
  EXPECT_EQ(bn->weight.grad().dtype(), mt::kFloat32);
  const Tensor y_ref = ref->forward(x.to(mt::kBFloat16).to(mt::kFloat32));
  mt::testing::expect_close(y, y_ref, 1e-2, 1e-2, "bfloat16 batch norm");
  mt::testing::expect_close(bn->running_var, ref->running_var, 1e-6, 1e-6, "running_var");
}

TEST(Norms, ErrorsNameTheOpAndTheShapes) {
  mt::testing::expect_error(
      [] {
        mt::group_norm(mt::randn({2, 6, 3}), 4);
      },
      {"group_norm", "divisible", "6", "4"});
  mt::testing::expect_error(
      [] {
        mt::batch_norm(mt::randn({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"});
  mt::testing::expect_error(
      [] {
        mt::batch_norm(mt::randn({4, 3}), mt::zeros({2}), mt::ones({2}));
      },
      {"batch_norm", "running_mean", "[3]", "[2]"});
  mt::testing::expect_error(
      [] {
        mt::batch_norm(mt::randn({4, 3}), Tensor(), Tensor());
      },
      {"batch_norm", "evaluation mode"});
  mt::testing::expect_error(
      [] {
        nn::BatchNorm2d(3)->forward(mt::randn({4, 3}));
      },
      {"BatchNorm2d", "4D", "[4, 3]"});
  mt::testing::expect_error([] { mt::rms_norm(mt::randn({2, 5}), {4}); }, {"rms_norm", "[4]"});
  mt::testing::expect_error(
      [] {
        mt::batch_norm(mt::randn({4, 3}), mt::zeros({3}, mt::TensorOptions().dtype(mt::kFloat64)),
                       mt::ones({3}));
      },
      {"batch_norm", "running_mean", "float64"});
}

// Eval mode is a fixed affine map: its gradient ignores the batch, unlike training mode's.
TEST(Norms, EvalBatchNormGradientIsPerElement) {
  nn::BatchNorm1d bn(2);
  bn->eval();
  const Tensor x = mt::randn({5, 2}).requires_grad_();
  bn->forward(x).sum().backward();
  mt::testing::expect_close(x.grad(), mt::full({5, 2}, 1.0 / std::sqrt(1.0 + 1e-5)), 1e-6, 1e-6,
                            "eval grad");
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
}

// Config layers: batchnorm2d/groupnorm after a conv, batchnorm1d/rmsnorm after a linear layer,
// with PyTorch's parameter and buffer names and the declared defaults.
TEST(Norms, ConfigLayersBuildTheModules) {
  namespace rn = mantissa::runner;
  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: conv2d, in: 1, out: 4, kernel: 3}\n"
      "    - {type: batchnorm2d, features: 4, momentum: 0.2}\n"
      "    - {type: groupnorm, features: 4, groups: 2}\n    - flatten\n"
      "    - {type: linear, in: 16, out: 6}\n    - {type: batchnorm1d, features: 6}\n"
      "    - {type: rmsnorm, shape: 6}\n",
      "t");
  EXPECT_EQ(rn::infer_output_shape(c, Shape{1, 4, 4}, "input"), (Shape{6}));
  auto seq = rn::build_model(c.model);
  std::vector<std::string> keys = seq->state_dict().keys();
  EXPECT_EQ(keys,
            (std::vector<std::string>{
                "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                "1.num_batches_tracked", "2.weight", "2.bias", "4.weight", "4.bias", "5.weight",
                "5.bias", "5.running_mean", "5.running_var", "5.num_batches_tracked", "6.weight"}));
  EXPECT_EQ(seq->forward(mt::randn({3, 1, 4, 4})).shape(), (Shape{3, 6}));
  auto rms = std::dynamic_pointer_cast<nn::RMSNormImpl>((*seq)[6]);
  ASSERT_TRUE(rms);
  EXPECT_EQ(rms->eps.value(), double(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(std::dynamic_pointer_cast<nn::BatchNormImpl>((*seq)[1])->momentum.value(), 0.2);
  const rn::Config bad_groups =
      rn::parse_config("model:\n  layers:\n    - {type: groupnorm, features: 6, groups: 4}\n", "t");
  mt::testing::expect_error(
      [&] {
        rn::infer_output_shape(bad_groups, Shape{6, 5}, "input");
      },
      {"model.layers.0.groups", "must divide features (6)"});
  const rn::Config wrong =
      rn::parse_config("model:\n  layers:\n    - {type: batchnorm2d, features: 3}\n", "t");
  mt::testing::expect_error(
      [&] {
        rn::infer_output_shape(wrong, Shape{4, 5, 5}, "input");
      },
      {"model.layers.0.features", "does not match the input channels"});
}

}  // namespace
