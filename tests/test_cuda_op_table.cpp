// One table walks every op with a kernel table (engine/kernel_tables.h) through its public
// entry point on CUDA and on the CPU (the oracle), for every dtype the op supports, on random
// NON-CONTIGUOUS inputs (transposed views of every other slice of a larger buffer, built the
// same way on both devices), and compares with per-dtype tolerances (tests/test_util.h), scaled
// per op where results fold many elements. Every differentiable op is also gradchecked in
// float64 on CUDA. The coverage list (op -> CPU kernel file -> CUDA kernel file) is in
// docs/kernels.md. Without a GPU every test here reports SKIPPED.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::kGpu;
using Inputs = std::vector<Tensor>;
using mt::testing::expect_close;

namespace {

constexpr uint32_t kFloat = mt::kFloatingTypes;
constexpr uint32_t kNumber = mt::kAllTypes;
constexpr uint32_t kAny = mt::kAllTypesAndBool;

struct OpCase {
  std::string name;
  uint32_t dtypes;
  std::vector<Shape> shapes;  // one random input per shape
  std::function<Tensor(const Inputs&)> fn;
  double low = -2.0, high = 2.0;  // input range
  double tol_scale = 1.0;         // results that fold many elements get a wider tolerance
  bool differentiable = true;     // gradcheck in float64 on CUDA (floating ops only)
  bool tf32_sensitive = false;    // a float32 GEMM: TF32 when matmul precision allows it
};

// The same values on both devices, non-contiguous on both (as test_util's random_tensor).
struct Pair {
  Tensor cpu, gpu;
};
Pair strided_pair(const Shape& shape, DType dt, double low, double high) {
  Shape big = shape;
  if (!big.empty()) {
    if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
    big[0] *= 2;
  }
  Tensor base;
  if (dt == mt::kBool) {
    base = mt::rand(big, mt::kFloat64) < 0.5;
  } else if (mt::is_floating(dt)) {
    base = (mt::rand(big, mt::kFloat64) * (high - low) + low).to(dt);
  } else {
    const int64_t lo = dt == mt::kUInt8 ? std::max<int64_t>(0, static_cast<int64_t>(low))
                                        : static_cast<int64_t>(low);
    base = mt::randint(lo, static_cast<int64_t>(high) + 1, big, dt);
  }
  auto view = [&](Tensor t) {
    if (shape.empty()) return t;
    t = t.slice(0, 0, std::nullopt, 2);
    return t.dim() >= 2 ? t.transpose(-1, -2) : t;
  };
  return {view(base), view(base.to(kGpu))};
}

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
Tensor on(const Tensor& t, const Tensor& like) { return t.to(like.device()); }

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
    unary("sign", kSigned, &mt::sign, -2, 2, false);
    unary("reciprocal", kFloat, &mt::reciprocal, 0.5, 2);
    unary("sin", kFloat, &mt::sin);
    unary("cos", kFloat, &mt::cos);
    unary("log1p", kFloat, &mt::log1p, -0.5, 2);
    unary("expm1", kFloat, &mt::expm1);
    unary("square", kNumber, &mt::square);
    v.push_back({"gelu", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::gelu(x[0]); }});
    v.push_back(
        {"gelu_tanh", kFloat, {{5, 7}}, [](const Inputs& x) { return mt::gelu(x[0], "tanh"); }});

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
    for (DType to : mt::testing::all_dtypes()) {
      v.push_back({std::string("cast to ") + std::string(mt::dtype_name(to)),
                   kAny,
                   {{5, 7}},
                   [to](const Inputs& x) { return x[0].to(to); },
                   -2,
                   2,
                   1.0,
                   false});
    }

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
    return v;
  }();
  return cases;
}

std::string label(const OpCase& c, DType dt) {
  return c.name + " " + std::string(mt::dtype_name(dt));
}

bool supports(const OpCase& c, DType dt) { return (c.dtypes & mt::dtype_bit(dt)) != 0; }

// Restores the float32 matmul precision on scope exit.
struct PrecisionGuard {
  mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  ~PrecisionGuard() { mt::set_float32_matmul_precision(saved); }
};

void compare(const Tensor& gpu, const Tensor& cpu, const OpCase& c, DType dt, bool tf32) {
  const std::string what = label(c, dt) + (tf32 ? " tf32" : "");
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const DType out = cpu.dtype();
  if (!mt::is_floating(out)) {
    EXPECT_EQ(gpu.to_vector<double>(), cpu.to_vector<double>()) << what;
    return;
  }
  mt::testing::Tolerance tol = mt::testing::tolerance_for(out);
  if (tf32 && out == mt::kFloat32) tol = {1e-3, 1e-3};
  // The CPU accumulates in double, CUDA in opmath: scale by how many elements an output folds.
  expect_close(gpu, cpu, tol.rtol * c.tol_scale, tol.atol * c.tol_scale, what);
}

}  // namespace

TEST(CudaOpTable, EveryOpEveryDtypeMatchesCpuOnStridedInputs) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  int compared = 0;
  for (const OpCase& c : op_cases()) {
    for (DType dt : mt::testing::all_dtypes()) {
      if (!supports(c, dt)) continue;
      Inputs xc, xg;
      for (const Shape& s : c.shapes) {
        const Pair p = strided_pair(s, dt, c.low, c.high);
        xc.push_back(p.cpu);
        xg.push_back(p.gpu);
      }
      compare(c.fn(xg), c.fn(xc), c, dt, false);
      ++compared;
    }
  }
  EXPECT_GT(compared, 200);
}

TEST(CudaOpTable, Float32GemmsUnderTF32StayWithinTF32Tolerance) {
  MT_REQUIRE_GPU();
  PrecisionGuard restore;
  mt::set_float32_matmul_precision(mt::MatmulPrecision::High);
  for (const OpCase& c : op_cases()) {
    if (!c.tf32_sensitive) continue;
    Inputs xc, xg;
    for (const Shape& s : c.shapes) {
      const Pair p = strided_pair(s, mt::kFloat32, c.low, c.high);
      xc.push_back(p.cpu);
      xg.push_back(p.gpu);
    }
    compare(c.fn(xg), c.fn(xc), c, mt::kFloat32, true);
  }
}

TEST(CudaOpTable, GradcheckFloat64OnCuda) {
  MT_REQUIRE_GPU();
  for (const OpCase& c : op_cases()) {
    if (!c.differentiable || !supports(c, mt::kFloat64)) continue;
    Inputs x;
    for (const Shape& s : c.shapes) {
      // Shifted away from 0, where abs/relu/maximum-style kinks would fool finite differences.
      Tensor t = strided_pair(s, mt::kFloat64, c.low, c.high).gpu;
      if (c.low < 0) t = t + mt::sign(t) * 0.05;
      x.push_back(t.detach().requires_grad_());
    }
    EXPECT_TRUE(mt::autograd::gradcheck(c.fn, x, 1e-6, 1e-5, 1e-3)) << c.name;
  }
}

TEST(CudaOpTable, DropoutDrawsTheCpuMask) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    const Pair x = strided_pair({33, 17}, dt, -2, 2);
    mt::Generator gc(1234), gg(1234);
    const Tensor yc = mt::dropout(x.cpu, 0.3, true, &gc);
    const Tensor yg = mt::dropout(x.gpu, 0.3, true, &gg);
    ASSERT_TRUE(yg.is_cuda());
    EXPECT_EQ((yg.cpu() == 0).to_vector<double>(), (yc == 0).to_vector<double>())
        << mt::dtype_name(dt);
    mt::testing::expect_close(yg, yc, std::string("dropout ") + std::string(mt::dtype_name(dt)));
  }
}

// The table itself is checked without a GPU: every case runs on the CPU for every dtype it
// claims, and every differentiable case passes gradcheck there, so a GPU run tests the kernels
// and not the table.
TEST(CudaOpTable, TableRunsOnTheCpu) {
  for (const OpCase& c : op_cases()) {
    for (DType dt : mt::testing::all_dtypes()) {
      if (!supports(c, dt)) continue;
      Inputs x;
      for (const Shape& s : c.shapes) {
        x.push_back(mt::testing::random_tensor(s, dt == mt::kBool ? mt::kFloat32 : dt, true, c.low,
                                               c.high));
        if (dt == mt::kBool) x.back() = x.back() > 0;
      }
      try {
        const Tensor y = c.fn(x);
        EXPECT_TRUE(y.defined()) << label(c, dt);
      } catch (const mt::Error& e) {
        ADD_FAILURE() << label(c, dt) << ": " << e.what();
      }
    }
    if (!c.differentiable || !supports(c, mt::kFloat64)) continue;
    Inputs x;
    for (const Shape& s : c.shapes) {
      Tensor t = mt::testing::random_tensor(s, mt::kFloat64, true, c.low, c.high);
      if (c.low < 0) t = t + mt::sign(t) * 0.05;
      x.push_back(t.detach().requires_grad_());
    }
    EXPECT_TRUE(mt::autograd::gradcheck(c.fn, x, 1e-6, 1e-5, 1e-3)) << c.name;
  }
}

// Casts of the values C++ leaves undefined (negative to unsigned, out of range, NaN, infinities)
// and fills with them give the CPU's bits on the GPU, whose cvt instructions would clamp instead
// (tests/test_tensor.cpp pins the CPU's values). Contiguous and strided sources both.
TEST(CudaOpTable, CastsToIntegerTypesMatchTheCpu) {
  MT_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> in = {-2.5, -1.5, -1, -0.5, 0.5, 255.75, 256, 300, -300, 3e9, -3e9,
                                  1e20, -1e20, inf, -inf, std::nan("")};
  for (DType from : mt::testing::floating_dtypes()) {
    const Tensor xc = mt::from_vector(in).to(from);
    const Tensor xg = xc.to(kGpu);
    const Tensor sc = mt::stack({xc, xc}, 1).select(1, 1), sg = mt::stack({xg, xg}, 1).select(1, 1);
    for (DType to : {mt::kUInt8, mt::kInt32, mt::kInt64, mt::kBool}) {
      const std::string what = std::string(mt::dtype_name(from)) + " -> " +
                                std::string(mt::dtype_name(to));
      EXPECT_EQ(xg.to(to).cpu().to_vector<int64_t>(), xc.to(to).to_vector<int64_t>()) << what;
      EXPECT_EQ(sg.to(to).cpu().to_vector<int64_t>(), sc.to(to).to_vector<int64_t>()) << what;
    }
  }
  for (double v : {-1.5, 300.0, 1e20, -inf, std::nan("")}) {
    for (DType to : {mt::kUInt8, mt::kInt32, mt::kInt64}) {
      EXPECT_EQ(mt::full({3}, v, mt::TensorOptions(kGpu).dtype(to)).cpu().to_vector<int64_t>(),
                mt::full({3}, v, to).to_vector<int64_t>())
          << v << " -> " << mt::dtype_name(to);
    }
  }
}
