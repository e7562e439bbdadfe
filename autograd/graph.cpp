// The backward pass: count dependencies from the roots, then run nodes in an order where each
// runs once all gradients flowing into it have been summed. Among ready nodes, the one created
// last runs first (as in PyTorch), which keeps the order deterministic.
#include "autograd/graph.h"

#include <bit>
#include <cstdint>
#include <queue>

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

void add_into(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? slot + g : g;
}

// Per-node state of one backward pass, found by node address in an open-addressing table: the
// pass touches every node a few times, and std::unordered_map's per-entry allocations cost more
// than the small graphs of a training step spend in their kernels.
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
    if ((states_.size() + 1) * 2 > slots_.size()) grow();
    size_t i = hash(node);
    while (slots_[i] != kEmpty) {
      if (states_[slots_[i]].node == node) return slots_[i];
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = states_.size();
    states_.emplace_back().node = node;
    return slots_[i];
  }
  State& operator[](size_t i) { return states_[i]; }

 private:
  static constexpr size_t kEmpty = ~size_t(0);
  size_t hash(Node* node) const {
    return (reinterpret_cast<uintptr_t>(node) >> 4) * 0x9E3779B97F4A7C15ull >>
           (64 - std::countr_zero(slots_.size()));
  }
  void grow() {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), kEmpty);
    for (size_t k = 0; k < states_.size(); ++k) {
      size_t i = hash(states_[k].node);
      while (slots_[i] != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = k;
    }
  }
  std::vector<size_t> slots_;
  std::vector<State> states_;
};

std::vector<Tensor> run_backward(const std::vector<Tensor>& outputs,
                                 const std::vector<Tensor>& grad_outputs, bool retain_graph,
                                 const std::vector<Edge>* capture_edges) {
  MT_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: got ",
           grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  NoGradGuard no_grad;
  // Backward runs each op in the dtype its forward ran in: autocast does not apply here.
  struct AutocastOff {
    autocast_state::ThreadState saved = autocast_state::current();
    AutocastOff() {
      for (auto& d : autocast_state::current().device) d.enabled = false;
      autocast_state::current().any_cast = false;
    }
    ~AutocastOff() { autocast_state::current() = saved; }
  } autocast_off;
  NodeStates states;
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<size_t> root_index;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    MT_CHECK(out.requires_grad(), "backward: element ", i,
             " of tensors does not require grad and "
             "does not have a grad_fn");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
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
    add_into(buf[e.input_nr], g);
    roots.push_back(e.fn);
    root_index.push_back(k);
  }

  // Dependencies: how many edges point at each node from nodes reachable from the roots.
  std::vector<size_t> stack;
  for (size_t k : root_index) {
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
  struct Ready {
    uint64_t sequence_nr;
    size_t index;
    bool operator<(const Ready& o) const { return sequence_nr < o.sequence_nr; }
  };
  std::priority_queue<Ready> ready;
  for (size_t k : root_index) {
    if (states[k].deps == 0 && states[k].visited) {
      states[k].visited = false;  // queue each root once
      ready.push({states[k].node->sequence_nr, k});
    }
  }
  while (!ready.empty()) {
    const size_t index = ready.top().index;
    ready.pop();
    Node* node = states[index].node;
    std::vector<Tensor> grads = std::move(states[index].grads);
    grads.resize(node->num_outputs);
    for (auto& [nr, weak] : node->retained) {
      if (auto impl = weak.lock(); impl && nr < grads.size() && grads[nr].defined()) {
        // Accumulates over backward calls, as a leaf's .grad does (and PyTorch's retain_grad).
        const Tensor t(impl), prev = t.grad();
        t.set_grad(prev.defined() ? prev + grads[nr] : grads[nr].clone());
      }
    }
    for (auto& [nr, hook] : node->grad_hooks) {
      if (nr < grads.size() && grads[nr].defined()) hook(grads[nr]);
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
    std::vector<Tensor> input_grads = node->apply(std::move(grads));
    if (!retain_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      const size_t k = states.index(e.fn.get());
      auto& buf = states[k].grads;
      buf.resize(e.fn->num_outputs);
      if (i < input_grads.size()) add_into(buf[e.input_nr], input_grads[i]);
      if (--states[k].deps == 0) ready.push({e.fn->sequence_nr, k});
    }
  }
  return captured;
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph) {
  run_backward(outputs, grad_outputs, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool allow_unused) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MT_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    edges.push_back(gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result = run_backward(outputs, grad_outputs, retain_graph, &edges);
  for (size_t i = 0; i < result.size(); ++i) {
    MT_CHECK(result[i].defined() || allow_unused, "grad: input ", i, " (shape ", inputs[i].shape(),
             ") was not used in the graph; pass allow_unused=true to get an undefined tensor");
  }
  return result;
}

}  // namespace mantissa::autograd
