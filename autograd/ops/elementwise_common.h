// Shared plumbing of the elementwise ops: device checks, type promotion, broadcasting views and
// kernel calls. Internal to autograd/ops.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "autograd/op_bodies.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa::ops {

void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// An uninitialised tensor of `shape` with like's dtype and device.
inline Tensor empty_as(const Shape& shape, const Tensor& like) {
  return empty(shape, TensorOptions(like.device()).dtype(like.dtype()));
}
// An uninitialised tensor of `shape`, `dtype` on `device`.
inline Tensor empty_on(const Shape& shape, DType dtype, Device device) {
  return empty(shape, TensorOptions(device).dtype(dtype));
}
// A non-recording broadcast view of t to `shape` (stride 0 on expanded dims).
Tensor broadcast_view(const Tensor& t, const Shape& shape);
// out = kernel(in) with out fresh, same shape/dtype as in.
Tensor run_unary(const KernelTable<UnaryKernel>& table, const Tensor& in);
// out = kernel(a, b) for two tensors of one dtype and shape (used by backward formulas).
Tensor run_binary_same(const KernelTable<BinaryKernel>& table, const Tensor& a, const Tensor& b);
// reductions and scans (reductions.cpp): the dtype an integer-promoting op (prod, cumsum,
// cumprod) computes in: the requested one, else int64 for integer and bool inputs, else x's.
DType integer_promoted(const Tensor& x, std::optional<DType> dtype);
// conv and pooling (conv.cpp): checks that input is a 3-D (unbatched) or 4-D floating-point
// tensor; true when unbatched.
bool is_unbatched(const char* op, const Tensor& input);
// The dtype an op that promotes integers to floating computes in.
inline DType floating_of(DType t) { return is_floating(t) ? t : kFloat32; }
// A 0-d tensor holding `s` in `dtype` on `device`.
Tensor wrap_scalar(const Scalar& s, DType dtype, Device device);
// result_type over several tensors (PyTorch's, as result_type(a, b) for two).
DType result_type_of(std::initializer_list<const Tensor*> tensors);
// `s` as the 0-d operand of a binary op with `t`: in result_type(t, s), on t's device.
Tensor scalar_operand(const Tensor& t, const Scalar& s);

// What a unary backward reads. Saving only that matters beyond memory: a saved output can't be
// modified in place afterwards (y = x.sin(); y.mul_(2) must stay legal, as in PyTorch).
enum Saves { kSaveNone = 0, kSaveIn = 1, kSaveOut = 2 };

// Unary ops; `backward(grad, input, output)` returns the input gradient (input/output are
// undefined unless `saves` asks for them). A formula that calls a kernel directly computes with
// the differentiable ops instead when autograd::creating_graph(), so every unary op supports
// create_graph.
template <typename Backward>
Tensor unary_op(const char* node, const KernelTable<UnaryKernel>& table, const Tensor& x_in,
                bool promote_int_to_float, Saves saves, Backward backward) {
  const Tensor x = promote_int_to_float ? x_in.to(floating_of(x_in.dtype())) : x_in;
  Tensor out = run_unary(table, x);
  if (is_floating(x.dtype())) {
    if (autograd::Recorder rec{node, {&x}}) {
      rec.save((saves & kSaveIn) ? x : Tensor()).save((saves & kSaveOut) ? out : Tensor());
      rec.finish(
          out,
          [backward](autograd::BackwardContext& ctx) -> std::vector<Tensor> {
            return {backward(ctx.grad(), ctx.saved(0), ctx.saved(1))};
          },
          autograd::DoubleBackward::Supported);
    }
  }
  return out;
}

}  // namespace mantissa::ops
