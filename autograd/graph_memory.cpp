#include "autograd/graph_memory.h"

#include <deque>
#include <unordered_set>

#include "autograd/node.h"
#include "autograd/recorder.h"
#include "engine/error.h"

namespace mantissa::autograd {

SavedBytes saved_tensor_bytes(const Tensor& root, const std::vector<Tensor>& exclude) {
  MT_CHECK(root.defined() && root.grad_fn() != nullptr,
           "saved_tensor_bytes: the tensor has no graph (shape ", root.shape(),
           "): pass an output of ops recorded with grad mode on");
  std::unordered_set<const StorageImpl*> counted;
  for (const Tensor& t : exclude)
    if (t.defined()) counted.insert(t.storage().get());
  SavedBytes out;
  // Breadth first from the root, so that a storage is charged to the node nearest it.
  std::unordered_set<const Node*> seen;
  std::deque<const Node*> queue = {root.grad_fn().get()};
  seen.insert(queue.front());
  while (!queue.empty()) {
    const Node* node = queue.front();
    queue.pop_front();
    if (const auto* f = dynamic_cast<const FunctionNode*>(node)) {
      for (size_t i = 0; i < f->saved.size(); ++i) {
        const SavedTensor& s = f->saved[i];
        if (s.packed()) {
          ++out.packed;
          continue;
        }
        const Tensor& t = s.held();
        if (!t.defined()) continue;
        ++out.tensors;
        if (!counted.insert(t.storage().get()).second) continue;
        const auto bytes = static_cast<int64_t>(t.storage()->nbytes);
        out.total += bytes;
        out.by_node[f->name()] += bytes;
      }
    }
    for (const Edge& e : node->next_edges)
      if (e.fn != nullptr && seen.insert(e.fn.get()).second) queue.push_back(e.fn.get());
  }
  return out;
}

}  // namespace mantissa::autograd
