// OverflowMonitor: per-module forward/gradient statistics and the first non-finite value.
#include <cmath>

#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;

namespace {

using Net = mt::testing::ToyModel;
const mt::testing::ToyModelOptions kNet{.in = 4, .hidden = 4, .out = 2, .name = "Net"};

}  // namespace

TEST(OverflowMonitor, TensorStats) {
  const float tiny = std::ldexp(1.0f, -26);  // flushes to zero in float16
  const mt::Tensor t = mt::tensor<float>({1.0f, -3.0f, 0.0f, tiny, INFINITY, NAN, 2.0f});
  const auto s = mt::amp::tensor_stats(t);
  EXPECT_EQ(s.num_inf, 1);
  EXPECT_EQ(s.num_nan, 1);
  EXPECT_TRUE(std::isinf(s.max_abs));
  EXPECT_FALSE(s.finite());
  const auto f = mt::amp::tensor_stats(mt::tensor<float>({1.0f, -3.0f, 0.0f, tiny}));
  EXPECT_DOUBLE_EQ(f.max_abs, 3.0);
  EXPECT_EQ(f.num_nonzero, 3);
  EXPECT_NEAR(f.fp16_underflow_fraction, 1.0 / 3.0, 1e-12);
  // 2^-24 is float16's smallest subnormal: it survives; 2^-25 rounds (to even) to zero.
  const auto edge =
      mt::amp::tensor_stats(mt::tensor<float>({std::ldexp(1.0f, -24), std::ldexp(1.0f, -25)}));
  EXPECT_NEAR(edge.fp16_underflow_fraction, 0.5, 1e-12);
  EXPECT_EQ(mt::Tensor(mt::tensor<float>({std::ldexp(1.0f, -25)}).to(mt::kFloat16)).item<float>(),
            0.0f);
}

TEST(OverflowMonitor, RecordsForwardAndGradientPerModule) {
  mt::manual_seed(1);
  Net net(kNet);
  mt::amp::OverflowMonitor monitor(net);
  ASSERT_EQ(monitor.stats().size(), 3u);
  const mt::Tensor x = mt::randn({8, 4});
  net.forward(x).sum().backward();
  for (const char* name : {"net1", "relu", "net2"}) {
    const auto* s = monitor.find(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->forward_calls, 1) << name;
    EXPECT_EQ(s->grad_calls, 1) << name;
    EXPECT_TRUE(s->forward.finite());
    EXPECT_TRUE(s->grad.finite());
  }
  // net2's output gradient is d(sum)/d(out) = 1 everywhere.
  EXPECT_DOUBLE_EQ(monitor.find("net2")->grad.max_abs, 1.0);
  EXPECT_EQ(monitor.find("net1")->type, "Linear");
  // Forward max matches the module's actual output.
  const double max_out = mt::amax(mt::abs(net.net1(x))).item<float>();
  EXPECT_NEAR(monitor.find("net1")->forward.max_abs, max_out, 1e-6);
  EXPECT_FALSE(monitor.first_nonfinite().has_value());
  monitor.report();
}

TEST(OverflowMonitor, NamesFirstModuleWithNonFiniteValues) {
  mt::manual_seed(2);
  Net net(kNet);
  {
    mt::autograd::NoGradGuard no_grad;
    net.net2->weight.select(0, 1).fill_(1e30);  // net2's output overflows float16
  }
  mt::amp::OverflowMonitor monitor(net);
  mt::Tensor out;
  {
    mt::amp::autocast guard(mt::kCPU, mt::kFloat16);
    out = net.forward(mt::randn({4, 4}) * 100.0);
  }
  ASSERT_TRUE(monitor.first_nonfinite().has_value());
  EXPECT_EQ(*monitor.first_nonfinite(), "net2 (forward)");
  EXPECT_TRUE(monitor.find("net1")->forward.finite());
  EXPECT_FALSE(monitor.find("net2")->forward.finite());  // inf weights: inf or inf*0 = NaN
  monitor.reset();
  EXPECT_FALSE(monitor.first_nonfinite().has_value());
  EXPECT_EQ(monitor.find("net2")->forward_calls, 0);
}

TEST(OverflowMonitor, GradientOverflowIsReported) {
  mt::manual_seed(3);
  Net net(kNet);
  mt::amp::OverflowMonitor monitor(net);
  const mt::Tensor out = net.forward(mt::randn({2, 4}));
  // A gradient seed with NaN: the first non-finite value appears in net2's gradient.
  mt::Tensor seed = mt::ones({2, 2});
  {
    mt::autograd::NoGradGuard no_grad;
    seed.select(0, 0).fill_(NAN);
  }
  out.backward(seed);
  ASSERT_TRUE(monitor.first_nonfinite().has_value());
  EXPECT_EQ(*monitor.first_nonfinite(), "net2 (gradient)");
  EXPECT_EQ(monitor.find("net2")->grad.num_nan, 2);
}

TEST(OverflowMonitor, DetachesOnDestruction) {
  Net net(kNet);
  { mt::amp::OverflowMonitor monitor(net); }
  // No hooks left: a forward after the monitor is gone must not touch freed memory.
  EXPECT_NO_THROW(net.forward(mt::randn({2, 4})).sum().backward());
}
