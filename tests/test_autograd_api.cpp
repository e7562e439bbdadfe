// The user-facing autograd API: leaf/graph flags, backward with and without seeds, retain_graph,
// accumulation into .grad, grad mode (thread-local), detach, autograd::grad, in-place checks
// (leaves and the version counter of saved tensors), retain_grad and hooks, and what a graph keeps
// alive.
#include <array>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/graph_memory.h"
#include "autograd/saved_tensor_hooks.h"
#include "test_util.h"

namespace mt = mantissa;
namespace ag = mantissa::autograd;
using mt::Shape;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using Vec = std::vector<double>;

namespace {

Tensor leaf(const Shape& shape) {
  return random_tensor(shape, mt::kFloat64, /*non_contiguous=*/false).requires_grad_();
}

Tensor f64(const Vec& v, const Shape& shape) { return mt::from_vector(v, shape, mt::kFloat64); }

// A pack hook's handle that keeps nothing (the graph's saved tensor is gone).
struct DroppedSaved : mt::autograd::PackedSaved {
  Tensor unpack() override { return Tensor(); }
};

Vec scaled(const Vec& v, double k) {
  Vec out = v;
  for (double& e : out) e *= k;
  return out;
}

}  // namespace

TEST(AutogradApi, LeafFlagsAndGradFnNames) {
  const Tensor x = leaf({2, 3}), w = leaf({3, 4});
  const Tensor plain = mt::randn({2, 3}, mt::kFloat64);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_FALSE(plain.requires_grad());
  EXPECT_TRUE(plain.is_leaf());

  const Tensor sum = x + plain;
  EXPECT_TRUE(sum.requires_grad());
  EXPECT_FALSE(sum.is_leaf());
  EXPECT_EQ(sum.grad_fn()->name(), "AddBackward0");
  EXPECT_EQ(mt::mm(x, w).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ((x * plain).grad_fn()->name(), "MulBackward0");
  EXPECT_EQ(x.sum().grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(x.exp().grad_fn()->name(), "ExpBackward0");
  EXPECT_EQ(x.sigmoid().grad_fn()->name(), "SigmoidBackward0");
  EXPECT_EQ(x.t().grad_fn()->name(), "TransposeBackward0");
  // An edge to the leaf's AccumulateGrad node.
  const auto& edges = sum.grad_fn()->next_edges;
  ASSERT_EQ(edges.size(), 2u);
  EXPECT_EQ(edges[0].fn->name(), "AccumulateGrad");
  EXPECT_EQ(edges[1].fn, nullptr);

  const Tensor no_graph = plain * 2.0;
  EXPECT_FALSE(no_graph.requires_grad());
  EXPECT_EQ(no_graph.grad_fn(), nullptr);
  expect_error([&] { Tensor(sum).requires_grad_(false); },
               {"only change requires_grad flags of leaf"});
  expect_error([] { mt::zeros({2}, mt::kInt64).requires_grad_(); },
               {"only tensors of floating point dtype can require gradients"});
}

TEST(AutogradApi, BackwardSeedsAndErrors) {
  const Tensor x = leaf({2, 3});
  const Tensor y = x * x;  // non-scalar
  expect_error([&] { y.backward(); }, {"grad can be implicitly created only for scalar outputs"});
  expect_error([&] { y.backward(mt::ones({3}, mt::kFloat64)); }, {"gradient has shape [3]"});
  const Tensor seed = random_tensor({2, 3}, mt::kFloat64, true);
  y.backward(seed);
  const Vec xv = x.to_vector<double>(), sv = seed.to_vector<double>();
  Vec expected(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) expected[i] = 2 * xv[i] * sv[i];
  expect_close(x.grad(), f64(expected, {2, 3}));

  expect_error([] { mt::ones({1}).backward(); }, {"does not require grad"});
}

TEST(AutogradApi, RetainGraph) {
  const Tensor x = leaf({4});
  const Tensor y = x.exp().sum();  // exp saves its output
  y.backward();
  const Vec g1 = x.grad().to_vector<double>();
  expect_error([&] { y.backward(); }, {"backward through the graph a second time", "retain_graph"});

  const Tensor z = x.exp().sum();
  x.set_grad(Tensor());
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();  // the second backward accumulates (+=)
  expect_close(x.grad(), f64(scaled(g1, 2), {4}));
}

TEST(AutogradApi, GradientsAccumulateAcrossBackwardCalls) {
  const Tensor x = leaf({3});
  (x * 3.0).sum().backward();
  const Tensor first = x.grad();
  (x * x).sum().backward();
  const Vec xv = x.to_vector<double>();
  Vec expected(3);
  for (int i = 0; i < 3; ++i) expected[i] = 3 + 2 * xv[i];
  expect_close(x.grad(), f64(expected, {3}));
  EXPECT_TRUE(first.is_same(x.grad()));  // accumulated in place

  // A tensor used twice in one graph gets both contributions (diamond).
  const Tensor a = leaf({3});
  const Tensor h = a * 2.0;
  (h * h + h).sum().backward();
  const Vec av = a.to_vector<double>();
  for (int i = 0; i < 3; ++i) expected[i] = 8 * av[i] + 2;
  expect_close(a.grad(), f64(expected, {3}));
}

TEST(AutogradApi, NoGradGuardIsThreadLocal) {
  const Tensor x = leaf({3});
  {
    ag::NoGradGuard no_grad;
    EXPECT_FALSE(ag::GradMode::is_enabled());
    const Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    bool other_thread_records = false;
    std::thread worker([&] {
      const Tensor z = x * 2.0;
      other_thread_records = z.requires_grad() && z.grad_fn() != nullptr;
    });
    worker.join();
    EXPECT_TRUE(other_thread_records);
    {
      ag::EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  EXPECT_TRUE(ag::GradMode::is_enabled());
  // A guard in another thread leaves this one recording.
  std::thread worker([] {
    ag::NoGradGuard no_grad;
    EXPECT_FALSE(ag::GradMode::is_enabled());
  });
  worker.join();
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(AutogradApi, Detach) {
  const Tensor x = leaf({3});
  const Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.storage() == y.storage());
  // The detached tensor shares values and the version counter.
  const uint32_t v = y.version();
  d.mul_(10.0);
  EXPECT_EQ(y.version(), v + 1);
  EXPECT_EQ(y.to_vector<double>(), d.to_vector<double>());
  // Gradient does not flow through a detached branch.
  (x * d.detach()).sum().backward();
  expect_close(x.grad(), d);
}

TEST(AutogradApi, GradFunction) {
  const Tensor x = leaf({3}), w = leaf({3}), unused = leaf({2});
  const Tensor y = (x * w).sum();
  const auto grads = ag::grad({y}, {x, w}, {}, /*retain_graph=*/true);
  ASSERT_EQ(grads.size(), 2u);
  expect_close(grads[0], w);
  expect_close(grads[1], x);
  EXPECT_FALSE(x.grad().defined());  // returned, not accumulated
  EXPECT_FALSE(w.grad().defined());

  expect_error(
      [&] {
        ag::grad({y}, {x, unused}, {}, true);
      },
      {"input 1", "not used in the graph", "allow_unused"});
  const auto with_unused = ag::grad({y}, {x, unused}, {}, true, /*allow_unused=*/true);
  EXPECT_TRUE(with_unused[0].defined());
  EXPECT_FALSE(with_unused[1].defined());

  // Gradient w.r.t. a non-leaf, with a seed.
  const Tensor h = x * 3.0;
  const Tensor out = h * h;
  const Tensor seed = mt::ones({3}, mt::kFloat64) * 0.5;
  const auto gh = ag::grad({out}, {h}, {seed});
  expect_close(gh[0], h);
  EXPECT_FALSE(x.grad().defined());
  expect_error([&] { ag::grad({y}, {mt::ones({3})}); }, {"does not require grad"});
}

TEST(AutogradApi, InPlaceChecks) {
  Tensor x = leaf({3});
  expect_error([&] { x.add_(1.0); }, {"leaf tensor that requires grad", "in-place operation"});
  expect_error([&] { x.mul_(2.0); }, {"leaf tensor that requires grad"});
  expect_error([&] { x.copy_(mt::zeros({3}, mt::kFloat64)); }, {"leaf tensor that requires grad"});
  {
    ag::NoGradGuard no_grad;  // how optimizers update parameters
    x.add_(1.0);
  }
  EXPECT_TRUE(x.is_leaf());

  // Modifying a tensor that backward needs is detected by its version counter.
  Tensor y = x.sigmoid();  // SigmoidBackward0 saves its output
  y.mul_(2.0);
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward0");
  expect_error([&] { y.sum().backward(); },
               {"modified by an in-place operation", "SigmoidBackward0", "version"});

  // In-place on a non-leaf whose old value nobody saved is fine and differentiable.
  const Tensor a = leaf({3});
  Tensor b = a * 1.0;
  b.mul_(3.0);
  b.add_(a);
  b.sum().backward();
  expect_close(a.grad(), mt::full({3}, 4.0, mt::kFloat64));
}

TEST(AutogradApi, RetainGradOnNonLeaf) {
  const Tensor x = leaf({3});
  const Tensor h = x * 2.0;
  const Tensor k = h + 1.0;
  h.retain_grad();
  const Tensor loss = (h * k).sum();  // d/dh = k + h
  loss.backward(Tensor(), /*retain_graph=*/true);
  const Vec expected = (k + h).to_vector<double>();
  expect_close(h.grad(), f64(expected, {3}));
  EXPECT_FALSE(k.grad().defined());  // not retained
  EXPECT_TRUE(x.grad().defined());
  // Like a leaf's, a retained gradient accumulates over backward calls.
  loss.backward();
  expect_close(h.grad(), f64(scaled(expected, 2), {3}));
  expect_error([] { mt::ones({2}).retain_grad(); }, {"requires_grad=false"});
}

TEST(AutogradApi, Hooks) {
  const Tensor x = leaf({3});
  const Tensor h = x * 2.0;
  std::vector<Vec> leaf_seen, inner_seen;
  x.register_hook([&](const Tensor& g) { leaf_seen.push_back(g.to_vector<double>()); });
  h.register_hook([&](const Tensor& g) { inner_seen.push_back(g.to_vector<double>()); });
  (h * 5.0).sum().backward();
  ASSERT_EQ(inner_seen.size(), 1u);
  EXPECT_EQ(inner_seen[0], Vec(3, 5.0));
  ASSERT_EQ(leaf_seen.size(), 1u);
  EXPECT_EQ(leaf_seen[0], Vec(3, 10.0));
  expect_close(x.grad(), mt::full({3}, 10.0, mt::kFloat64));
  expect_error([] { mt::ones({2}).register_hook([](const Tensor&) {}); },
               {"doesn't require gradient"});
}

// What a graph keeps alive, and for how long: a node that saves its own output must not keep
// itself alive through it, and a leaf's accumulator lives exactly as long as the leaf.
TEST(GraphLifetime, NodeSavingItsOwnOutputIsFreedWithTheOutput) {
  const Tensor x = leaf({3});
  std::weak_ptr<ag::Node> node;
  std::weak_ptr<mt::TensorImpl> out_impl;
  {
    const Tensor y = x.exp();  // ExpBackward0 saves y
    node = y.grad_fn();
    out_impl = y.impl_ptr();
    ASSERT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
  EXPECT_TRUE(out_impl.expired());
}

TEST(GraphLifetime, SavedOutputStillChecksItsVersion) {
  const Tensor x = leaf({3});
  Tensor y = x.exp();
  {
    ag::NoGradGuard no_grad;
    y.mul_(f64({2, 2, 2}, {3}));
  }
  expect_error([&] { y.sum().backward(); }, {"modified by an in-place operation", "ExpBackward0"});
}

TEST(GraphLifetime, LeafAccumulatorOutlivesTheGraphAndDiesWithTheLeaf) {
  std::weak_ptr<ag::Node> acc;
  std::weak_ptr<mt::TensorImpl> leaf_impl;
  {
    const Tensor p = leaf({2});
    {
      const Tensor y = p * 2.0;
      acc = y.grad_fn()->next_edges[0].fn;
    }
    // The graph is gone; the next graph gets the same accumulator instead of a new one.
    ASSERT_FALSE(acc.expired());
    const Tensor y2 = p * 3.0;
    EXPECT_EQ(y2.grad_fn()->next_edges[0].fn, acc.lock());
    y2.sum().backward();
    expect_close(p.grad(), f64({3, 3}, {2}));
    leaf_impl = p.impl_ptr();
  }
  // No leaf <-> accumulator cycle: both go when the last handle does.
  EXPECT_TRUE(acc.expired());
  EXPECT_TRUE(leaf_impl.expired());
}

TEST(GraphLifetime, GradientForADroppedLeafIsDropped) {
  Tensor y;
  std::weak_ptr<mt::TensorImpl> leaf_impl;
  {
    const Tensor p = leaf({2});
    leaf_impl = p.impl_ptr();
    y = (p + 1.0).sum();
  }
  EXPECT_TRUE(leaf_impl.expired());
  EXPECT_NO_THROW(y.backward());
}

// Backward formulas keep small captures inside the node and large ones on the heap; both kinds
// survive being moved, run, and destroy their captures exactly once.
TEST(GraphLifetime, BackwardFormulasWithSmallAndLargeCapturesMoveAndRun) {
  auto counter = std::make_shared<int>(0);
  std::array<double, 64> big{};  // 512 bytes: past the inline room
  big[63] = 2.0;
  {
    ag::BackwardFn small = [counter](ag::BackwardContext&) {
      ++*counter;
      return std::vector<Tensor>{};
    };
    ag::BackwardFn large = [counter, big](ag::BackwardContext&) {
      *counter += static_cast<int>(big[63]);
      return std::vector<Tensor>{};
    };
    EXPECT_EQ(counter.use_count(), 3);
    ag::BackwardFn moved_small = std::move(small), moved_large = std::move(large);
    EXPECT_FALSE(small);
    EXPECT_FALSE(large);
    EXPECT_EQ(counter.use_count(), 3);  // moved, not copied
    // The formulas ignore the context; a node is only needed to build one.
    auto node = std::make_shared<ag::FunctionNode>("Test", nullptr);
    std::vector<Tensor> grads;
    ag::BackwardContext ctx(*node, grads);
    moved_small(ctx);
    moved_large(ctx);
    EXPECT_EQ(*counter, 3);
  }
  EXPECT_EQ(counter.use_count(), 1);
}

// Post-accumulate-grad hooks (Tensor::register_post_accumulate_grad_hook) and end-of-backward
// callbacks (autograd::queue_callback): what DistributedDataParallel builds on.
TEST(AutogradApi, PostAccumulateGradHookSeesTheAccumulatedGrad) {
  const Tensor x = leaf({2});
  std::vector<Vec> seen;
  const int handle = x.register_post_accumulate_grad_hook(
      [&](const Tensor& t) { seen.push_back(t.grad().to_vector<double>()); });
  // x is used twice: the hook runs once, after both gradients are summed into .grad.
  (x * 2.0 + x * 3.0).sum().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], Vec(2, 5.0));
  // A second backward: the hook sees .grad after accumulation.
  (x * 1.0).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], Vec(2, 6.0));
  x.remove_post_accumulate_grad_hook(handle);
  (x * 1.0).sum().backward();
  EXPECT_EQ(seen.size(), 2u);
  const Tensor y = x * 2.0;
  expect_error([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); },
               {"register_post_accumulate_grad_hook", "leaf"});
}

TEST(AutogradApi, QueuedCallbacksRunAfterEveryNodeInOrder) {
  const Tensor a = leaf({2}), b = leaf({2});
  std::vector<std::string> events;
  EXPECT_FALSE(ag::in_backward());
  expect_error([] { ag::queue_callback([] {}); }, {"queue_callback", "no backward pass"});
  // Queued from the first leaf's hook, the callback must still see the other leaf's .grad.
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    EXPECT_TRUE(ag::in_backward());
    events.push_back("hook a");
    ag::queue_callback([&] {
      events.push_back(std::string("first, b.grad ") + (b.grad().defined() ? "set" : "unset"));
      ag::queue_callback([&] { events.push_back("queued by a callback"); });
    });
    ag::queue_callback([&] { events.push_back("second"); });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("hook b"); });
  ((a * b).sum() * 2.0).backward();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[2], "first, b.grad set");
  EXPECT_EQ(events[3], "second");
  EXPECT_EQ(events[4], "queued by a callback");
  EXPECT_FALSE(ag::in_backward());
  // Callbacks belong to one pass: the next backward runs none of them again.
  events.clear();
  (b * 1.0).sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"hook b"}));
}

TEST(AutogradApi, CallbacksOfAFailingPassDoNotRun) {
  const Tensor a = leaf({2});
  bool ran = false;
  const Tensor h = a * 2.0;
  h.register_hook([&](const Tensor&) -> Tensor {
    ag::queue_callback([&] { ran = true; });
    MT_THROW("hook failed");
  });
  expect_error([&] { h.sum().backward(); }, {"hook failed"});
  EXPECT_FALSE(ran);
  EXPECT_FALSE(ag::in_backward());
  (a * 1.0).sum().backward();
  EXPECT_FALSE(ran);
}

TEST(GraphMemory, CountsEachSavedStorageOnceForTheNodeNearestTheRoot) {
  const Tensor w = mt::randn({8, 4}).requires_grad_();
  const Tensor x = mt::randn({16, 8}).requires_grad_();
  const Tensor h = mt::matmul(x, w);  // saves x and w
  const Tensor y = mt::sum(h * h);    // saves h, twice: one storage
  const auto all = mt::autograd::saved_tensor_bytes(y);
  EXPECT_EQ(all.total, (16 * 8 + 8 * 4 + 16 * 4) * 4);
  EXPECT_EQ(all.by_node.at("MulBackward0"), 16 * 4 * 4);
  EXPECT_EQ(all.by_node.at("MmBackward0"), (16 * 8 + 8 * 4) * 4);
  EXPECT_EQ(all.tensors, 4);
  EXPECT_EQ(all.packed, 0);
  const auto activations = mt::autograd::saved_tensor_bytes(y, {w});
  EXPECT_EQ(activations.total, (16 * 8 + 16 * 4) * 4);
  // A view of a saved storage is the same bytes: charged once, to the op nearest the root.
  const Tensor top = h.narrow(0, 0, 4);
  const Tensor v = mt::sum(mt::exp(top) * top);
  const auto views = mt::autograd::saved_tensor_bytes(v, {w});
  EXPECT_EQ(views.total, (16 * 8 + 16 * 4 + 4 * 4) * 4);  // x, h, exp's output
  EXPECT_EQ(views.by_node.at("MulBackward0"), (16 * 4 + 4 * 4) * 4);
  EXPECT_EQ(views.by_node.count("ExpBackward0"), 0u);  // its output is mul's input
  // Tensors a pack hook holds are not kept by the graph: counted apart.
  Tensor z;
  {
    mt::autograd::SavedTensorHooksGuard guard(
        [](const Tensor&) { return std::make_shared<DroppedSaved>(); });
    z = mt::sum(mt::exp(x));
  }
  const auto packed = mt::autograd::saved_tensor_bytes(z);
  EXPECT_EQ(packed.total, 0);
  EXPECT_EQ(packed.packed, 1);
  EXPECT_THROW(mt::autograd::saved_tensor_bytes(mt::randn({2})), mt::Error);
}
