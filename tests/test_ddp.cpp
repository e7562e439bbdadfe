// nn::DistributedDataParallel across real processes (tests/dist_test_util.h starts 2-4 ranks on
// the CPU, meeting through Gloo). Each rank also trains a single-process reference itself, so
// the comparisons need no communication beyond DDP's own; "identical on every rank" is checked
// by an allgather of the parameters.
// In-process tests (a group of one) are in test_ddp_single.cpp.
#include <limits>
#include <set>

#include "ddp_test_util.h"

namespace {

using namespace mantissa::testing::ddp;
using mt::testing::exited_ok;
using mt::testing::Report;
using mt::testing::run_ranks;

// W ranks, B rows each, SGD with momentum, versus one process that accumulates the W
// micro-batches with each loss scaled by 1/W. For W = 2 they agree bitwise: DDP's gradient is
// g0/2 + g1/2 (halving is exact, and a sum of two terms does not depend on their order), and the
// reference's is 0.5*g0 accumulated with 0.5*g1, where scaling the loss by 0.5 halves every value
// of its backward exactly.
void scenario_matches_accumulation(Report& r) {
  auto pg = init();
  const int w = pg->size(), rank = pg->rank();
  const int64_t b = 4;
  auto net = make_net(rank);
  nn::DistributedDataParallel ddp(net, pg);
  auto ref = make_net(0);
  if (!bitwise_equal(flat_params(*net), flat_params(*ref)))
    r.fail("construction did not broadcast rank 0's parameters");
  mt::optim::SGD opt(net->parameters(), 0.1, {.momentum = 0.9});
  mt::optim::SGD ref_opt(ref->parameters(), 0.1, {.momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    loss_of(ddp(inputs(step, rank, b)), targets(step, rank, b)).backward();
    opt.step();
    expect_same_on_every_rank(r, *pg, *net, "step " + std::to_string(step));

    ref_opt.zero_grad();
    for (int part = 0; part < w; ++part)
      (loss_of(ref->forward(inputs(step, part, b)), targets(step, part, b)) * (1.0 / w)).backward();
    ref_opt.step();
    if (!bitwise_equal(flat_params(*net), flat_params(*ref)))
      r.fail("step " + std::to_string(step) + ": differs from 1 process accumulating " +
             std::to_string(w) + " micro-batches");
  }
  if (!ddp.buckets_rebuilt()) r.fail("buckets were not rebuilt after the first iteration");
}

// 4 ranks against 1 process on the whole 4B batch: the sums run in another order (Gloo's over
// ranks, the matmul's over rows), so they agree within float32 rounding, not bitwise.
void scenario_matches_big_batch(Report& r) {
  auto pg = init();
  const int w = pg->size(), rank = pg->rank();
  const int64_t b = 3;
  auto net = make_net(rank);
  nn::DistributedDataParallel ddp(net, pg);
  auto ref = make_net(0);
  mt::optim::SGD opt(net->parameters(), 0.1);
  mt::optim::SGD ref_opt(ref->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    loss_of(ddp(inputs(step, rank, b)), targets(step, rank, b)).backward();
    opt.step();
    expect_same_on_every_rank(r, *pg, *net, "step " + std::to_string(step));
    std::vector<Tensor> xs, ys;
    for (int part = 0; part < w; ++part) {
      xs.push_back(inputs(step, part, b));
      ys.push_back(targets(step, part, b));
    }
    ref_opt.zero_grad();
    loss_of(ref->forward(mt::cat(xs)), mt::cat(ys)).backward();
    ref_opt.step();
  }
  const auto got = flat_params(*net), want = flat_params(*ref);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-6 + 1e-5 * std::fabs(want[i])) {
      r.fail("parameter element " + std::to_string(i) + " is " + std::to_string(got[i]) +
             ", the 4B process has " + std::to_string(want[i]));
      break;
    }
  }
}

// A process group that forwards to Gloo and records, for each allreduce, its size and which
// parameters still had no gradient when it was issued.
class RecordingGroup final : public dist::ProcessGroup {
 public:
  explicit RecordingGroup(std::shared_ptr<dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->timeout()), inner_(std::move(inner)) {}
  std::string backend() const override { return inner_->backend(); }
  mantissa::Device device() const override { return inner_->device(); }
  std::shared_ptr<dist::Work> allreduce(const Tensor& t, dist::ReduceOp op) override {
    allreduces.push_back({t.numel(), probe ? probe() : std::set<std::string>{}});
    return inner_->allreduce(t, op);
  }
  std::shared_ptr<dist::Work> broadcast(const Tensor& t, int root) override {
    ++broadcasts;
    return inner_->broadcast(t, root);
  }
  std::shared_ptr<dist::Work> allgather(const Tensor& out, const Tensor& in) override {
    return inner_->allgather(out, in);
  }
  std::shared_ptr<dist::Work> reduce_scatter(const Tensor& out, const Tensor& in,
                                             dist::ReduceOp op) override {
    return inner_->reduce_scatter(out, in, op);
  }
  std::shared_ptr<dist::Work> barrier() override { return inner_->barrier(); }

  struct Call {
    int64_t numel;
    std::set<std::string> without_grad;
  };
  std::vector<Call> allreduces;
  int broadcasts = 0;
  std::function<std::set<std::string>()> probe;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

std::set<std::string> params_without_grad(const nn::Module& m) {
  std::set<std::string> out;
  for (const auto& [name, p] : m.named_parameters())
    if (!p.grad().defined()) out.insert(name);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// One parameter per bucket (a tiny cap). As in PyTorch, the first iteration reduces a single
// bucket once every gradient is in (registration order need not be backward's order); the
// second forward rebuilds the buckets in the order the gradients became ready, and from then on
// the first allreduce goes out while fc1 still waits for its gradients (communication overlaps
// backward).
void scenario_buckets(Report& r) {
  auto rec = std::make_shared<RecordingGroup>(init());
  auto net = make_net(rec->rank());
  nn::DistributedDataParallel::Options o;
  o.first_bucket_mb = 1e-9;
  o.bucket_cap_mb = 1e-9;
  nn::DistributedDataParallel ddp(net, rec, o);
  if (ddp.bucket_parameter_names() !=
      std::vector<std::vector<std::string>>{{"fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}})
    r.fail("initial buckets: not one bucket in reverse registration order");
  std::vector<std::string> ready_order;
  for (const auto& [name, p] : net->named_parameters())
    p.register_post_accumulate_grad_hook(
        [&, n = name](const Tensor&) { ready_order.push_back(n); });
  rec->probe = [&] { return params_without_grad(*net); };
  net->zero_grad();
  rec->allreduces.clear();
  loss_of(ddp(inputs(0, rec->rank(), 4)), targets(0, rec->rank(), 4)).backward();
  if (rec->allreduces.size() != 1 || !rec->allreduces.front().without_grad.empty())
    r.fail("the first iteration did not reduce one bucket after every gradient was ready");
  if (ddp.buckets_rebuilt()) r.fail("buckets rebuilt before the next forward");
  net->zero_grad();
  rec->allreduces.clear();
  const auto order = ready_order;
  Tensor out = ddp(inputs(1, rec->rank(), 4));
  if (!ddp.buckets_rebuilt()) r.fail("buckets not rebuilt at the second forward");
  std::vector<std::string> names;
  for (const auto& b : ddp.bucket_parameter_names()) names.push_back(join(b));
  if (join(names) != join(order) || names.size() != 4)
    r.fail("rebuilt buckets " + join(names) + " are not one per parameter in the ready order " +
           join(order));
  loss_of(out, targets(1, rec->rank(), 4)).backward();
  if (rec->allreduces.size() != 4) {
    r.fail("expected 4 bucket allreduces, got " + std::to_string(rec->allreduces.size()));
    return;
  }
  const auto& first = rec->allreduces.front();
  if (!first.without_grad.count("fc1.weight") || !first.without_grad.count("fc1.bias"))
    r.fail("the first bucket's allreduce was issued after fc1's gradients: no overlap");
  if (!rec->allreduces.back().without_grad.empty())
    r.fail("the last allreduce was issued before every gradient was ready");
}

// no_sync(): the first micro-batch's backward reduces nothing and leaves local gradients; the
// synced one reduces the accumulated sum: (a0 + b0)/2 + (a1 + b1)/2, computed here from each
// rank's micro-batches on a reference model.
void scenario_no_sync(Report& r) {
  auto rec = std::make_shared<RecordingGroup>(init());
  const int rank = rec->rank();
  auto net = make_net(rank);
  nn::DistributedDataParallel ddp(net, rec);
  auto ref = make_net(0);
  std::vector<Tensor> sums;
  for (int q = 0; q < 2; ++q) {
    ref->zero_grad();
    loss_of(ref->forward(inputs(0, 2 * q, 4)), targets(0, 2 * q, 4)).backward();
    loss_of(ref->forward(inputs(0, 2 * q + 1, 4)), targets(0, 2 * q + 1, 4)).backward();
    std::vector<Tensor> g;
    for (const Tensor& p : ref->parameters()) g.push_back(p.grad().clone());
    if (q == 0) {
      sums = g;
    } else {
      for (size_t i = 0; i < g.size(); ++i) sums[i] = sums[i] / 2.0 + g[i] / 2.0;
    }
  }
  net->zero_grad();
  rec->allreduces.clear();
  {
    auto guard = ddp.no_sync();
    loss_of(ddp(inputs(0, 2 * rank, 4)), targets(0, 2 * rank, 4)).backward();
  }
  if (!rec->allreduces.empty()) r.fail("a backward under no_sync() started an allreduce");
  loss_of(ddp(inputs(0, 2 * rank + 1, 4)), targets(0, 2 * rank + 1, 4)).backward();
  if (rec->allreduces.empty()) r.fail("the backward after no_sync() reduced nothing");
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!bitwise_equal(params[i].grad().to_vector<float>(), sums[i].to_vector<float>()))
      r.fail("parameter " + std::to_string(i) +
             ": the reduced gradient is not the average of "
             "the accumulated sums");
  }
}

// Copies src's parameters into dst's.
void copy_params(nn::Module& dst, const nn::Module& src) {
  mt::autograd::NoGradGuard no_grad;
  const auto d = dst.parameters(), s = src.parameters();
  for (size_t i = 0; i < d.size(); ++i) Tensor(d[i]).copy_(s[i]);
}

// The gradient of `extra` that rank 1's micro-batch gives a copy of `net` that uses it, halved:
// the average over 2 ranks when only rank 1 uses it (exact: halving is exact and 0 + x = x).
std::vector<float> half_rank1_extra_grad(const Net& net, int step) {
  auto ref = make_net(0, true);
  copy_params(*ref, net);
  ref->use_extra = true;
  loss_of(ref->forward(inputs(step, 1, 4)), targets(step, 1, 4)).backward();
  return (ref->extra.grad() / 2.0).to_vector<float>();
}

// A parameter that gets no gradient: without find_unused_parameters the next forward names it
// (no hang); with it, training goes on, a parameter no rank used keeps no gradient, and one that
// only rank 1 uses gets the average (its gradient / 2) on both ranks.
void scenario_unused(Report& r) {
  auto pg = init();
  const int rank = pg->rank();
  {
    auto net = make_net(rank, true);
    nn::DistributedDataParallel ddp(net, pg);
    loss_of(ddp(inputs(0, rank, 4)), targets(0, rank, 4)).backward();
    try {
      (void)ddp(inputs(1, rank, 4));
      r.fail("the forward after an iteration with unused parameters did not throw");
    } catch (const mt::Error& e) {
      const std::string what = e.what();
      for (const char* want :
           {"extra", "unused", "find_unused_parameters", "expected to have finished reduction"})
        if (what.find(want) == std::string::npos)
          r.fail(std::string("error lacks '") + want + "': " + what);
    }
  }
  pg->barrier()->wait();
  nn::DistributedDataParallel::Options o;
  o.find_unused_parameters = true;
  auto net = make_net(rank, true);
  net->use_extra = rank == 1;
  nn::DistributedDataParallel ddp(net, pg, o);
  mt::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    const auto want = half_rank1_extra_grad(*net, step);
    loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
    if (net->unused.grad().defined()) r.fail("a parameter no rank used got a gradient");
    if (!net->extra.grad().defined()) {
      r.fail("a parameter rank 1 used has no gradient");
    } else if (!bitwise_equal(net->extra.grad().to_vector<float>(), want)) {
      r.fail("step " + std::to_string(step) + ": extra's gradient is not rank 1's halved");
    }
    opt.step();
    expect_same_on_every_rank(r, *pg, *net, "find_unused step " + std::to_string(step));
  }
}

// static_graph with a graph that differs between ranks but not between iterations: only rank 1
// uses `extra`, no rank uses `unused`. The first iteration finds that out (one extra allreduce
// of the used flags); later ones reduce the buckets only, yet every rank still gets extra's
// average and leaves `unused` without a gradient.
void scenario_static_graph(Report& r) {
  auto rec = std::make_shared<RecordingGroup>(init());
  const int rank = rec->rank();
  nn::DistributedDataParallel::Options o;
  o.static_graph = true;
  auto net = make_net(rank, true);
  net->use_extra = rank == 1;
  nn::DistributedDataParallel ddp(net, rec, o);
  mt::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    const auto want = half_rank1_extra_grad(*net, step);
    rec->allreduces.clear();
    loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4)).backward();
    const size_t want_calls = step == 0 ? 2 : 1;  // one bucket, plus the flags at first
    if (rec->allreduces.size() != want_calls)
      r.fail("static_graph step " + std::to_string(step) + ": " +
             std::to_string(rec->allreduces.size()) + " allreduces, expected " +
             std::to_string(want_calls));
    if (net->unused.grad().defined()) r.fail("a parameter no rank used got a gradient");
    if (!net->extra.grad().defined() || !bitwise_equal(net->extra.grad().to_vector<float>(), want))
      r.fail("static_graph step " + std::to_string(step) +
             ": extra's gradient is not rank 1's "
             "halved");
    opt.step();
    expect_same_on_every_rank(r, *rec, *net, "static_graph step " + std::to_string(step));
  }
  if (!ddp.buckets_rebuilt()) r.fail("static_graph: buckets not rebuilt");
}

// An inf in rank 1's gradient at step 1: gradients are reduced before the scaler unscales them,
// so every rank finds it, skips that step and backs off; parameters and scaler state stay equal.
void scenario_grad_scaler(Report& r) {
  auto pg = init();
  const int rank = pg->rank();
  auto net = make_net(rank);
  nn::DistributedDataParallel ddp(net, pg);
  mt::optim::SGD opt(net->parameters(), 0.1);
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions{.init_scale = 1024.0});
  int step = 0;
  if (rank == 1)
    net->fc1->weight.register_hook([&](const Tensor& g) -> Tensor {
      if (step != 1) return Tensor();
      Tensor bad = g.clone();
      bad.view({-1}).narrow(0, 0, 1).fill_(std::numeric_limits<float>::infinity());
      return bad;
    });
  for (; step < 3; ++step) {
    opt.zero_grad();
    const auto before = flat_params(*net);
    scaler.scale(loss_of(ddp(inputs(step, rank, 4)), targets(step, rank, 4))).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    if (stepped != (step != 1))
      r.fail("step " + std::to_string(step) + ": stepped = " + std::to_string(stepped));
    if (step == 1 && !bitwise_equal(before, flat_params(*net)))
      r.fail("the skipped step changed the parameters");
    expect_same_on_every_rank(r, *pg, *net, "scaler step " + std::to_string(step));
    Tensor s = mt::full({1}, scaler.get_scale());
    Tensor all = mt::zeros({pg->size()});
    pg->allgather(all, s)->wait();
    for (float v : all.to_vector<float>())
      if (v != static_cast<float>(scaler.get_scale())) r.fail("scales differ across ranks");
  }
  if (scaler.get_scale() != 512.0) r.fail("scale " + std::to_string(scaler.get_scale()));
}

// Buffers: rank 0's at construction and before every forward (unless broadcast_buffers is off).
void scenario_buffers(Report& r) {
  auto pg = init();
  const int rank = pg->rank();
  for (bool broadcast : {true, false}) {
    auto net = make_net(rank);
    net->running.fill_(float(rank + 1));
    nn::DistributedDataParallel::Options o;
    o.broadcast_buffers = broadcast;
    nn::DistributedDataParallel ddp(net, pg, o);
    if (net->running.to_vector<float>() != std::vector<float>(3, 1.0f))
      r.fail("construction did not broadcast rank 0's buffer");
    net->running.fill_(float(10 * (rank + 1)));
    (void)ddp(inputs(0, rank, 2));
    const float want = broadcast ? 10.0f : float(10 * (rank + 1));
    if (net->running.to_vector<float>() != std::vector<float>(3, want))
      r.fail(std::string("buffer after forward with broadcast_buffers=") +
             (broadcast ? "true" : "false") + ": " +
             std::to_string(net->running.to_vector<float>()[0]));
  }
}

// Rank 1 wraps a model with a wider first layer: both ranks name the parameter and the shapes.
void scenario_shape_mismatch(Report& r) {
  auto pg = init();
  mt::manual_seed(1);
  struct Other : nn::Module {
    nn::Linear fc1{nullptr}, fc2{nullptr};
    Other(int64_t in) {
      fc1 = register_module("fc1", nn::Linear(in, 8));
      fc2 = register_module("fc2", nn::Linear(8, 3));
    }
    Tensor forward(const Tensor& x) { return fc2(fc1(x)); }
  };
  auto net = std::make_shared<Other>(pg->rank() == 0 ? 6 : 7);
  try {
    nn::DistributedDataParallel ddp(net, pg);
    r.fail("mismatched parameters were accepted");
  } catch (const mt::Error& e) {
    r.text << e.what() << "\n";
  }
}

// Rank 1 names a parameter differently (same shapes): both ranks name the two names.
void scenario_name_mismatch(Report& r) {
  auto pg = init();
  struct Renamed : nn::Module {
    Tensor w;
    explicit Renamed(const std::string& name) { w = register_parameter(name, mt::ones({3})); }
  };
  auto net = std::make_shared<Renamed>(pg->rank() == 0 ? "weight" : "weights");
  try {
    nn::DistributedDataParallel ddp(std::shared_ptr<nn::Module>(net), pg);
    r.fail("differently named parameters were accepted");
  } catch (const mt::Error& e) {
    r.text << e.what() << "\n";
  }
}

// Two parameters; `use_b` decides whether b reaches the loss.
struct TwoParams : nn::Module {
  Tensor a, b;
  bool use_b = true;
  TwoParams() {
    a = register_parameter("a", mt::ones({3}));
    b = register_parameter("b", mt::ones({3}));
  }
  Tensor forward(const Tensor& x) {
    Tensor y = x * a;
    if (use_b) y = y + b;
    return y;
  }
};

Tensor two_inputs(int step, int rank) {
  return mt::from_vector(std::vector<float>{float(step + 1), float(rank + 2), 0.5f}, mt::Shape{3});
}

// find_unused_parameters where rank 0 uses every parameter and rank 1 leaves b unused: every
// rank joins the allreduce of the used flags (not only those with an unused parameter), so the
// collectives pair up and b gets rank 0's gradient halved on both ranks.
void scenario_unused_on_one_rank(Report& r) {
  auto pg = init(std::chrono::seconds(5));
  const int rank = pg->rank();
  nn::DistributedDataParallel::Options o;
  o.find_unused_parameters = true;
  auto net = std::make_shared<TwoParams>();
  net->use_b = rank == 0;
  nn::DistributedDataParallel ddp(net, pg, o);
  mt::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    ddp(two_inputs(step, rank)).sum().backward();
    if (!net->b.grad().defined() || net->b.grad().to_vector<float>() != std::vector<float>(3, 0.5f))
      r.fail("step " + std::to_string(step) + ": b's gradient is not rank 0's (ones) halved");
    opt.step();
    expect_same_on_every_rank(r, *pg, *net, "unused on one rank, step " + std::to_string(step));
  }
}

// A forward through DDP under no-grad between the training forward and its backward (an eval or
// a target computed with the same model) leaves the iteration armed: the backward still reduces.
void scenario_no_grad_forward_between(Report& r) {
  auto pg = init(std::chrono::seconds(5));
  const int rank = pg->rank();
  auto net = make_net(rank);
  nn::DistributedDataParallel ddp(net, pg);
  mt::optim::SGD opt(net->parameters(), 0.1);
  opt.zero_grad();
  Tensor loss = loss_of(ddp(inputs(0, rank, 4)), targets(0, rank, 4));
  {
    mt::autograd::NoGradGuard no_grad;
    (void)ddp(inputs(9, rank, 4));
  }
  loss.backward();
  opt.step();
  expect_same_on_every_rank(r, *pg, *net, "after a no-grad forward between forward and backward");
}

// find_unused_parameters with no_sync: `extra` is used in the no_sync micro-batch on every rank
// but in none of the synced one. As in PyTorch it counts as used (usage is recorded under
// no_sync too), so its accumulated gradient is averaged.
void scenario_no_sync_only_parameter(Report& r) {
  auto pg = init(std::chrono::seconds(5));
  const int rank = pg->rank();
  nn::DistributedDataParallel::Options o;
  o.find_unused_parameters = true;
  auto net = make_net(rank, true);
  nn::DistributedDataParallel ddp(net, pg, o);
  mt::optim::SGD opt(net->parameters(), 0.1);
  opt.zero_grad();
  {
    auto guard = ddp.no_sync();
    net->use_extra = true;
    loss_of(ddp(inputs(0, 2 * rank, 4)), targets(0, 2 * rank, 4)).backward();
  }
  net->use_extra = false;
  loss_of(ddp(inputs(0, 2 * rank + 1, 4)), targets(0, 2 * rank + 1, 4)).backward();
  opt.step();
  expect_same_on_every_rank(r, *pg, *net, "no_sync then synced with a no_sync-only parameter");
}

const mt::testing::Scenarios kScenarios = {
    {"accumulation", scenario_matches_accumulation},
    {"big_batch", scenario_matches_big_batch},
    {"buckets", scenario_buckets},
    {"no_sync", scenario_no_sync},
    {"unused", scenario_unused},
    {"static_graph", scenario_static_graph},
    {"grad_scaler", scenario_grad_scaler},
    {"buffers", scenario_buffers},
    {"shape_mismatch", scenario_shape_mismatch},
    {"name_mismatch", scenario_name_mismatch},
    {"unused_on_one_rank", scenario_unused_on_one_rank},
    {"no_grad_forward_between", scenario_no_grad_forward_between},
    {"no_sync_only_parameter", scenario_no_sync_only_parameter},
};

[[maybe_unused]] const bool kRankProcess = mt::testing::run_rank_process_if_asked(kScenarios);

class Ddp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::is_available(dist::Backend::Gloo))
      GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
  }
  static void expect_all_ok(const std::string& scenario, int world) {
    const auto results = run_ranks(scenario, world, std::chrono::seconds(30));
    for (size_t rank = 0; rank < results.size(); ++rank)
      EXPECT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
  }
};

TEST_F(Ddp, TwoRanksMatchOneProcessAccumulatingTwoMicroBatchesBitwise) {
  expect_all_ok("accumulation", 2);
}
TEST_F(Ddp, FourRanksMatchOneProcessOnTheWholeBatch) { expect_all_ok("big_batch", 4); }
TEST_F(Ddp, BucketsStartDuringBackwardAndAreRebuiltFromTheReadyOrder) {
  expect_all_ok("buckets", 2);
}
TEST_F(Ddp, NoSyncAccumulatesLocallyAndTheNextBackwardReducesTheSum) {
  expect_all_ok("no_sync", 2);
}
TEST_F(Ddp, UnusedParameters) { expect_all_ok("unused", 2); }
TEST_F(Ddp, StaticGraphWithAParameterOnlyOneRankUses) { expect_all_ok("static_graph", 2); }
TEST_F(Ddp, InfOnOneRankSkipsTheStepOnEveryRank) { expect_all_ok("grad_scaler", 2); }
TEST_F(Ddp, BuffersAreBroadcastFromRankZero) { expect_all_ok("buffers", 2); }

TEST_F(Ddp, MismatchedParameterShapesNameTheParameterAndRanks) {
  const auto results = run_ranks("shape_mismatch", 2, std::chrono::seconds(30));
  ASSERT_EQ(results.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
    const std::string other = rank == 0 ? "1" : "0";
    EXPECT_NE(results[rank].report.find("parameter 'fc1.weight' has shape"), std::string::npos)
        << results[rank].report;
    EXPECT_NE(results[rank].report.find("on rank " + other), std::string::npos)
        << results[rank].report;
    EXPECT_NE(results[rank].report.find("[8, 6] (float32)"), std::string::npos)
        << results[rank].report;
    EXPECT_NE(results[rank].report.find("[8, 7] (float32)"), std::string::npos)
        << results[rank].report;
  }
}

TEST_F(Ddp, FindUnusedParametersWhenOnlyOneRankLeavesOneUnused) {
  expect_all_ok("unused_on_one_rank", 2);
}
TEST_F(Ddp, ANoGradForwardBeforeTheBackwardLeavesReductionOn) {
  expect_all_ok("no_grad_forward_between", 2);
}
TEST_F(Ddp, FindUnusedAveragesAParameterUsedOnlyUnderNoSync) {
  expect_all_ok("no_sync_only_parameter", 2);
}

TEST_F(Ddp, DifferentlyNamedParametersNameBothNamesAndRanks) {
  const auto results = run_ranks("name_mismatch", 2, std::chrono::seconds(30));
  ASSERT_EQ(results.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
    const std::string mine = rank == 0 ? "'weight'" : "'weights'";
    const std::string theirs = rank == 0 ? "'weights' on rank 1" : "'weight' on rank 0";
    EXPECT_NE(
        results[rank].report.find("parameter 0 is " + mine + " on rank " + std::to_string(rank)),
        std::string::npos)
        << results[rank].report;
    EXPECT_NE(results[rank].report.find(theirs), std::string::npos) << results[rank].report;
  }
}

}  // namespace
