// Fused nn blocks by name: nn::FusedMLP is linear_act_linear on two Linear children (bits,
// state_dict keys and initial values shared with Sequential(Linear, ReLU, Linear)), and a
// Sequential never fuses its children behind the user's back.
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

// The precisions every fused-block test runs in: float32 (2-d and 3-d inputs), float64,
// bfloat16/float16 autocast on float32 parameters, and bfloat16 parameters.
struct BlockCase {
  const char* name;
  mt::DType dtype;
  std::optional<mt::amp::Precision> autocast;
  Shape x_shape;
};
const BlockCase kBlockCases[] = {
    {"float32", mt::kFloat32, std::nullopt, {20, 10}},
    {"float32 3-d", mt::kFloat32, std::nullopt, {2, 5, 10}},
    {"float64", mt::kFloat64, std::nullopt, {7, 10}},
    {"bfloat16 autocast", mt::kFloat32, mt::amp::Precision::BFloat16, {20, 10}},
    {"float16 autocast", mt::kFloat32, mt::amp::Precision::Float16, {20, 10}},
    {"bfloat16 params", mt::kBFloat16, std::nullopt, {20, 10}},
};

// Runs `forward` on x under the case's autocast, backpropagates a fixed random cotangent and
// returns the output's grad_fn name, the output and the gradients of `params`.
struct BlockResult {
  std::string grad_fn;
  std::vector<Tensor> values;
};
BlockResult run_block(const BlockCase& c, const Tensor& x, const std::vector<Tensor>& params,
                      const std::function<Tensor(const Tensor&)>& forward) {
  for (const Tensor& p : params) p.set_grad(Tensor());
  Tensor y;
  {
    mt::amp::autocast scope(mt::kCPU, c.autocast, c.autocast.has_value());
    y = forward(x);
  }
  mt::manual_seed(5);
  const Tensor gy = random_tensor(y.shape(), mt::kFloat32, false);
  mt::sum(y.to(mt::kFloat32) * gy).backward();
  BlockResult r{mt::autograd::meta(y)->grad_fn->name(), {y.detach()}};
  for (const Tensor& p : params) r.values.push_back(p.grad());
  return r;
}
void expect_same_bits(const BlockResult& a, const BlockResult& b, const std::string& what) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  for (size_t i = 0; i < a.values.size(); ++i) {
    EXPECT_EQ(a.values[i].dtype(), b.values[i].dtype()) << what << " " << i;
    EXPECT_TRUE(mt::equal(a.values[i], b.values[i])) << what << " output/grad " << i;
  }
}

// A Sequential runs its children one by one (no pattern is fused behind the user's back), so
// Linear -> ReLU -> Linear gives the bits of calling the three modules by hand, with Linear's
// own autograd node on the output.
TEST(Sequential, LinearReluLinearRunsModuleByModule) {
  for (const BlockCase& c : kBlockCases) {
    mt::manual_seed(31);
    nn::Sequential seq(nn::Linear(10, 16), nn::ReLU(), nn::Linear(16, 5));
    seq->to(mt::kCPU, c.dtype);
    const Tensor x = random_tensor(c.x_shape, c.dtype, false);
    const auto params = seq->parameters();
    const BlockResult in_seq = run_block(c, x, params, [&](const Tensor& in) { return seq(in); });
    const BlockResult by_hand = run_block(c, x, params, [&](const Tensor& in) {
      const auto& l1 = static_cast<nn::LinearImpl&>(*(*seq)[0]);
      const auto& l2 = static_cast<nn::LinearImpl&>(*(*seq)[2]);
      return mt::linear(mt::relu(mt::linear(in, l1.weight, l1.bias)), l2.weight, l2.bias);
    });
    EXPECT_EQ(in_seq.grad_fn, "LinearBackward0") << c.name;
    expect_same_bits(in_seq, by_hand, c.name);
  }
}

// FusedMLP is linear_act_linear on its two Linear children's parameters, bit for bit, for both
// activations; on the CPU that is also the unfused composition's bits.
TEST(FusedMLP, IsLinearActLinearAndMatchesTheComposition) {
  for (const auto act : {mt::LinearActivation::Relu, mt::LinearActivation::GeluTanh}) {
    for (const BlockCase& c : kBlockCases) {
      const std::string what =
          std::string(c.name) + (act == mt::LinearActivation::Relu ? " relu" : " gelu_tanh");
      mt::manual_seed(31);
      nn::FusedMLP mlp(10, 16, 5, act);
      mlp->to(mt::kCPU, c.dtype);
      const Tensor x = random_tensor(c.x_shape, c.dtype, false);
      const auto params = mlp->parameters();
      const Tensor &w1 = mlp->fc1->weight, &b1 = mlp->fc1->bias;
      const Tensor &w2 = mlp->fc2->weight, &b2 = mlp->fc2->bias;
      const BlockResult module = run_block(c, x, params, [&](const Tensor& in) { return mlp(in); });
      const BlockResult op = run_block(c, x, params, [&](const Tensor& in) {
        return mt::linear_act_linear(in, w1, b1, act, w2, b2);
      });
      const BlockResult unfused = run_block(c, x, params, [&](const Tensor& in) {
        const Tensor h = mt::linear(in, w1, b1);
        return mt::linear(act == mt::LinearActivation::Relu ? mt::relu(h) : mt::gelu(h, "tanh"), w2,
                          b2);
      });
      EXPECT_EQ(module.grad_fn, "LinearActLinearBackward0") << what;
      expect_same_bits(module, op, what + " vs linear_act_linear");
      expect_same_bits(module, unfused, what + " vs unfused");
    }
  }
}

// FusedMLP's parameters are named and initialised as Sequential(Linear, ReLU, Linear)'s, so a
// state_dict moves between the two unchanged.
TEST(FusedMLP, StateDictMatchesSequential) {
  // Layer by layer: the order in which a constructor call's arguments are made is unspecified.
  mt::manual_seed(7);
  nn::Sequential seq;
  seq->push_back(nn::Linear(6, 12));
  seq->push_back(nn::ReLU());
  seq->push_back(nn::Linear(12, 3));
  mt::manual_seed(7);
  nn::FusedMLP mlp(6, 12, 3);
  const nn::StateDict from_seq = seq->state_dict(), from_mlp = mlp->state_dict();
  EXPECT_EQ(from_mlp.keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(from_mlp.keys(), from_seq.keys());
  for (const auto& key : from_seq.keys()) {
    EXPECT_EQ(from_mlp.at(key).shape(), from_seq.at(key).shape()) << key;
    EXPECT_TRUE(mt::equal(from_mlp.at(key), from_seq.at(key))) << key << ": same seed, same init";
  }
  // Both directions, strictly; then both compute the same function.
  mt::manual_seed(8);
  nn::FusedMLP other(6, 12, 3);
  other->load_state_dict(seq->state_dict());
  nn::Sequential back(nn::Linear(6, 12), nn::ReLU(), nn::Linear(12, 3));
  back->load_state_dict(other->state_dict());
  const Tensor x = random_tensor({4, 6}, mt::kFloat32, false);
  EXPECT_TRUE(mt::equal(other(x), seq(x)));
  EXPECT_TRUE(mt::equal(back(x), seq(x)));
  // Without biases, as a bias-free Sequential.
  nn::FusedMLP no_bias(6, 12, 3, mt::LinearActivation::Relu, /*bias=*/false);
  EXPECT_EQ(no_bias->state_dict().keys(), (std::vector<std::string>{"0.weight", "2.weight"}));
}

TEST(FusedMLP, PrintsAndRejectsWhatItCannotHonour) {
  nn::FusedMLP mlp(4, 8, 2, mt::LinearActivation::GeluTanh);
  std::ostringstream os;
  os << *mlp;
  EXPECT_EQ(os.str(),
            "FusedMLP(\n"
            "  in_features=4, hidden_features=8, out_features=2, activation=gelu_tanh\n"
            "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
            "  (2): Linear(in_features=8, out_features=2, bias=True)\n"
            ")");
  expect_error([] { nn::FusedMLP(4, 8, 2, mt::LinearActivation::None); },
               {"FusedMLP: activation must be", "got None"});
  expect_error(
      [&] {
        mlp(random_tensor({3, 5}, mt::kFloat32, false));
      },
      {"FusedMLP: expected input with last dimension 4", "[3, 5]"});
  // A hook on a child could never see the hidden layer: refused, not silently skipped.
  int seen = 0;
  const int handle = mlp->fc1->register_forward_hook([&](nn::Module&, const Tensor&) { ++seen; });
  const Tensor x = random_tensor({3, 4}, mt::kFloat32, false);
  expect_error([&] { mlp(x); }, {"FusedMLP", "forward hooks would never run"});
  mlp->fc1->remove_forward_hook(handle);
  mlp->register_forward_hook([&](nn::Module&, const Tensor& out) {
    EXPECT_EQ(out.shape(), Shape({3, 2}));
    ++seen;
  });
  mlp(x);
  EXPECT_EQ(seen, 1);
}

}  // namespace
