// Shared plumbing of the elementwise ops: device checks, type promotion, broadcasting views and
// kernel calls. Internal to autograd/ops.
#pragma once

#include <initializer_list>

#include "autograd/functions.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa::ops {

void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// An uninitialised tensor of `shape` with like's dtype and device.
inline Tensor empty_as(const Shape& shape, const Tensor& like) {
  return empty(shape, TensorOptions(like.device()).dtype(like.dtype()));
}
// A non-recording broadcast view of t to `shape` (stride 0 on expanded dims).
Tensor broadcast_view(const Tensor& t, const Shape& shape);
// out = kernel(in) with out fresh, same shape/dtype as in.
Tensor run_unary(const KernelTable<UnaryKernel>& table, const Tensor& in);
// out = kernel(a, b) for two tensors of one dtype and shape (used by backward formulas).
Tensor run_binary_same(const KernelTable<BinaryKernel>& table, const Tensor& a, const Tensor& b);
// A 0-d tensor holding `s` in `dtype` on `device`.
Tensor wrap_scalar(const Scalar& s, DType dtype, Device device);
// result_type over several tensors (PyTorch's, as result_type(a, b) for two).
DType result_type_of(std::initializer_list<const Tensor*> tensors);
// `s` as the 0-d operand of a binary op with `t`: in result_type(t, s), on t's device.
Tensor scalar_operand(const Tensor& t, const Scalar& s);

}  // namespace mantissa::ops
