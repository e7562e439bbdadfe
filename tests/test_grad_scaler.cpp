// GradScaler (dynamic loss scaling, torch.amp.GradScaler semantics plus min_scale, hysteresis
// and step counters), the optimizer's master weights, and the LR scheduler's handling of skipped
// steps. Expected values are computed here from the update rules, in float where the library is
// specified to round in float.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::amp::GradScaler;
using mt::amp::GradScalerOptions;
using mt::testing::expect_close;
using mt::testing::expect_error;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The raw bytes of `t` in row-major order, for bitwise comparisons.
std::vector<unsigned char> bits(const Tensor& t) {
  const Tensor c = t.contiguous().clone();
  std::vector<unsigned char> out(static_cast<size_t>(c.nbytes()));
  std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}
bool same_bits(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

Tensor f32(const std::vector<float>& v, std::optional<mt::Shape> shape = std::nullopt) {
  return mt::from_vector<float>(v, shape, mt::kFloat32);
}

// A float32 parameter and an SGD optimizer over it; one iteration backpropagates
// scale * sum(p * c), so p.grad = scale * c, with c containing inf when asked.
struct Toy {
  Tensor p = f32({0.5f, 1.0f, 1.5f, 2.0f}).requires_grad_();
  std::unique_ptr<optim::Optimizer> opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, 0.1);

  bool iterate(GradScaler& scaler, bool overflow) {
    opt->zero_grad();
    const Tensor c = f32({1.0f, -2.0f, overflow ? kInf : 3.0f, 0.25f});
    Tensor loss = (p * c).sum();
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(*opt);
    scaler.update();
    return stepped;
  }
};

Tensor scalar_loss() { return f32({2.0f}).sum(); }

}  // namespace

// ---- defaults, scale(), disabled ------------------------------------------------------------
TEST(GradScaler, Defaults) {
  GradScaler scaler;
  const GradScalerOptions& o = scaler.options();
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(scaler.is_enabled());
  // Lazily initialised: before the first scale(), get_scale() reports init_scale.
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.state_dict()->scale, 65536.0);

  GradScaler custom(GradScalerOptions{.init_scale = 3.0});
  EXPECT_EQ(custom.get_scale(), 3.0);
  const Tensor loss = f32({1.5f, -0.25f}, mt::Shape{2});
  const Tensor scaled = custom.scale(loss);
  EXPECT_EQ(scaled.dtype(), mt::kFloat32);
  EXPECT_EQ(scaled.to_vector<float>(), (std::vector<float>{4.5f, -0.75f}));
  EXPECT_EQ(custom.get_scale(), 3.0);
}

TEST(GradScaler, ScaleKeepsAutogradHistoryAndPromotesHalfLoss) {
  GradScaler scaler(GradScalerOptions{.init_scale = 8.0});
  Tensor x = f32({1.0f, 2.0f}).requires_grad_();
  Tensor loss = (x * x).sum();
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), 40.0f);
  scaled.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{16.0f, 32.0f}));
  // A half-precision loss is scaled in float32 (as loss * float32 scale in PyTorch), so a large
  // scale does not overflow it.
  GradScaler big;
  const Tensor half_loss = f32({2.0f}).sum().to(mt::kFloat16);
  const Tensor s = big.scale(half_loss);
  EXPECT_EQ(s.dtype(), mt::kFloat32);
  EXPECT_EQ(s.item<float>(), 131072.0f);
}

// PyTorch's scale is a one-element 1-d tensor: a 0-d loss comes back with shape [1].
TEST(GradScaler, ScaledZeroDimLossHasShapeOne) {
  GradScaler scaler(GradScalerOptions{.init_scale = 4.0});
  Tensor x = f32({1.0f, 2.0f}).requires_grad_();
  const Tensor scaled = scaler.scale((x * x).sum());
  EXPECT_EQ(scaled.shape(), mt::Shape{1});
  EXPECT_EQ(scaled.item<float>(), 20.0f);
  scaled.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{8.0f, 16.0f}));
  EXPECT_EQ(scaler.scale(f32({1.0f, 2.0f})).shape(), mt::Shape{2});
}

// backoff_factor 0 and growth_interval 0, which PyTorch accepts, follow its update rule: an
// overflow multiplies the scale by 0 (then min_scale applies), and a clean step never reaches
// an interval of 0, so the scale never grows.
TEST(GradScaler, ZeroBackoffAndZeroIntervalAreAccepted) {
  GradScaler scaler(GradScalerOptions{
      .init_scale = 8.0, .growth_factor = 2.0, .backoff_factor = 0.0, .growth_interval = 0});
  Toy toy;
  const std::vector<float> grads[] = {{1, 1, 1, 1}, {1, 1, 1, 1}, {1, kInf, 1, 1}};
  const double expected_scale[] = {8.0, 8.0, 0.0};
  const int64_t expected_tracker[] = {1, 2, 0};
  for (int i = 0; i < 3; ++i) {
    scaler.scale(scalar_loss());
    toy.p.set_grad(f32(grads[i]));
    scaler.step(*toy.opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected_scale[i]) << i;
    EXPECT_EQ(scaler.growth_tracker(), expected_tracker[i]) << i;
  }
}

TEST(GradScaler, DisabledIsTransparent) {
  GradScaler scaler(/*enabled=*/false);
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  const Tensor loss = scalar_loss();
  const Tensor out = scaler.scale(loss);
  EXPECT_TRUE(out.is_same(loss));

  Toy toy;
  toy.p.set_grad(f32({1.0f, 1.0f, kInf, 1.0f}));
  const auto before = toy.p.to_vector<float>();
  scaler.unscale_(*toy.opt);           // no-op
  EXPECT_TRUE(scaler.step(*toy.opt));  // steps even with inf: nothing is checked
  const auto after = toy.p.to_vector<float>();
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.1f);
  EXPECT_TRUE(std::isinf(after[2]));
  scaler.update();  // no-op, no inf checks needed
  scaler.update(5.0);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.steps_taken(), 1);
  EXPECT_EQ(scaler.steps_skipped(), 0);
}

// ---- scale sequences ------------------------------------------------------------------------
TEST(GradScaler, GrowthAndBackoffSequence) {
  GradScaler scaler(GradScalerOptions{
      .init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2});
  Toy toy;
  const struct {
    bool overflow;
    double scale;
    int64_t tracker;
  } expected[] = {{false, 4, 1}, {false, 8, 0}, {true, 2, 0}, {false, 2, 1}, {false, 4, 0}};
  for (const auto& e : expected) {
    const auto p_before = toy.p.to_vector<float>();
    const double scale_used = scaler.get_scale();
    EXPECT_EQ(toy.iterate(scaler, e.overflow), !e.overflow);
    EXPECT_EQ(scaler.get_scale(), e.scale);
    EXPECT_EQ(scaler.growth_tracker(), e.tracker);
    // A clean step sees the unscaled gradient c; a skipped one leaves p alone.
    const auto p_after = toy.p.to_vector<float>();
    const float c[] = {1.0f, -2.0f, 3.0f, 0.25f};
    for (size_t i = 0; i < 4; ++i) {
      const float want = e.overflow ? p_before[i] : p_before[i] + -0.1f * c[i];
      EXPECT_EQ(p_after[i], want) << "scale " << scale_used << " element " << i;
    }
  }
  EXPECT_EQ(scaler.steps_taken(), 4);
  EXPECT_EQ(scaler.steps_skipped(), 1);
}

TEST(GradScaler, GrowthNeverOverflowsToInf) {
  GradScaler scaler(
      GradScalerOptions{.init_scale = 1e38, .growth_factor = 16.0, .growth_interval = 1});
  Toy toy;
  for (int i = 0; i < 3; ++i) {
    // Gradients are scale * c ~ 3e38: finite in float32, so the steps are clean.
    toy.iterate(scaler, false);
    EXPECT_EQ(scaler.get_scale(), static_cast<double>(1e38f));
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, SixteenOverflowsFrom65536ReachOne) {
  GradScaler scaler;
  Toy toy;
  for (int i = 0; i < 16; ++i) EXPECT_FALSE(toy.iterate(scaler, true));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.steps_skipped(), 16);
  EXPECT_EQ(scaler.steps_taken(), 0);
  EXPECT_FALSE(toy.iterate(scaler, true));
  EXPECT_EQ(scaler.get_scale(), 0.5);
}

TEST(GradScaler, UpdateWithNewScale) {
  GradScaler scaler(GradScalerOptions{.growth_interval = 2});
  Toy toy;
  toy.iterate(scaler, false);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  scaler.update(3.0);  // no inf checks needed
  EXPECT_EQ(scaler.get_scale(), 3.0);
  scaler.update(0.125);
  EXPECT_EQ(scaler.get_scale(), 0.125);
  // The next iteration uses the new scale and grows from it.
  toy.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 0.25);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// ---- unscaling ------------------------------------------------------------------------------
TEST(GradScaler, UnscalesStridedGradientsInPlace) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat64, mt::kBFloat16}) {
    const std::string what = std::string(mt::dtype_name(dtype));
    Tensor a = mt::zeros({3, 5}, mt::TensorOptions().dtype(dtype)).requires_grad_();
    Tensor b = mt::zeros({5, 3}, mt::TensorOptions().dtype(dtype)).requires_grad_();
    Tensor c = mt::zeros({4, 3}, mt::TensorOptions().dtype(dtype)).requires_grad_();
    optim::SGD opt({a, b, c}, 0.1);
    GradScaler scaler(GradScalerOptions{.init_scale = 4.0});
    scaler.scale(scalar_loss());

    const Tensor ga = mt::full({3, 5}, 4.0, mt::TensorOptions().dtype(dtype));
    const Tensor gb_base = mt::full({3, 5}, 4.0, mt::TensorOptions().dtype(dtype));
    const Tensor gb = gb_base.t();
    const Tensor gc_base = mt::full({4, 6}, 4.0, mt::TensorOptions().dtype(dtype));
    const Tensor gc = gc_base.slice(1, 0, std::nullopt, 2);
    ASSERT_FALSE(gb.is_contiguous());
    ASSERT_FALSE(gc.is_contiguous());
    a.set_grad(ga);
    b.set_grad(gb);
    c.set_grad(gc);
    scaler.unscale_(opt);
    EXPECT_TRUE(a.grad().is_same(ga)) << what;
    for (const Tensor& g : {a.grad(), b.grad(), c.grad()}) {
      for (double v : g.to_vector<double>()) ASSERT_EQ(v, 1.0) << what;
    }
    // Only the slice's own elements were touched.
    const auto base = gc_base.to_vector<double>();
    for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(base[i], i % 2 == 0 ? 1.0 : 4.0) << what;
    EXPECT_TRUE(scaler.step(opt)) << what;
    EXPECT_EQ(a.to_vector<double>()[0], mt::full({1}, -0.1, dtype).to_vector<double>()[0]) << what;
    scaler.update();
  }
}

TEST(GradScaler, SingleNonFiniteAnywhereSkipsTheStep) {
  // > kParallelGrain elements, so the check also runs split across threads.
  const int64_t n = 40001;
  for (float bad : {kInf, -kInf, kNaN}) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      for (bool strided : {false, true}) {
        const std::string what = "value " + std::to_string(bad) + " at " + std::to_string(pos) +
                                 (strided ? " strided" : "");
        Tensor clean = f32({1.0f, 2.0f}).requires_grad_();
        Tensor big = mt::zeros({n}).requires_grad_();
        Tensor untouched = mt::zeros({3}).requires_grad_();  // no grad: skipped by unscale_
        optim::SGD opt({clean, big, untouched}, 0.1);
        GradScaler scaler(GradScalerOptions{.init_scale = 2.0});
        scaler.scale(scalar_loss());
        clean.set_grad(f32({2.0f, 4.0f}));
        std::vector<float> gv(static_cast<size_t>(n), 6.0f);
        gv[static_cast<size_t>(pos)] = bad;
        Tensor g = f32(gv);
        if (strided) {  // the same values through a step-2 view of a bigger buffer
          Tensor buf = mt::zeros({2 * n});
          buf.slice(0, 0, std::nullopt, 2).copy_(g);
          g = buf.slice(0, 0, std::nullopt, 2);
        }
        big.set_grad(g);
        const auto p_bits = bits(big);
        EXPECT_FALSE(scaler.step(opt)) << what;
        EXPECT_TRUE(same_bits(bits(big), p_bits)) << what;
        EXPECT_EQ(clean.to_vector<float>(), (std::vector<float>{1.0f, 2.0f})) << what;
        // As in PyTorch, every gradient is still unscaled.
        EXPECT_EQ(clean.grad().to_vector<float>(), (std::vector<float>{1.0f, 2.0f})) << what;
        const auto out = big.grad().to_vector<float>();
        EXPECT_EQ(out[static_cast<size_t>((pos + 1) % n)], 3.0f) << what;
        EXPECT_EQ(std::isnan(out[static_cast<size_t>(pos)]), std::isnan(bad)) << what;
        scaler.update();
        EXPECT_EQ(scaler.get_scale(), 1.0) << what;
        EXPECT_EQ(scaler.steps_skipped(), 1) << what;
      }
    }
  }
}

TEST(GradScaler, SkippedStepLeavesParamsAndSgdStateUnchanged) {
  Tensor p = mt::testing::random_tensor({3, 4}, mt::kFloat32, false).requires_grad_();
  optim::SGD opt({p}, 0.1, optim::SGDOptions{.momentum = 0.9});
  GradScaler scaler(GradScalerOptions{.init_scale = 16.0});
  auto iterate = [&](bool overflow) {
    opt.zero_grad();
    Tensor c = mt::testing::random_tensor({3, 4}, mt::kFloat32, false);
    if (overflow) c = c / mt::zeros({3, 4});  // +-inf everywhere
    scaler.scale((p * c).sum()).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  ASSERT_TRUE(iterate(false));
  const Tensor buf = opt.state(0)->buffers.at("momentum_buffer");
  auto p_bits = bits(p), buf_bits = bits(buf);
  EXPECT_FALSE(iterate(true));
  EXPECT_TRUE(same_bits(bits(p), p_bits));
  EXPECT_TRUE(same_bits(bits(opt.state(0)->buffers.at("momentum_buffer")), buf_bits));
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_TRUE(iterate(false));
  EXPECT_FALSE(same_bits(bits(p), p_bits));
  EXPECT_FALSE(same_bits(bits(opt.state(0)->buffers.at("momentum_buffer")), buf_bits));
  EXPECT_FALSE(opt.last_step_skipped());
}

TEST(GradScaler, SkippedStepLeavesAdamStateUnchanged) {
  Tensor p = mt::testing::random_tensor({5, 2}, mt::kFloat32, true).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
  GradScaler scaler(GradScalerOptions{.init_scale = 1024.0});
  auto iterate = [&](bool overflow) {
    opt.zero_grad();
    Tensor c = mt::testing::random_tensor({5, 2}, mt::kFloat32, false);
    if (overflow) c = c * f32({kNaN, 1.0f}, mt::Shape{2});  // NaN in one column
    scaler.scale((p * c).sum()).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  const std::vector<std::string> keys{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  auto snapshot = [&] {
    std::vector<std::vector<unsigned char>> s{bits(p)};
    for (const auto& k : keys) s.push_back(bits(opt.state(0)->buffers.at(k)));
    return s;
  };
  ASSERT_TRUE(iterate(false));
  ASSERT_TRUE(iterate(false));
  const auto before = snapshot();
  ASSERT_EQ(opt.state(0)->step, 2);
  EXPECT_FALSE(iterate(true));
  EXPECT_FALSE(iterate(true));
  const auto after = snapshot();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(same_bits(after[i], before[i])) << i;
  EXPECT_EQ(opt.state(0)->step, 2);
  EXPECT_TRUE(iterate(false));
  const auto stepped = snapshot();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_FALSE(same_bits(stepped[i], before[i])) << i;
  EXPECT_EQ(opt.state(0)->step, 3);
}

TEST(GradScaler, UnscaleMultipliesByTheFloatReciprocal) {
  // The reciprocal is taken in double and used in float, and gradients are multiplied by it
  // (not divided by the scale): g * float(1/3) differs from g / 3 for many g. (For a float32
  // scale, float(1/double(s)) always equals 1.0f/s — double rounding is harmless for division —
  // so the double-vs-float reciprocal cannot be told apart by a test.)
  Tensor p = mt::zeros({1000}).requires_grad_();
  Tensor p64 = mt::zeros({10}, mt::kFloat64).requires_grad_();
  optim::SGD opt({p, p64}, 0.1);
  GradScaler scaler;
  scaler.scale(scalar_loss());
  scaler.update(3.0);
  const Tensor g = mt::testing::random_tensor({1000}, mt::kFloat32, false, -100.0, 100.0);
  const auto gv = g.to_vector<float>();
  const Tensor g64 = mt::testing::random_tensor({10}, mt::kFloat64, false, -100.0, 100.0);
  const auto g64v = g64.to_vector<double>();
  p.set_grad(g.clone());
  p64.set_grad(g64.clone());
  scaler.unscale_(opt);
  const float inv = static_cast<float>(1.0 / 3.0);
  const auto out = p.grad().to_vector<float>();
  int differs_from_division = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    ASSERT_EQ(out[i], gv[i] * inv) << i;
    differs_from_division += out[i] != gv[i] / 3.0f;
  }
  EXPECT_GT(differs_from_division, 0);
  // float64 gradients use the same float reciprocal, widened.
  const auto out64 = p64.grad().to_vector<double>();
  for (size_t i = 0; i < g64v.size(); ++i) ASSERT_EQ(out64[i], g64v[i] * double(inv)) << i;
}

// ---- misuse -----------------------------------------------------------------------------------
TEST(GradScaler, MisuseErrors) {
  {
    GradScaler scaler;
    Toy toy;
    scaler.scale((toy.p * 2.0).sum()).backward();
    scaler.unscale_(*toy.opt);
    expect_error([&] { scaler.unscale_(*toy.opt); },
                 {"unscale_() has already been called on this optimizer since the last update()."});
    EXPECT_TRUE(scaler.step(*toy.opt));  // step after an explicit unscale_ is fine
    expect_error([&] { scaler.unscale_(*toy.opt); }, {"unscale_() is being called after step()."});
    expect_error([&] { scaler.step(*toy.opt); },
                 {"step() has already been called since the last update()."});
    scaler.update();
    // After update() the cycle starts again.
    toy.opt->zero_grad();
    scaler.scale((toy.p * 2.0).sum()).backward();
    EXPECT_TRUE(scaler.step(*toy.opt));
    scaler.update();
  }
  {
    GradScaler scaler;
    scaler.scale(scalar_loss());
    expect_error([&] { scaler.update(); }, {"No inf checks were recorded prior to update."});
  }
  {
    // No gradients at all: no inf check is recorded (as in PyTorch).
    GradScaler scaler;
    Toy toy;
    scaler.scale(scalar_loss());
    expect_error([&] { scaler.step(*toy.opt); },
                 {"No inf checks were recorded for this optimizer."});
    expect_error([&] { scaler.update(); }, {"No inf checks were recorded prior to update."});
  }
  {
    Tensor p = mt::zeros({4}, mt::kFloat16).requires_grad_();
    optim::SGD opt({p}, 0.1);
    GradScaler scaler;
    scaler.scale((p * 2.0).sum()).backward();
    ASSERT_EQ(p.grad().dtype(), mt::kFloat16);
    expect_error([&] { scaler.step(opt); }, {"Attempting to unscale FP16 gradients."});
    expect_error([&] { scaler.unscale_(opt); }, {"Attempting to unscale FP16 gradients."});
  }
  expect_error([] { GradScaler s(GradScalerOptions{.growth_factor = 1.0}); }, {"growth_factor"});
  expect_error([] { GradScaler s(GradScalerOptions{.backoff_factor = 1.0}); }, {"backoff_factor"});
  expect_error([] { GradScaler s(GradScalerOptions{.backoff_factor = -0.5}); }, {"backoff_factor"});
  expect_error([] { GradScaler s(GradScalerOptions{.growth_interval = -1}); }, {"growth_interval"});
  expect_error([] { GradScaler s(GradScalerOptions{.hysteresis = 0}); }, {"hysteresis"});
}

// ---- state dict ---------------------------------------------------------------------------------
// PyTorch: a disabled scaler's state_dict() is {}, loading anything into it does nothing, and an
// enabled scaler refuses an empty state.
TEST(GradScaler, DisabledScalerHasAnEmptyStateDict) {
  GradScaler disabled(/*enabled=*/false), enabled;
  EXPECT_FALSE(disabled.state_dict().has_value());
  ASSERT_TRUE(enabled.state_dict().has_value());
  disabled.load_state_dict(enabled.state_dict());  // no-op
  EXPECT_EQ(disabled.get_scale(), 1.0);
  expect_error([&] { enabled.load_state_dict(disabled.state_dict()); },
               {"source state dict is empty", "disabled instance of GradScaler"});
  EXPECT_EQ(enabled.get_scale(), 65536.0);
}

TEST(GradScaler, StateDictRoundTripContinuesIdentically) {
  const GradScalerOptions opts{.init_scale = 256.0,
                               .growth_factor = 4.0,
                               .backoff_factor = 0.125,
                               .growth_interval = 3,
                               .min_scale = 0.5,
                               .hysteresis = 2};
  GradScaler a(opts);
  Toy toy_a;
  for (bool overflow : {false, false, true, true, false}) toy_a.iterate(a, overflow);
  const mt::amp::GradScalerState s = *a.state_dict();
  EXPECT_EQ(s.scale, 32.0);  // 256, 2nd consecutive overflow backs off by 1/8
  EXPECT_EQ(s.growth_factor, 4.0);
  EXPECT_EQ(s.backoff_factor, 0.125);
  EXPECT_EQ(s.growth_interval, 3);
  EXPECT_EQ(s.growth_tracker, 1);
  EXPECT_EQ(s.min_scale, 0.5);
  EXPECT_EQ(s.hysteresis, 2);
  EXPECT_EQ(s.overflow_streak, 0);
  EXPECT_EQ(s.steps_taken, 3);
  EXPECT_EQ(s.steps_skipped, 2);

  GradScaler b;  // defaults, overwritten by the load; never used before
  b.load_state_dict(s);
  EXPECT_EQ(b.get_scale(), 32.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  EXPECT_EQ(b.options().growth_interval, 3);
  Toy toy_b;
  for (bool overflow : {false, false, true, false, true, true, true, true, false, false, false}) {
    toy_a.iterate(a, overflow);
    toy_b.iterate(b, overflow);
    EXPECT_EQ(a.get_scale(), b.get_scale());
    EXPECT_EQ(a.growth_tracker(), b.growth_tracker());
  }
  EXPECT_EQ(a.get_scale(), 2.0);  // floored at min_scale 0.5 then grown x4
  const auto sa = *a.state_dict(), sb = *b.state_dict();
  EXPECT_EQ(sa.steps_taken, sb.steps_taken);  // the counters travel with the state
  EXPECT_EQ(sa.steps_skipped, sb.steps_skipped);
  EXPECT_EQ(sa.overflow_streak, sb.overflow_streak);

  // Loading into a scaler that has been used replaces its scale and tracker.
  GradScaler c(GradScalerOptions{.init_scale = 2.0});
  Toy toy_c;
  toy_c.iterate(c, false);
  c.load_state_dict(s);
  EXPECT_EQ(c.get_scale(), 32.0);
  EXPECT_EQ(c.growth_tracker(), 1);
}

// ---- beyond PyTorch -----------------------------------------------------------------------------
TEST(GradScaler, MinScaleFloor) {
  GradScaler scaler(GradScalerOptions{.init_scale = 4.0, .min_scale = 1.5});
  Toy toy;
  const double expected[] = {2.0, 1.5, 1.5, 1.5};
  for (double e : expected) {
    toy.iterate(scaler, true);
    EXPECT_EQ(scaler.get_scale(), e);
  }
  toy.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 1.5);
  // A scale already below the floor (set directly) is not raised to it by an overflow.
  scaler.update(0.25);
  toy.iterate(scaler, true);
  EXPECT_EQ(scaler.get_scale(), 0.25);
  GradScaler low(GradScalerOptions{.init_scale = 1.0, .min_scale = 2.0});
  toy.iterate(low, true);
  EXPECT_EQ(low.get_scale(), 1.0);
}

TEST(GradScaler, HysteresisBacksOffOnTheNthConsecutiveOverflow) {
  GradScaler scaler(
      GradScalerOptions{.init_scale = 64.0, .growth_interval = 1000, .hysteresis = 3});
  Toy toy;
  const struct {
    bool overflow;
    double scale;
    int64_t tracker, streak;
  } expected[] = {
      {false, 64, 1, 0}, {false, 64, 2, 0}, {true, 64, 0, 1},  {true, 64, 0, 2},
      {true, 32, 0, 3},  {true, 16, 0, 4},  {false, 16, 1, 0}, {true, 16, 0, 1},
      {false, 16, 1, 0}, {true, 16, 0, 1},  {true, 16, 0, 2},  {true, 8, 0, 3},
  };
  int i = 0;
  for (const auto& e : expected) {
    EXPECT_EQ(toy.iterate(scaler, e.overflow), !e.overflow) << i;
    EXPECT_EQ(scaler.get_scale(), e.scale) << i;
    EXPECT_EQ(scaler.growth_tracker(), e.tracker) << i;
    EXPECT_EQ(scaler.state_dict()->overflow_streak, e.streak) << i;
    ++i;
  }
  EXPECT_EQ(scaler.steps_taken(), 4);
  EXPECT_EQ(scaler.steps_skipped(), 8);
}

TEST(GradScaler, StepLRDoesNotAdvanceOnSkippedSteps) {
  Toy toy;
  optim::StepLR sched(*toy.opt, /*step_size=*/1, /*gamma=*/0.5);
  GradScaler scaler;
  const struct {
    bool overflow;
    double lr;
    int64_t epoch;
  } expected[] = {{false, 0.05, 1}, {true, 0.05, 1}, {true, 0.05, 1}, {false, 0.025, 2}};
  for (const auto& e : expected) {
    toy.iterate(scaler, e.overflow);
    sched.step();
    EXPECT_DOUBLE_EQ(toy.opt->lr(), e.lr);
    EXPECT_EQ(sched.last_epoch(), e.epoch);
  }
  // A skip the scheduler never saw must not hold back a later, plain optimizer step.
  toy.iterate(scaler, true);
  EXPECT_TRUE(toy.opt->last_step_skipped());
  toy.p.set_grad(f32({1, 1, 1, 1}));
  toy.opt->step();
  EXPECT_FALSE(toy.opt->last_step_skipped());
  sched.step();
  EXPECT_EQ(sched.last_epoch(), 3);
  EXPECT_DOUBLE_EQ(toy.opt->lr(), 0.0125);
}

// ---- master weights -----------------------------------------------------------------------------
TEST(MasterWeights, SmallUpdatesAccumulateInFloat32) {
  for (mt::DType dtype : {mt::kFloat16, mt::kBFloat16}) {
    const std::string what(mt::dtype_name(dtype));
    // 1e-4 is far below half an ulp of 1.0 in either format, so plain half SGD never moves.
    const double g = 1e-4;
    Tensor plain = mt::ones({4}, dtype).requires_grad_();
    Tensor mastered = mt::ones({4}, dtype).requires_grad_();
    optim::SGD opt_plain({plain}, 1.0);
    optim::SGD opt_master({mastered}, 1.0);
    opt_master.set_master_weights(true);
    EXPECT_TRUE(opt_master.master_weights());
    float master_ref = 1.0f;
    for (int k = 0; k < 40; ++k) {
      plain.set_grad(mt::full({4}, g, dtype));
      mastered.set_grad(mt::full({4}, g, dtype));
      opt_plain.step();
      opt_master.step();
      master_ref = master_ref + -1.0f * mt::full({1}, g, dtype).to_vector<float>()[0];
    }
    EXPECT_EQ(plain.to_vector<double>()[0], 1.0) << what;
    const Tensor master = opt_master.state(0)->buffers.at("master");
    EXPECT_EQ(master.dtype(), mt::kFloat32) << what;
    EXPECT_EQ(mastered.dtype(), dtype) << what;
    EXPECT_EQ(master.to_vector<float>()[0], master_ref) << what;
    EXPECT_TRUE(same_bits(bits(mastered), bits(master.to(dtype)))) << what;
    EXPECT_LT(mastered.to_vector<double>()[0], 1.0) << what;
  }
}

TEST(MasterWeights, HalfModelTrainsWithGradScalerLikeFloat32Reference) {
  for (mt::DType dtype : {mt::kFloat16, mt::kBFloat16}) {
    const std::string what(mt::dtype_name(dtype));
    mt::manual_seed(7);
    mt::nn::Linear model(4, 3);
    model->to(dtype);
    ASSERT_EQ(model->weight.dtype(), dtype);
    const float lr = 0.05f, momentum = 0.5f;
    optim::SGD opt(model->parameters(), lr, optim::SGDOptions{.momentum = momentum});
    opt.set_master_weights(true);
    GradScaler scaler(GradScalerOptions{.init_scale = 512.0, .growth_interval = 2});
    const Tensor x = mt::testing::random_tensor({6, 4}, dtype, true);
    const Tensor y = mt::testing::random_tensor({6, 3}, dtype, false);
    const std::vector<Tensor> params = model->parameters();
    std::vector<std::vector<float>> master_ref, buf_ref(params.size());
    for (const Tensor& p : params) master_ref.push_back(p.to_vector<float>());
    for (int k = 0; k < 6; ++k) {
      opt.zero_grad();
      const Tensor loss = mt::nn::functional::mse_loss(model(x), y);
      const float scale = static_cast<float>(scaler.get_scale());
      scaler.scale(loss).backward();
      std::vector<std::vector<float>> grads;
      for (const Tensor& p : params) {
        ASSERT_EQ(p.grad().dtype(), dtype) << what;
        grads.push_back(p.grad().to_vector<float>());
      }
      // grads_to_unscale hands out float32 copies, so float16 is no error here.
      ASSERT_TRUE(scaler.step(opt)) << what << " step " << k;
      scaler.update();
      const float inv = static_cast<float>(1.0 / scale);
      for (size_t i = 0; i < params.size(); ++i) {
        auto& m = master_ref[i];
        auto& b = buf_ref[i];
        if (b.empty()) b.assign(m.size(), 0.0f);
        for (size_t j = 0; j < m.size(); ++j) {
          const float gj = grads[i][j] * inv;
          b[j] = k == 0 ? gj : b[j] * momentum + gj;
          m[j] = m[j] + -lr * b[j];
        }
        const mt::optim::ParamState* st = opt.state(i);
        ASSERT_NE(st, nullptr);
        const Tensor master = st->buffers.at("master");
        const Tensor buf = st->buffers.at("momentum_buffer");
        ASSERT_EQ(master.dtype(), mt::kFloat32) << what;
        ASSERT_EQ(buf.dtype(), mt::kFloat32) << what;
        expect_close(master, f32(m, master.shape()), 1e-6, 1e-7, what + " master");
        expect_close(buf, f32(b, buf.shape()), 1e-6, 1e-7, what + " momentum");
        // The half weights are the master rounded once.
        EXPECT_EQ(params[i].dtype(), dtype);
        EXPECT_TRUE(same_bits(bits(params[i]), bits(master.to(dtype)))) << what;
      }
    }
    EXPECT_EQ(scaler.get_scale(), 512.0 * 8) << what;
    // An overflowing half gradient skips the step and leaves the float32 master untouched.
    const auto master_bits = bits(opt.state(0)->buffers.at("master"));
    const auto weight_bits = bits(model->weight);
    opt.zero_grad();
    scaler.scale(mt::nn::functional::mse_loss(model(x), y)).backward();
    Tensor g = model->weight.grad();
    g.fill_(std::numeric_limits<double>::infinity());
    EXPECT_FALSE(scaler.step(opt)) << what;
    scaler.update();
    EXPECT_TRUE(same_bits(bits(opt.state(0)->buffers.at("master")), master_bits)) << what;
    EXPECT_TRUE(same_bits(bits(model->weight), weight_bits)) << what;
  }
}

// ---- the documented AMP loop
// ----------------------------------------------------------------------
TEST(GradScaler, AutocastBFloat16TrainingLoopReducesLoss) {
  mt::manual_seed(3);
  const mt::Device device = mt::Device::cpu();
  mt::nn::Sequential net(mt::nn::Linear(8, 16), mt::nn::ReLU(), mt::nn::Linear(16, 1));
  mt::nn::MSELoss loss_fn;
  optim::SGD opt(net->parameters(), 0.05);
  GradScaler scaler;
  const Tensor input = mt::randn({64, 8});
  const Tensor w_true = mt::randn({8, 1});
  const Tensor target = input.matmul(w_true) * 0.5;
  double first = 0.0, last = 0.0;
  for (int it = 0; it < 50; ++it) {
    Tensor output, loss;
    {
      mantissa::amp::autocast guard(device.type(), mantissa::kBFloat16, true);
      output = net->forward(input);
      loss = loss_fn(output, target);
    }
    EXPECT_EQ(output.dtype(), mt::kBFloat16);
    EXPECT_EQ(loss.dtype(), mt::kFloat32);
    scaler.scale(loss).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    opt.zero_grad();
    (it == 0 ? first : last) = loss.item<double>();
  }
  for (const Tensor& p : net->parameters()) EXPECT_EQ(p.dtype(), mt::kFloat32);
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  EXPECT_EQ(scaler.steps_taken(), 50);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}
