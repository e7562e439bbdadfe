// The backward pass: count dependencies from the roots, then run nodes in an order where each
// runs once all gradients flowing into it have been summed. Among ready nodes, the one created
// last runs first (as in PyTorch), which keeps the order deterministic.
#include "autograd/backward.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>

#include "autograd/node.h"
#include "engine/factory.h"
#include "engine/precision.h"

namespace mantissa::autograd {
namespace {

struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t slot;
};

// Adds g into slot; the first gradient into a slot is moved there, not shared.
void add_into(Tensor& slot, Tensor g) {
  if (!g.defined()) return;
  if (slot.defined()) {
    slot = slot + g;
  } else {
    slot = std::move(g);
  }
}

// Adds a gradient for `to` into its slot, in the dtype `to` requires.
void deliver(Tensor& slot, Tensor&& g, const Edge& to) {
  if (!g.defined()) return;
  const std::optional<DType> want = to.fn->grad_dtype(to.input_nr);
  if (want && *want != g.dtype() && is_floating(g.dtype()) && is_floating(*want)) g = g.to(*want);
  add_into(slot, std::move(g));
}

// Per-node state of one backward pass, found by node address in an open-addressing table: the
// pass touches every node a few times, and std::unordered_map's per-entry allocations cost more
// than the small graphs of a training step spend in their kernels. The table and the states are
// kept per thread and reused (reset() keeps every vector's capacity), so that a training step's
// backward allocates nothing here.
class NodeStates {
 public:
  struct State {
    Node* node = nullptr;
    int deps = 0;          // edges from reachable nodes not yet processed
    bool visited = false;  // reached by the dependency walk
    std::vector<Tensor> grads;
  };

  // The index of `node`'s state, created if absent.
  size_t index(Node* node) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = hash(node);
    while (slots_[i] != kEmpty) {
      if (states_[slots_[i]].node == node) return slots_[i];
      i = (i + 1) & (slots_.size() - 1);
    }
    if (size_ == states_.size()) states_.emplace_back();
    State& s = states_[size_];
    s.node = node;
    s.deps = 0;
    s.visited = false;
    slots_[i] = size_;
    return size_++;
  }
  State& operator[](size_t i) { return states_[i]; }

  // Forgets every node and drops the gradients still held.
  void reset() {
    for (size_t k = 0; k < size_; ++k) states_[k].grads.clear();
    if (size_ != 0) std::fill(slots_.begin(), slots_.end(), kEmpty);
    size_ = 0;
  }

 private:
  static constexpr size_t kEmpty = ~size_t(0);
  size_t hash(Node* node) const {
    return (reinterpret_cast<uintptr_t>(node) >> 4) * 0x9E3779B97F4A7C15ull >>
           (64 - std::countr_zero(slots_.size()));
  }
  void grow() {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), kEmpty);
    for (size_t k = 0; k < size_; ++k) {
      size_t i = hash(states_[k].node);
      while (slots_[i] != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = k;
    }
  }
  std::vector<size_t> slots_;
  std::vector<State> states_;  // the first size_ are in use
  size_t size_ = 0;
};

struct Ready {
  uint64_t sequence_nr;
  size_t index;
  bool operator<(const Ready& o) const { return sequence_nr < o.sequence_nr; }
};

// Everything one backward pass needs besides the graph, reused across passes on a thread.
struct Workspace {
  NodeStates states;
  std::vector<size_t> root_index, stack;
  std::vector<Ready> ready;                      // a max-heap on sequence_nr
  std::vector<std::function<void()>> callbacks;  // queue_callback's, for this pass
  bool in_use = false;
};

// The workspace of the innermost backward pass running on this thread.
thread_local Workspace* current_pass = nullptr;

// The thread's workspace, or a fresh one for a backward started from inside another (a hook).
class WorkspaceLease {
 public:
  WorkspaceLease() {
    thread_local Workspace cached;
    ws_ = cached.in_use ? &own_.emplace() : &cached;
    ws_->in_use = true;
    outer_ = current_pass;
    current_pass = ws_;
  }
  ~WorkspaceLease() {
    current_pass = outer_;
    ws_->states.reset();
    ws_->root_index.clear();
    ws_->stack.clear();
    ws_->ready.clear();
    ws_->callbacks.clear();
    ws_->in_use = false;
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace& operator*() { return *ws_; }

 private:
  std::optional<Workspace> own_;
  Workspace* ws_;
  Workspace* outer_;
};

std::vector<Tensor> run_backward(const Tensor* outputs, size_t n_outputs,
                                 const Tensor* grad_outputs, size_t n_grads, bool retain_graph,
                                 bool create_graph, const std::vector<Edge>* capture_edges) {
  MT_CHECK(n_grads == 0 || n_grads == n_outputs, "backward: got ", n_grads, " gradients for ",
           n_outputs, " outputs");
  // Grad mode is on in the pass exactly when it records (create_graph); formulas and
  // AccumulateGrad read it from there. A recorded graph refers to the saved tensors.
  struct GradModeScope {
    bool prev = GradMode::is_enabled();
    explicit GradModeScope(bool on) { GradMode::set_enabled(on); }
    ~GradModeScope() { GradMode::set_enabled(prev); }
  } grad_mode(create_graph);
  if (create_graph) retain_graph = true;
  // Backward runs each op in the dtype its forward ran in: autocast does not apply here.
  struct AutocastOff {
    autocast_state::ThreadState saved = autocast_state::current();
    AutocastOff() {
      for (auto& d : autocast_state::current().device) d.enabled = false;
      autocast_state::current().any_cast = false;
    }
    ~AutocastOff() { autocast_state::current() = saved; }
  } autocast_off;
  WorkspaceLease lease;
  Workspace& ws = *lease;
  NodeStates& states = ws.states;
  // Owns the root nodes for the pass: a leaf's AccumulateGrad is held only by its edge.
  std::shared_ptr<Node> first_root;
  std::vector<std::shared_ptr<Node>> more_roots;
  for (size_t i = 0; i < n_outputs; ++i) {
    const Tensor& out = outputs[i];
    MT_CHECK(out.requires_grad(), "backward: element ", i,
             " of tensors does not require grad and "
             "does not have a grad_fn");
    Tensor g = n_grads == 0 ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      MT_CHECK(out.numel() == 1,
               "backward: grad can be implicitly created only for scalar "
               "outputs, but the output has shape ",
               out.shape(), "; pass a gradient");
      g = ones_like(out);
    } else {
      MT_CHECK(g.shape() == out.shape(), "backward: gradient has shape ", g.shape(),
               " but the output has shape ", out.shape());
    }
    Edge e = gradient_edge(out);
    const size_t k = states.index(e.fn.get());
    auto& buf = states[k].grads;
    buf.resize(e.fn->num_outputs);
    deliver(buf[e.input_nr], std::move(g), e);
    if (i == 0) {
      first_root = e.fn;
    } else {
      more_roots.push_back(e.fn);
    }
    ws.root_index.push_back(k);
  }

  // Dependencies: how many edges point at each node from nodes reachable from the roots.
  std::vector<size_t>& stack = ws.stack;
  for (size_t k : ws.root_index) {
    if (!states[k].visited) {
      states[k].visited = true;
      stack.push_back(k);
    }
  }
  while (!stack.empty()) {
    Node* n = states[stack.back()].node;
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      const size_t k = states.index(e.fn.get());
      ++states[k].deps;
      if (!states[k].visited) {
        states[k].visited = true;
        stack.push_back(k);
      }
    }
  }

  std::vector<Tensor> captured(capture_edges ? capture_edges->size() : 0);
  std::vector<Ready>& ready = ws.ready;
  const auto push_ready = [&](uint64_t sequence_nr, size_t index) {
    ready.push_back({sequence_nr, index});
    std::push_heap(ready.begin(), ready.end());
  };
  for (size_t k : ws.root_index) {
    if (states[k].deps == 0 && states[k].visited) {
      states[k].visited = false;  // queue each root once
      push_ready(states[k].node->sequence_nr, k);
    }
  }
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end());
    const size_t index = ready.back().index;
    ready.pop_back();
    Node* node = states[index].node;
    // Every reachable node has its state already, so no index() below grows the table and this
    // reference stays valid.
    std::vector<Tensor>& grads = states[index].grads;
    grads.resize(node->num_outputs);
    for (auto& [nr, hook] : node->grad_hooks) {
      if (nr < grads.size() && grads[nr].defined()) apply_grad_hook(hook, grads[nr]);
    }
    // After the hooks, as in PyTorch: a retained gradient is the one the node goes on with.
    for (auto& [nr, weak] : node->retained) {
      if (auto impl = weak.lock(); impl && nr < grads.size() && grads[nr].defined()) {
        // Accumulates over backward calls, as a leaf's .grad does (and PyTorch's retain_grad).
        const Tensor t(impl), prev = t.grad();
        t.set_grad(prev.defined() ? prev + grads[nr] : grads[nr].clone());
      }
    }
    if (capture_edges) {
      for (size_t k = 0; k < capture_edges->size(); ++k) {
        const Edge& ce = (*capture_edges)[k];
        if (ce.fn.get() == node && ce.input_nr < grads.size())
          add_into(captured[k], grads[ce.input_nr]);
      }
      // autograd::grad never accumulates into leaves.
      if (dynamic_cast<AccumulateGrad*>(node) != nullptr) continue;
    }
    MT_CHECK(!create_graph || node->supports_create_graph(), "backward: op ", node->name(),
             " does not support create_graph (double backward); call backward without "
             "create_graph, or build this part of the model from ops that support it");
    std::vector<Tensor> input_grads = node->apply(std::move(grads));
    grads.clear();  // this node's incoming gradients are no longer needed
    if (!retain_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      const size_t k = states.index(e.fn.get());
      auto& buf = states[k].grads;
      buf.resize(e.fn->num_outputs);
      if (i < input_grads.size()) deliver(buf[e.input_nr], std::move(input_grads[i]), e);
      if (--states[k].deps == 0) push_ready(e.fn->sequence_nr, k);
    }
  }
  // By index: a callback may queue more.
  for (size_t i = 0; i < ws.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(ws.callbacks[i]);
    callback();
  }
  return captured;
}

}  // namespace

void queue_callback(std::function<void()> callback) {
  MT_CHECK(current_pass != nullptr,
           "queue_callback: no backward pass is running on this thread (call it from a hook or "
           "a node during backward)");
  current_pass->callbacks.push_back(std::move(callback));
}

bool in_backward() { return current_pass != nullptr; }

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph) {
  run_backward(outputs.data(), outputs.size(), grad_outputs.data(), grad_outputs.size(),
               retain_graph, create_graph, nullptr);
}

void backward_from(const Tensor& output, const Tensor& grad_output, bool retain_graph,
                   bool create_graph) {
  run_backward(&output, 1, &grad_output, 1, retain_graph, create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool allow_unused, bool create_graph) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MT_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    edges.push_back(gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result =
      run_backward(outputs.data(), outputs.size(), grad_outputs.data(), grad_outputs.size(),
                   retain_graph, create_graph, &edges);
  for (size_t i = 0; i < result.size(); ++i) {
    MT_CHECK(result[i].defined() || allow_unused, "grad: input ", i, " (shape ", inputs[i].shape(),
             ") was not used in the graph; pass allow_unused=true to get an undefined tensor");
  }
  return result;
}

}  // namespace mantissa::autograd
