// The float8 training ops against torchao 0.18 on PyTorch 2.15 (tests/golden/float8_linear.txt,
// written by scripts/golden/make_float8_linear.py): float8_scale and float8_cast bit for bit,
// scaled_mm to within the order of its float32 sums, and float8_linear for the recipes
// tensorwise, rowwise and rowwise_with_gw_hp: one layer's output and gradients, and the losses of
// a 3-layer MLP trained 20 steps, in float32 and under bfloat16 autocast.
//
// Tolerances. The products of float8 values are exact in float32, so mantissa and PyTorch sum the
// same terms in different orders: a float32 result differs by a few float32 ulps of the row's
// magnitude (where the terms cancel, relative to the row, not to the element). A result PyTorch
// rounds to bfloat16 (every product under autocast; rowwise products, which torchao makes in
// bfloat16) may round the other way when the float32 sums differ: one bfloat16 ulp, 2^-7 relative.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/graph_memory.h"
#include "autograd/saved_tensor_hooks.h"
#include "golden_file.h"
#include "nn/float8.h"
#include "nn/optim/sgd.h"
#include "nn/transformer.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;

namespace {

const std::map<std::string, mt::testing::GoldenCase>& golden() {
  static const auto cases = mt::testing::read_golden_file("float8_linear.txt");
  return cases;
}

std::map<std::string, Tensor> golden_case(const std::string& name) {
  return golden().at(name).tensors_by_name();
}

// The file's 17 digits name each float32 input exactly.
Tensor input(const std::string& name) { return golden_case("inputs").at(name).to(mt::kFloat32); }

// Every element within rtol of the expected value, or within atol_rows times the largest
// magnitude of its row (the last dim) of the expected tensor. With flip_rtol, up to 2% of the
// elements may instead be within flip_rtol: a result rounded to bfloat16 from float32 sums in
// another order lands one ulp away where the sums straddle a rounding boundary, which is rare; a
// systematic difference of one ulp is not.
void expect_close_rows(const Tensor& actual, const Tensor& expected, double rtol, double atol_rows,
                       const std::string& what, double flip_rtol = 0) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto a = actual.to(mt::kFloat64).to_vector<double>();
  const auto e = expected.to(mt::kFloat64).to_vector<double>();
  const int64_t cols = expected.dim() == 0 ? 1 : expected.size(-1);
  int reported = 0;
  size_t flips = 0;
  for (size_t r = 0; r * cols < e.size(); ++r) {
    double row_max = 0;
    for (int64_t j = 0; j < cols; ++j)
      if (std::isfinite(e[r * cols + j])) row_max = std::max(row_max, std::fabs(e[r * cols + j]));
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = r * cols + j;
      const double err = std::fabs(a[i] - e[i]), atol = atol_rows * row_max;
      bool ok = a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i])) ||
                err <= rtol * std::fabs(e[i]) + atol;
      if (!ok && err <= flip_rtol * std::fabs(e[i]) + atol) {
        ok = true;
        ++flips;
      }
      if (!ok && reported++ < 5)
        ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
    }
  }
  EXPECT_LE(flips, e.size() / 50) << what << ": " << flips << " of " << e.size()
                                  << " elements one rounding away";
}

void expect_bitwise(const Tensor& actual, const Tensor& expected, const std::string& what) {
  expect_close_rows(actual.to(mt::kFloat64), expected, 0, 0, what);
}

constexpr double kFloat32Sums = 1e-5;       // a few float32 ulps of the row
constexpr double kBFloat16Ulp = 1.0 / 128;  // one bfloat16 ulp, relative

TEST(Float8Ops, ScalesAndCastsAreTorchaos) {
  const auto want = golden_case("ops");
  const Tensor x = input("x").reshape({32, 32});
  for (auto [dtype, dn] : {std::pair{mt::kFloat8E4M3FN, "e4m3"}, {mt::kFloat8E5M2, "e5m2"}}) {
    for (auto [dim, gn] : {std::pair{-2, "tensor"}, {-1, "rows"}, {0, "cols"}}) {
      for (const bool pow2 : {false, true}) {
        const std::string name = std::string(dn) + "_" + gn + (pow2 ? "_pow2" : "_exact");
        const Tensor s = dim == -2
                             ? mt::float8_scale(x, dtype, mt::Float8Scaling::Tensorwise, -1, pow2)
                             : mt::float8_scale(x, dtype, mt::Float8Scaling::Rowwise, dim, pow2);
        EXPECT_EQ(s.dtype(), mt::kFloat32);
        expect_bitwise(s, want.at("scale_" + name), "scale_" + name);
        const Tensor bits = mt::float8_cast(x, s, dtype);
        EXPECT_EQ(bits.dtype(), dtype);
        expect_bitwise(bits.to(mt::kFloat32), want.at("cast_" + name), "cast_" + name);
      }
    }
    const Tensor special = mt::from_vector(
        std::vector<float>{1e6f, -1e6f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-9f},
        mt::Shape{8});
    const Tensor cast = mt::float8_cast(special, mt::ones({}), dtype).to(mt::kFloat32);
    expect_bitwise(cast, want.at(std::string("cast_special_") + dn), "special values");
    EXPECT_TRUE(std::signbit(cast.to_vector<float>()[6])) << "-0 keeps its sign";
  }
}

// The cast's fast paths (a dense loop with a vector copy per instruction set; a transposed matrix
// cast as its dense transpose) against saturate-then-convert written out, for every bfloat16 value
// under scales that move each one across the formats' ranges: the bits agree and the transposed
// cast keeps its input's layout.
TEST(Float8Ops, CastPathsSaturateThenRoundAsWrittenOut) {
  std::vector<float> values(1 << 16);  // each bfloat16 bit pattern, as the float it is
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(i) << 16;
    std::memcpy(&values[i], &bits, sizeof(float));
  }
  const Tensor x = mt::from_vector(values, mt::Shape{256, 256}).to(mt::kBFloat16);
  for (const mt::DType dtype : {mt::kFloat8E4M3FN, mt::kFloat8E5M2}) {
    const float max = dtype == mt::kFloat8E4M3FN ? 448.0f : 57344.0f;
    for (const float scale : {1.0f, 0.001f, 3.7f, 1048576.0f}) {
      std::vector<float> want;
      for (const float v : x.to(mt::kFloat32).to_vector<float>()) {
        float y = v * scale;
        y = y > max ? max : (y < -max ? -max : y);  // NaN passes
        want.push_back(y);
      }
      // Decoding is one to one (a NaN keeps its code's sign and mantissa), so equal float32 bits
      // are equal codes.
      const Tensor expected = mt::from_vector(want, mt::Shape{256, 256}).to(dtype).to(mt::kFloat32);
      const Tensor s = mt::full({}, scale);
      const std::string what =
          std::string(mt::dtype_name(dtype)) + " scale " + std::to_string(scale);
      expect_bitwise(mt::float8_cast(x, s, dtype).to(mt::kFloat32), expected, what);
      const Tensor xt = x.to(mt::kFloat32).t().contiguous().t();  // [256, 256], transposed layout
      const Tensor transposed = mt::float8_cast(xt, s, dtype);
      EXPECT_EQ(transposed.stride(0), 1);
      expect_bitwise(transposed.to(mt::kFloat32).contiguous(), expected, what + " transposed");
    }
  }
}

TEST(Float8Ops, ScaledMmIsTorchsToWithinTheSumsOrder) {
  const auto want = golden_case("ops");
  const Tensor x = input("x").reshape({32, 32});
  const Tensor sa = mt::float8_scale(x, mt::kFloat8E4M3FN, mt::Float8Scaling::Rowwise, -1);
  const Tensor a = mt::float8_cast(x, sa, mt::kFloat8E4M3FN);
  const Tensor w = input("w").t();
  const Tensor sw = mt::float8_scale(w, mt::kFloat8E5M2, mt::Float8Scaling::Rowwise, 0, true);
  const Tensor b = mt::float8_cast(w, sw, mt::kFloat8E5M2);
  for (auto [dtype, on] :
       {std::pair{mt::kFloat32, "f32"}, {mt::kBFloat16, "bf16"}, {mt::kFloat16, "f16"}}) {
    const double flip = dtype == mt::kFloat32 ? 0 : kBFloat16Ulp;
    const Tensor rows =
        mt::scaled_mm(a, b, mt::reciprocal(sa), mt::reciprocal(sw), Tensor(), dtype);
    EXPECT_EQ(rows.dtype(), dtype);
    expect_close_rows(rows, want.at(std::string("mm_rows_") + on), kFloat32Sums, kFloat32Sums,
                      std::string("mm_rows_") + on, flip);
    const Tensor biased =
        mt::scaled_mm(a, b, mt::full({}, 0.25), mt::full({}, 3.0), input("b").to(dtype), dtype);
    expect_close_rows(biased, want.at(std::string("mm_tensor_bias_") + on), kFloat32Sums,
                      kFloat32Sums, std::string("mm_tensor_bias_") + on, flip);
  }
}

TEST(Float8Ops, ScaledMmRefusesWhatItCannotMultiply) {
  const Tensor a = mt::zeros({4, 8}).to(mt::kFloat8E4M3FN);
  const Tensor b = mt::zeros({8, 3}).to(mt::kFloat8E4M3FN);
  const Tensor one = mt::ones({});
  EXPECT_THROW(mt::scaled_mm(a, a, one, one), mt::Error);  // [4,8] @ [4,8]
  EXPECT_THROW(mt::scaled_mm(a.to(mt::kBFloat16), b, one, one), mt::Error);
  EXPECT_THROW(mt::scaled_mm(a, b, one.to(mt::kFloat64), one), mt::Error);
  EXPECT_THROW(mt::scaled_mm(a, b, mt::ones({1, 4}), one), mt::Error);  // rows need [4, 1]
  EXPECT_THROW(mt::scaled_mm(a, b, one, one, mt::ones({4})), mt::Error);
  EXPECT_THROW(mt::scaled_mm(a, b, one, one, Tensor(), mt::kInt32), mt::Error);
  // The K = 0 product is the bias, as PyTorch's.
  const Tensor empty_k =
      mt::scaled_mm(mt::zeros({4, 0}).to(mt::kFloat8E5M2), mt::zeros({0, 3}).to(mt::kFloat8E4M3FN),
                    one, one, mt::ones({3}), mt::kFloat32);
  EXPECT_TRUE(mt::equal(empty_k, mt::ones({4, 3})));
  // The default output dtype is a's, saturated: 448 * 448 is 448 in float8_e4m3fn.
  const Tensor big = mt::full({2, 2}, 448.0).to(mt::kFloat8E4M3FN);
  const Tensor sat = mt::scaled_mm(big, big, one, one);
  EXPECT_EQ(sat.dtype(), mt::kFloat8E4M3FN);
  EXPECT_TRUE(mt::equal(sat.to(mt::kFloat32), mt::full({2, 2}, 448.0)));
}

TEST(Float8Ops, OpsWithoutADerivativeRefuseInputsThatRequireGrad) {
  const Tensor x = mt::randn({4, 8}).requires_grad_();
  const Tensor s = mt::ones({});
  EXPECT_THROW(mt::float8_cast(x, s, mt::kFloat8E4M3FN), mt::Error);
  const Tensor a = mt::float8_cast(x.detach(), s, mt::kFloat8E4M3FN);
  const Tensor b = mt::float8_cast(mt::randn({8, 3}), s, mt::kFloat8E4M3FN);
  EXPECT_THROW(mt::scaled_mm(a, b, s, s, mt::ones({3}).requires_grad_(), mt::kFloat32), mt::Error);
  {
    mt::autograd::NoGradGuard no_grad;
    EXPECT_NO_THROW(mt::float8_cast(x, s, mt::kFloat8E4M3FN));
  }
  // The scale is a constant, as torchao computes it under no_grad.
  EXPECT_FALSE(mt::float8_scale(x, mt::kFloat8E4M3FN).requires_grad());
}

TEST(Float8Ops, ConfigRefusesUnknownRecipesAndMixedProducts) {
  EXPECT_THROW(mt::Float8LinearConfig::from_recipe("delayed_typo"), mt::Error);
  mt::Float8LinearConfig c = mt::Float8LinearConfig::from_recipe("rowwise");
  c.input.scaling = mt::Float8Scaling::Disabled;  // the output product half in float8
  EXPECT_THROW(mt::float8_linear(mt::ones({2, 16}), mt::ones({8, 16}), Tensor(), c), mt::Error);
  EXPECT_THROW(mt::float8_linear(mt::ones({2, 15}), mt::ones({8, 16})), mt::Error);
  // One float8 dtype per operand across the products that read it (torchao's rule).
  mt::Float8LinearConfig formats;
  formats.input_for_grad_weight.dtype = mt::kFloat8E5M2;
  EXPECT_THROW(mt::float8_linear(mt::ones({2, 16}), mt::ones({8, 16}), Tensor(), formats),
               mt::Error);
  EXPECT_THROW(mt::float8_linear(mt::ones({0, 16}), mt::ones({8, 16})), mt::Error);
  EXPECT_THROW(
      mt::float8_linear(mt::ones({2, 16}), mt::ones({8, 16}), mt::ones({8}).to(mt::kFloat8E4M3FN)),
      mt::Error);
  EXPECT_THROW(mt::float8_linear(mt::ones({2, 16}).to(mt::kFloat8E4M3FN), mt::ones({8, 16})),
               mt::Error);
}

struct Recipe {
  std::string recipe, precision;
  std::string name() const { return recipe + "_" + precision; }
  bool bf16() const { return precision == "bfloat16"; }
  friend void PrintTo(const Recipe& r, std::ostream* os) { *os << r.name(); }
};

std::vector<Recipe> runs() {
  std::vector<Recipe> out;
  for (const char* r : {"tensorwise", "rowwise", "rowwise_with_gw_hp"})
    for (const char* p : {"float32", "bfloat16"}) out.push_back({r, p});
  return out;
}

class Float8Linear : public ::testing::TestWithParam<Recipe> {};

TEST_P(Float8Linear, LayerIsTorchaos) {
  const Recipe run = GetParam();
  const auto want = golden_case("layer_" + run.name());
  const auto config = mt::Float8LinearConfig::from_recipe(run.recipe);
  const Tensor x = input("x").requires_grad_();
  const Tensor w = input("w").requires_grad_();
  const Tensor b = input("b").requires_grad_();
  Tensor y;
  {
    std::optional<mt::amp::autocast> scope;
    if (run.bf16()) scope.emplace(mt::kCPU, mt::amp::Precision::BFloat16);
    y = mt::float8_linear(x, w, b, config);
  }
  EXPECT_EQ(y.dtype(), run.bf16() ? mt::kBFloat16 : mt::kFloat32);
  mt::sum(y.to(mt::kFloat32) * input("gy")).backward();
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  // Rowwise products are made in bfloat16 by torchao whatever the precision.
  const double flip = run.bf16() || run.recipe != "tensorwise" ? kBFloat16Ulp : 0;
  expect_close_rows(y, want.at("out"), kFloat32Sums, kFloat32Sums, run.name() + " out", flip);
  expect_close_rows(x.grad(), want.at("gx"), kFloat32Sums, kFloat32Sums, run.name() + " grad x",
                    flip);
  expect_close_rows(w.grad(), want.at("gw"), kFloat32Sums, kFloat32Sums, run.name() + " grad w",
                    flip);
  expect_close_rows(b.grad(), want.at("gb"), kFloat32Sums, 0, run.name() + " grad b", flip);
}

TEST_P(Float8Linear, MlpLossesAreTorchaos) {
  const Recipe run = GetParam();
  const auto want = golden_case("mlp_" + run.name()).at("losses").to_vector<double>();
  const auto config = mt::Float8LinearConfig::from_recipe(run.recipe);
  std::vector<Tensor> params;
  for (int i = 1; i <= 3; ++i) {
    params.push_back(input("mlp_w" + std::to_string(i)).requires_grad_());
    params.push_back(input("mlp_b" + std::to_string(i)).requires_grad_());
  }
  mt::optim::SGD opt(params, 0.05, {.momentum = 0.9});
  const Tensor x = input("mlp_x"), target = input("mlp_y");
  for (size_t step = 0; step < want.size(); ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<mt::amp::autocast> scope;
      if (run.bf16()) scope.emplace(mt::kCPU, mt::amp::Precision::BFloat16);
      Tensor h = mt::relu(mt::float8_linear(x, params[0], params[1], config));
      h = mt::relu(mt::float8_linear(h, params[2], params[3], config));
      loss =
          mt::mse_loss(mt::float8_linear(h, params[4], params[5], config).to(mt::kFloat32), target);
    }
    loss.backward();
    opt.step();
    const double got = loss.item<float>();
    // The float32 sums' order moves a value across a float8 rounding boundary now and then, and
    // training amplifies the flip: tight while none has happened, looser after (on a Zen 4 the
    // largest gap over the 20 steps of all six runs is 8.1e-5 relative, tensorwise float32 from
    // step 17; another processor's GEMM sums in another order).
    const double rtol = step < 15 ? 1e-5 : 5e-4;
    EXPECT_NEAR(got, want[step], rtol * want[step]) << run.name() << " step " << step;
  }
}

// The bytes a float8_linear call keeps for its backward (saved-tensor hooks see every save).
int64_t saved_bytes(const std::string& recipe, std::vector<mt::DType>* dtypes = nullptr) {
  const Tensor x = mt::randn({64, 128}).requires_grad_();
  const Tensor w = mt::randn({96, 128}).requires_grad_();
  int64_t bytes = 0;
  mt::autograd::SavedTensorHooksGuard guard([&](const Tensor& t) {
    bytes += t.nbytes();
    if (dtypes != nullptr) dtypes->push_back(t.dtype());
    return std::shared_ptr<mt::autograd::PackedSaved>();
  });
  mt::float8_linear(x, w, Tensor(), mt::Float8LinearConfig::from_recipe(recipe));
  return bytes;
}

TEST(Float8Linear, TensorwiseKeepsTheFloat8OperandsForBackward) {
  std::vector<mt::DType> dtypes;
  const int64_t tensorwise = saved_bytes("tensorwise", &dtypes);
  // The float8 input and weight and their two float32 scales: a quarter of the float32 bytes.
  EXPECT_EQ(tensorwise, (64 * 128 + 96 * 128) * 1 + 2 * 4);
  EXPECT_EQ(dtypes, (std::vector<mt::DType>{mt::kFloat8E4M3FN, mt::kFloat32, mt::kFloat8E4M3FN,
                                            mt::kFloat32}));
  // Rowwise recasts along the other dim in the backward, from the float32 input and weight.
  EXPECT_EQ(saved_bytes("rowwise"), (64 * 128 + 96 * 128) * 4);
}

TEST(Float8Linear, AutocastCastsTheInputAndNotTheWeight) {
  const Tensor x = mt::randn({8, 32}), w = mt::randn({16, 32});
  Tensor scoped;
  {
    mt::amp::autocast scope(mt::kCPU, mt::amp::Precision::BFloat16);
    scoped = mt::float8_linear(x, w);
  }
  EXPECT_TRUE(mt::equal(scoped, mt::float8_linear(x.to(mt::kBFloat16), w)));
  // A weight rounded to bfloat16 before its float8 cast gives other scales and codes.
  EXPECT_FALSE(mt::equal(scoped, mt::float8_linear(x.to(mt::kBFloat16), w.to(mt::kBFloat16))));
}

TEST(Float8Linear, ItsOutputTakesInPlaceOps) {
  const Tensor x = mt::randn({2, 4, 32}).requires_grad_();
  const Tensor w = mt::randn({16, 32}).requires_grad_();
  for (const Tensor& input : {x, x.select(0, 0)}) {
    Tensor y = mt::float8_linear(input, w);
    y.mul_(2.0);
    mt::sum(y).backward();
    EXPECT_TRUE(w.grad().defined());
    w.set_grad(Tensor());
  }
}

TEST(Float8Modules, ConvertTakesTheLinearLayersTheFilterTakes) {
  mt::nn::Sequential net(mt::nn::Linear(32, 64), mt::nn::ReLU(), mt::nn::Linear(64, 10),
                         mt::nn::ReLU(), mt::nn::Linear(10, 16));
  const auto config = mt::Float8LinearConfig::from_recipe("rowwise");
  // The default filter skips the layers with a dim that is not a multiple of 16.
  EXPECT_EQ(mt::nn::convert_to_float8_training(*net, config), std::vector<std::string>{"0"});
  const auto layer = [&](size_t i) -> mt::nn::LinearImpl& {
    return dynamic_cast<mt::nn::LinearImpl&>(*(*net)[i]);
  };
  auto& first = layer(0);
  ASSERT_TRUE(first.float8.has_value());
  EXPECT_EQ(*first.float8, config);
  EXPECT_FALSE(layer(2).float8.has_value());
  const Tensor x = mt::randn({8, 32});
  EXPECT_TRUE(mt::equal(first.forward(x), mt::float8_linear(x, first.weight, first.bias, config)));
  EXPECT_FALSE(mt::equal(first.forward(x), mt::linear(x, first.weight, first.bias)));
  // A filter by name.
  const auto by_name = mt::nn::convert_to_float8_training(
      *net, {}, [](const std::string& name, const mt::nn::LinearImpl&) { return name != "0"; });
  EXPECT_EQ(by_name, (std::vector<std::string>{"2", "4"}));
  EXPECT_EQ(*layer(4).float8, mt::Float8LinearConfig{});
}

TEST(Float8Modules, FusedMlpRunsItsFloat8LayersUnfused) {
  mt::nn::FusedMLP mlp(32, 64, 16, mt::LinearActivation::GeluTanh);
  const Tensor x = mt::randn({8, 32});
  const Tensor fused = mlp(x);
  EXPECT_EQ(mt::nn::convert_to_float8_training(*mlp).size(), 2u);
  const auto c = *mlp->fc1->float8;
  const Tensor want =
      mt::float8_linear(mt::gelu(mt::float8_linear(x, mlp->fc1->weight, mlp->fc1->bias, c), "tanh"),
                        mlp->fc2->weight, mlp->fc2->bias, c);
  EXPECT_TRUE(mt::equal(mlp(x), want));
  EXPECT_FALSE(mt::equal(mlp(x), fused));
}

// configs/gpt_tiny.yaml's model and batch (4 layers, n_embd 128, 16 x 128 tokens) under bfloat16
// autocast, and with its 16 Linear layers in float8 tensorwise: what one forward keeps for
// backward (autograd::saved_tensor_bytes, the parameters left out).
mt::autograd::SavedBytes gpt_tiny_saved_bytes(const std::string& recipe) {
  const mt::nn::GPTConfig c{
      .block_size = 128, .vocab_size = 256, .n_layer = 4, .n_head = 4, .n_embd = 128};
  mt::manual_seed(0);
  mt::nn::GPT model(c);
  if (!recipe.empty()) {
    const auto layers =
        mt::nn::convert_to_float8_training(*model, mt::Float8LinearConfig::from_recipe(recipe));
    EXPECT_EQ(layers.size(), 16u);
  }
  const Tensor idx = mt::randint(0, c.vocab_size, {16, c.block_size});
  const Tensor targets = mt::randint(0, c.vocab_size, {16, c.block_size});
  mt::amp::autocast scope(mt::kCPU, mt::amp::Precision::BFloat16);
  const Tensor loss = mt::cross_entropy(model(idx).view({-1, c.vocab_size}), targets.reshape({-1}));
  return mt::autograd::saved_tensor_bytes(loss, model->parameters());
}

// Tensorwise scales are valid for the transposed use, so a float8 layer keeps its float8 input
// and weight (1 byte an element, and its two float32 scales) where the bfloat16 layer keeps
// bfloat16 ones (2 bytes): the Linear layers of the blocks keep half the bytes. The whole forward
// keeps less too, but not half: the layer norms (float32 inputs), GELU (its bfloat16 input),
// attention, the cross entropy and the tied lm_head (bfloat16 in both) keep the same.
TEST(Float8Modules, TensorwiseGptTinyKeepsHalfTheLinearLayersBytes) {
  const auto bf16 = gpt_tiny_saved_bytes("");
  const auto f8 = gpt_tiny_saved_bytes("tensorwise");
  // The lm_head is the only plain Linear node of the float8 model.
  const int64_t lm_head = f8.by_node.at("LinearBackward0");
  EXPECT_EQ(lm_head, 2 * (2048 * 128 + 256 * 128));  // ln_f's output and wte, bfloat16
  const int64_t blocks_bf16 = bf16.by_node.at("LinearBackward0") - lm_head;
  const int64_t blocks_f8 = f8.by_node.at("Float8LinearBackward0");
  // Inputs: 2048 tokens x (128 + 128 + 128 + 512) per layer; weights 196,608 per layer; 4 layers.
  const int64_t elements = 4 * (2048 * (128 + 128 + 128 + 512) + 196608);
  EXPECT_EQ(blocks_bf16, 2 * elements);
  EXPECT_EQ(blocks_f8, elements + 16 * 2 * 4);
  EXPECT_LE(static_cast<double>(blocks_f8), 0.6 * static_cast<double>(blocks_bf16));
  for (const auto& [node, bytes] : bf16.by_node) {
    if (node != "LinearBackward0") {
      EXPECT_EQ(f8.by_node.at(node), bytes) << node;
    }
  }
  EXPECT_EQ(bf16.total - f8.total, blocks_bf16 - blocks_f8);
  std::printf(
      "gpt_tiny saved for backward: the blocks' Linear layers %.2f MiB (bfloat16) -> "
      "%.2f MiB (float8 tensorwise), %.3fx; the whole forward %.2f -> %.2f MiB, %.3fx\n",
      blocks_bf16 / 1048576.0, blocks_f8 / 1048576.0,
      static_cast<double>(blocks_f8) / static_cast<double>(blocks_bf16), bf16.total / 1048576.0,
      f8.total / 1048576.0, static_cast<double>(f8.total) / static_cast<double>(bf16.total));
}

INSTANTIATE_TEST_SUITE_P(Recipes, Float8Linear, ::testing::ValuesIn(runs()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
