// What a recorded graph keeps alive for its backward: the bytes of its saved tensors, counted as
// activation memory is (each storage once, however many nodes save it or views of it), by the
// node that saves it. It answers "how much does this forward keep, and which ops keep it" (the
// question PyTorch answers with saved-tensor hooks or a memory snapshot) from the graph itself,
// after the forward and before backward frees it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

struct SavedBytes {
  int64_t total = 0;  // bytes of the distinct storages saved, on any device
  // The same bytes by the name of the node that saves them. A storage saved by several nodes is
  // counted for the one nearest `root` (the last op of the forward to save it).
  std::map<std::string, int64_t> by_node;
  int64_t tensors = 0;  // saved tensors counted (a storage's views each count here)
  int64_t packed = 0;   // saved tensors a pack hook holds instead (checkpointing): not in total
};

// Walks the graph that produced `root` and counts its saved tensors, leaving out every storage of
// `exclude` (the parameters: a saved weight is the parameter itself, not an activation; a copy
// of it, such as autocast's bfloat16 weight or a float8 one, is counted). Throws if `root` has
// no graph.
SavedBytes saved_tensor_bytes(const Tensor& root, const std::vector<Tensor>& exclude = {});

}  // namespace mantissa::autograd
