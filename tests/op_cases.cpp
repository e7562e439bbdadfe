#include "op_cases.h"

#include <limits>
#include <tuple>

namespace mantissa::testing {
namespace {

namespace mt = mantissa;
namespace F = mt::nn::functional;

constexpr uint32_t kFloat = mt::kFloatingTypes;
constexpr uint32_t kNumber = mt::kAllTypes;
constexpr uint32_t kAny = mt::kAllTypesAndBool;

// Index tensors shared by the indexing cases (valid for every shape they are used with).
const Tensor& gather_index() {
  static const Tensor t = mt::randint(0, 4, {3, 4}, mt::kInt64);
  return t;
}
const Tensor& select_index() {
  static const Tensor t = mt::randint(0, 4, {6}, mt::kInt64);
  return t;
}
const Tensor& class_target() {
  static const Tensor t = mt::randint(0, 5, {4}, mt::kInt64);
  return t;
}
// Repeats indices 1 and 2, so the embedding case sums rows (padding_idx is outside a
// gradcheck: PyTorch defines its row's gradient as zero; tests/test_nn_modules.cpp covers it).
const Tensor& embedding_index() {
  static const Tensor t =
      mt::from_vector(std::vector<int64_t>{1, 4, 2, 1, 0, 1, 5, 2}, Shape{2, 4});
  return t;
}
Tensor on(const Tensor& t, const Tensor& like) { return t.to(like.device()); }

}  // namespace

const std::vector<OpCase>& op_cases() {
  using Act = mt::LinearActivation;
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v;
    auto unary = [&](const std::string& name, uint32_t dtypes, Tensor (*f)(const Tensor&),
                     double lo = -2, double hi = 2, bool diff = true) {
      v.push_back(
          {name, dtypes, {{5, 7}}, [f](const Inputs& x) { return f(x[0]); }, lo, hi, 1.0, diff});
    };
    constexpr uint32_t kSigned = kNumber & ~mt::dtype_bit(mt::kUInt8);
    unary("neg", kSigned, &mt::neg, -2, 2);
    unary("abs", kNumber, &mt::abs, -2, 2);
    unary("exp", kFloat, &mt::exp);
    unary("log", kFloat, &mt::log, 0.1, 3);
    unary("sqrt", kFloat, &mt::sqrt, 0.1, 3);
    unary("rsqrt", kFloat, &mt::rsqrt, 0.1, 3);
    unary("relu", kNumber, &mt::relu);
    unary("sigmoid", kFloat, &mt::sigmoid);
    unary("tanh", kFloat, &mt::tanh);
    unary("silu", kFloat, &mt::silu);
    unary("mish", kFloat, &mt::mish, -4, 4);
    unary("hardswish", kFloat, &mt::hardswish, -5, 5);
    unary("selu", kFloat, &mt::selu);
    unary("softsign", kFloat, &mt::softsign);
    unary("logsigmoid", kFloat, &mt::logsigmoid, -4, 4);
    unary("sign", kSigned, &mt::sign, -2, 2);
    unary("reciprocal", kFloat, &mt::reciprocal, 0.5, 2);
    unary("sin", kFloat, &mt::sin);
    unary("cos", kFloat, &mt::cos);
    unary("log1p", kFloat, &mt::log1p, -0.5, 2);
    unary("expm1", kFloat, &mt::expm1);
    unary("square", kNumber, &mt::square);
    v.push_back({"gelu", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::gelu(x[0]); }});
    v.push_back(
        {"gelu_tanh", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::gelu(x[0], "tanh"); }});
    v.back().op = "gelu";

    auto binary = [&](const std::string& name, uint32_t dtypes,
                      Tensor (*f)(const Tensor&, const Tensor&), double lo = -2, double hi = 2,
                      bool diff = true) {
      v.push_back({name,
                   dtypes,
                   {{5, 7}, {5, 7}},
                   [f](const Inputs& x) { return f(x[0], x[1]); },
                   lo,
                   hi,
                   1.0,
                   diff});
    };
    v.push_back(
        {"add", kNumber, {{5, 7}, {5, 7}}, [](const Inputs& x) { return mt::add(x[0], x[1], 2); }});
    binary("mul", kNumber, &mt::mul);
    v.push_back({"div", kFloat, {{5, 7}, {5, 7}}, [](const Inputs& x) {
                   return mt::div(x[0], mt::abs(x[1]) + 0.5);
                 }});
    v.push_back({"pow", kFloat, {{5, 7}, {5, 7}}, [](const Inputs& x) {
                   return mt::pow(mt::abs(x[0]) + 0.5, x[1]);
                 }});
    binary("maximum", kNumber, &mt::maximum);
    binary("minimum", kNumber, &mt::minimum);
    for (auto [name, f] :
         std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"eq", &mt::eq},
             {"ne", &mt::ne},
             {"lt", &mt::lt},
             {"le", &mt::le},
             {"gt", &mt::gt},
             {"ge", &mt::ge}}) {
      binary(name, kAny, f, -2, 2, false);
    }
    v.push_back({"where", kAny, {{5, 7}, {5, 7}, {5, 7}}, [](const Inputs& x) {
                   return mt::where(x[0].to(mt::kFloat64) > 0, x[1], x[2]);
                 }});
    v.push_back({"clamp",
                 kNumber,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::clamp(x[0], -1, 1.5); },
                 -3,
                 3});
    v.push_back({"copy", kAny, {{5, 7}}, [](const Inputs& x) { return x[0].contiguous(); }});
    v.back().op = "contiguous";
    for (DType to : mt::testing::all_dtypes()) {
      v.push_back({std::string("cast to ") + std::string(mt::dtype_name(to)),
                   kAny,
                   {{5, 7}},
                   [to](const Inputs& x) { return x[0].to(to); },
                   -2,
                   2,
                   1.0,
                   false});
      v.back().op = "to";
    }
    v.push_back({"to float64", kFloat, {{5, 7}}, [](const Inputs& x) {
                   return mt::to(x[0], mt::kFloat64);
                 }});
    v.back().op = "to";

    // Reductions fold up to 35 elements.
    v.push_back({"sum",
                 kNumber,
                 {{5, 7, 3}},
                 [](const Inputs& x) { return mt::sum(x[0], {1}); },
                 -2,
                 2,
                 8});
    v.push_back({"mean",
                 kFloat,
                 {{5, 7, 3}},
                 [](const Inputs& x) {
                   return mt::mean(x[0], {0, 2});
                 },
                 -2,
                 2,
                 8});
    v.push_back({"amax", kNumber, {{5, 7}}, [](const Inputs& x) { return mt::amax(x[0], {1}); }});
    v.push_back({"amin", kNumber, {{5, 7}}, [](const Inputs& x) { return mt::amin(x[0], {0}); }});
    v.push_back(
        {"var", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::var(x[0], {1}); }, -2, 2, 8});
    v.push_back({"norm",
                 kFloat,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::norm(x[0], 2.0, {0}); },
                 -2,
                 2,
                 8});
    v.push_back(
        {"max_dim", kNumber, {{5, 7}}, [](const Inputs& x) { return mt::max(x[0], 1).values; }});
    v.back().op = "max";
    v.push_back({"argmin",
                 kNumber,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::argmin(x[0], 0); },
                 -2,
                 2,
                 1.0,
                 false});
    v.push_back({"all_finite",
                 kAny,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::all_finite(x[0]); },
                 -2,
                 2,
                 1.0,
                 false});
    v.push_back({"softmax",
                 kFloat,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::softmax(x[0], 1); },
                 -2,
                 2,
                 8});
    v.push_back({"log_softmax",
                 kFloat,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::log_softmax(x[0], 0); },
                 -2,
                 2,
                 8});

    // GEMMs: K = 6, so a few roundings of the inputs' magnitude.
    OpCase mm{"mm", kNumber, {{5, 6}, {6, 4}}, [](const Inputs& x) { return mt::mm(x[0], x[1]); }};
    mm.tol_scale = 8;
    mm.tf32_sensitive = true;
    v.push_back(mm);
    OpCase bmm{"bmm", kNumber, {{3, 5, 6}, {3, 6, 4}}, [](const Inputs& x) {
                 return mt::bmm(x[0], x[1]);
               }};
    bmm.tol_scale = 8;
    bmm.tf32_sensitive = true;
    v.push_back(bmm);
    for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
      const std::string an = act == Act::None ? "" : act == Act::Relu ? " relu" : " gelu_tanh";
      OpCase lin{"linear" + an, kFloat, {{2, 5, 6}, {8, 6}, {8}}, [act](const Inputs& x) {
                   return F::linear(x[0], x[1], x[2], act);
                 }};
      lin.tol_scale = 8;
      lin.tf32_sensitive = true;
      lin.op = act == Act::None ? "linear" : "linear_act";
      v.push_back(lin);
      if (act == Act::None) continue;
      OpCase block{"linear_act_linear" + an,
                   kFloat,
                   {{4, 6}, {8, 6}, {8}, {3, 8}, {3}},
                   [act](const Inputs& x) {
                     return F::linear_act_linear(x[0], x[1], x[2], act, x[3], x[4]);
                   }};
      block.tol_scale = 16;
      block.tf32_sensitive = true;
      block.op = "linear_act_linear";
      v.push_back(block);
    }
    v.push_back({"layer_norm",
                 kFloat,
                 {{4, 3, 8}, {8}, {8}},
                 [](const Inputs& x) { return F::layer_norm(x[0], {8}, x[1], x[2]); },
                 -2,
                 2,
                 8});

    v.push_back({"gather", kAny, {{3, 5}}, [](const Inputs& x) {
                   return mt::gather(x[0], 1, on(gather_index(), x[0]));
                 }});
    v.push_back({"index_select", kAny, {{5, 4}}, [](const Inputs& x) {
                   return mt::index_select(x[0], 1, on(select_index(), x[0]));
                 }});
    v.push_back(
        {"scatter_add",
         kNumber,
         {{5, 4}, {3, 4}},
         [](const Inputs& x) { return mt::scatter_add(x[0], 0, on(gather_index(), x[0]), x[1]); },
         -2,
         2,
         4});
    v.push_back(
        {"index_add",
         kNumber,
         {{5, 4}, {5, 6}},
         [](const Inputs& x) { return mt::index_add(x[0], 1, on(select_index(), x[0]), x[1]); },
         -2,
         2,
         4});

    OpCase conv{"conv2d", kFloat, {{2, 3, 6, 5}, {4, 3, 3, 3}, {4}}, [](const Inputs& x) {
                  return mt::conv2d(x[0], x[1], x[2], 1, 1);
                }};
    conv.tol_scale = 16;
    conv.tf32_sensitive = true;
    v.push_back(conv);
    v.push_back({"max_pool2d", kFloat, {{2, 3, 6, 5}}, [](const Inputs& x) {
                   return mt::max_pool2d(x[0], 2, 1, 1);
                 }});
    v.push_back({"avg_pool2d",
                 kFloat,
                 {{2, 3, 6, 5}},
                 [](const Inputs& x) { return mt::avg_pool2d(x[0], 3, 2, 1); },
                 -2,
                 2,
                 4});

    // Losses are compositions of the ops above; they are here for their autograd on CUDA.
    v.push_back({"cross_entropy",
                 kFloat,
                 {{4, 5}},
                 [](const Inputs& x) { return F::cross_entropy(x[0], on(class_target(), x[0])); },
                 -2,
                 2,
                 8});
    // Two chunks of rows (3 + 1), with bias, smoothing and an ignored class; None reruns the
    // chunks in backward.
    v.push_back({"linear_cross_entropy",
                 kFloat,
                 {{4, 3}, {5, 3}, {5}},
                 [](const Inputs& x) {
                   return mt::linear_cross_entropy(x[0], x[1], on(class_target(), x[0]), x[2],
                                                   mt::Reduction::Mean, 0.1, 2, 3);
                 },
                 -2,
                 2,
                 8});
    v.push_back({"linear_cross_entropy_none",
                 kFloat,
                 {{2, 2, 3}, {5, 3}},
                 [](const Inputs& x) {
                   return mt::linear_cross_entropy(x[0], x[1],
                                                   on(class_target(), x[0]).reshape({2, 2}),
                                                   Tensor(), mt::Reduction::None, 0.0, -100, 3);
                 },
                 -2,
                 2,
                 8,
                 true,
                 false,
                 "linear_cross_entropy"});
    v.push_back({"mse_loss",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) { return F::mse_loss(x[0], x[1]); },
                 -2,
                 2,
                 8});
    v.push_back({"bce_with_logits",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) {
                   return F::binary_cross_entropy_with_logits(x[0], mt::sigmoid(x[1]));
                 },
                 -2,
                 2,
                 8});
    v.back().op = "binary_cross_entropy_with_logits";

    // Views, joins and the remaining ops of the index.
    v.push_back(
        {"sub", kNumber, {{5, 7}, {5, 7}}, [](const Inputs& x) { return mt::sub(x[0], x[1], 2); }});
    for (auto [name, f] :
         std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)>>{
             {"logical_and", &mt::logical_and}, {"logical_or", &mt::logical_or}}) {
      v.push_back({name,
                   kAny,
                   {{5, 7}, {5, 7}},
                   [f](const Inputs& x) { return f(x[0] > 0, x[1] > 0); },
                   -2,
                   2,
                   1.0,
                   false});
    }
    v.push_back({"logical_not",
                 kAny,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::logical_not(x[0] > 0); },
                 -2,
                 2,
                 1.0,
                 false});
    v.push_back({"clone", kAny, {{5, 7}}, [](const Inputs& x) { return mt::clone(x[0]); }});
    v.push_back({"reshape", kAny, {{5, 7}}, [](const Inputs& x) {
                   return mt::reshape(x[0], {7, 5});
                 }});
    v.push_back({"view", kAny, {{5, 7}}, [](const Inputs& x) {
                   return mt::view(x[0].contiguous(), {35});
                 }});
    v.push_back(
        {"transpose", kAny, {{5, 7}}, [](const Inputs& x) { return mt::transpose(x[0], 0, 1); }});
    v.push_back({"permute", kAny, {{3, 4, 5}}, [](const Inputs& x) {
                   return mt::permute(x[0], {2, 0, 1});
                 }});
    v.push_back(
        {"narrow", kAny, {{5, 7}}, [](const Inputs& x) { return mt::narrow(x[0], 1, 2, 3); }});
    v.push_back({"select", kAny, {{5, 7}}, [](const Inputs& x) { return mt::select(x[0], 0, 2); }});
    v.push_back(
        {"squeeze", kAny, {{5, 1, 7}}, [](const Inputs& x) { return mt::squeeze(x[0], 1); }});
    v.push_back(
        {"unsqueeze", kAny, {{5, 7}}, [](const Inputs& x) { return mt::unsqueeze(x[0], 1); }});
    v.push_back({"expand", kAny, {{1, 7}}, [](const Inputs& x) {
                   return mt::expand(x[0], {5, 7});
                 }});
    v.push_back(
        {"flatten", kAny, {{3, 4, 5}}, [](const Inputs& x) { return mt::flatten(x[0], 1); }});
    v.push_back({"broadcast_tensors", kAny, {{5, 7}, {1, 7}}, [](const Inputs& x) {
                   return mt::broadcast_tensors({x[0], x[1]})[1];
                 }});
    v.push_back({"min", kNumber, {{5, 7}}, [](const Inputs& x) { return mt::min(x[0]); }});
    v.push_back({"argmax",
                 kNumber,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::argmax(x[0], 1); },
                 -2,
                 2,
                 1.0,
                 false});
    v.push_back(
        {"std", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::std(x[0], {1}); }, -2, 2, 8});
    OpCase matmul{"matmul", kFloat, {{2, 5, 6}, {6, 4}}, [](const Inputs& x) {
                    return mt::matmul(x[0], x[1]);
                  }};
    matmul.tol_scale = 8;
    matmul.tf32_sensitive = true;
    v.push_back(matmul);
    v.push_back({"one_hot",
                 kAny,
                 {{5, 7}},
                 [](const Inputs& x) { return mt::one_hot(on(select_index(), x[0]), 5); },
                 -2,
                 2,
                 1.0,
                 false});
    v.push_back({"cat", kAny, {{5, 7}, {5, 3}}, [](const Inputs& x) {
                   return mt::cat({x[0], x[1]}, 1);
                 }});
    v.push_back({"stack", kAny, {{5, 7}, {5, 7}}, [](const Inputs& x) {
                   return mt::stack({x[0], x[1]}, 0);
                 }});
    v.push_back({"dropout", kFloat, {{5, 7}}, [](const Inputs& x) {
                   mt::Generator gen(7);
                   return mt::dropout(x[0], 0.3, true, &gen);
                 }});
    v.push_back({"nll_loss",
                 kFloat,
                 {{4, 5}},
                 [](const Inputs& x) { return F::nll_loss(x[0], on(class_target(), x[0])); },
                 -2,
                 2,
                 8});
    v.push_back({"l1_loss",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) { return F::l1_loss(x[0], x[1]); },
                 -2,
                 2,
                 8});

    // Reductions, scans, sorting, splitting and products of several operands.
    auto values_case = [&](const std::string& name, const std::string& op, uint32_t dtypes,
                           std::vector<Shape> shapes, std::function<Tensor(const Inputs&)> fn,
                           double tol = 1.0, bool diff = true) {
      v.push_back({name, dtypes, std::move(shapes), std::move(fn), -2, 2, tol, diff});
      v.back().op = op;
    };
    values_case(
        "logsumexp", "logsumexp", kFloat, {{5, 7}},
        [](const Inputs& x) { return mt::logsumexp(x[0], {1}); }, 8);
    values_case(
        "logsumexp all", "logsumexp", kFloat, {{3, 4}},
        [](const Inputs& x) { return mt::logsumexp(x[0], {}, true); }, 8);
    values_case(
        "prod", "prod", kNumber, {{4, 5}}, [](const Inputs& x) { return mt::prod(x[0], 1); }, 8);
    values_case(
        "prod all", "prod", kFloat, {{2, 3}}, [](const Inputs& x) { return mt::prod(x[0]); }, 8);
    values_case(
        "cumsum", "cumsum", kNumber, {{5, 7}}, [](const Inputs& x) { return mt::cumsum(x[0], 1); },
        8);
    values_case(
        "cumprod", "cumprod", kNumber, {{4, 5}},
        [](const Inputs& x) { return mt::cumprod(x[0], -1); }, 8);
    values_case(
        "any", "any", kAny, {{5, 7}}, [](const Inputs& x) { return mt::any(x[0], 1); }, 1, false);
    values_case(
        "all", "all", kAny, {{5, 7}}, [](const Inputs& x) { return mt::all(x[0], 0, true); }, 1,
        false);
    values_case("topk", "topk", kNumber, {{5, 7}},
                [](const Inputs& x) { return mt::topk(x[0], 3, 1).values; });
    values_case(
        "topk indices", "topk", kNumber, {{5, 7}},
        [](const Inputs& x) { return mt::topk(x[0], 2, 0, false).indices; }, 1, false);
    values_case("sort", "sort", kNumber, {{5, 7}},
                [](const Inputs& x) { return mt::sort(x[0], 1, true).values; });
    values_case(
        "sort indices", "sort", kAny, {{5, 7}},
        [](const Inputs& x) { return mt::sort(x[0], 0).indices; }, 1, false);
    values_case("split", "split", kAny, {{5, 7}},
                [](const Inputs& x) { return mt::split(x[0], 3, 1)[1]; });
    values_case("chunk", "chunk", kAny, {{5, 7}},
                [](const Inputs& x) { return mt::chunk(x[0], 3, 0)[2]; });
    values_case("repeat", "repeat", kAny, {{2, 3}}, [](const Inputs& x) {
      return mt::repeat(x[0], {2, 1, 3});
    });
    for (auto [name, op, shapes, fn] :
         std::vector<std::tuple<const char*, const char*, std::vector<Shape>,
                                std::function<Tensor(const Inputs&)>>>{
             {"einsum",
              "einsum",
              {{3, 4, 5}, {3, 5, 2}},
              [](const Inputs& x) {
                return mt::einsum("bij,bjk->bki", {x[0], x[1]});
              }},
             {"addmm",
              "addmm",
              {{4}, {5, 6}, {6, 4}},
              [](const Inputs& x) { return mt::addmm(x[0], x[1], x[2], 3, 2); }},
             {"baddbmm", "baddbmm", {{3, 1, 4}, {3, 5, 6}, {3, 6, 4}}, [](const Inputs& x) {
                return mt::baddbmm(x[0], x[1], x[2], 3, 2);
              }}}) {
      values_case(name, op, std::string(name) == "einsum" ? kFloat : kNumber, shapes, fn, 8);
      v.back().tf32_sensitive = true;
    }
    // nn modules: embedding, transposed convolution, adaptive pooling, pooling with indices.
    v.push_back({"embedding", kFloat, {{6, 3}}, [](const Inputs& x) {
                   return mt::embedding(on(embedding_index(), x[0]), x[0]);
                 }});
    v.push_back({"adaptive_avg_pool2d", kFloat, {{2, 3, 7, 5}}, [](const Inputs& x) {
                   return mt::adaptive_avg_pool2d(x[0], mt::Size2(3, 4));
                 }});
    OpCase conv_t{
        "conv_transpose2d", kFloat, {{2, 4, 4, 3}, {4, 3, 3, 2}, {6}}, [](const Inputs& x) {
          return mt::conv_transpose2d(x[0], x[1], x[2], mt::Size2(2, 1), 1, 1, 2, mt::Size2(1, 2));
        }};
    conv_t.tol_scale = 16;
    conv_t.tf32_sensitive = true;
    v.push_back(conv_t);
    v.push_back({"max_pool2d_with_indices", kFloat, {{2, 3, 6, 5}}, [](const Inputs& x) {
                   return mt::max_pool2d_with_indices(x[0], 2, 1, 1).values;
                 }});
    // Pointwise and masking ops (autograd/ops/pointwise.cpp) and the activations with parameters
    // (activations.cpp). Divisors stay away from zero.
    auto divisor = [](const Tensor& t) { return mt::clamp(mt::abs(t), 0, 4) + 1; };
    v.push_back({"floor_divide",
                 kNumber,
                 {{5, 7}, {5, 7}},
                 [divisor](const Inputs& x) { return mt::floor_divide(x[0], divisor(x[1])); },
                 -4,
                 4,
                 1.0,
                 false});
    v.push_back({"remainder", kNumber, {{5, 7}, {5, 7}}, [divisor](const Inputs& x) {
                   return mt::remainder(x[0], divisor(x[1]));
                 }});
    v.back().low = -4;
    v.back().high = 4;
    // remainder takes the divisor's sign.
    v.push_back({"remainder negative divisor",
                 kNumber & ~mt::dtype_bit(mt::kUInt8),
                 {{5, 7}, {5, 7}},
                 [divisor](const Inputs& x) { return mt::remainder(x[0], -divisor(x[1])); }});
    v.back().op = "remainder";
    v.back().low = -4;
    v.back().high = 4;
    v.push_back({"fmod", kNumber, {{5, 7}, {7}}, [divisor](const Inputs& x) {
                   return mt::fmod(x[0], divisor(x[1]));
                 }});
    v.back().low = -4;
    v.back().high = 4;
    v.push_back({"masked_fill", kAny, {{5, 7}, {7}}, [](const Inputs& x) {
                   return mt::masked_fill(x[0], x[1].to(mt::kFloat64) > 0, 1);
                 }});
    v.push_back({"masked_fill tensor value", kFloat, {{5, 7}, {7}, {}}, [](const Inputs& x) {
                   return mt::masked_fill(x[0], x[1] > 0, x[2]);
                 }});
    v.back().op = "masked_fill";
    // Floating inputs get infinities and NaNs to classify.
    auto specials = [](const Tensor& t) {
      if (!mt::is_floating(t.dtype())) return t;
      const double inf = std::numeric_limits<double>::infinity();
      return t.masked_fill(t > 1.2, inf)
          .masked_fill(t < -1.2, -inf)
          .masked_fill(mt::abs(t) < 0.3, std::numeric_limits<double>::quiet_NaN());
    };
    for (auto [name, f] : std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>>{
             {"isnan", &mt::isnan}, {"isinf", &mt::isinf}, {"isfinite", &mt::isfinite}}) {
      v.push_back({name,
                   kAny,
                   {{5, 7}},
                   [f, specials](const Inputs& x) { return f(specials(x[0])); },
                   -2,
                   2,
                   1.0,
                   false});
    }
    v.push_back({"leaky_relu", kFloat, {{5, 7}}, [](const Inputs& x) {
                   return mt::leaky_relu(x[0], 0.2);
                 }});
    v.push_back({"elu", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::elu(x[0], 1.3); }});
    v.push_back({"softplus", kFloat, {{5, 7}}, [](const Inputs& x) {
                   return mt::softplus(x[0], 2.0, 3.0);
                 }});
    v.push_back({"celu", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::celu(x[0], 0.7); }});
    v.push_back({"hardtanh", kFloat, {{5, 7}}, [](const Inputs& x) {
                   return mt::hardtanh(x[0], -0.8, 1.1);
                 }});
    v.push_back({"lerp", kFloat, {{5, 7}, {5, 7}, {7}}, [](const Inputs& x) {
                   return mt::lerp(x[0], x[1], x[2]);
                 }});
    for (double w : {0.3, 0.7}) {
      v.push_back(
          {"lerp scalar " + std::to_string(w), kFloat, {{5, 7}, {1, 7}}, [w](const Inputs& x) {
             return mt::lerp(x[0], x[1], w);
           }});
      v.back().op = "lerp";
    }
    v.push_back({"addcmul", kNumber, {{5, 7}, {5, 7}, {1, 7}}, [](const Inputs& x) {
                   return mt::addcmul(x[0], x[1], x[2], 2);
                 }});
    v.push_back({"tril", kAny, {{2, 5, 7}}, [](const Inputs& x) { return mt::tril(x[0], 1); }});
    v.push_back({"triu", kAny, {{2, 5, 7}}, [](const Inputs& x) { return mt::triu(x[0], -1); }});
    // Batch norm, group norm, RMS norm. Training-mode batch norm differentiates through the
    // batch statistics; eval mode reads fixed running statistics.
    auto running = [](const Tensor& like, double value) {
      return mt::full({3}, value, mt::TensorOptions(like.device()).dtype(like.dtype()));
    };
    v.push_back({"batch_norm_train",
                 kFloat,
                 {{4, 3, 5}, {3}, {3}},
                 [running](const Inputs& x) {
                   return F::batch_norm(x[0], running(x[0], 0.0), running(x[0], 1.0), x[1], x[2],
                                        true, 0.1, 1e-5);
                 },
                 -2,
                 2,
                 8});
    v.back().op = "batch_norm";
    v.push_back({"batch_norm_train_2d_no_affine",
                 kFloat,
                 {{5, 3}},
                 [](const Inputs& x) {
                   return F::batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
                 },
                 -2,
                 2,
                 8});
    v.back().op = "batch_norm";
    v.push_back({"batch_norm_eval",
                 kFloat,
                 {{2, 3, 2, 2}, {3}, {3}},
                 [running](const Inputs& x) {
                   return F::batch_norm(x[0], running(x[0], 0.3), running(x[0], 1.7), x[1], x[2],
                                        false);
                 },
                 -2,
                 2,
                 8});
    v.back().op = "batch_norm";
    v.push_back({"group_norm",
                 kFloat,
                 {{2, 6, 5}, {6}, {6}},
                 [](const Inputs& x) { return F::group_norm(x[0], 3, x[1], x[2]); },
                 -2,
                 2,
                 8});
    v.push_back({"group_norm_4d",
                 kFloat,
                 {{2, 4, 3, 2}},
                 [](const Inputs& x) { return F::group_norm(x[0], 2); },
                 -2,
                 2,
                 8});
    v.back().op = "group_norm";
    v.push_back({"rms_norm",
                 kFloat,
                 {{4, 3, 8}, {8}},
                 [](const Inputs& x) { return F::rms_norm(x[0], {8}, x[1], 1e-6); },
                 -2,
                 2,
                 8});
    v.push_back({"rms_norm_2d_shape",
                 kFloat,
                 {{3, 2, 4}, {2, 4}},
                 [](const Inputs& x) {
                   return F::rms_norm(x[0], {2, 4}, x[1]);
                 },
                 -2,
                 2,
                 8});
    v.back().op = "rms_norm";
    // The losses' options: class weights (a fixed [5] tensor on the input's device and dtype),
    // beta, delta, log_target. Inputs avoid the kinks: |x - t| keeps clear of beta and delta.
    const auto weights = [](const Tensor& like) {
      return mt::from_vector(std::vector<double>{0.5, 1.5, 1.0, 2.0, 0.25}, mt::Shape{5})
          .to(like.dtype())
          .to(like.device());
    };
    v.push_back({"cross_entropy_weight",
                 kFloat,
                 {{4, 5}},
                 [weights](const Inputs& x) {
                   return F::cross_entropy(x[0], on(class_target(), x[0]), mt::Reduction::Mean, 0.1,
                                           -100, weights(x[0]));
                 },
                 -2,
                 2,
                 8,
                 true,
                 false,
                 "cross_entropy"});
    v.push_back({"nll_loss_weight",
                 kFloat,
                 {{4, 5}},
                 [weights](const Inputs& x) {
                   return F::nll_loss(x[0], on(class_target(), x[0]), mt::Reduction::Mean, -100,
                                      weights(x[0]));
                 },
                 -2,
                 2,
                 8,
                 true,
                 false,
                 "nll_loss"});
    v.push_back({"smooth_l1_loss",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) {
                   return F::smooth_l1_loss(x[0], x[1] * 0.1, mt::Reduction::Sum, 0.7);
                 },
                 -2,
                 2,
                 8});
    v.push_back(
        {"huber_loss",
         kFloat,
         {{4, 5}, {4, 5}},
         [](const Inputs& x) { return F::huber_loss(x[0], x[1] * 0.1, mt::Reduction::Mean, 0.7); },
         -2,
         2,
         8});
    v.push_back({"binary_cross_entropy",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [weights](const Inputs& x) {
                   return F::binary_cross_entropy(mt::sigmoid(x[0]), mt::sigmoid(x[1]),
                                                  mt::Reduction::Mean, weights(x[0]));
                 },
                 -2,
                 2,
                 8});
    v.push_back({"kl_div",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) {
                   return F::kl_div(mt::log_softmax(x[0], 1), mt::softmax(x[1], 1),
                                    mt::KlDivReduction::BatchMean);
                 },
                 -2,
                 2,
                 8});
    v.push_back({"kl_div_log_target",
                 kFloat,
                 {{4, 5}, {4, 5}},
                 [](const Inputs& x) {
                   return F::kl_div(x[0], mt::log_softmax(x[1], 1), mt::KlDivReduction::Sum, true);
                 },
                 -2,
                 2,
                 8,
                 true,
                 false,
                 "kl_div"});
    // scaled_dot_product_attention: a float mask broadcast over batch and heads, the causal mask
    // with L != S, key/value batch dims broadcast against the query's with an explicit scale,
    // and a bool mask that leaves every query a key.
    const auto sdpa = [&](const std::string& name, std::vector<Shape> shapes,
                          std::function<Tensor(const Inputs&)> fn) {
      v.push_back({name, kFloat, std::move(shapes), std::move(fn), -2, 2, 8});
      v.back().tf32_sensitive = true;
      v.back().op = "scaled_dot_product_attention";
    };
    sdpa("scaled_dot_product_attention float mask",
         {{2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 3}, {5, 6}},
         [](const Inputs& x) { return mt::scaled_dot_product_attention(x[0], x[1], x[2], x[3]); });
    sdpa("scaled_dot_product_attention causal", {{2, 7, 4}, {2, 9, 4}, {2, 9, 5}},
         [](const Inputs& x) {
           return mt::scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true);
         });
    sdpa("scaled_dot_product_attention broadcast", {{2, 3, 5, 4}, {3, 6, 4}, {3, 6, 4}},
         [](const Inputs& x) {
           return mt::scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, false, 0.7);
         });
    sdpa("scaled_dot_product_attention bool mask", {{2, 5, 4}, {2, 6, 4}, {2, 6, 4}},
         [](const Inputs& x) {
           const Tensor i = mt::arange(5, mt::TensorOptions(x[0].device()).dtype(mt::kInt64));
           const Tensor j = mt::arange(6, mt::TensorOptions(x[0].device()).dtype(mt::kInt64));
           const Tensor mask = mt::ne(j.view({1, 6}), mt::add(i, mt::Scalar(1)).view({5, 1}));
           return mt::scaled_dot_product_attention(x[0], x[1], x[2], mask);
         });
    // The float8 ops. The scales and casts run on every floating input dtype; scaled_mm on
    // operands cast by them, with both scale layouts and a bias.
    const auto f8 = [&](const std::string& name, std::vector<Shape> shapes,
                        std::function<Tensor(const Inputs&)> fn, bool differentiable = false) {
      v.push_back({name, kFloat, std::move(shapes), std::move(fn), -2, 2, 8, differentiable});
      v.back().op = name.substr(0, name.find(' '));
    };
    f8("float8_scale tensorwise", {{5, 6}},
       [](const Inputs& x) { return mt::float8_scale(x[0], mt::kFloat8E4M3FN); });
    f8("float8_scale rowwise", {{5, 6}}, [](const Inputs& x) {
      return mt::float8_scale(x[0], mt::kFloat8E5M2, mt::Float8Scaling::Rowwise, 0, true);
    });
    // float8_cast and scaled_mm refuse inputs that require grad (tests/test_float8_linear.cpp).
    f8("float8_cast", {{5, 6}, {5, 3}}, [](const Inputs& in) {
      const Inputs x = {in[0].detach(), in[1].detach()};
      const Tensor row_scales = mt::amax(mt::abs(x[1]), {1}, true).to(mt::kFloat32) * 50.0;
      return mt::float8_cast(x[0], row_scales, mt::kFloat8E4M3FN).to(mt::kFloat32);
    });
    f8("scaled_mm", {{5, 6}, {6, 4}, {4}}, [](const Inputs& in) {
      const Inputs x = {in[0].detach(), in[1].detach(), in[2].detach()};
      const Tensor sa = mt::float8_scale(x[0], mt::kFloat8E4M3FN, mt::Float8Scaling::Rowwise);
      const Tensor sb = mt::float8_scale(x[1], mt::kFloat8E5M2, mt::Float8Scaling::Rowwise, 0);
      return mt::scaled_mm(mt::float8_cast(x[0], sa, mt::kFloat8E4M3FN),
                           mt::float8_cast(x[1], sb, mt::kFloat8E5M2), mt::reciprocal(sa),
                           mt::reciprocal(sb), x[2], mt::kFloat32);
    });
    // Its backward is torchao's (the float8 products of the gradients), not the derivative of
    // its quantized forward: tests/test_float8_linear.cpp checks it against torchao instead.
    f8(
        "float8_linear", {{2, 3, 16}, {8, 16}, {8}},
        [](const Inputs& x) { return mt::float8_linear(x[0], x[1], x[2]); }, true);
    v.back().no_gradcheck = "tests/test_float8_linear.cpp";
    return v;
  }();
  return cases;
}

std::string label(const OpCase& c, DType dt) {
  return c.name + " " + std::string(mt::dtype_name(dt));
}

bool supports(const OpCase& c, DType dt) { return (c.dtypes & mt::dtype_bit(dt)) != 0; }

}  // namespace mantissa::testing
