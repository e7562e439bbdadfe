// The CUDA backend against the CPU: the CPU kernels are the oracle. Every elementwise op runs on
// both devices from the same input values (contiguous, strided, broadcast) and every dtype the op
// supports, and the results must agree within the dtype's tolerance (exactly for integers and
// bools). Also: moving tensors between devices, random streams that match the CPU's, and the
// caching allocator's reuse, statistics and out-of-memory message.
//
// Every test needs a GPU and skips without one, except CudaBuild.*, which checks what a machine
// without a GPU must see (device_count() == 0 without throwing, try_gpu() == cpu, clear errors).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend_hooks.h"
#include "engine/kernel_tables.h"
#include "kernels/functors.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Device;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::all_dtypes;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::kGpu;

namespace {

std::string label(const std::string& op, DType dt, bool non_contiguous) {
  return op + " " + std::string(mt::dtype_name(dt)) + (non_contiguous ? " strided" : "");
}

// The same values on the CPU and on cuda:0, with the same layout: a non-contiguous pair is a
// strided, transposed view of a larger buffer built identically on each device.
struct Pair {
  Tensor cpu, gpu;
};

Tensor make_view(Tensor t, bool non_contiguous) {
  if (!non_contiguous) return t;
  t = t.slice(0, 0, std::nullopt, 2);
  return t.dim() >= 2 ? t.transpose(-1, -2) : t;
}

Pair device_pair(const Shape& shape, DType dt, bool non_contiguous, double low = -2.0,
                 double high = 2.0) {
  Shape big = shape;
  if (non_contiguous) {
    if (big.size() >= 2) std::swap(big[big.size() - 1], big[big.size() - 2]);
    big[0] *= 2;
  }
  Tensor base;
  if (mt::is_floating(dt)) {
    base = (mt::rand(big, mt::kFloat64) * (high - low) + low).to(dt);
  } else if (dt == mt::kBool) {
    base = mt::rand(big, mt::kFloat64) < 0.5;
  } else {
    const int64_t lo = dt == mt::kUInt8 ? std::max<int64_t>(0, static_cast<int64_t>(low))
                                        : static_cast<int64_t>(low);
    base = mt::randint(lo, static_cast<int64_t>(high) + 1, big, dt);
  }
  Pair p{make_view(base, non_contiguous), make_view(base.to(kGpu), non_contiguous)};
  EXPECT_EQ(p.cpu.shape(), shape);
  EXPECT_EQ(p.gpu.is_contiguous(), p.cpu.is_contiguous());
  return p;
}

// The CUDA result must be on cuda:0 and match the CPU result within `dt`'s tolerance.
void expect_match(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  EXPECT_EQ(gpu.device(), kGpu) << what;
  EXPECT_EQ(gpu.dtype(), cpu.dtype()) << what;
  expect_close(gpu, cpu, what);
}

void expect_identical(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  EXPECT_EQ(gpu.to_vector<double>(), cpu.to_vector<double>()) << what;
}

const Shape kShape{5, 7, 33};  // 1155 elements: not a multiple of any pack width

}  // namespace

// ---- without a GPU ----------------------------------------------------------------------------

TEST(CudaBuild, DeviceQueriesNeverThrow) {
  EXPECT_EQ(mt::cuda::is_compiled(), MANTISSA_CUDA != 0);
  int n = -1;
  EXPECT_NO_THROW(n = mt::cuda::device_count());
  EXPECT_GE(n, 0);
  EXPECT_EQ(mt::cuda::is_available(), n > 0);
  EXPECT_EQ(mt::try_gpu(), n > 0 ? Device::cuda(0) : Device::cpu());
  EXPECT_EQ(mt::try_gpu(n), Device::cpu());
  EXPECT_EQ(mt::try_all_gpus().size(), static_cast<size_t>(n > 0 ? n : 1));
}

TEST(CudaBuild, MissingDeviceIsAClearError) {
  const int n = mt::cuda::device_count();
  const std::string want =
      mt::cuda::is_compiled() ? "this machine has " + std::to_string(n) : "no CUDA support";
  expect_error([&] { mt::empty({2}, Device::cuda(n)); }, {"cuda:" + std::to_string(n), want});
  expect_error([&] { mt::ones({2}).to(Device::cuda(n)); }, {"cuda:" + std::to_string(n), want});
}

// ---- devices and copies -----------------------------------------------------------------------

TEST(Cuda, DeviceCountAndNames) {
  MT_REQUIRE_GPU();
  const int n = mt::cuda::device_count();
  EXPECT_GT(n, 0);
  EXPECT_EQ(mt::try_gpu(), Device::cuda(0));
  EXPECT_EQ(mt::try_gpu(n - 1), Device::cuda(n - 1));
  ASSERT_NE(mt::cuda_hooks(), nullptr);
  for (int i = 0; i < n; ++i) EXPECT_FALSE(mt::cuda_hooks()->device_name(i).empty());
  EXPECT_NO_THROW(mt::cuda_hooks()->synchronize(0));
}

TEST(Cuda, RoundTripEveryDtype) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    for (bool nc : {false, true}) {
      const Pair p = device_pair(kShape, dt, nc, -50, 50);
      // CPU -> CUDA from a strided source, CUDA -> CPU from a strided CUDA view.
      const Tensor up = p.cpu.to(kGpu);
      EXPECT_TRUE(up.is_cuda());
      expect_identical(up, p.cpu, label("to(cuda)", dt, nc));
      expect_identical(p.gpu.cpu(), p.cpu, label("cpu()", dt, nc));
      expect_identical(p.gpu.contiguous(), p.cpu, label("contiguous on cuda", dt, nc));
    }
  }
  // 0-d and empty tensors.
  EXPECT_EQ(mt::scalar_tensor(3.5, kGpu).item<float>(), 3.5f);
  EXPECT_EQ(mt::empty({0, 3}, kGpu).cpu().numel(), 0);
}

TEST(Cuda, CastsMatchCpu) {
  MT_REQUIRE_GPU();
  // Non-negative values so that float -> integer casts are defined on both devices.
  for (DType from : all_dtypes()) {
    const Pair p = device_pair(kShape, from, true, 0, 100);
    for (DType to : all_dtypes())
      expect_identical(
          p.gpu.to(to), p.cpu.to(to),
          label(std::string("cast to ") + std::string(mt::dtype_name(to)), from, true));
  }
}

TEST(Cuda, CopyBetweenDevicesAndBroadcastCopy) {
  MT_REQUIRE_GPU();
  const Pair p = device_pair({4, 6}, mt::kFloat32, false);
  // Broadcasting copy_ into a strided CUDA destination, with a dtype change.
  Tensor dst_cpu = mt::zeros({6, 4}, mt::kFloat64).t();
  Tensor dst_gpu = mt::zeros({6, 4}, TensorOptions(kGpu).dtype(mt::kFloat64)).t();
  const Tensor row_cpu = p.cpu.select(0, 1), row_gpu = p.gpu.select(0, 1);
  dst_cpu.copy_(row_cpu);
  dst_gpu.copy_(row_gpu);
  expect_identical(dst_gpu, dst_cpu, "broadcast copy_");
  // CPU source into a CUDA destination and back.
  dst_gpu.copy_(p.cpu);
  expect_identical(dst_gpu, p.cpu.to(mt::kFloat64), "copy_ cpu -> cuda");
  if (mt::cuda::device_count() >= 2) {
    const Tensor other = p.gpu.to(Device::cuda(1));
    EXPECT_EQ(other.device(), Device::cuda(1));
    expect_identical(other, p.cpu, "cuda:0 -> cuda:1");
    const Tensor sum1 = other + other;
    EXPECT_EQ(sum1.device(), Device::cuda(1));
    expect_close(sum1, p.cpu + p.cpu, "add on cuda:1");
    expect_identical(other.to(kGpu), p.cpu, "cuda:1 -> cuda:0");
  }
}

TEST(Cuda, MixedDevicesAreRejected) {
  MT_REQUIRE_GPU();
  const Tensor a = mt::ones({3}), b = mt::ones({3}, kGpu);
  expect_error([&] { mt::add(a, b); }, {"same device", "cpu", "cuda:0"});
}

// ---- elementwise ops --------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  uint32_t dtypes;
  std::function<Tensor(const Tensor&)> fn;
  double low, high;  // input range (integers: inclusive)
};

TEST(Cuda, UnaryOpsMatchCpu) {
  MT_REQUIRE_GPU();
  namespace f = mt::functors;
  const std::vector<UnaryCase> cases = {
      {"neg", f::Neg::dtypes, [](const Tensor& x) { return mt::neg(x); }, -5, 5},
      {"abs", f::Abs::dtypes, [](const Tensor& x) { return mt::abs(x); }, -5, 5},
      {"exp", f::Exp::dtypes, [](const Tensor& x) { return mt::exp(x); }, -4, 4},
      {"log", f::Log::dtypes, [](const Tensor& x) { return mt::log(x); }, 0.05, 5},
      {"sqrt", f::Sqrt::dtypes, [](const Tensor& x) { return mt::sqrt(x); }, 0, 5},
      {"rsqrt", f::Rsqrt::dtypes, [](const Tensor& x) { return mt::rsqrt(x); }, 0.05, 5},
      {"relu", f::Relu::dtypes, [](const Tensor& x) { return mt::relu(x); }, -5, 5},
      {"sigmoid", f::Sigmoid::dtypes, [](const Tensor& x) { return mt::sigmoid(x); }, -6, 6},
      {"tanh", f::Tanh::dtypes, [](const Tensor& x) { return mt::tanh(x); }, -3, 3},
      {"gelu", f::Gelu::dtypes, [](const Tensor& x) { return mt::gelu(x); }, -5, 5},
      {"gelu_tanh", f::GeluTanh::dtypes, [](const Tensor& x) { return mt::gelu(x, "tanh"); }, -5,
       5},
      {"sign", f::Sign::dtypes, [](const Tensor& x) { return mt::sign(x); }, -5, 5},
      {"reciprocal", f::Reciprocal::dtypes, [](const Tensor& x) { return mt::reciprocal(x); }, 0.1,
       4},
      {"sin", f::Sin::dtypes, [](const Tensor& x) { return mt::sin(x); }, -6, 6},
      {"cos", f::Cos::dtypes, [](const Tensor& x) { return mt::cos(x); }, -6, 6},
      {"log1p", f::Log1p::dtypes, [](const Tensor& x) { return mt::log1p(x); }, -0.9, 4},
      {"expm1", f::Expm1::dtypes, [](const Tensor& x) { return mt::expm1(x); }, -3, 3},
      {"square", f::Square::dtypes, [](const Tensor& x) { return mt::square(x); }, -9, 9},
  };
  for (const UnaryCase& c : cases) {
    for (DType dt : all_dtypes()) {
      if ((c.dtypes & mt::dtype_bit(dt)) == 0) continue;
      for (bool nc : {false, true}) {
        const Pair p = device_pair(kShape, dt, nc, c.low, c.high);
        expect_match(c.fn(p.gpu), c.fn(p.cpu), label(c.name, dt, nc));
      }
      // A contiguous view whose data pointer is not 16-byte aligned takes the strided path.
      const Pair p = device_pair({1031}, dt, false, c.low, c.high);
      expect_match(c.fn(p.gpu.narrow(0, 1, 1030)), c.fn(p.cpu.narrow(0, 1, 1030)),
                   label(std::string(c.name) + " misaligned", dt, false));
    }
  }
}

struct BinaryCase {
  const char* name;
  uint32_t dtypes;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  double low, high, low_b, high_b;
};

TEST(Cuda, BinaryOpsMatchCpu) {
  MT_REQUIRE_GPU();
  namespace f = mt::functors;
  auto cmp = [](auto op) { return [op](const Tensor& a, const Tensor& b) { return op(a, b); }; };
  const std::vector<BinaryCase> cases = {
      {"add", mt::kAllTypesAndBool, [](const Tensor& a, const Tensor& b) { return a + b; }, -5, 5,
       -5, 5},
      {"add alpha", mt::kAllTypes,
       [](const Tensor& a, const Tensor& b) { return mt::add(a, b, 3); }, 0, 5, 0, 5},
      {"sub alpha", mt::kFloatingTypes,
       [](const Tensor& a, const Tensor& b) { return mt::sub(a, b, 0.5); }, -5, 5, -5, 5},
      {"mul", f::Mul::dtypes, [](const Tensor& a, const Tensor& b) { return a * b; }, -5, 5, -5, 5},
      {"div", f::Div::dtypes, [](const Tensor& a, const Tensor& b) { return a / b; }, -5, 5, 0.5,
       3},
      {"pow", mt::kFloatingTypes, [](const Tensor& a, const Tensor& b) { return mt::pow(a, b); },
       0.5, 2, -2, 2},
      {"pow int", mt::kIntegralTypes,
       [](const Tensor& a, const Tensor& b) { return mt::pow(a, b); }, -3, 3, 0, 4},
      {"maximum", f::Maximum::dtypes, cmp([](auto& a, auto& b) { return mt::maximum(a, b); }), -5,
       5, -5, 5},
      {"minimum", f::Minimum::dtypes, cmp([](auto& a, auto& b) { return mt::minimum(a, b); }), -5,
       5, -5, 5},
      {"eq", f::Eq::dtypes, cmp([](auto& a, auto& b) { return mt::eq(a, b); }), -2, 2, -2, 2},
      {"ne", f::Ne::dtypes, cmp([](auto& a, auto& b) { return mt::ne(a, b); }), -2, 2, -2, 2},
      {"lt", f::Lt::dtypes, cmp([](auto& a, auto& b) { return mt::lt(a, b); }), -2, 2, -2, 2},
      {"le", f::Le::dtypes, cmp([](auto& a, auto& b) { return mt::le(a, b); }), -2, 2, -2, 2},
      {"gt", f::Gt::dtypes, cmp([](auto& a, auto& b) { return mt::gt(a, b); }), -2, 2, -2, 2},
      {"ge", f::Ge::dtypes, cmp([](auto& a, auto& b) { return mt::ge(a, b); }), -2, 2, -2, 2},
  };
  for (const BinaryCase& c : cases) {
    for (DType dt : all_dtypes()) {
      if ((c.dtypes & mt::dtype_bit(dt)) == 0) continue;
      for (bool nc : {false, true}) {
        const Pair a = device_pair(kShape, dt, nc, c.low, c.high);
        const Pair b = device_pair(kShape, dt, !nc, c.low_b, c.high_b);
        expect_match(c.fn(a.gpu, b.gpu), c.fn(a.cpu, b.cpu), label(c.name, dt, nc));
      }
      // Broadcasting: [5, 1, 33] with [7, 33] and a 0-d operand.
      const Pair a = device_pair({5, 1, 33}, dt, true, c.low, c.high);
      const Pair b = device_pair({7, 33}, dt, false, c.low_b, c.high_b);
      expect_match(c.fn(a.gpu, b.gpu), c.fn(a.cpu, b.cpu), label(c.name, dt, true) + " broadcast");
      const Pair s = device_pair({1}, dt, false, c.low_b, c.high_b);
      expect_match(c.fn(a.gpu, s.gpu.squeeze()), c.fn(a.cpu, s.cpu.squeeze()),
                   label(c.name, dt, true) + " with 0-d");
    }
  }
}

TEST(Cuda, WhereAndClampMatchCpu) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    const Pair cond = device_pair({7, 33}, mt::kBool, true);
    const Pair a = device_pair({5, 7, 33}, dt, true, -5, 5);
    const Pair b = device_pair({33}, dt, false, -5, 5);
    expect_match(mt::where(cond.gpu, a.gpu, b.gpu), mt::where(cond.cpu, a.cpu, b.cpu),
                 label("where", dt, true));
    if (dt == mt::kBool) continue;
    const mt::Scalar lo = mt::is_floating(dt) ? mt::Scalar(-1.5) : mt::Scalar(1);
    const mt::Scalar hi = mt::is_floating(dt) ? mt::Scalar(2.25) : mt::Scalar(3);
    expect_match(mt::clamp(a.gpu, lo, hi), mt::clamp(a.cpu, lo, hi), label("clamp", dt, true));
    expect_match(mt::clamp(a.gpu, lo, std::nullopt), mt::clamp(a.cpu, lo, std::nullopt),
                 label("clamp min", dt, true));
    expect_match(mt::clamp(a.gpu, std::nullopt, hi), mt::clamp(a.cpu, std::nullopt, hi),
                 label("clamp max", dt, true));
  }
}

TEST(Cuda, NanAndInfHandlingMatchesCpu) {
  MT_REQUIRE_GPU();
  const double inf = INFINITY, nan = NAN;
  const std::vector<double> xs{nan, inf, -inf, 0.0, -0.0, 1.5, -2.5, nan};
  const std::vector<double> ys{1.0, nan, 3.0, -inf, 0.0, nan, -2.5, nan};
  for (DType dt : mt::testing::floating_dtypes()) {
    const Tensor xc = mt::from_vector(xs).to(dt), yc = mt::from_vector(ys).to(dt);
    const Tensor xg = xc.to(kGpu), yg = yc.to(kGpu);
    const std::string n(mt::dtype_name(dt));
    expect_match(mt::maximum(xg, yg), mt::maximum(xc, yc), "maximum nan " + n);
    expect_match(mt::minimum(xg, yg), mt::minimum(xc, yc), "minimum nan " + n);
    expect_match(mt::relu(xg), mt::relu(xc), "relu nan " + n);
    expect_match(mt::clamp(xg, -1.0, 1.0), mt::clamp(xc, -1.0, 1.0), "clamp nan " + n);
    expect_identical(mt::eq(xg, yg), mt::eq(xc, yc), "eq nan " + n);
    expect_identical(mt::ne(xg, yg), mt::ne(xc, yc), "ne nan " + n);
    expect_identical(mt::lt(xg, yg), mt::lt(xc, yc), "lt nan " + n);
  }
}

TEST(Cuda, ActivationBackwardsMatchCpu) {
  MT_REQUIRE_GPU();
  const std::vector<std::pair<const char*, const mt::KernelTable<mt::BinaryKernel>*>> tables = {
      {"relu_backward", &mt::relu_backward_kernel},
      {"gelu_backward", &mt::gelu_backward_kernel},
      {"gelu_tanh_backward", &mt::gelu_tanh_backward_kernel},
      {"sigmoid_backward", &mt::sigmoid_backward_kernel},
      {"tanh_backward", &mt::tanh_backward_kernel},
  };
  for (const auto& [name, table] : tables) {
    for (DType dt : mt::testing::floating_dtypes()) {
      for (bool nc : {false, true}) {
        const Pair g = device_pair(kShape, dt, nc, -2, 2);
        const Pair s = device_pair(kShape, dt, !nc, -3, 3);
        Tensor out_cpu = mt::empty(kShape, dt);
        Tensor out_gpu = mt::empty(kShape, TensorOptions(kGpu).dtype(dt));
        (*table)(mt::kCPU)(out_cpu, g.cpu, s.cpu);
        (*table)(mt::kCUDA)(out_gpu, g.gpu, s.gpu);
        expect_match(out_gpu, out_cpu, label(name, dt, nc));
      }
    }
  }
}

TEST(Cuda, InPlaceOpsOnStridedViews) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    Pair a = device_pair(kShape, dt, true);
    const Pair b = device_pair(kShape, dt, false);
    a.cpu.add_(b.cpu, 2.0);
    a.gpu.add_(b.gpu, 2.0);
    a.cpu.mul_(1.5);
    a.gpu.mul_(1.5);
    expect_match(a.gpu, a.cpu, label("add_/mul_", dt, true));
    a.cpu.fill_(-0.75);
    a.gpu.fill_(-0.75);
    expect_identical(a.gpu, a.cpu, label("fill_", dt, true));
  }
}

TEST(Cuda, FactoriesMatchCpu) {
  MT_REQUIRE_GPU();
  for (DType dt : all_dtypes()) {
    expect_identical(mt::full({3, 5}, 2.5, TensorOptions(kGpu).dtype(dt)),
                     mt::full({3, 5}, 2.5, dt), label("full", dt, false));
    if (dt == mt::kBool) continue;
    expect_identical(mt::arange(0, 17, 3, TensorOptions(kGpu).dtype(dt)), mt::arange(0, 17, 3, dt),
                     label("arange int", dt, false));
    expect_identical(mt::linspace(0, 50, 11, TensorOptions(kGpu).dtype(dt)),
                     mt::linspace(0, 50, 11, dt), label("linspace", dt, false));
  }
  // Exact agreement needs start + step * i evaluated without FMA on the device.
  expect_identical(mt::arange(-1.0, 2.3, 0.1, TensorOptions(kGpu).dtype(mt::kFloat64)),
                   mt::arange(-1.0, 2.3, 0.1, mt::kFloat64), "arange float64");
  expect_identical(mt::linspace(-3.3, 7.1, 1001, TensorOptions(kGpu).dtype(mt::kFloat64)),
                   mt::linspace(-3.3, 7.1, 1001, mt::kFloat64), "linspace float64");
  expect_identical(mt::linspace(2.0, 5.0, 1, TensorOptions(kGpu).dtype(mt::kFloat64)),
                   mt::linspace(2.0, 5.0, 1, mt::kFloat64), "linspace 1 point");
}

// Byte offsets beyond int32 take the 64-bit offset calculator.
TEST(Cuda, LargeStridesUse64BitIndexing) {
  MT_REQUIRE_GPU();
  constexpr int64_t kStride = 150'000'000;  // floats: 600 MB apart, 3 GB spanned
  Tensor base;
  try {
    base = mt::empty({5 * kStride + 1}, kGpu);
  } catch (const mt::Error& e) {
    GTEST_SKIP() << "not enough GPU memory for a 3 GB buffer: " << e.what();
  }
  Tensor view = base.slice(0, 0, std::nullopt, kStride);
  ASSERT_EQ(view.numel(), 6);
  const Tensor values = mt::tensor<float>({1, 2, 3, 4, 5, 6});
  view.copy_(values.to(kGpu));
  EXPECT_EQ(view.to_vector<float>(), values.to_vector<float>());
  EXPECT_EQ((view * 2.0f).to_vector<float>(), (values * 2.0f).to_vector<float>());
}

// ---- random numbers ---------------------------------------------------------------------------

TEST(Cuda, RandomStreamsMatchCpu) {
  MT_REQUIRE_GPU();
  const Shape shape{37, 29};
  for (DType dt : mt::testing::floating_dtypes()) {
    mt::Generator gc(1234), gg(1234);
    const std::string n(mt::dtype_name(dt));
    // Two draws each: the second starts at the advanced offset.
    for (int draw = 0; draw < 2; ++draw) {
      expect_identical(mt::rand(shape, TensorOptions(kGpu).dtype(dt), &gg),
                       mt::rand(shape, dt, &gc), "rand " + n);
    }
    // Box-Muller goes through log/cos, which may differ in the last bit between libm and CUDA.
    expect_match(mt::randn(shape, TensorOptions(kGpu).dtype(dt), &gg), mt::randn(shape, dt, &gc),
                 "randn " + n);
    Tensor uc = mt::empty(shape, dt), ug = mt::empty(shape, TensorOptions(kGpu).dtype(dt));
    mt::uniform_(uc, -3.0, 0.5, &gc);
    mt::uniform_(ug, -3.0, 0.5, &gg);
    expect_identical(ug, uc, "uniform_ " + n);
    EXPECT_EQ(gc.offset(), gg.offset());
  }
  for (DType dt : all_dtypes()) {
    mt::Generator gc(99), gg(99);
    const std::string n(mt::dtype_name(dt));
    Tensor bc = mt::empty(shape, dt), bg = mt::empty(shape, TensorOptions(kGpu).dtype(dt));
    mt::bernoulli_(bc, 0.3, &gc);
    mt::bernoulli_(bg, 0.3, &gg);
    expect_identical(bg, bc, "bernoulli_ " + n);
    if (dt == mt::kBool) continue;
    const int64_t hi = dt == mt::kUInt8 ? 200 : 1000;
    expect_identical(mt::randint(3, hi, shape, TensorOptions(kGpu).dtype(dt), &gg),
                     mt::randint(3, hi, shape, dt, &gc), "randint " + n);
  }
}

// Element i of the row-major order draws counter offset + i, whatever the output's strides.
TEST(Cuda, RandomOnStridedOutputMatchesCpu) {
  MT_REQUIRE_GPU();
  mt::Generator gc(7), gg(7);
  Tensor c = mt::empty({40, 30}).t(), g = mt::empty({40, 30}, kGpu).t();
  mt::uniform_(c, 0.0, 1.0, &gc);
  mt::uniform_(g, 0.0, 1.0, &gg);
  expect_identical(g, c, "uniform_ on a transposed view");
  mt::normal_(c, 1.0, 2.0, &gc);
  mt::normal_(g, 1.0, 2.0, &gg);
  expect_match(g, c, "normal_ on a transposed view");
}

// ---- the caching allocator --------------------------------------------------------------------
#if MANTISSA_CUDA

TEST(CudaAllocator, FreedBlocksAreReused) {
  MT_REQUIRE_GPU();
  mt::cuda::empty_cache();
  const auto s0 = mt::cuda::memory_stats(0);
  { Tensor t = mt::empty({1000}, kGpu); }  // 4000 B, rounded to 4096
  const auto s1 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s1.num_cuda_mallocs, s0.num_cuda_mallocs + 1);
  EXPECT_EQ(s1.cached_bytes, s0.cached_bytes + (2 << 20));  // a whole 2 MiB small segment
  { Tensor t = mt::empty({1010}, kGpu); }                   // 4040 B: the same rounded size
  { Tensor t = mt::empty({1000}, kGpu); }
  const auto s2 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s2.num_cuda_mallocs, s1.num_cuda_mallocs);
  EXPECT_EQ(s2.num_cache_hits, s1.num_cache_hits + 2);
  // Large blocks round to 2 MiB: 3 MiB and 3.5 MiB share a 4 MiB block.
  { Tensor t = mt::empty({3 << 20}, TensorOptions(kGpu).dtype(mt::kUInt8)); }
  const auto s3 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s3.num_cuda_mallocs, s2.num_cuda_mallocs + 1);
  EXPECT_EQ(s3.reserved_bytes, s2.reserved_bytes + (4 << 20));
  { Tensor t = mt::empty({7 << 19}, TensorOptions(kGpu).dtype(mt::kUInt8)); }
  EXPECT_EQ(mt::cuda::memory_stats(0).num_cuda_mallocs, s3.num_cuda_mallocs);
  // empty_cache returns every cached block.
  mt::cuda::empty_cache();
  const auto s4 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s4.cached_bytes, 0);
  EXPECT_EQ(s4.reserved_bytes, s4.allocated_bytes);
  EXPECT_EQ(s4.num_cuda_frees, s3.num_cuda_frees + 2);
}

TEST(CudaAllocator, StatsTrackLiveTensors) {
  MT_REQUIRE_GPU();
  const auto s0 = mt::cuda::memory_stats(0);
  mt::cuda::reset_peak_memory_stats(0);
  {
    Tensor t = mt::empty({100}, kGpu);  // 400 B requested, 512 B after rounding
    const auto s1 = mt::cuda::memory_stats(0);
    EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes + 512);
    EXPECT_EQ(s1.requested_bytes, s0.requested_bytes + 400);
    EXPECT_EQ(s1.num_allocations, s0.num_allocations + 1);
    EXPECT_GE(s1.reserved_bytes, s1.allocated_bytes);
    EXPECT_EQ(s1.peak_allocated_bytes, s1.allocated_bytes);
  }
  const auto s2 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(s2.requested_bytes, s0.requested_bytes);
  EXPECT_EQ(s2.peak_allocated_bytes, s0.allocated_bytes + 512);
  mt::cuda::reset_peak_memory_stats(0);
  EXPECT_EQ(mt::cuda::memory_stats(0).peak_allocated_bytes, s2.allocated_bytes);
  const int n = mt::cuda::device_count();
  expect_error([&] { mt::cuda::memory_stats(n); }, {"cuda:" + std::to_string(n), "requested"});
}

TEST(CudaAllocator, OutOfMemoryIsAClearError) {
  MT_REQUIRE_GPU();
  const auto before = mt::cuda::memory_stats(0);
  expect_error([] { mt::empty({int64_t{1} << 50}, TensorOptions(kGpu).dtype(mt::kUInt8)); },
               {"CUDA out of memory on cuda:0", "tried to allocate 1.00 PiB", "allocated",
                "reserved", "free of"});
  EXPECT_EQ(mt::cuda::memory_stats(0).num_oom_retries, before.num_oom_retries + 1);
  // The device is still usable afterwards.
  const Tensor x = mt::ones({8}, kGpu) * 3.0f;
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 3.0f));
}

#endif  // MANTISSA_CUDA

// Without a usable GPU (or in a CPU-only build) the allocator statistics say why they are
// unavailable, and emptying the cache is a harmless no-op.
TEST(CudaBuild, MemoryStatsWithoutDevice) {
  if (mt::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  expect_error([] { (void)mt::cuda::memory_stats(0); }, {"cuda:0"});
  EXPECT_NO_THROW(mt::cuda::empty_cache());
}

// The CUDA stack a result came from, in one line: with a device its name and compute capability;
// without one the reason, in the runtime's own words in a CUDA build. Runs on every machine.
TEST(CudaBuild, RuntimeInfoAndBannerSayWhatRanOrWhyNothingCould) {
  const mt::cuda::RuntimeInfo info = mt::cuda::runtime_info();
  const std::string banner = mt::cuda::runtime_banner();
  EXPECT_EQ(banner.find('\n'), std::string::npos) << banner;
  EXPECT_EQ(info.compiled, mt::cuda::is_compiled());
  EXPECT_EQ(info.device_count, mt::cuda::device_count());
  if (!info.compiled) {
    EXPECT_EQ(info.unavailable_reason, "CPU-only build");
    EXPECT_EQ(banner, "CUDA: no usable device (CPU-only build)");
    return;
  }
  // The libraries this build links answer without a device.
  EXPECT_GT(info.runtime_version, 0);
  EXPECT_GT(info.cublaslt_version, 0);
  EXPECT_GT(info.cudnn_version, 0);
  for (const char* part : {"| driver ", "| runtime ", "| cuBLASLt ", "| cuDNN ", "| NCCL "})
    EXPECT_NE(banner.find(part), std::string::npos) << banner << " lacks " << part;
  // The cuDNN loaded and the one built against, which can differ (a GPU machine's comes from its
  // PyTorch wheels), and whether the fused attention was built.
  EXPECT_GT(info.cudnn_build_version, 0);
  EXPECT_NE(
      banner.find(" (built against " + std::to_string(info.cudnn_build_version / 10000) + "."),
      std::string::npos)
      << banner;
  EXPECT_NE(banner.find(info.cudnn_frontend_version.empty()
                            ? std::string("fused attention: not built")
                            : "fused attention: frontend " + info.cudnn_frontend_version),
            std::string::npos)
      << banner;
  if (info.device_count > 0) {
    EXPECT_TRUE(info.unavailable_reason.empty()) << info.unavailable_reason;
    const mt::cuda::DeviceProperties p = mt::cuda::device_properties(0);
    EXPECT_EQ(
        banner.rfind(
            "CUDA: " + p.name + " (sm_" + std::to_string(p.major) + std::to_string(p.minor), 0),
        0u)
        << banner;
  } else {
    EXPECT_NE(info.unavailable_reason.find("cudaGetDeviceCount"), std::string::npos)
        << info.unavailable_reason;
    EXPECT_EQ(banner.rfind("CUDA: no usable device (cudaGetDeviceCount", 0), 0u) << banner;
  }
}
