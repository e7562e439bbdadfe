// distributed::ZeroRedundancyOptimizer across real processes (2 and 4 Gloo ranks on the CPU,
// started by tests/dist_test_util.h). Each rank trains a plain-DDP twin of the model beside the
// ZeRO one, on the same data, so the comparisons need no extra communication.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "ddp_test_util.h"
#include "distributed/zero.h"
#include "nn/clip_grad.h"
#include "nn/optim/adam.h"
#include "nn/optim/muon.h"
#include "nn/optim/nadam.h"
#include "runner/training/checkpoint.h"

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

// Muon for the three weight matrices (each stepped whole by one rank), AdamW for the biases
// (sharded by element): the hybrid of the GPT-2 speedrun.
// `float32`: the iteration in float32 (ns_float32) rather than PyTorch's bfloat16.
optim::MuonOptions muon_options(bool float32 = false) {
  optim::MuonOptions o;
  o.lr = 0.02;
  o.weight_decay = 0.05;
  o.ns_float32 = float32;
  return o;
}

std::vector<optim::ParamGroup> muon_param_groups(const nn::Module& m, bool float32 = false) {
  std::vector<Tensor> matrices, others;
  for (const Tensor& p : m.parameters()) (p.dim() == 2 ? matrices : others).push_back(p);
  optim::MuonOptions adamw = muon_options(float32);
  adamw.use_muon = false;
  adamw.lr = 0.01;
  return {optim::ParamGroup(matrices, muon_options(float32)), optim::ParamGroup(others, adamw)};
}

Zero::Factory muon_factory(bool float32 = false) {
  return [float32](std::vector<optim::ParamGroup> groups) {
    return std::make_shared<optim::Muon>(std::move(groups), muon_options(float32));
  };
}

// The optimizer a scenario runs: AdamW over one group, or Muon + AdamW (MuonFloat32: with the
// iteration in float32).
enum class Opt { AdamW, Muon, MuonFloat32 };

std::vector<optim::ParamGroup> param_groups(Opt opt, const nn::Module& m) {
  if (opt == Opt::AdamW) return {optim::ParamGroup(m.parameters())};
  return muon_param_groups(m, opt == Opt::MuonFloat32);
}

Zero::Factory factory(Opt opt) {
  return opt == Opt::AdamW ? adamw_factory() : muon_factory(opt == Opt::MuonFloat32);
}

// The plain twin's optimizer, built by the same factory.
std::shared_ptr<optim::Optimizer> plain(Opt opt, const nn::Module& m) {
  return factory(opt)(param_groups(opt, m));
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

// One training step of the ZeRO model; returns the gradient's norm when it clips.
double zero_step(Zero& zero, nn::DistributedDataParallel& ddp, int step, int rank, double clip) {
  zero.zero_grad();
  loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
  zero.prepare_gradients();
  const double norm = clip > 0 ? zero.clip_grad_norm_(clip) : 0.0;
  zero.optimizer().step();
  zero.gather_parameters();
  return norm;
}

// For a twin whose DDP reduce-scatters (as ZeRO-2's): every rank's reduced slices all-gathered
// into the parameters' .grad, so that it steps the gradients ZeRO-2 sums, in the same order.
void gradients_from_slices(nn::DistributedDataParallel& ddp, const nn::Module& m) {
  std::vector<Tensor> params;
  for (const Tensor& p : m.parameters())
    if (p.requires_grad()) params.push_back(p);
  mt::autograd::NoGradGuard no_grad;
  for (const auto& b : ddp.gradient_buckets()) {
    Tensor all = mt::empty({b.padded_numel}, b.shard.dtype());
    ddp.process_group().allgather(all, b.shard)->wait();
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor p = params[b.params[k]];
      p.set_grad(all.narrow(0, b.offsets[k], p.numel()).reshape(p.shape()).clone());
    }
  }
}

// The same step of the plain-DDP twin.
double ddp_step(optim::Optimizer& opt, nn::DistributedDataParallel& ddp, const nn::Module& m,
                int step, int rank, double clip) {
  opt.zero_grad();
  loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
  if (ddp.options().reduce_scatter_gradients) gradients_from_slices(ddp, m);
  const double norm = clip > 0 ? nn::clip_grad_norm_(m.parameters(), clip) : 0.0;
  opt.step();
  return norm;
}

// 60 steps (weight decay, and with `clip` the norm clipped every step) of ZeRO stage 1 or 2
// against plain DDP. Without clipping each element sees the same arithmetic: Gloo reduces the
// same sums (its reduce-scatter is an allreduce and a slice), so on 2 ranks — a sum of two terms
// in either order — the parameters are equal bit for bit; so are Muon's matrices, each
// orthogonalised by its owner from the same gradient as on every DDP rank. The clipped norm is a
// float64 sum of the shards' squares instead of a float32 norm of norms, so there they agree
// within 1e-6.
// Muon on 4 ranks: stage 2's reduce-scatter sums in another order than DDP's all-reduce of other
// bucket sizes (gradients ~1e-9 apart), and the iteration in bfloat16 can turn that into a
// bfloat16 step of an update (10% apart after 60 steps, measured; 7e-5 with ns_float32). So there
// the twin reduce-scatters too and all-gathers every slice into its .grad: the same sums, and
// the comparison is of the sharded step alone, bit for bit. Clipped, Muon runs its iteration in
// float32 (ns_float32): the two norms' last-bit difference moves Muon's parameters by 3.5e-5 in
// 60 steps (measured), so they are compared within 1e-4 — a matrix counted twice or left out of
// the norm moves it by 1% and the parameters by far more — and the first step's norms, of the
// same gradients, within 1e-7.
void versus_ddp(Report& r, int stage, double clip, Opt which = Opt::AdamW) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank), twin = make_wide(rank);
  const bool same_sums = which != Opt::AdamW && stage == 2 && pg->size() > 2;
  nn::DistributedDataParallel zddp(net, pg, small_buckets(stage));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(same_sums ? 2 : 1));
  Zero zero(zddp, param_groups(which, *net), factory(which), stage);
  const auto opt_ptr = plain(which, *twin);
  optim::Optimizer& opt = *opt_ptr;
  // With Muon a rank may own only whole matrices, or (4 ranks, stage 2) nothing.
  if (which == Opt::AdamW && zero.owned_numel() <= 0) r.fail("rank owns no element");
  for (int step = 0; step < 60; ++step) {
    const double a = zero_step(zero, zddp, step, rank, clip);
    const double b = ddp_step(opt, tddp, *twin, step, rank, clip);
    if (step == 0 && !(std::fabs(a - b) <= 1e-7 * b))
      r.fail("first step: ZeRO's gradient norm " + std::to_string(a) + ", DDP's " +
             std::to_string(b));
  }
  expect_same_on_every_rank(r, *pg, *net, "after 60 steps");
  const auto got = flat_params(*net), want = flat_params(*twin);
  const double rel = relative_difference(got, want);
  std::ostringstream s;
  s << (which == Opt::AdamW  ? "AdamW, "
        : which == Opt::Muon ? "Muon, "
                             : "Muon (float32), ")
    << "stage " << stage << " on " << pg->size() << " ranks, clip " << clip
    << ": relative difference " << rel;
  // Where they differ most, to say which parameter.
  std::string worst;
  double worst_diff = 0;
  const auto named = twin->named_parameters();
  size_t k = 0;
  for (const auto& [name, p] : net->named_parameters()) {
    const auto a = p.to_vector<float>(), b = named.at(k++).second.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(double(a[i]) - double(b[i])) > worst_diff) {
        worst_diff = std::fabs(double(a[i]) - double(b[i]));
        worst = name;
      }
  }
  if (!worst.empty()) s << " (largest in " << worst << ")";
  if (rank == 0) std::cout << s.str() << "\n";
  // Muon's stage 1 all-reduces as DDP does, so its owners see DDP's gradients on 4 ranks too.
  const bool bitwise = pg->size() == 2 || same_sums || (which == Opt::Muon && stage == 1);
  if (clip == 0 && bitwise && !bitwise_equal(got, want))
    r.fail(s.str() + " (expected bitwise equal)");
  const double tolerance = which == Opt::MuonFloat32 && clip > 0 ? 1e-4 : 1e-6;
  if (!(rel <= tolerance)) r.fail(s.str());
}

void scenario_versus_ddp_1(Report& r) { versus_ddp(r, 1, 0.0); }
void scenario_versus_ddp_2(Report& r) { versus_ddp(r, 2, 0.0); }
void scenario_clipped_1(Report& r) { versus_ddp(r, 1, 0.05); }
void scenario_clipped_2(Report& r) { versus_ddp(r, 2, 0.05); }
void scenario_muon_versus_ddp_1(Report& r) { versus_ddp(r, 1, 0.0, Opt::Muon); }
void scenario_muon_versus_ddp_2(Report& r) { versus_ddp(r, 2, 0.0, Opt::Muon); }
void scenario_muon_clipped_2(Report& r) { versus_ddp(r, 2, 0.05, Opt::MuonFloat32); }

// Whole matrices go to ranks largest first, each to the least loaded: of fc2 (13 x 33 = 429
// elements), fc1 (33 x 6 = 198) and fc3 (3 x 13 = 39), 2 ranks own {fc2} and {fc1, fc3}
// (429 / 237); 4 ranks own {fc2}, {fc1}, {fc3} and none. A rank steps exactly its own, with
// momentum buffers shaped as the matrices; the biases are sharded by element as before.
void muon_ownership(Report& r, int stage) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank);
  nn::DistributedDataParallel ddp(net, pg, small_buckets(stage));
  Zero zero(ddp, muon_param_groups(*net), muon_factory(), stage);
  const std::vector<std::vector<std::vector<std::vector<int64_t>>>> want = {
      {}, {}, {{{13, 33}}, {{33, 6}, {3, 13}}}, {}, {{{13, 33}}, {{33, 6}}, {{3, 13}}, {}}};
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor& p : zero.optimizer().param_groups()[0].params)
    shapes.push_back(p.shape().vec());
  if (shapes != want.at(static_cast<size_t>(pg->size())).at(static_cast<size_t>(rank)))
    r.fail("rank " + std::to_string(rank) + " owns " + std::to_string(shapes.size()) +
           " matrices, not the expected ones");
  zero_step(zero, ddp, 0, rank, 0.0);
  size_t index = 0;
  for (const Tensor& p : zero.optimizer().param_groups()[0].params) {
    const auto* st = zero.optimizer().state(index++);
    if (st == nullptr || st->buffers.at("momentum_buffer").shape() != p.shape())
      r.fail("an owned matrix has no momentum buffer of its shape after a step");
  }
  for (const Tensor& p : zero.optimizer().param_groups()[1].params)
    if (p.dim() != 1) r.fail("an AdamW shard is not a 1-D slice");
  // The owned matrices' elements and this rank's slices of the biases.
  int64_t whole = 0;
  for (const Tensor& p : zero.optimizer().param_groups()[0].params) whole += p.numel();
  if (whole > zero.owned_numel()) r.fail("owned_numel leaves out the whole matrices");
}

void scenario_muon_ownership_1(Report& r) { muon_ownership(r, 1); }
void scenario_muon_ownership_2(Report& r) { muon_ownership(r, 2); }

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
void overflow(Report& r, int stage, Opt which = Opt::AdamW) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank);
  nn::DistributedDataParallel ddp(net, pg, small_buckets(stage));
  Zero zero(ddp, param_groups(which, *net), factory(which), stage);
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
// Rank 1's first Muon matrix (fc1's weight, whole) gets the inf.
void scenario_muon_overflow_2(Report& r) { overflow(r, 2, Opt::Muon); }

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

std::string checkpoint_name(Opt which) {
  return which == Opt::Muon ? "zero-muon.ckpt" : "zero.ckpt";
}

// 2 ranks, ZeRO-2: 10 steps, then a checkpoint (rank 0 writes, rank 1 takes part). The file's
// optimizer state is the plain twin's, bit for bit (2 ranks: the same sums); with Muon, the
// momentum buffers come from the matrices' owners.
void save(Report& r, Opt which) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_wide(rank), twin = make_wide(rank);
  nn::DistributedDataParallel zddp(net, pg, small_buckets(2));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(1));
  Zero zero(zddp, param_groups(which, *net), factory(which), 2);
  const auto opt_ptr = plain(which, *twin);
  optim::Optimizer& opt = *opt_ptr;
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
    mt::runner::save_checkpoint((dir / checkpoint_name(which)).string(), parts);
  } else {
    (void)zero.consolidated_state_dict();
  }
  std::string why;
  if (!same_state(zero.consolidated_state_dict(), opt.state_dict(), &why))
    r.fail("consolidated state differs from plain DDP's: " + why);
  pg->barrier()->wait();
}

void scenario_save(Report& r) { save(r, Opt::AdamW); }
void scenario_muon_save(Report& r) { save(r, Opt::Muon); }

// 4 ranks resume the 2-rank checkpoint: ZeRO-1 takes its slices (Muon: its whole matrices,
// owned otherwise than on 2 ranks), a plain optimizer loads the same file (it is an unsharded
// run's), the consolidated state equals what the plain one loaded, and 10 more steps agree with
// plain DDP within 1e-6.
void resume_elsewhere(Report& r, Opt which) {
  auto pg = init();
  const int rank = pg->rank();
  const fs::path file = shared_dir() / checkpoint_name(which);
  auto net = make_wide(rank + 7), twin = make_wide(rank + 9);
  nn::DistributedDataParallel zddp(net, pg, small_buckets(1));
  nn::DistributedDataParallel tddp(twin, pg, small_buckets(1));
  Zero zero(zddp, param_groups(which, *net), factory(which), 1);
  const auto opt_ptr = plain(which, *twin);
  optim::Optimizer& opt = *opt_ptr;
  mt::runner::CheckpointParts zparts;
  zparts.model = net.get();
  zparts.optimizer = &zero.optimizer();
  zparts.zero = &zero;
  zparts.rng = false;
  mt::runner::load_checkpoint(file.string(), zparts);
  mt::runner::CheckpointParts tparts;
  tparts.model = twin.get();
  tparts.optimizer = opt_ptr.get();
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

void scenario_resume_elsewhere(Report& r) { resume_elsewhere(r, Opt::AdamW); }
void scenario_muon_resume_elsewhere(Report& r) { resume_elsewhere(r, Opt::Muon); }

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

// Muon alone over the 3 matrices on 4 ranks: one rank would own nothing to step. Refused on every
// rank, before any collective.
void scenario_muon_too_many_ranks(Report& r) {
  auto pg = init();
  auto net = make_wide(pg->rank());
  std::vector<Tensor> matrices;
  for (Tensor p : net->parameters()) {
    if (p.dim() == 2) {
      matrices.push_back(p);
    } else {
      p.set_requires_grad(false);
    }
  }
  nn::DistributedDataParallel ddp(net, pg, small_buckets(1));
  try {
    Zero zero(ddp, {optim::ParamGroup(matrices, muon_options())}, muon_factory(), 1);
    r.fail("no error for 3 whole matrices on 4 ranks");
  } catch (const mt::Error& e) {
    if (std::string(e.what()).find("use at most 3 ranks") == std::string::npos)
      r.fail(std::string("unexpected error: ") + e.what());
  }
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
    {"muon_versus_ddp_1", scenario_muon_versus_ddp_1},
    {"muon_versus_ddp_2", scenario_muon_versus_ddp_2},
    {"muon_clipped_2", scenario_muon_clipped_2},
    {"muon_ownership_1", scenario_muon_ownership_1},
    {"muon_ownership_2", scenario_muon_ownership_2},
    {"muon_overflow_2", scenario_muon_overflow_2},
    {"muon_save", scenario_muon_save},
    {"muon_resume_elsewhere", scenario_muon_resume_elsewhere},
    {"muon_too_many_ranks", scenario_muon_too_many_ranks},
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
  // The scenarios save (2 ranks, ZeRO-2) and resume_elsewhere (4 ranks, ZeRO-1) of `which`, in a
  // folder of their own (shared_dir() of the ranks).
  static void saved_on_two_resumed_on_four(Opt which) {
    const std::string prefix = which == Opt::Muon ? "muon_" : "";
    const fs::path dir =
        fs::temp_directory_path() / ("mantissa-test-zero-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    expect_all_ok(prefix + "save", 2);
    ASSERT_TRUE(fs::exists(dir / checkpoint_name(which)));
    expect_all_ok(prefix + "resume_elsewhere", 4);
    fs::remove_all(dir);
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
  saved_on_two_resumed_on_four(Opt::AdamW);
}
TEST_F(ZeroRedundancy, RefusesWhatItCannotShard) { expect_all_ok("refusals", 1); }

TEST_F(ZeroRedundancy, MuonStage1EqualsDdpBitwiseOnTwoAndFourRanks) {
  expect_all_ok("muon_versus_ddp_1", 2);
  expect_all_ok("muon_versus_ddp_1", 4);
}
// On 4 ranks against a twin that sums the gradients as stage 2 does (see versus_ddp).
TEST_F(ZeroRedundancy, MuonStage2EqualsDdpBitwiseOnTwoRanksAndFourWithTheSameSums) {
  expect_all_ok("muon_versus_ddp_2", 2);
  expect_all_ok("muon_versus_ddp_2", 4);
}
TEST_F(ZeroRedundancy, MuonWithGlobalNormClippingMatchesDdp) { expect_all_ok("muon_clipped_2", 4); }
TEST_F(ZeroRedundancy, MuonGivesWholeMatricesToRanksBalancedBySize) {
  expect_all_ok("muon_ownership_1", 2);
  expect_all_ok("muon_ownership_2", 4);
}
TEST_F(ZeroRedundancy, MuonAnInfInOneRanksMatrixSkipsTheStepOnEveryRank) {
  expect_all_ok("muon_overflow_2", 2);
}
TEST_F(ZeroRedundancy, MuonCheckpointOfTwoRanksResumesOnFour) {
  saved_on_two_resumed_on_four(Opt::Muon);
}
TEST_F(ZeroRedundancy, MuonRefusesMoreRanksThanWholeMatricesWithNothingElse) {
  expect_all_ok("muon_too_many_ranks", 4);
}

}  // namespace
