// distributed::ZeroRedundancyOptimizer across real processes (2 and 4 Gloo ranks on the CPU,
// started by tests/dist_test_util.h). Each rank trains a plain-DDP twin of the model beside the
// ZeRO one, on the same data, so the comparisons need no extra communication.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "ddp_test_util.h"
#include "distributed/zero.h"
#include "nn/clip_grad.h"
#include "nn/optim/adam.h"
#include "nn/optim/nadam.h"
#include "runner/checkpoint.h"

namespace {

using namespace mantissa::testing::ddp;
using mt::testing::exited_ok;
using mt::testing::Report;
using mt::testing::run_ranks;
namespace optim = mantissa::optim;
namespace fs = std::filesystem;
using Zero = dist::ZeroRedundancyOptimizer;

// Parameter sizes that do not divide by 2 or 4, and buckets of a few hundred bytes, so that the
// ranks' slices cut through parameters and buckets have padding.
struct Wide : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  explicit Wide(int64_t hidden) {
    fc1 = register_module("fc1", nn::Linear(6, hidden));
    fc2 = register_module("fc2", nn::Linear(hidden, 13));
    fc3 = register_module("fc3", nn::Linear(13, 3));
  }
  Tensor forward(const Tensor& x) { return fc3(fc2(fc1(x).tanh()).tanh()); }
};

std::shared_ptr<Wide> make_wide(int seed, int64_t hidden = 33) {
  mt::manual_seed(static_cast<uint64_t>(200 + seed));
  return std::make_shared<Wide>(hidden);
}

nn::DistributedDataParallelOptions small_buckets(int stage) {
  nn::DistributedDataParallelOptions o;
  o.first_bucket_mb = 300.0 / (1 << 20);
  o.bucket_cap_mb = 700.0 / (1 << 20);
  o.reduce_scatter_gradients = stage == 2;
  return o;
}

optim::AdamWOptions adamw_options() {
  optim::AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.05;
  return o;
}

Zero::Factory adamw_factory() {
  return [](std::vector<optim::ParamGroup> groups) {
    return std::make_shared<optim::AdamW>(std::move(groups), adamw_options());
  };
}

// The largest |a - b| over the largest |b|: the parameters' relative difference.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return a.size() == b.size() ? diff / scale : std::numeric_limits<double>::infinity();
}

// One training step of the ZeRO model.
void zero_step(Zero& zero, nn::DistributedDataParallel& ddp, int step, int rank, double clip) {
  zero.zero_grad();
  loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
  zero.prepare_gradients();
  if (clip > 0) zero.clip_grad_norm_(clip);
  zero.optimizer().step();
  zero.gather_parameters();
}

// The same step of the plain-DDP twin.
void ddp_step(optim::Optimizer& opt, nn::DistributedDataParallel& ddp, const nn::Module& m,
              int step, int rank, double clip) {
  opt.zero_grad();
  loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
  if (clip > 0) nn::clip_grad_norm_(m.parameters(), clip);
  opt.step();
}

// 60 AdamW steps (weight decay, and with `clip` the norm clipped every step) of ZeRO stage 1 or 2
// against plain DDP. Without clipping each element sees the same arithmetic: Gloo reduces the
// same sums (its reduce-scatter is an allreduce and a slice), so on 2 ranks — a sum of two terms
// in either order — the parameters are equal bit for bit. The clipped norm is a float64 sum of
// the shards' squares instead of a float32 norm of norms, so there they agree within 1e-6.
void versus_ddp(Report& r, int stage, double clip) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank), twin = make_wide(rank);
  nn::DistributedDataParallel zddp(net, pg, small_buckets(stage));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(1));
  Zero zero(zddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), stage);
  optim::AdamW opt(twin->parameters(), adamw_options());
  if (zero.owned_numel() <= 0) r.fail("rank owns no element");
  for (int step = 0; step < 60; ++step) {
    zero_step(zero, zddp, step, rank, clip);
    ddp_step(opt, tddp, *twin, step, rank, clip);
  }
  expect_same_on_every_rank(r, *pg, *net, "after 60 steps");
  const auto got = flat_params(*net), want = flat_params(*twin);
  const double rel = relative_difference(got, want);
  std::ostringstream s;
  s << "stage " << stage << " on " << pg->size() << " ranks, clip " << clip
    << ": relative difference " << rel;
  if (clip == 0 && pg->size() == 2 && !bitwise_equal(got, want))
    r.fail(s.str() + " (expected bitwise equal)");
  if (!(rel <= 1e-6)) r.fail(s.str());
}

void scenario_versus_ddp_1(Report& r) { versus_ddp(r, 1, 0.0); }
void scenario_versus_ddp_2(Report& r) { versus_ddp(r, 2, 0.0); }
void scenario_clipped_1(Report& r) { versus_ddp(r, 1, 0.05); }
void scenario_clipped_2(Report& r) { versus_ddp(r, 2, 0.05); }

int64_t state_bytes(const optim::Optimizer& opt) {
  int64_t bytes = 0;
  size_t index = 0;
  for (const auto& g : opt.param_groups())
    for (size_t i = 0; i < g.params.size(); ++i, ++index)
      if (const auto* st = opt.state(index))
        for (const auto& [name, t] : st->buffers) bytes += t.nbytes();
  return bytes;
}

// Per rank, the optimizer state is K * Psi / N bytes (the ZeRO paper's formula; K = 8 for
// float32 Adam moments, 12 with float32 master weights of bfloat16 parameters), and with stage
// 2 the gradient 4 * Psi / N (float32) or 2 * Psi / N (bfloat16): within 5%.
void state_bytes_case(Report& r, int stage, bool bf16) {
  auto pg = init();
  const int w = pg->size();
  auto net = make_wide(pg->rank(), 512);
  if (bf16) net->to(mt::kBFloat16);
  nn::DistributedDataParallelOptions o;
  o.reduce_scatter_gradients = stage == 2;
  nn::DistributedDataParallel ddp(net, pg, o);
  Zero zero(
      ddp, {optim::ParamGroup(net->parameters())},
      [bf16](std::vector<optim::ParamGroup> g) {
        auto opt = std::make_shared<optim::AdamW>(std::move(g), adamw_options());
        opt->set_master_weights(bf16);
        return opt;
      },
      stage);
  zero.zero_grad();
  Tensor x = inputs(0, pg->rank(), 4), y = targets(0, pg->rank(), 4);
  if (bf16) {
    x = x.to(mt::kBFloat16);
    y = y.to(mt::kBFloat16);
  }
  loss_of(ddp(x), y).backward();
  zero.prepare_gradients();
  zero.optimizer().step();
  zero.gather_parameters();
  int64_t psi = 0;
  for (const Tensor& p : net->parameters()) psi += p.numel();
  const double k = bf16 ? 12.0 : 8.0;
  const double want = k * double(psi) / w, got = double(state_bytes(zero.optimizer()));
  std::ostringstream s;
  s << "stage " << stage << (bf16 ? " bf16 + master" : " float32") << " on " << w
    << " ranks: optimizer state " << got << " bytes, formula " << want;
  if (std::fabs(got - want) > 0.05 * want) r.fail(s.str());
  if (stage == 2) {
    const double grad_want = (bf16 ? 2.0 : 4.0) * double(psi) / w;
    const double grad_got = double(zero.gradient_bytes());
    if (std::fabs(grad_got - grad_want) > 0.05 * grad_want)
      r.fail(s.str() + "; gradient " + std::to_string(grad_got) + " bytes, formula " +
             std::to_string(grad_want));
    for (const Tensor& p : net->parameters())
      if (p.grad().defined()) r.fail("stage 2 left a full .grad on a parameter");
  }
}

void scenario_state_bytes(Report& r) {
  for (int stage : {1, 2})
    for (bool bf16 : {false, true}) state_bytes_case(r, stage, bf16);
}

// An inf in one rank's shard only (rank 1's first shard gradient) skips the step on every rank:
// the scaler's inf check is the maximum over the ranks. The parameters stay as they were, the
// scale backs off everywhere, and the next step goes ahead.
void overflow(Report& r, int stage) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank);
  nn::DistributedDataParallel ddp(net, pg, small_buckets(stage));
  Zero zero(ddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), stage);
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions{.init_scale = 1024.0});
  scaler.set_found_inf_hook(zero.found_inf_hook());
  for (int step = 0; step < 3; ++step) {
    const auto before = flat_params(*net);
    zero.zero_grad();
    scaler.scale(loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4))).backward();
    zero.prepare_gradients();
    if (step == 1 && rank == 1) {
      mt::autograd::NoGradGuard no_grad;
      Tensor g = zero.optimizer().param_groups()[0].params[0].grad();
      g.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
    }
    const bool stepped = scaler.step(zero.optimizer()).stepped();
    scaler.update();
    zero.gather_parameters();
    const bool changed = !bitwise_equal(before, flat_params(*net));
    if (stepped != (step != 1) || changed != stepped)
      r.fail("step " + std::to_string(step) + ": stepped " + std::to_string(stepped) +
             ", parameters changed " + std::to_string(changed));
    expect_same_on_every_rank(r, *pg, *net, "step " + std::to_string(step));
  }
  if (scaler.get_scale() != 512.0)
    r.fail("scale " + std::to_string(scaler.get_scale()) + " after one overflow, expected 512");
}

void scenario_overflow_1(Report& r) { overflow(r, 1); }
void scenario_overflow_2(Report& r) { overflow(r, 2); }

fs::path shared_dir() {
  // The test process is every rank's parent.
  return fs::temp_directory_path() / ("mantissa-test-zero-" + std::to_string(getppid()));
}

bool same_state(const optim::OptimizerState& a, const optim::OptimizerState& b, std::string* why) {
  if (a.state.size() != b.state.size()) {
    *why = "state for " + std::to_string(a.state.size()) + " vs " + std::to_string(b.state.size()) +
           " parameters";
    return false;
  }
  for (const auto& [id, s] : a.state) {
    auto it = b.state.find(id);
    if (it == b.state.end() || it->second.step != s.step ||
        it->second.buffers.size() != s.buffers.size()) {
      *why = "parameter " + std::to_string(id) + ": step or entries differ";
      return false;
    }
    for (const auto& [key, t] : s.buffers) {
      auto u = it->second.buffers.find(key);
      if (u == it->second.buffers.end() || u->second.shape() != t.shape() ||
          !bitwise_equal(t.to(mt::kFloat32).to_vector<float>(),
                         u->second.to(mt::kFloat32).to_vector<float>())) {
        *why = "parameter " + std::to_string(id) + " entry " + key + " differs";
        return false;
      }
    }
  }
  return true;
}

// 2 ranks, ZeRO-2: 10 steps, then a checkpoint (rank 0 writes, rank 1 takes part). The file's
// optimizer state is the plain twin's, bit for bit (2 ranks: the same sums).
void scenario_save(Report& r) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank), twin = make_wide(rank);
  nn::DistributedDataParallel zddp(net, pg, small_buckets(2));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(1));
  Zero zero(zddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), 2);
  optim::AdamW opt(twin->parameters(), adamw_options());
  for (int step = 0; step < 10; ++step) {
    zero_step(zero, zddp, step, rank, 0.0);
    ddp_step(opt, tddp, *twin, step, rank, 0.0);
  }
  const fs::path dir = shared_dir();
  if (rank == 0) {
    mt::runner::CheckpointParts parts;
    parts.model = net.get();
    parts.optimizer = &zero.optimizer();
    parts.zero = &zero;
    parts.rng = false;
    mt::runner::save_checkpoint((dir / "zero.ckpt").string(), parts);
  } else {
    (void)zero.consolidated_state_dict();
  }
  std::string why;
  if (!same_state(zero.consolidated_state_dict(), opt.state_dict(), &why))
    r.fail("consolidated state differs from plain DDP's: " + why);
  pg->barrier()->wait();
}

// 4 ranks resume the 2-rank checkpoint: ZeRO-1 takes its slices, a plain optimizer loads the same
// file (it is an unsharded run's), the consolidated state equals what the plain one loaded, and
// 10 more steps agree with plain DDP within 1e-6.
void scenario_resume_elsewhere(Report& r) {
  auto pg = init();
  const int rank = pg->rank();
  const fs::path file = shared_dir() / "zero.ckpt";
  auto net = make_wide(rank + 7), twin = make_wide(rank + 9);
  nn::DistributedDataParallel zddp(net, pg, small_buckets(1));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(1));
  Zero zero(zddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), 1);
  optim::AdamW opt(twin->parameters(), adamw_options());
  mt::runner::CheckpointParts zparts;
  zparts.model = net.get();
  zparts.optimizer = &zero.optimizer();
  zparts.zero = &zero;
  zparts.rng = false;
  mt::runner::load_checkpoint(file.string(), zparts);
  mt::runner::CheckpointParts tparts;
  tparts.model = twin.get();
  tparts.optimizer = &opt;
  tparts.rng = false;
  mt::runner::load_checkpoint(file.string(), tparts);
  std::string why;
  if (!same_state(zero.consolidated_state_dict(), opt.state_dict(), &why))
    r.fail("the state loaded on 4 ranks differs from the file's: " + why);
  if (!bitwise_equal(flat_params(*net), flat_params(*twin))) r.fail("loaded parameters differ");
  for (int step = 10; step < 20; ++step) {
    zero_step(zero, zddp, step, rank, 0.0);
    ddp_step(opt, tddp, *twin, step, rank, 0.0);
  }
  expect_same_on_every_rank(r, *pg, *net, "after resuming");
  const double rel = relative_difference(flat_params(*net), flat_params(*twin));
  if (!(rel <= 1e-6)) r.fail("after resuming: relative difference " + std::to_string(rel));
}

// What is refused, on one rank.
void scenario_refusals(Report& r) {
  auto pg = init();
  auto net = make_wide(0);
  nn::DistributedDataParallel ddp(net, pg, small_buckets(1));
  auto expect_throw = [&r](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      r.fail("no error (expected one mentioning '" + part + "')");
    } catch (const mt::Error& e) {
      if (std::string(e.what()).find(part) == std::string::npos)
        r.fail(std::string("error without '") + part + "': " + e.what());
    }
  };
  expect_throw([&] { Zero(ddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), 2); },
               "reduce_scatter_gradients");
  expect_throw([&] { Zero(ddp, {optim::ParamGroup(net->parameters())}, adamw_factory(), 3); },
               "stage must be 1 or 2");
  auto params = net->parameters();
  params.pop_back();
  expect_throw([&] { Zero(ddp, {optim::ParamGroup(params)}, adamw_factory(), 1); },
               "is in none of the optimizer's groups");
  expect_throw(
      [&] {
        Zero(
            ddp, {optim::ParamGroup(net->parameters())},
            [](std::vector<optim::ParamGroup> g) {
              return std::make_shared<optim::NAdam>(std::move(g));
            },
            1);
      },
      "cannot be sharded");
}

const mt::testing::Scenarios kScenarios = {
    {"versus_ddp_1", scenario_versus_ddp_1},
    {"versus_ddp_2", scenario_versus_ddp_2},
    {"clipped_1", scenario_clipped_1},
    {"clipped_2", scenario_clipped_2},
    {"state_bytes", scenario_state_bytes},
    {"overflow_1", scenario_overflow_1},
    {"overflow_2", scenario_overflow_2},
    {"save", scenario_save},
    {"resume_elsewhere", scenario_resume_elsewhere},
    {"refusals", scenario_refusals},
};

[[maybe_unused]] const bool kRankProcess = mt::testing::run_rank_process_if_asked(kScenarios);

class ZeroRedundancy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::is_available(dist::Backend::Gloo))
      GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
  }
  static void expect_all_ok(const std::string& scenario, int world) {
    const auto results = run_ranks(scenario, world, std::chrono::seconds(60));
    for (size_t rank = 0; rank < results.size(); ++rank)
      EXPECT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
  }
};

TEST_F(ZeroRedundancy, Stage1EqualsDdpBitwiseOnTwoRanksAndWithin1e6OnFour) {
  expect_all_ok("versus_ddp_1", 2);
  expect_all_ok("versus_ddp_1", 4);
}
TEST_F(ZeroRedundancy, Stage2EqualsDdpBitwiseOnTwoRanksAndWithin1e6OnFour) {
  expect_all_ok("versus_ddp_2", 2);
  expect_all_ok("versus_ddp_2", 4);
}
TEST_F(ZeroRedundancy, GlobalNormClippingAcrossShardsMatchesDdp) {
  expect_all_ok("clipped_1", 2);
  expect_all_ok("clipped_2", 4);
}
TEST_F(ZeroRedundancy, StateAndGradientBytesPerRankFollowTheFormula) {
  expect_all_ok("state_bytes", 2);
  expect_all_ok("state_bytes", 4);
}
TEST_F(ZeroRedundancy, AnInfInOneRanksShardSkipsTheStepOnEveryRank) {
  expect_all_ok("overflow_1", 2);
  expect_all_ok("overflow_2", 2);
}
TEST_F(ZeroRedundancy, ACheckpointOfTwoRanksResumesOnFour) {
  const fs::path dir =
      fs::temp_directory_path() / ("mantissa-test-zero-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  expect_all_ok("save", 2);
  ASSERT_TRUE(fs::exists(dir / "zero.ckpt"));
  expect_all_ok("resume_elsewhere", 4);
  fs::remove_all(dir);
}
TEST_F(ZeroRedundancy, RefusesWhatItCannotShard) { expect_all_ok("refusals", 1); }

}  // namespace
