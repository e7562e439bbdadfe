// nn::DistributedDataParallel in one process, on a Gloo group of one (bucket layout, forward
// functions, errors), the device-layout rule, and NCCL with world size 1 on a GPU.
#include <algorithm>
#include <filesystem>

#include "ddp_test_util.h"
#include "distributed/reducer.h"

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

// NCCL, world size 1, a GPU: a DDP step eagerly and captured in a CUDA graph matches plain
// training (a group of one averages over one rank).
TEST(DdpNccl, WorldSizeOneIncludingAGraphCapturedStep) {
  if (!dist::is_available(dist::Backend::Nccl))
    GTEST_SKIP() << "this build has no NCCL backend (a CUDA build that found NCCL is needed)";
  MT_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mantissa-test-ddp-nccl-" + std::to_string(getpid()));
  dist::InitOptions o;
  o.backend = dist::Backend::Nccl;
  o.rank = 0;
  o.world_size = 1;
  o.local_rank = 0;
  o.store_path = dir.string();
  o.timeout = std::chrono::seconds(20);
  auto pg = dist::init_process_group(o);
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

}  // namespace
