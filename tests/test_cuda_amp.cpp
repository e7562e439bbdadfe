// The CUDA GradScaler kernels (kernels/cuda/amp_kernels.cu) against the CPU kernels: unscale
// must give the same bits for every floating dtype and layout (both multiply in opmath by the same
// float inv_scale and round once), detect a single inf/NaN anywhere in a large tensor, and the
// scale update must follow the CPU's sequence exactly. A small mixed-precision training loop on
// CUDA must track the same loop on the CPU. Every test skips without a GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/amp_kernel_tables.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::testing::all_dtypes;
using mt::testing::kGpu;
using mt::Device;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::TensorOptions;

namespace {

Tensor scalar_f32(float v, Device device) {
  return mt::full({}, v, TensorOptions(device).dtype(mt::kFloat32));
}
Tensor scalar_i32(int32_t v, Device device) {
  return mt::full({}, v, TensorOptions(device).dtype(mt::kInt32));
}

// The same buffer on both devices; the gradient is either all of it or a strided view of it
// (every other row, transposed), so elements outside the view must come back untouched.
struct Buffers {
  Tensor cpu_base, gpu_base, cpu, gpu;
  bool strided;
  Tensor view(const Tensor& t) const {
    return strided ? t.slice(1, 0, std::nullopt, 2).transpose(0, 1) : t;
  }
};
Buffers make_buffers(const Shape& shape, DType dt, bool strided) {
  Shape big = shape;
  if (strided) {
    std::swap(big[0], big[1]);
    big[1] *= 2;
  }
  Buffers b;
  b.strided = strided;
  b.cpu_base = mt::testing::random_tensor(big, dt, false, -3.0, 3.0);
  b.gpu_base = b.cpu_base.to(kGpu);
  b.cpu = b.view(b.cpu_base);
  b.gpu = b.view(b.gpu_base);
  EXPECT_EQ(b.cpu.shape(), shape);
  EXPECT_EQ(b.cpu.is_contiguous(), !strided);
  return b;
}

void expect_same_values(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const auto g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  ASSERT_EQ(g.size(), c.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(g[i] == c[i] || (std::isnan(g[i]) && std::isnan(c[i])))) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << c[i];
      return;
    }
  }
}

std::string label(DType dt, bool strided) {
  return std::string(mt::dtype_name(dt)) + (strided ? " strided" : " contiguous");
}

}  // namespace

TEST(CudaAmp, UnscaleMatchesCpu) {
  MT_REQUIRE_GPU();
  for (DType dt : mt::testing::floating_dtypes()) {
    for (bool strided : {false, true}) {
      const std::string what = label(dt, strided);
      Buffers b = make_buffers({37, 53}, dt, strided);
      const Tensor original = b.cpu_base.to(mt::kFloat64).clone();  // to() may alias
      // 1/3 is inexact: any difference in how the product is formed or rounded shows up.
      const float inv = 1.0f / 3.0f;
      const Tensor found_c = scalar_f32(0, Device::cpu()), found_g = scalar_f32(0, kGpu);
      mt::amp_unscale_kernel(Device::cpu())({b.cpu}, found_c, scalar_f32(inv, Device::cpu()));
      mt::amp_unscale_kernel(kGpu)({b.gpu}, found_g, scalar_f32(inv, kGpu));
      expect_same_values(b.gpu_base, b.cpu_base, what);
      EXPECT_EQ(found_g.item<float>(), 0.0f) << what;
      // Independently: the view holds original * inv rounded once, the rest is untouched.
      mt::testing::expect_close(b.gpu.cpu(), b.view(original) * static_cast<double>(inv), what);
      const Tensor changed = b.gpu_base.cpu().to(mt::kFloat64) - original;
      b.view(changed).fill_(0.0);  // what remains lies outside the view: it must be zero
      mt::testing::expect_close(changed, mt::zeros_like(changed), 0.0, 0.0, what + " outside");
    }
  }
}

TEST(CudaAmp, UnscaleManyTensorsOfMixedDtypesAndLayouts) {
  MT_REQUIRE_GPU();
  // More tensors than one multi-tensor launch carries, of every dtype, some strided, some empty.
  std::vector<Buffers> bufs;
  std::vector<Tensor> cpu, gpu;
  for (int i = 0; i < 75; ++i) {
    const DType dt = mt::testing::floating_dtypes()[i % 4];
    const bool strided = i % 5 == 0;
    const int64_t rows = i % 7 == 0 ? 0 : 1 + i % 6;
    bufs.push_back(make_buffers({rows == 0 && strided ? 1 : rows, 3 + 97 * (i % 3)}, dt, strided));
    cpu.push_back(bufs.back().cpu);
    gpu.push_back(bufs.back().gpu);
  }
  const Tensor found_c = scalar_f32(0, Device::cpu()), found_g = scalar_f32(0, kGpu);
  mt::amp_unscale_kernel(Device::cpu())(cpu, found_c, scalar_f32(0.125f, Device::cpu()));
  mt::amp_unscale_kernel(kGpu)(gpu, found_g, scalar_f32(0.125f, kGpu));
  for (size_t i = 0; i < bufs.size(); ++i)
    expect_same_values(bufs[i].gpu_base, bufs[i].cpu_base, "tensor " + std::to_string(i));
  EXPECT_EQ(found_g.item<float>(), 0.0f);
}

TEST(CudaAmp, FindsOneNonFiniteAnywhereInALargeTensor) {
  MT_REQUIRE_GPU();
  const int64_t rows = 1031, cols = 1029;  // > 1M elements: many blocks, grid-stride iterations
  const double specials[] = {std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64}) {
    for (bool strided : {false, true}) {
      for (int64_t pos : {int64_t{0}, rows * cols / 2 + 7, rows * cols - 1}) {
        for (double special : specials) {
          Buffers b = make_buffers({rows, cols}, dt, strided);
          const int64_t r = pos / cols, c = pos % cols;
          b.gpu.select(0, r).select(0, c).fill_(special);
          // A clean tensor in the same call must not hide (or fake) the detection.
          Buffers clean = make_buffers({3, 5}, dt, false);
          const Tensor found = scalar_f32(0, kGpu);
          mt::amp_unscale_kernel(kGpu)({clean.gpu, b.gpu}, found, scalar_f32(0.5f, kGpu));
          EXPECT_EQ(found.item<float>(), 1.0f)
              << label(dt, strided) << " non-finite " << special << " at " << pos;
        }
      }
      Buffers b = make_buffers({rows, cols}, dt, strided);
      const Tensor found = scalar_f32(0, kGpu);
      mt::amp_unscale_kernel(kGpu)({b.gpu}, found, scalar_f32(0.5f, kGpu));
      EXPECT_EQ(found.item<float>(), 0.0f) << label(dt, strided) << " clean";
    }
  }
}

TEST(CudaAmp, FoundInfIsNeverCleared) {
  MT_REQUIRE_GPU();
  const Tensor found = scalar_f32(1.0f, kGpu);
  Buffers b = make_buffers({4, 4}, mt::kFloat32, false);
  mt::amp_unscale_kernel(kGpu)({b.gpu}, found, scalar_f32(1.0f, kGpu));
  EXPECT_EQ(found.item<float>(), 1.0f);
}

namespace {

struct ScaleState {
  Tensor scale, tracker, streak;
  ScaleState(float s, Device d)
      : scale(scalar_f32(s, d)), tracker(scalar_i32(0, d)), streak(scalar_i32(0, d)) {}
  void update(bool overflow, const mt::AmpUpdateParams& p) {
    const Device d = scale.device();
    mt::amp_update_scale_kernel(d)(scale, tracker, streak, scalar_f32(overflow ? 1.0f : 0.0f, d),
                                   p);
  }
};

}  // namespace

TEST(CudaAmp, UpdateScaleSequence) {
  MT_REQUIRE_GPU();
  const mt::AmpUpdateParams p{.growth_factor = 2.0,
                              .backoff_factor = 0.25,
                              .growth_interval = 2,
                              .min_scale = 0.0,
                              .hysteresis = 1};
  ScaleState gpu(4.0f, kGpu);
  const struct {
    bool overflow;
    float scale;
    int32_t tracker;
  } expected[] = {{false, 4, 1}, {false, 8, 0}, {true, 2, 0}};
  for (const auto& e : expected) {
    gpu.update(e.overflow, p);
    EXPECT_EQ(gpu.scale.item<float>(), e.scale);
    EXPECT_EQ(gpu.tracker.item<int32_t>(), e.tracker);
  }
}

TEST(CudaAmp, UpdateScaleFollowsCpuWithFloorHysteresisAndGrowthLimit) {
  MT_REQUIRE_GPU();
  const mt::AmpUpdateParams params[] = {
      {.growth_factor = 2.0,
       .backoff_factor = 0.5,
       .growth_interval = 3,
       .min_scale = 0.0,
       .hysteresis = 1},
      {.growth_factor = 3.0,
       .backoff_factor = 0.1,
       .growth_interval = 1,
       .min_scale = 0.7,
       .hysteresis = 2},
      {.growth_factor = 16.0,
       .backoff_factor = 0.3,
       .growth_interval = 1,
       .min_scale = 0.0,
       .hysteresis = 3},
  };
  const float inits[] = {65536.0f, 3.0f, 1e37f};
  // A fixed pattern of overflows: runs of one, two and three, separated by clean steps.
  const bool pattern[] = {false, true, false, false, true,  true,  false, true,
                          true,  true, false, false, false, true,  false, true,
                          true,  true, true,  false, false, false, false, true};
  for (int k = 0; k < 3; ++k) {
    ScaleState cpu(inits[k], Device::cpu()), gpu(inits[k], kGpu);
    for (size_t i = 0; i < std::size(pattern); ++i) {
      cpu.update(pattern[i], params[k]);
      gpu.update(pattern[i], params[k]);
      const std::string what = "params " + std::to_string(k) + " step " + std::to_string(i);
      EXPECT_EQ(gpu.scale.item<float>(), cpu.scale.item<float>()) << what;
      EXPECT_EQ(gpu.tracker.item<int32_t>(), cpu.tracker.item<int32_t>()) << what;
      EXPECT_EQ(gpu.streak.item<int32_t>(), cpu.streak.item<int32_t>()) << what;
    }
    EXPECT_TRUE(std::isfinite(gpu.scale.item<float>()));
  }
}

namespace {

struct Mlp : mt::nn::Module {
  mt::nn::Linear net1{nullptr}, net2{nullptr};
  mt::nn::ReLU relu;
  Mlp() : mt::nn::Module("Mlp") {
    net1 = register_module("net1", mt::nn::Linear(16, 32));
    relu = register_module("relu", mt::nn::ReLU());
    net2 = register_module("net2", mt::nn::Linear(32, 4));
  }
  Tensor forward(const Tensor& x) { return net2(relu(net1(x))); }
};

}  // namespace

TEST(CudaAmp, GradScalerTrainingLoopFollowsTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(0);
  auto cpu_model = std::make_shared<Mlp>();
  mt::manual_seed(0);
  auto gpu_model = std::make_shared<Mlp>();
  gpu_model->to(kGpu);
  mt::optim::SGD cpu_opt(cpu_model->parameters(), 0.05);
  mt::optim::SGD gpu_opt(gpu_model->parameters(), 0.05);
  const mt::amp::GradScalerOptions opts{.init_scale = 1024.0, .growth_interval = 3};
  mt::amp::GradScaler cpu_scaler(opts), gpu_scaler(opts);
  mt::nn::MSELoss loss_fn;
  for (int step = 0; step < 12; ++step) {
    const Tensor x = mt::randn({24, 16}), y = mt::randn({24, 4});
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    Tensor lc, lg;
    {
      mt::amp::autocast ac(mt::DeviceType::CPU, mt::kFloat16);
      lc = loss_fn(cpu_model->forward(x), y);
    }
    {
      mt::amp::autocast ac(mt::DeviceType::CUDA, mt::kFloat16);
      lg = loss_fn(gpu_model->forward(x.to(kGpu)), y.to(kGpu));
    }
    ASSERT_TRUE(lg.is_cuda());
    cpu_scaler.scale(lc).backward();
    gpu_scaler.scale(lg).backward();
    EXPECT_EQ(gpu_scaler.step(gpu_opt), cpu_scaler.step(cpu_opt)) << "step " << step;
    cpu_scaler.update();
    gpu_scaler.update();
    EXPECT_EQ(gpu_scaler.get_scale(), cpu_scaler.get_scale()) << "step " << step;
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-2 * std::fabs(lc.item<double>()))
        << "step " << step;
  }
  EXPECT_EQ(gpu_scaler.steps_taken(), cpu_scaler.steps_taken());
  EXPECT_EQ(gpu_scaler.get_scale(), 1024.0 * 16);  // 12 clean steps, growth every 3
}
