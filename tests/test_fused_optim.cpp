// The multi-tensor ("fused") optimizer path and the found_inf-aware step, on the CPU: fused and
// per-parameter kernels agree bit for bit for every dtype and with master weights; a step with
// found_inf set changes nothing (parameters, buffers, step counts); a step with found_inf clear is
// an ordinary step; the device step count survives state_dict round trips; and GradScaler's lazy
// results read what the device recorded.
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "amp/grad_scaler.h"
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "test_util.h"

namespace mt = mantissa;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::testing::random_tensor;

namespace {

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<std::pair<std::string, Make>> makers() {
  std::vector<std::pair<std::string, Make>> out;
  out.emplace_back("sgd", [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), 0.05);
  });
  out.emplace_back("sgd momentum dampening wd", [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), 0.05,
                                        optim::SGDOptions{0.9, 0.3, 0.01, false, false});
  });
  out.emplace_back("sgd nesterov maximize", [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), 0.05,
                                        optim::SGDOptions{0.8, 0.0, 0.0, true, true});
  });
  out.emplace_back("adam", [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01});
  });
  out.emplace_back("adam amsgrad wd", [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(
        std::move(p), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  });
  out.emplace_back("adamw maximize", [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p),
                                          optim::AdamWOptions{.lr = 0.01, .maximize = true});
  });
  return out;
}

// The bits of a tensor, so that equality is bitwise (and NaN-safe).
std::vector<uint8_t> bits(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.nbytes()));
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

void expect_same_state(const optim::Optimizer& a, const optim::Optimizer& b, size_t n,
                       const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    const optim::ParamState* sa = a.state(i);
    const optim::ParamState* sb = b.state(i);
    ASSERT_EQ(sa == nullptr, sb == nullptr) << what << " param " << i;
    if (sa == nullptr) continue;
    EXPECT_EQ(sa->step, sb->step) << what << " param " << i;
    ASSERT_EQ(sa->buffers.size(), sb->buffers.size()) << what << " param " << i;
    for (const auto& [key, t] : sa->buffers) {
      EXPECT_EQ(bits(t), bits(sb->buffers.at(key))) << what << " param " << i << " " << key;
    }
  }
}

struct Params {
  std::vector<Tensor> a, b;  // twins
};

// Three parameters: a matrix, a non-contiguous view's worth (the optimizer copies it), a vector.
Params twin_params(mt::DType dtype) {
  Params p;
  const std::vector<mt::Shape> shapes{{7, 5}, {4, 3}, {33}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    // detach(): a leaf that keeps the view's strides.
    Tensor t = random_tensor(shapes[k], dtype, /*non_contiguous=*/k == 1).detach();
    Tensor twin = k == 1 ? random_tensor(shapes[k], dtype, true).detach() : t.clone();
    if (k == 1) twin.copy_(t);
    EXPECT_EQ(t.is_contiguous(), k != 1);
    p.a.push_back(t.requires_grad_());
    p.b.push_back(twin.requires_grad_());
  }
  return p;
}

void set_twin_grads(const Params& p, mt::DType dtype) {
  for (size_t k = 0; k < p.a.size(); ++k) {
    Tensor g = random_tensor(p.a[k].shape(), dtype, false);
    p.a[k].set_grad(g);
    p.b[k].set_grad(g.clone());
  }
}

}  // namespace

TEST(FusedOptim, MatchesPerParameterKernelsBitwise) {
  for (const mt::DType dtype : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64}) {
    for (const bool master : {false, true}) {
      if (master && !mt::is_reduced_float(dtype)) continue;
      for (const auto& [name, make] : makers()) {
        const std::string what =
            name + " " + std::string(mt::dtype_name(dtype)) + (master ? " master" : "");
        Params p = twin_params(dtype);
        auto fused = make(p.a);
        auto reference = make(p.b);
        reference->set_fused(false);
        fused->set_master_weights(master);
        reference->set_master_weights(master);
        ASSERT_TRUE(fused->fused());
        for (int step = 0; step < 4; ++step) {
          set_twin_grads(p, dtype);
          fused->step();
          reference->step();
        }
        for (size_t k = 0; k < p.a.size(); ++k) {
          EXPECT_EQ(bits(p.a[k]), bits(p.b[k])) << what << " param " << k;
        }
        expect_same_state(*fused, *reference, p.a.size(), what);
      }
    }
  }
}

TEST(FusedOptim, FoundInfSetChangesNothingAndClearIsAnOrdinaryStep) {
  for (const bool fused : {true, false}) {
    for (const mt::DType dtype : {mt::kFloat32, mt::kFloat16}) {
      for (const auto& [name, make] : makers()) {
        const std::string what =
            name + " " + std::string(mt::dtype_name(dtype)) + (fused ? " fused" : " per-parameter");
        Params p = twin_params(dtype);
        auto opt = make(p.a);
        auto twin = make(p.b);
        opt->set_fused(fused);
        opt->set_master_weights(dtype == mt::kFloat16);
        twin->set_master_weights(dtype == mt::kFloat16);
        for (int step = 0; step < 2; ++step) {
          set_twin_grads(p, dtype);
          opt->step();
          twin->step();
        }
        // A skipped step: nothing moves, not even the step counts.
        set_twin_grads(p, dtype);
        opt->step_if_finite(mt::ones({}, mt::TensorOptions().dtype(mt::kFloat32)));
        EXPECT_TRUE(opt->last_step_skipped()) << what;
        for (size_t k = 0; k < p.a.size(); ++k) {
          EXPECT_EQ(bits(p.a[k]), bits(p.b[k])) << what << " param " << k;
        }
        expect_same_state(*opt, *twin, p.a.size(), what + " after skip");
        // found_inf == 0 and no found_inf: ordinary steps.
        opt->step_if_finite(mt::zeros({}, mt::TensorOptions().dtype(mt::kFloat32)));
        EXPECT_FALSE(opt->last_step_skipped()) << what;
        twin->step();
        set_twin_grads(p, dtype);
        opt->step_if_finite(Tensor());
        twin->step();
        for (size_t k = 0; k < p.a.size(); ++k) {
          EXPECT_EQ(bits(p.a[k]), bits(p.b[k])) << what << " param " << k;
        }
        expect_same_state(*opt, *twin, p.a.size(), what + " after steps");
      }
    }
  }
}

TEST(FusedOptim, SkippedFirstStepStillInitialisesTheMomentumBuffer) {
  // With dampening, buf = d (first step) and buf = (1 - dampening) * d differ: a skipped first
  // step must leave the next one a first step.
  Tensor a = random_tensor({6}, mt::kFloat32, false).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  optim::SGD sa({a}, 0.1, {.momentum = 0.9, .dampening = 0.5});
  optim::SGD sb({b}, 0.1, {.momentum = 0.9, .dampening = 0.5});
  sb.set_fused(false);  // the reference: first_step from the host count
  a.set_grad(random_tensor({6}, mt::kFloat32, false));
  sa.step_if_finite(mt::ones({}, mt::TensorOptions().dtype(mt::kFloat32)));
  EXPECT_EQ(sa.state(0)->step, 0);
  const Tensor g = random_tensor({6}, mt::kFloat32, false);
  a.set_grad(g);
  b.set_grad(g.clone());
  sa.step_if_finite(mt::zeros({}, mt::TensorOptions().dtype(mt::kFloat32)));
  sb.step();
  EXPECT_EQ(bits(a), bits(b));
  EXPECT_EQ(bits(sa.state(0)->buffers.at("momentum_buffer")),
            bits(sb.state(0)->buffers.at("momentum_buffer")));
  EXPECT_EQ(sa.state(0)->step, 1);
}

TEST(FusedOptim, StepCountRoundTripsThroughStateDict) {
  for (const bool fused : {true, false}) {
    Tensor a = random_tensor({3, 4}, mt::kFloat16, false).requires_grad_();
    optim::AdamW o1({a}, {.lr = 0.01});
    o1.set_fused(fused);
    o1.set_master_weights(true);
    const Tensor skip = mt::ones({}, mt::TensorOptions().dtype(mt::kFloat32));
    for (int k = 0; k < 3; ++k) {
      a.set_grad(random_tensor({3, 4}, mt::kFloat16, false));
      o1.step();
    }
    a.set_grad(random_tensor({3, 4}, mt::kFloat16, false));
    o1.step_if_finite(skip);
    const optim::OptimizerState saved = o1.state_dict();
    ASSERT_EQ(saved.state.count(0), 1u);
    EXPECT_EQ(saved.state.at(0).step, 3);
    EXPECT_EQ(saved.state.at(0).buffers.count("master"), 1u);

    Tensor b = a.detach().clone().requires_grad_();
    optim::AdamW o2({b}, {.lr = 0.5});
    o2.set_master_weights(true);
    o2.load_state_dict(saved);
    EXPECT_EQ(o2.state(0)->step, 3);
    const Tensor g = random_tensor({3, 4}, mt::kFloat16, false);
    a.set_grad(g);
    b.set_grad(g.clone());
    o1.step();
    o2.step();
    EXPECT_EQ(bits(a), bits(b)) << (fused ? "fused" : "per-parameter");
    EXPECT_EQ(o1.state(0)->step, 4);
    EXPECT_EQ(o2.state(0)->step, 4);
  }
}

TEST(FusedOptim, SgdSnapshotWithoutCountResumesMomentum) {
  // Snapshots written before the count existed have step 0 beside an initialised buffer.
  Tensor a = random_tensor({5}, mt::kFloat32, false).requires_grad_();
  optim::SGD o1({a}, 0.1, {.momentum = 0.9, .dampening = 0.5});
  a.set_grad(random_tensor({5}, mt::kFloat32, false));
  o1.step();
  optim::OptimizerState saved = o1.state_dict();
  EXPECT_EQ(saved.state.at(0).step, 1);
  saved.state.at(0).step = 0;
  Tensor b = a.detach().clone().requires_grad_();
  optim::SGD o2({b}, 0.1, {.momentum = 0.9, .dampening = 0.5});
  o2.load_state_dict(saved);
  const Tensor g = random_tensor({5}, mt::kFloat32, false);
  a.set_grad(g);
  b.set_grad(g.clone());
  o1.step();
  o2.step();
  EXPECT_EQ(bits(a), bits(b));
}

TEST(FusedOptim, StepIfFiniteRejectsABadFlag) {
  Tensor a = random_tensor({2}, mt::kFloat32, false).requires_grad_();
  optim::SGD o({a}, 0.1);
  mt::testing::expect_error(
      [&] { o.step_if_finite(mt::zeros({2}, mt::TensorOptions().dtype(mt::kFloat32))); },
      {"SGD", "step_if_finite", "float32", "1 element"});
}

TEST(FusedOptim, GradScalerResultsAreReadLazilyAndAgree) {
  Tensor w = random_tensor({4}, mt::kFloat32, false).requires_grad_();
  optim::SGD opt({w}, 0.1, {.momentum = 0.9});
  optim::StepLR sched(opt, 1, 0.5);
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions{.init_scale = 8.0});
  const std::vector<bool> overflow{false, true, false, false, true};
  int64_t taken = 0;
  for (size_t k = 0; k < overflow.size(); ++k) {
    Tensor loss = (w * w).sum();
    scaler.scale(loss).backward();
    if (overflow[k]) w.grad().fill_(std::numeric_limits<float>::infinity());
    const Tensor before = w.detach().clone();
    const mt::amp::StepResult r = scaler.step(opt);
    EXPECT_EQ(static_cast<bool>(r), !overflow[k]) << "step " << k;
    EXPECT_EQ(r.stepped(), !overflow[k]);
    EXPECT_EQ(opt.last_step_skipped(), overflow[k]);
    if (overflow[k]) {
      EXPECT_EQ(bits(w), bits(before)) << "step " << k;
    }
    taken += overflow[k] ? 0 : 1;
    scaler.update();
    sched.step();
    opt.zero_grad();
  }
  EXPECT_EQ(scaler.steps_taken(), taken);
  EXPECT_EQ(scaler.steps_skipped(), 2);
  EXPECT_EQ(sched.last_epoch(), taken);  // skipped steps do not advance the schedule
  const mt::amp::GradScalerState s = *scaler.state_dict();
  EXPECT_EQ(s.steps_taken, taken);
  EXPECT_EQ(s.steps_skipped, 2);
  // Loading resets the device counts in place and restarts from the loaded values.
  mt::amp::GradScalerState loaded = s;
  loaded.steps_taken = 100;
  loaded.steps_skipped = 7;
  scaler.load_state_dict(loaded);
  EXPECT_EQ(scaler.steps_taken(), 100);
  EXPECT_EQ(scaler.steps_skipped(), 7);
  scaler.scale((w * w).sum()).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.steps_taken(), 101);
  EXPECT_EQ(scaler.steps_skipped(), 7);
}
