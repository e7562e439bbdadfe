// Views and messages shared by the CPU and CUDA indexing kernels (gather, scatter_add,
// index_select, index_add): both run one loop over an iteration shape in which the indexed
// operand has stride 0 along `dim` and each element's address moves by index * stride(dim).
#pragma once

#include <cstdint>

#include "engine/error.h"
#include "engine/factory.h"
#include "engine/tensor.h"

namespace mantissa::index_views {

// `t` viewed with `shape`, keeping its strides except a stride of 0 along `dim`.
inline Tensor restride(const Tensor& t, const Shape& shape, int64_t dim) {
  Shape strides = t.strides();
  strides[dim] = 0;
  return detail::make_view(t, shape, strides, t.storage_offset());
}

// A 1-D index spread over `shape`: element [.., i, ..] (i along dim) reads index[i].
inline Tensor spread_index(const Tensor& index, const Shape& shape, int64_t dim) {
  Shape strides(shape.size(), 0);
  strides[dim] = index.stride(0);
  return detail::make_view(index, shape, strides, index.storage_offset());
}

// The error for an out-of-range index, the same on every device.
[[noreturn]] inline void throw_out_of_bounds(const char* op, int64_t index, int64_t dim,
                                             int64_t size) {
  MT_THROW(op, ": index ", index, " is out of bounds for dimension ", dim, " with size ", size);
}

}  // namespace mantissa::index_views
