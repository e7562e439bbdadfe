// The op cases (tests/op_cases.cpp) walk every op of the op index through its public entry
// point on CUDA and on the CPU (the oracle), for every dtype the op supports, on random
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
#include "op_cases.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::Inputs;
using mt::testing::kGpu;
using mt::testing::label;
using mt::testing::op_cases;
using mt::testing::OpCase;
using mt::testing::supports;

namespace {

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
    if (!c.differentiable || !c.no_gradcheck.empty() || !supports(c, mt::kFloat64)) continue;
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

// The cases themselves run on the CPU without a GPU: tests/test_op_index.cpp.

// Casts of the values C++ leaves undefined (negative to unsigned, out of range, NaN, infinities)
// and fills with them give the CPU's bits on the GPU, whose cvt instructions would clamp instead
// (tests/test_tensor.cpp pins the CPU's values). Contiguous and strided sources both.
TEST(CudaOpTable, CastsToIntegerTypesMatchTheCpu) {
  MT_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> in = {-2.5, -1.5, -1,   -0.5, 0.5,   255.75, 256,  300,
                                  -300, 3e9,  -3e9, 1e20, -1e20, inf,    -inf, std::nan("")};
  for (DType from : mt::testing::floating_dtypes()) {
    const Tensor xc = mt::from_vector(in).to(from);
    const Tensor xg = xc.to(kGpu);
    const Tensor sc = mt::stack({xc, xc}, 1).select(1, 1), sg = mt::stack({xg, xg}, 1).select(1, 1);
    for (DType to : {mt::kUInt8, mt::kInt32, mt::kInt64, mt::kBool}) {
      const std::string what =
          std::string(mt::dtype_name(from)) + " -> " + std::string(mt::dtype_name(to));
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
