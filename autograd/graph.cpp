// The backward pass: count dependencies from the roots, then run nodes in an order where each
// runs once all gradients flowing into it have been summed. Among ready nodes, the one created
// last runs first (as in PyTorch), which keeps the order deterministic.
#include "autograd/graph.h"

#include <queue>
#include <unordered_map>

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

struct ByNewest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void add_into(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? slot + g : g;
}

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
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> roots;
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
    auto& buf = buffers[e.fn.get()];
    buf.resize(e.fn->num_outputs);
    add_into(buf[e.input_nr], g);
    roots.push_back(e.fn);
  }

  // Dependencies: how many edges point at each node from nodes reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& r : roots) {
    if (!seen[r.get()]) {
      seen[r.get()] = true;
      stack.push_back(r.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }

  std::vector<Tensor> captured(capture_edges ? capture_edges->size() : 0);
  std::priority_queue<Node*, std::vector<Node*>, ByNewest> ready;
  for (auto& r : roots) {
    if (deps[r.get()] == 0 && seen[r.get()]) {
      seen[r.get()] = false;  // queue each root once
      ready.push(r.get());
    }
  }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
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
      auto& buf = buffers[e.fn.get()];
      buf.resize(e.fn->num_outputs);
      if (i < input_grads.size()) add_into(buf[e.input_nr], input_grads[i]);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
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
