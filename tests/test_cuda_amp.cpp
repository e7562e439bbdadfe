// The CUDA GradScaler kernels (kernels/cuda/amp_kernels.cu) against the CPU kernels: unscale
// must give the same bits for every floating dtype and layout (both multiply in opmath by the same
// float inv_scale and round once), detect a single inf/NaN anywhere in a large tensor, and the
// scale update must follow the CPU's sequence exactly. A small mixed-precision training loop on
// CUDA must track the same loop on the CPU. The fused multi-tensor SGD/Adam/AdamW steps must follow
// the CPU (SGD bit for bit), skip on the device when found_inf is set, and an AMP step (unscale,
// step, update; and with forward/backward) must not wait for the GPU, shown with a HeldStream that
// holds the stream while the host queues the step, and by capturing the step into a CUDA graph.
// Every test skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "engine/amp_kernel_tables.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Device;
using mt::DType;
using mt::Shape;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::all_dtypes;
using mt::testing::kGpu;

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

using Mlp = mt::testing::ToyModel;
const mt::testing::ToyModelOptions kMlp{.in = 16, .hidden = 32, .out = 4, .name = "Mlp"};

}  // namespace

TEST(CudaAmp, GradScalerTrainingLoopFollowsTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(0);
  auto cpu_model = std::make_shared<Mlp>(kMlp);
  mt::manual_seed(0);
  auto gpu_model = std::make_shared<Mlp>(kMlp);
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

// ---- fused multi-tensor optimizer steps and the sync-free AMP step --------------------------

namespace {

struct OptCase {
  std::string name;
  std::function<std::unique_ptr<mt::optim::Optimizer>(std::vector<Tensor>)> make;
  bool bitwise;  // Adam's bias correction uses the device's pow: equal up to its last bit
};

std::vector<OptCase> opt_cases() {
  using namespace mt::optim;
  return {
      {"sgd momentum dampening wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(std::move(p), 0.05, SGDOptions{0.9, 0.3, 0.01});
       },
       true},
      {"sgd nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(std::move(p), 0.05,
                                      SGDOptions{.momentum = 0.8, .nesterov = true});
       },
       true},
      {"adam amsgrad wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<Adam>(
             std::move(p), AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
       },
       false},
      {"adamw",
       [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(std::move(p), AdamWOptions{.lr = 0.01});
       },
       false},
  };
}

// Many parameters of mixed sizes: more than one launch's worth of tensors (24) and one parameter
// larger than a launch's worth of chunks (320 x 4096 elements), so lists continue across launches.
std::vector<Shape> many_shapes() {
  std::vector<Shape> shapes;
  for (int k = 0; k < 30; ++k) shapes.push_back({k % 5 + 1, 3 * k + 1});
  shapes.push_back({320 * 4096 + 17});
  shapes.push_back({0});
  return shapes;
}

}  // namespace

TEST(CudaFusedOptim, MultiTensorStepFollowsTheCpu) {
  MT_REQUIRE_GPU();
  for (const DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    for (const bool master : {false, true}) {
      if (master && dt == mt::kFloat32) continue;
      for (const OptCase& c : opt_cases()) {
        const std::string what =
            c.name + " " + std::string(mt::dtype_name(dt)) + (master ? " master" : "");
        std::vector<Tensor> cpu, gpu;
        for (const Shape& s : many_shapes()) {
          Tensor t = mt::testing::random_tensor(s, dt, false);
          gpu.push_back(t.to(kGpu).requires_grad_());
          cpu.push_back(t.requires_grad_());
        }
        auto oc = c.make(cpu), og = c.make(gpu);
        oc->set_master_weights(master);
        og->set_master_weights(master);
        for (int step = 0; step < 3; ++step) {
          for (size_t k = 0; k < cpu.size(); ++k) {
            Tensor g = mt::testing::random_tensor(cpu[k].shape(), dt, false);
            cpu[k].set_grad(g);
            gpu[k].set_grad(g.to(kGpu));
          }
          oc->step();
          og->step();
        }
        for (size_t k = 0; k < cpu.size(); ++k) {
          if (c.bitwise) {
            expect_same_values(gpu[k], cpu[k], what + " param " + std::to_string(k));
          } else {
            // A last-bit difference in the step size can flip one rounding of a half value.
            const auto tol = mt::testing::tolerance_for(dt);
            mt::testing::expect_close(gpu[k].to(Device::cpu()), cpu[k], std::max(1e-5, tol.rtol),
                                      std::max(1e-6, tol.atol),
                                      what + " param " + std::to_string(k));
          }
          EXPECT_EQ(og->state(k)->step, oc->state(k)->step) << what;
        }
      }
    }
  }
}

TEST(CudaFusedOptim, FoundInfSkipsOnTheDevice) {
  MT_REQUIRE_GPU();
  for (const OptCase& c : opt_cases()) {
    std::vector<Tensor> ps;
    for (const Shape& s : many_shapes()) {
      ps.push_back(mt::testing::random_tensor(s, mt::kFloat16, false).to(kGpu).requires_grad_());
    }
    auto opt = c.make(ps);
    opt->set_master_weights(true);
    auto set_grads = [&] {
      for (Tensor& p : ps)
        p.set_grad(mt::testing::random_tensor(p.shape(), mt::kFloat16, false).to(kGpu));
    };
    set_grads();
    opt->step();
    std::vector<Tensor> before;
    for (const Tensor& p : ps) before.push_back(p.detach().clone());
    const auto state_before = opt->state_dict();
    std::map<int64_t, std::map<std::string, Tensor>> buffers;
    for (const auto& [id, s] : state_before.state) {
      for (const auto& [key, t] : s.buffers) buffers[id][key] = t.clone();
    }
    set_grads();
    opt->step_if_finite(scalar_f32(1.0f, kGpu));
    EXPECT_TRUE(opt->last_step_skipped()) << c.name;
    for (size_t k = 0; k < ps.size(); ++k) expect_same_values(ps[k], before[k], c.name);
    const auto state_after = opt->state_dict();
    for (const auto& [id, s] : state_after.state) {
      EXPECT_EQ(s.step, state_before.state.at(id).step) << c.name;
      for (const auto& [key, t] : s.buffers)
        expect_same_values(t, buffers.at(id).at(key), c.name + " " + key);
    }
  }
}

namespace {

// One AMP step with the stream held by a gate: the host must get through it without waiting for
// the GPU (a sync would block until the gate times out).
void expect_step_without_host_sync(bool include_forward) {
  mt::manual_seed(0);
  auto model = std::make_shared<Mlp>(kMlp);
  model->to(kGpu);
  mt::optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions{.init_scale = 1024.0});
  mt::nn::MSELoss loss_fn;
  const Tensor x = mt::randn({24, 16}).to(kGpu), y = mt::randn({24, 4}).to(kGpu);
  auto forward_backward = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      mt::amp::autocast ac(mt::DeviceType::CUDA, mt::kFloat16);
      loss = loss_fn(model->forward(x), y);
    }
    scaler.scale(loss).backward();
  };
  for (int warm = 0; warm < 3; ++warm) {  // fills the caching allocator and the lazy state
    forward_backward();
    (void)scaler.step(opt);
    scaler.update();
  }
  EXPECT_GT(scaler.steps_taken(), 0);  // a sync, before the gate
  if (!include_forward) forward_backward();
  mt::testing::HeldStream gate(mt::cuda::current_stream(0));
  if (include_forward) forward_backward();
  const mt::amp::StepResult stepped = scaler.step(opt);
  scaler.update();
  gate.release();
  EXPECT_TRUE(stepped.stepped());  // the optional sync, after the gate opened
  EXPECT_FALSE(gate.timed_out()) << "the host waited for the GPU inside the step"
                                 << (include_forward ? " (with forward)" : "");
}

}  // namespace

TEST(CudaFusedOptim, UnscaleStepAndUpdateNeedNoHostSync) {
  MT_REQUIRE_GPU();
  expect_step_without_host_sync(/*include_forward=*/false);
}

TEST(CudaFusedOptim, FullAmpTrainingStepNeedsNoHostSync) {
  MT_REQUIRE_GPU();
  expect_step_without_host_sync(/*include_forward=*/true);
}

TEST(CudaFusedOptim, AmpStepCapturesIntoACudaGraphAndReplaysLikeEagerSteps) {
  MT_REQUIRE_GPU();
  // A capture throws on any host sync, so capturing scale/backward/step/update proves the step is
  // sync-free; the replays (device-side found_inf, scale and Adam step counts) must then follow
  // an eager twin exactly.
  mt::manual_seed(0);
  auto eager_model = std::make_shared<Mlp>(kMlp);
  mt::manual_seed(0);
  auto graph_model = std::make_shared<Mlp>(kMlp);
  eager_model->to(kGpu);
  graph_model->to(kGpu);
  mt::optim::AdamW eager_opt(eager_model->parameters(), {.lr = 1e-3});
  mt::optim::AdamW graph_opt(graph_model->parameters(), {.lr = 1e-3});
  const mt::amp::GradScalerOptions so{.init_scale = 1024.0, .growth_interval = 2};
  mt::amp::GradScaler eager_scaler(so), graph_scaler(so);
  mt::nn::MSELoss loss_fn;
  const Tensor x = mt::randn({24, 16}).to(kGpu), y = mt::randn({24, 4}).to(kGpu);
  auto step = [&](Mlp& model, mt::optim::Optimizer& opt, mt::amp::GradScaler& scaler) {
    opt.zero_grad(/*set_to_none=*/false);
    Tensor loss;
    {
      mt::amp::autocast ac(mt::DeviceType::CUDA, mt::kFloat16);
      loss = loss_fn(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    (void)scaler.step(opt);  // not read: reading it would sync
    scaler.update();
  };
  mt::cuda::GraphedStep graphed([&] { step(*graph_model, graph_opt, graph_scaler); },
                                /*warmup_steps=*/3);
  for (int k = 0; k < 7; ++k) {
    step(*eager_model, eager_opt, eager_scaler);
    graphed();
  }
  EXPECT_TRUE(graphed.captured());
  const auto pe = eager_model->parameters(), pg = graph_model->parameters();
  ASSERT_EQ(pe.size(), pg.size());
  for (size_t k = 0; k < pe.size(); ++k) {
    expect_same_values(pg[k], pe[k].to(kGpu), "param " + std::to_string(k));
  }
  EXPECT_EQ(graph_scaler.get_scale(), eager_scaler.get_scale());
  EXPECT_EQ(graph_opt.state(0)->step, eager_opt.state(0)->step);  // counted on the device
  EXPECT_EQ(graph_scaler.steps_taken(), 7);  // replays count: the counters live on the device
  EXPECT_EQ(graph_scaler.steps_taken(), eager_scaler.steps_taken());
}
