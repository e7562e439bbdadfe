// nn::DistributedDataParallel in one process, on a Gloo group of one (bucket layout, forward
// functions, errors), the device-layout rule, NCCL with world size 1 on a GPU, and ZeRO stages 1
// and 2 on a group of one (bfloat16 Adam state with stochastic rounding, clipping): on the CPU
// equal to the plain optimizer, and on a GPU over NCCL against the CPU's result.
#include <algorithm>
#include <filesystem>

#include "ddp_test_util.h"
#include "distributed/reducer.h"
#include "distributed/zero.h"
#include "engine/precision.h"
#include "nn/clip_grad.h"
#include "nn/optim/adam.h"

namespace {

using namespace mantissa::testing::ddp;

// In-process, on a group of one.
class DdpSingle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::is_available(dist::Backend::Gloo))
      GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
    dir_ = std::filesystem::temp_directory_path() /
           ("mantissa-test-ddp-single-" + std::to_string(getpid()));
    dist::InitOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.store_path = dir_.string();
    o.timeout = std::chrono::seconds(10);
    pg_ = dist::init_process_group(o);
  }
  void TearDown() override {
    pg_.reset();
    dist::destroy_process_group();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::shared_ptr<dist::ProcessGroup> pg_;
};

TEST_F(DdpSingle, DefaultBucketSizes) {
  struct Wide : nn::Module {
    nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
    Wide() {
      a = register_module("a", nn::Linear(512, 512));  // 1 MiB of float32 weight
      b = register_module("b", nn::Linear(512, 512));
      c = register_module("c", nn::Linear(512, 512));
    }
    Tensor forward(const Tensor& x) { return c(b(a(x))); }
  };
  // As PyTorch: one bucket until the rebuild, then 1 MiB first and 25 MiB after, in the order
  // the gradients became ready (c's first).
  auto wide = std::make_shared<Wide>();
  nn::DistributedDataParallel ddp(wide, pg_);
  const std::vector<std::string> all = {"c.bias",   "c.weight", "b.bias",
                                        "b.weight", "a.bias",   "a.weight"};
  EXPECT_EQ(ddp.bucket_parameter_names(), std::vector<std::vector<std::string>>{all});
  const Tensor x = mt::ones({2, 512});
  ddp(x).sum().backward();
  (void)ddp(x);
  ASSERT_TRUE(ddp.buckets_rebuilt());
  auto buckets = ddp.bucket_parameter_names();
  ASSERT_GE(buckets.size(), 2u);
  for (const auto& name : buckets[0]) EXPECT_EQ(name[0], 'c') << name;  // 1 MiB: c.weight
  EXPECT_NE(std::find(buckets[0].begin(), buckets[0].end(), "c.weight"), buckets[0].end());
  EXPECT_NE(std::find(buckets.back().begin(), buckets.back().end(), "a.weight"),
            buckets.back().end());
  // find_unused_parameters: those sizes from the start, never rebuilt.
  nn::DistributedDataParallel::Options o;
  o.find_unused_parameters = true;
  nn::DistributedDataParallel unused(std::make_shared<Wide>(), pg_, o);
  buckets = unused.bucket_parameter_names();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<std::string>{"c.bias", "c.weight"}));
  EXPECT_EQ(buckets[1], (std::vector<std::string>{"b.bias", "b.weight", "a.bias", "a.weight"}));
}

TEST_F(DdpSingle, ForwardFunctionsAndErrors) {
  auto net = make_net(0);
  // A holder: operator() calls its forward.
  nn::DistributedDataParallel holder(nn::Linear(6, 3), pg_);
  EXPECT_EQ(holder(inputs(0, 0, 2)).shape(), (mt::Shape{2, 3}));
  // A plain Module: forward(run), or operator() once given a forward function.
  nn::DistributedDataParallel plain(std::shared_ptr<nn::Module>(net), pg_);
  mt::testing::expect_error([&] { (void)plain(inputs(0, 0, 2)); }, {"without a forward function"});
  Tensor out = plain.forward([&] { return net->forward(inputs(0, 0, 2)); });
  loss_of(out, targets(0, 0, 2)).backward();
  EXPECT_EQ(plain.num_iterations(), 1);
  auto fn = plain.forward_fn();
  mt::testing::expect_error([&] { (void)fn(inputs(0, 0, 2)); }, {"without a forward function"});
  // A typed module: operator() calls Net::forward.
  auto net2 = make_net(0);
  nn::DistributedDataParallel typed(net2, pg_);
  EXPECT_EQ(typed(inputs(0, 0, 2)).shape(), (mt::Shape{2, 3}));
  mt::testing::expect_error(
      [&] {
        nn::DistributedDataParallel::Options o;
        o.bucket_cap_mb = 0;
        nn::DistributedDataParallel bad(make_net(0), pg_, o);
      },
      {"bucket_cap_mb and first_bucket_mb must be positive"});
}
// A backward that throws after DDP's hooks began the iteration: the next forward reports it, as
// PyTorch's "Expected to have finished reduction in the prior iteration", naming the rank; the
// one after that starts afresh and reduces normally.
TEST_F(DdpSingle, ABackwardThatThrowsIsReportedAtTheNextForward) {
  auto net = make_net(0);
  auto ref = make_net(0);
  nn::DistributedDataParallel ddp(net, pg_);
  bool boom = true;
  net->fc2->bias.register_post_accumulate_grad_hook([&](const Tensor&) {
    if (boom) MT_THROW("user hook failed");
  });
  EXPECT_THROW(loss_of(ddp(inputs(0, 0, 2)), targets(0, 0, 2)).backward(), mt::Error);
  boom = false;
  mt::testing::expect_error(
      [&] { (void)ddp(inputs(1, 0, 2)); },
      {"expected to have finished reduction", "Rank 0's previous backward", "never finished"});
  net->zero_grad();
  loss_of(ddp(inputs(2, 0, 2)), targets(2, 0, 2)).backward();
  loss_of(ref->forward(inputs(2, 0, 2)), targets(2, 0, 2)).backward();
  const auto got = net->parameters(), want = ref->parameters();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(bitwise_equal(got[i].grad().to_vector<float>(), want[i].grad().to_vector<float>()))
        << "parameter " << i;
  EXPECT_EQ(ddp.num_iterations(), 1);
}

// Device layouts DDP cannot reduce are refused at construction (a GPU is not needed to check
// the rule itself).
TEST(DdpDevices, LayoutsThatCannotBeReducedAreRejected) {
  using Params = std::vector<std::pair<std::string, mt::Device>>;
  const mt::Device cpu = mt::Device::cpu(), gpu0 = mt::Device::cuda(0), gpu1 = mt::Device::cuda(1);
  EXPECT_NO_THROW(nn::detail::check_parameter_devices("gloo", Params{{"a", cpu}, {"b", cpu}}));
  EXPECT_NO_THROW(nn::detail::check_parameter_devices("nccl", Params{{"a", gpu1}, {"b", gpu1}}));
  mt::testing::expect_error(
      [&] {
        nn::detail::check_parameter_devices("nccl", Params{{"a", gpu0}, {"b", gpu1}});
      },
      {"parameter 'a' is on cuda:0 but 'b' is on cuda:1", "one device"});
  mt::testing::expect_error(
      [&] {
        nn::detail::check_parameter_devices("gloo", Params{{"a", cpu}, {"b", gpu0}});
      },
      {"parameter 'a' is on cpu but 'b' is on cuda:0"});
  mt::testing::expect_error(
      [&] {
        nn::detail::check_parameter_devices("gloo", Params{{"a", gpu0}});
      },
      {"the gloo backend reduces CPU tensors", "'a'", "cuda:0", "nccl"});
  mt::testing::expect_error(
      [&] {
        nn::detail::check_parameter_devices("nccl", Params{{"a", cpu}});
      },
      {"the nccl backend reduces CUDA tensors", "'a'"});
}

// A process group of one rank over `backend`, meeting in `dir`.
std::shared_ptr<dist::ProcessGroup> group_of_one(dist::Backend backend,
                                                 const std::filesystem::path& dir) {
  dist::InitOptions o;
  o.backend = backend;
  o.rank = 0;
  o.world_size = 1;
  o.local_rank = 0;
  o.store_path = dir.string();
  o.timeout = std::chrono::seconds(20);
  return dist::init_process_group(o);
}

// NCCL, world size 1, a GPU: a DDP step eagerly and captured in a CUDA graph matches plain
// training (a group of one averages over one rank).
TEST(DdpNccl, WorldSizeOneIncludingAGraphCapturedStep) {
  if (!dist::is_available(dist::Backend::Nccl))
    GTEST_SKIP() << "this build has no NCCL backend (a CUDA build that found NCCL is needed)";
  MT_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mantissa-test-ddp-nccl-" + std::to_string(getpid()));
  auto pg = group_of_one(dist::Backend::Nccl, dir);
  const mt::Device gpu = mt::Device::cuda(0);
  auto net = make_net(0);
  auto ref = make_net(0);
  net->to(gpu);
  ref->to(gpu);
  nn::DistributedDataParallel ddp(net, pg);
  mt::optim::SGD opt(net->parameters(), 0.1);
  mt::optim::SGD ref_opt(ref->parameters(), 0.1);
  Tensor x = inputs(0, 0, 4).to(gpu), y = targets(0, 0, 4).to(gpu);
  auto step = [&] {
    opt.zero_grad(false);
    loss_of(ddp(x), y).backward();
    opt.step();
  };
  mt::cuda::GraphedStep graphed(step, 2);
  for (int i = 0; i < 5; ++i) {
    x.copy_(inputs(i, 0, 4).to(gpu));
    y.copy_(targets(i, 0, 4).to(gpu));
    graphed();
    ref_opt.zero_grad(false);
    loss_of(ref->forward(inputs(i, 0, 4).to(gpu)), targets(i, 0, 4).to(gpu)).backward();
    ref_opt.step();
    mt::cuda::synchronize(0);
    EXPECT_TRUE(bitwise_equal(flat_params(*net), flat_params(*ref))) << "step " << i;
  }
  EXPECT_TRUE(graphed.captured());
  dist::destroy_process_group();
  std::filesystem::remove_all(dir);
}

// ---- ZeRO on a group of one ------------------------------------------------------------------

// AdamW with bfloat16 moments and stochastic rounding (seed 7), as a run's optimizer.
std::shared_ptr<mt::optim::Optimizer> low_memory_adamw(std::vector<mt::optim::ParamGroup> groups) {
  auto opt = std::make_shared<mt::optim::AdamW>(
      std::move(groups), mt::optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
  opt->set_state_dtype(mt::kBFloat16);
  opt->set_stochastic_rounding(true, 7);
  return opt;
}

constexpr int kZeroSteps = 20;
constexpr double kZeroClip = 0.5;

// kZeroSteps steps of ZeRO stage `stage` (0: the plain optimizer, no process group) with the norm
// clipped to kZeroClip, on a group of one over `backend`, with the model on `device`: the
// parameters after them.
std::vector<float> zero_world_size_one(dist::Backend backend, mt::Device device, int stage) {
  auto net = make_net(0);
  net->to(device);
  if (stage == 0) {
    auto opt = low_memory_adamw({mt::optim::ParamGroup(net->parameters())});
    for (int step = 0; step < kZeroSteps; ++step) {
      opt->zero_grad();
      loss_of(net->forward(inputs(step, 0, 4).to(device)), targets(step, 0, 4).to(device))
          .backward();
      nn::clip_grad_norm_(net->parameters(), kZeroClip);
      opt->step();
    }
    return flat_params(*net);
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mantissa-test-zero-one-" + std::to_string(getpid()));
  auto pg = group_of_one(backend, dir);
  std::vector<float> out;
  {
    nn::DistributedDataParallelOptions ddp_options;
    ddp_options.reduce_scatter_gradients = stage == 2;
    nn::DistributedDataParallel ddp(net, pg, ddp_options);
    dist::ZeroRedundancyOptimizer zero(ddp, {mt::optim::ParamGroup(net->parameters())},
                                       low_memory_adamw, stage);
    for (int step = 0; step < kZeroSteps; ++step) {
      zero.zero_grad();
      loss_of(ddp(inputs(step, 0, 4).to(device)), targets(step, 0, 4).to(device)).backward();
      zero.prepare_gradients();
      zero.clip_grad_norm_(kZeroClip);
      zero.optimizer().step();
      zero.gather_parameters();
    }
    out = flat_params(*net);
  }
  pg.reset();
  dist::destroy_process_group();
  std::filesystem::remove_all(dir);
  return out;
}

// On a group of one, ZeRO's shards are the whole model: stages 1 and 2 train as the plain
// optimizer does (the clipped norm is a float64 sum of squares there, a float32 norm here).
TEST(ZeroWorldSizeOne, EqualsThePlainOptimizerOnTheCpu) {
  if (!dist::is_available(dist::Backend::Gloo))
    GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
  const auto plain = zero_world_size_one(dist::Backend::Gloo, mt::Device::cpu(), 0);
  for (int stage : {1, 2}) {
    const auto got = zero_world_size_one(dist::Backend::Gloo, mt::Device::cpu(), stage);
    ASSERT_EQ(got.size(), plain.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], plain[i], 1e-6) << "stage " << stage << ", element " << i;
  }
}

// On a GPU over NCCL, the same runs against the CPU's over Gloo. Each element's arithmetic is the
// same except for the GEMMs' summation order and the compilers' multiply-add contraction (last
// bits), which can move a stochastic rounding of a bfloat16 moment to its other neighbour: one
// bfloat16 ulp (2^-7 relative) of m, and half of one of v through its square root, change that
// step's update (about lr in size) by under lr * 2^-6; kZeroSteps such steps bound the
// difference of a parameter.
TEST(ZeroWorldSizeOne, OnAGpuOverNcclMatchesTheCpu) {
  if (!dist::is_available(dist::Backend::Nccl) || !dist::is_available(dist::Backend::Gloo))
    GTEST_SKIP() << "this build lacks the NCCL or the Gloo backend";
  MT_REQUIRE_GPU();
  const mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  const double bound = kZeroSteps * 0.01 * std::ldexp(1.0, -6);
  for (int stage : {0, 1, 2}) {
    const auto cpu = zero_world_size_one(dist::Backend::Gloo, mt::Device::cpu(), stage);
    const auto gpu = zero_world_size_one(dist::Backend::Nccl, mt::Device::cuda(0), stage);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < gpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], bound) << "stage " << stage << ", element " << i;
  }
  mt::set_float32_matmul_precision(saved);
}

}  // namespace
