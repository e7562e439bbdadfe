// The foundation's error messages: each names the op and shows the offending shapes, dtypes or
// devices. Also the log level switch (set_log_level and MANTISSA_LOG_LEVEL).
#include <cstdlib>
#include <memory>

#include "engine/kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

// A tensor that claims to live on `device` but wraps host memory. Only good for reaching the
// checks that run before any kernel, which is how an op mixing devices must fail.
Tensor fake_tensor_on(mt::Device device, const Shape& shape, std::vector<float>& host) {
  host.assign(static_cast<size_t>(shape.numel()), 0.0f);
  auto impl = std::make_shared<mt::TensorImpl>();
  impl->storage = std::make_shared<mt::StorageImpl>(host.data(), host.size() * sizeof(float),
                                                    device, std::function<void(void*)>());
  impl->sizes = shape;
  impl->strides = mt::contiguous_strides(shape);
  impl->dtype = mt::kFloat32;
  impl->refresh_contiguous();
  return Tensor(std::move(impl));
}

}  // namespace

TEST(Errors, MatmulNamesOpAndShapes) {
  const Tensor a = mt::ones({20, 10}), b = mt::ones({5, 10});
  expect_error([&] { mt::mm(a, b); }, {"mm", "[20, 10]", "[5, 10]"});
  expect_error([&] { a.mm(b); }, {"mm", "[20, 10]", "[5, 10]"});
  expect_error([&] { mt::matmul(a, b); }, {"matmul", "[20, 10]", "[5, 10]"});
}

TEST(Errors, DeviceMismatchNamesBothDevices) {
  std::vector<float> host;
  const Tensor gpu = fake_tensor_on(mt::Device::cuda(0), {3}, host);
  const Tensor cpu = mt::ones({3});
  const std::vector<std::string> want = {"expected all tensors to be on the same device", "cpu",
                                         "cuda:0"};
  expect_error([&] { cpu + gpu; }, want);
  expect_error([&] { gpu* cpu; }, want);
  expect_error([&] { mt::maximum(cpu, gpu); }, want);
  expect_error([&] { (void)(cpu < gpu); }, want);
  expect_error([&] { mt::where(cpu > 0.0, cpu, gpu); }, want);
  Tensor self = mt::zeros({3});
  expect_error([&] { self.add_(gpu); }, want);
  expect_error([&] { self.mul_(gpu); }, want);
  expect_error([&] { cpu + gpu; }, {"(op: add)"});
  expect_error([&] { gpu* cpu; }, {"(op: mul)", "found cuda:0 and cpu"});
}

TEST(Errors, MissingCudaDevice) {
  const int n = mt::cuda::device_count();
  if (!mt::cuda::is_compiled()) {
    const std::vector<std::string> want = {"device cuda:0 requested", "no CUDA support"};
    expect_error([] { mt::zeros({2}, mt::Device::cuda(0)); }, want);
    expect_error([] { mt::empty({2}, mt::Device("cuda")); }, want);
    expect_error([] { mt::ones({2}).to(mt::Device::cuda(0)); }, {"cuda:0", "no CUDA support"});
    expect_error([] { mt::ones({2}).cuda(); }, {"no CUDA support"});
    expect_error([] { mt::check_device_exists(mt::Device::cuda(3)); },
                 {"device cuda:3 requested", "no CUDA support"});
  } else if (n == 0) {
    expect_error([] { mt::zeros({2}, mt::Device::cuda(0)); },
                 {"device cuda:0 requested", "has 0 CUDA devices"});
  }
  if (mt::cuda::is_compiled()) {
    const std::string count = "has " + std::to_string(n) + " CUDA device";
    expect_error([&] { mt::zeros({2}, mt::Device::cuda(n)); },
                 {"device cuda:" + std::to_string(n) + " requested", count});
    if (n > 0 && n <= 3) {
      expect_error([] { mt::ones({1}, mt::Device("cuda:3")); },
                   {"cuda:3", count, "valid: cuda:0 to cuda:" + std::to_string(n - 1)});
    }
  }
  mt::check_device_exists(mt::Device::cpu());  // never throws
}

TEST(Errors, UndefinedTensor) {
  const Tensor u;
  EXPECT_FALSE(u.defined());
  const std::vector<std::string> want = {"undefined tensor"};
  expect_error([&] { u.shape(); }, want);
  expect_error([&] { u.numel(); }, want);
  expect_error([&] { u.dtype(); }, want);
  expect_error([&] { u + mt::ones({1}); }, want);
  expect_error([&] { mt::exp(u); }, want);
  expect_error([&] { u.item<float>(); }, {"item"});
  expect_error([&] { u.to_vector<float>(); }, want);
  EXPECT_EQ(u.str(), "[ undefined Tensor ]");
}

TEST(Errors, ItemOnManyElements) {
  expect_error(
      [] {
        mt::ones({2, 3}).item<float>();
      },
      {"item", "6 elements cannot be converted to a scalar", "[2, 3]"});
  expect_error([] { mt::zeros({0}).item<double>(); }, {"item", "0 elements"});
  EXPECT_EQ(mt::ones({1, 1}).item<float>(), 1.0f);
}

TEST(Errors, DataWithWrongType) {
  const Tensor t = mt::ones({2});
  EXPECT_NE(t.data<float>(), nullptr);
  expect_error([&] { t.data<double>(); }, {"data<T>", "requested float64", "dtype float32"});
  expect_error([&] { mt::ones({2}, mt::kInt64).data<int32_t>(); }, {"int32", "int64"});
  expect_error([&] { mt::ones({2}, mt::kFloat16).data<mt::BFloat16>(); }, {"bfloat16", "float16"});
}

TEST(Errors, KernelForUnsupportedDtype) {
  expect_error([] { mt::gelu(mt::ones({2}, mt::kInt32)); },
               {"op gelu not implemented for dtype int32 on device cpu"});
  expect_error([] { mt::abs(mt::ones({2}, mt::kBool)); },
               {"op abs not implemented for dtype bool on device cpu"});
  // Straight through the dispatcher.
  expect_error(
      [] {
        mt::dispatch_dtype<mt::kFloatingTypes>(mt::kUInt8, "myop", mt::Device::cpu(), [](auto) {});
      },
      {"op myop not implemented for dtype uint8 on device cpu"});
  // A table with no kernel for a device type.
  mt::KernelTable<mt::UnaryKernel> empty_table{"nothing"};
  expect_error([&] { empty_table(mt::kCUDA); }, {"op nothing has no kernel for device type cuda"});
}

TEST(Errors, ParseDtype) {
  EXPECT_EQ(mt::parse_dtype("float32"), mt::kFloat32);
  EXPECT_EQ(mt::parse_dtype("bf16"), mt::kBFloat16);
  EXPECT_EQ(mt::parse_dtype("half"), mt::kFloat16);
  EXPECT_EQ(mt::parse_dtype("double"), mt::kFloat64);
  EXPECT_EQ(mt::parse_dtype("long"), mt::kInt64);
  EXPECT_EQ(mt::parse_dtype("int"), mt::kInt32);
  EXPECT_EQ(mt::parse_dtype("bool"), mt::kBool);
  for (int i = 0; i < mt::kNumDTypes; ++i)
    EXPECT_EQ(mt::parse_dtype(mt::dtype_name(mt::DType(i))), mt::DType(i));
  expect_error([] { mt::parse_dtype("float8"); },
               {"unknown dtype 'float8'", "float32", "bfloat16"});
  expect_error([] { mt::parse_dtype("Float32"); }, {"unknown dtype 'Float32'"});
  expect_error([] { mt::parse_dtype(""); }, {"unknown dtype ''"});
}

TEST(Errors, ShapeAndDimChecks) {
  const Tensor x = mt::ones({2, 3});
  expect_error([&] { x.size(2); }, {"size", "dimension out of range", "[-2, 1]", "got 2"});
  expect_error([] { mt::zeros(Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}); }, {"at most 8 dimensions"});
  expect_error([] { mt::ones({2}, mt::kInt64).requires_grad_(true); },
               {"requires_grad_", "floating point", "int64"});
  expect_error([&] { x.transpose(0, -3); }, {"transpose", "dimension out of range", "got -3"});
}

TEST(Logging, SetLogLevel) {
  const auto before = mt::log().level();
  expect_error([] { mt::set_log_level("bogus"); }, {"unknown log level 'bogus'", "debug"});
  EXPECT_EQ(mt::log().level(), before) << "a bad level leaves the level unchanged";
  mt::set_log_level("debug");
  EXPECT_EQ(mt::log().level(), spdlog::level::debug);
  mt::set_log_level("off");
  EXPECT_EQ(mt::log().level(), spdlog::level::off);
  mt::set_log_level(spdlog::level::err);
  EXPECT_EQ(mt::log().level(), spdlog::level::err);
  EXPECT_EQ(mt::log().name(), "mantissa");
  mt::set_log_level(before);
}

// MANTISSA_LOG_LEVEL is read when the logger is first used, so these run in a fresh process
// (death tests in "threadsafe" style re-execute the binary).
TEST(Logging, EnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MANTISSA_LOG_LEVEL", "debug", 1);
        std::exit(mt::log().level() == spdlog::level::debug ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("MANTISSA_LOG_LEVEL");
        std::exit(mt::log().level() == spdlog::level::warn ? 0 : 1);  // the default
      },
      ::testing::ExitedWithCode(0), "");
  // An unknown value is ignored with a warning, not an error.
  EXPECT_EXIT(
      {
        setenv("MANTISSA_LOG_LEVEL", "loud", 1);
        std::exit(mt::log().level() == spdlog::level::warn ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "ignoring MANTISSA_LOG_LEVEL.*unknown log level 'loud'");
}
