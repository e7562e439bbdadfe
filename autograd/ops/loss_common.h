// What the loss files (autograd/ops/loss_*.cpp) share: forward arithmetic straight on the kernels,
// recording nothing, and the reductions with their gradients.
//
// Each loss performs the same roundings, in the same order, as the composition of elementwise
// ops and reductions it stands for, forward and backward, so values and gradients equal that
// composition's bit for bit: the fp32 golden trajectories are pinned to it.
#pragma once

#include <algorithm>
#include <optional>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/logging.h"

namespace mantissa::loss_detail {

using autograd::BackwardContext;
using autograd::Recorder;
using autograd::sum_to;
using Grads = std::vector<Tensor>;
using ops::broadcast_view;

inline Tensor scalar_like(double v, const Tensor& like) {
  return ops::wrap_scalar(v, like.dtype(), like.device());
}

// a + alpha * b, broadcast (alpha -1 is sub's kernel call).
inline Tensor add_k(const Tensor& a, const Tensor& b, double alpha = 1.0) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "add");
  Tensor out = ops::empty_as(shape, a);
  add_kernel(a.device())(out, broadcast_view(a, shape), broadcast_view(b, shape), alpha);
  return out;
}

inline Tensor where_k(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  Tensor out = ops::empty_as(shape, a);
  where_kernel(a.device())(out, broadcast_view(cond, shape), broadcast_view(a, shape),
                           broadcast_view(b, shape));
  return out;
}

// sum or mean over `dim`, or over every dim (a 0-d result) when there is none.
inline Tensor reduce_k(const KernelTable<ReduceKernel>& kernel, const Tensor& x,
                       std::optional<int64_t> dim = std::nullopt) {
  Shape keep = x.shape(), result;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!dim || d == *dim) {
      keep[d] = 1;
    } else {
      result.push_back(x.size(d));
    }
  }
  Tensor out = ops::empty_as(keep, x);
  kernel(x.device())(out, x);
  if (keep == result) return out;
  return detail::make_view(out, result, contiguous_strides(result), out.storage_offset());
}

inline Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return reduce_k(sum_kernel, loss);
    case Reduction::Mean:
      return reduce_k(mean_kernel, loss);
  }
  return loss;
}

// The gradient of every element of a `shape`d loss from its reduction's gradient g: what the
// backwards of sum() and mean() produce.
inline Tensor elementwise_grad(const Tensor& g, Reduction reduction, const Shape& shape) {
  switch (reduction) {
    case Reduction::None:
      return g.shape() == shape ? g : g.reshape(shape);
    case Reduction::Sum:
      return g.expand(shape);
    case Reduction::Mean:
      return (g / static_cast<double>(shape.numel())).expand(shape);
  }
  return g;
}

inline void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating point input, got ", t.dtype());
}

// Class-index targets (int64) range-checked against [0, classes), ignore_index exempt, where
// reading them costs no device sync (host memory); the smallest target is named when one is
// negative, else the largest. A device reports an out-of-range target as NaN instead (the loss
// kernels), so that a training step needs no sync and can be captured in a CUDA graph.
inline void check_class_targets(const char* op, const Tensor& target, int64_t classes,
                                int64_t ignore_index) {
  if (!target.device().is_cpu() || target.numel() == 0) return;
  const Tensor t = target.contiguous();
  const int64_t* v = t.data<int64_t>();
  // An ignored target counts as 0, a valid class.
  int64_t lo = 0, hi = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t x = v[i] == ignore_index ? 0 : v[i];
    lo = i == 0 ? x : std::min(lo, x);
    hi = i == 0 ? x : std::max(hi, x);
  }
  MT_CHECK(lo >= 0 && hi < classes, op, ": target ", lo < 0 ? lo : hi, " is out of bounds for ",
           classes, " classes");
}

// Weights are constants of the loss, as in PyTorch, which refuses one that requires grad.
inline void check_weight(const char* op, const char* what, const Tensor& w) {
  if (!w.defined()) return;
  MT_CHECK(!(w.requires_grad() && autograd::GradMode::is_enabled()), op, ": ", what,
           " is not differentiable, so it cannot require grad");
  MT_CHECK(is_floating(w.dtype()), op, ": expected a floating point ", what, ", got ", w.dtype());
}

// t converted to `dtype` without recording (the loss records its own node).
inline Tensor converted(const Tensor& t, DType dtype) {
  if (!t.defined()) return t;
  autograd::NoGradGuard no_grad;
  return t.to(dtype);
}

// input and target of an elementwise loss in their common dtype (copies made without recording;
// the gradients come back in that dtype and the engine converts them for their inputs).
struct Pair {
  Tensor input, target;
  Shape shape;  // broadcast
};

inline Pair prepare_pair(const char* op, const Tensor& input, const Tensor& target) {
  check_floating(op, input);
  ops::check_same_device(op, input, target);
  if (!(input.shape() == target.shape())) {
    log().warn(
        "{}: using a target size ({}) that is different to the input size ({}); this will "
        "likely lead to incorrect results due to broadcasting",
        op, detail::str_cat(target.shape()), detail::str_cat(input.shape()));
  }
  const DType dtype = result_type(input, target);
  return {converted(input, dtype), converted(target, dtype),
          broadcast_shapes(input.shape(), target.shape(), op)};
}

// The formulas of mse_loss and l1_loss serve create_graph when they read the operands
// themselves: a cast made by prepare_pair is not recorded, so it has no history to go through.
inline autograd::DoubleBackward same_operands(const Pair& p, const Tensor& input,
                                              const Tensor& target) {
  return p.input.is_same(input) && p.target.is_same(target) ? autograd::DoubleBackward::Supported
                                                            : autograd::DoubleBackward::Unsupported;
}

}  // namespace mantissa::loss_detail
