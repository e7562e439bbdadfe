// Pointwise and masking ops with their backward formulas: floor_divide, remainder and fmod,
// masked_fill, the floating-point class tests, lerp, addcmul, and tril/triu. Broadcasting and
// type promotion are PyTorch's.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/scalar_range.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using autograd::sum_to;
using Grads = std::vector<Tensor>;
using ops::broadcast_view;

TensorOptions options(const Tensor& like, DType dtype) {
  return TensorOptions(like.device()).dtype(dtype);
}

// PyTorch's CPU kernels raise ZeroDivisionError for an integer zero divisor. The check reads the
// divisor back to the host, on every device, so integer division behaves the same everywhere.
void check_integer_divisor(const char* op, const Tensor& divisor) {
  autograd::NoGradGuard no_grad;
  const int64_t zeros = sum(divisor == 0).item<int64_t>();
  MT_CHECK(zeros == 0, op, ": ZeroDivisionError: integer division by zero (", zeros,
           " zero divisors of dtype ", divisor.dtype(), ")");
}

// floor_divide, remainder and fmod: a and b promoted to their result type and broadcast.
// `backward(ctx, grad, a, b)` gives the gradients of a floating result; none for floor_divide,
// whose derivative PyTorch does not implement.
template <typename Backward>
Tensor division_op(const char* op, const char* node, const KernelTable<BinaryKernel>& table,
                   const Tensor& a, const Tensor& b, bool differentiable, Backward backward) {
  ops::check_same_device(op, a, b);
  const DType dtype = result_type(a, b);
  const Tensor x = a.to(dtype), y = b.to(dtype);
  if (!is_floating(dtype) && dtype != kBool) check_integer_divisor(op, y);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, options(x, dtype));
  table(x.device())(out, broadcast_view(x, shape), broadcast_view(y, shape));
  if (differentiable && is_floating(dtype)) {
    if (Recorder rec{node, {&x, &y}}) {
      rec.save(x).save(y);
      rec.finish(out, [backward, sa = x.shape(), sb = y.shape()](BackwardContext& ctx) -> Grads {
        auto [ga, gb] = backward(ctx, ctx.grad(), ctx.saved(0), ctx.saved(1));
        return {ga.defined() ? sum_to(ga, sa) : ga, gb.defined() ? sum_to(gb, sb) : gb};
      });
    }
  }
  return out;
}

// ---- masked_fill ------------------------------------------------------------------------------
void check_mask(const char* op, const Tensor& self, const Tensor& mask, const Tensor& value) {
  MT_CHECK(mask.dtype() == kBool, op, ": expected a bool mask, got dtype ", mask.dtype());
  MT_CHECK(value.dim() == 0, op,
           ": only supports a 0-dimensional value tensor, but got tensor with ", value.dim(),
           " dimension(s)");
  ops::check_same_device(op, self, mask);
}

// The value as a 0-d tensor of self's dtype on self's device (a recorded cast, so a value that
// requires grad gets its gradient back in its own dtype).
Tensor fill_value(const Tensor& self, const Tensor& value) {
  return value.to(self.device()).to(self.dtype());
}

Tensor& masked_fill_inplace(Tensor& self, const Tensor& mask, const Tensor& value) {
  check_mask("masked_fill_", self, mask, value);
  autograd::check_inplace("masked_fill_", self, {&value});
  const Shape shape = broadcast_shapes(self.shape(), mask.shape(), "masked_fill_");
  MT_CHECK(shape == self.shape(), "masked_fill_: output with shape ", self.shape(),
           " doesn't match the broadcast shape ", shape);
  const Tensor v = fill_value(self, value);
  Recorder rec{"MaskedFillBackward0", {&self, &v}};  // edges capture self's old history
  where_kernel(self.device())(self, broadcast_view(mask, shape), broadcast_view(v, shape), self);
  self.bump_version();
  if (rec) {
    rec.save(mask);
    rec.finish_inplace(self, [](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad(), m = ctx.saved(0), z = zeros_like(g);
      return {ctx.needs(0) ? where(m, z, g) : Tensor(),
              ctx.needs(1) ? sum(where(m, g, z)) : Tensor()};
    });
  }
  return self;
}

// ---- class tests ------------------------------------------------------------------------------
Tensor class_test(const KernelTable<UnaryKernel>& table, const Tensor& x) {
  Tensor out = empty(x.shape(), options(x, kBool));
  table(x.device())(out, x);
  return out;
}

// ---- lerp and addcmul -------------------------------------------------------------------------
void check_lerp_operand(const Tensor& start, const Tensor& t, const char* what) {
  MT_CHECK(t.dtype() == start.dtype(), "lerp: expected dtype ", start.dtype(), " for `", what,
           "` but got dtype ", t.dtype());
  ops::check_same_device("lerp", start, t);
}

// ---- tril / triu ------------------------------------------------------------------------------
// Keeps the elements of each matrix (the last two dims) on and below (tril) or on and above
// (triu) the diagonal `diagonal`, through a [rows, cols] mask of col - row against it.
Tensor triangle(const char* op, const char* node, const Tensor& x, int64_t diagonal, bool upper) {
  MT_CHECK(x.dim() >= 2, op, ": input tensor must have at least 2 dimensions, got ", x.dim());
  Tensor out = ops::empty_as(x.shape(), x);
  {
    autograd::NoGradGuard no_grad;
    const TensorOptions index = options(x, kInt64);
    const Tensor offset =
        arange(x.size(-1), index).unsqueeze(0) - arange(x.size(-2), index).unsqueeze(1);
    const Tensor keep = upper ? offset >= diagonal : offset <= diagonal;
    where_kernel(x.device())(out, broadcast_view(keep, x.shape()), x,
                             broadcast_view(zeros({}, options(x, x.dtype())), x.shape()));
  }
  if (Recorder rec{node, {&x}}) {
    rec.finish(out, [diagonal, upper](BackwardContext& ctx) -> Grads {
      return {upper ? triu(ctx.grad(), diagonal) : tril(ctx.grad(), diagonal)};
    });
  }
  return out;
}

}  // namespace

// ---- public entries ---------------------------------------------------------------------------
Tensor floor_divide_op(const Tensor& a, const Tensor& b) {
  return division_op("floor_divide", "", floor_divide_kernel, a, b, false,
                     [](BackwardContext&, const Tensor&, const Tensor&, const Tensor&) {
                       return std::pair{Tensor(), Tensor()};
                     });
}

Tensor floor_divide_op(const Tensor& a, const Scalar& b) {
  return floor_divide(a, ops::scalar_operand(a, b));
}

Tensor remainder_op(const Tensor& a, const Tensor& b) {
  return division_op("remainder", "RemainderBackward0", remainder_kernel, a, b, true,
                     [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y) {
                       return std::pair{ctx.needs(0) ? g : Tensor(),
                                        ctx.needs(1) ? -g * floor_divide(x, y) : Tensor()};
                     });
}

Tensor remainder_op(const Tensor& a, const Scalar& b) {
  return remainder(a, ops::scalar_operand(a, b));
}

Tensor fmod_op(const Tensor& a, const Tensor& b) {
  return division_op("fmod", "FmodBackward0", fmod_kernel, a, b, true,
                     [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y) {
                       // trunc(x / y), exactly: x - fmod(x, y) is a multiple of y.
                       return std::pair{ctx.needs(0) ? g : Tensor(),
                                        ctx.needs(1) ? -g * ((x - fmod(x, y)) / y) : Tensor()};
                     });
}

Tensor fmod_op(const Tensor& a, const Scalar& b) { return fmod(a, ops::scalar_operand(a, b)); }

Tensor masked_fill_op(const Tensor& self, const Tensor& mask, const Tensor& value) {
  check_mask("masked_fill", self, mask, value);
  const Tensor v = fill_value(self, value);
  const Shape shape = broadcast_shapes(self.shape(), mask.shape(), "masked_fill");
  Tensor out = empty(shape, options(self, self.dtype()));
  where_kernel(self.device())(out, broadcast_view(mask, shape), broadcast_view(v, shape),
                              broadcast_view(self, shape));
  if (Recorder rec{"MaskedFillBackward0", {&self, &v}}) {
    rec.save(mask);
    rec.finish(out, [ss = self.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad(), m = ctx.saved(0), z = zeros_like(g);
      return {ctx.needs(0) ? sum_to(where(m, z, g), ss) : Tensor(),
              ctx.needs(1) ? sum(where(m, g, z)) : Tensor()};
    });
  }
  return out;
}

Tensor masked_fill_op(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return masked_fill(self, mask, ops::wrap_scalar(value, self.dtype(), self.device()));
}

Tensor isnan_op(const Tensor& x) { return class_test(isnan_kernel, x); }
Tensor isinf_op(const Tensor& x) { return class_test(isinf_kernel, x); }
Tensor isfinite_op(const Tensor& x) { return class_test(isfinite_kernel, x); }

Tensor lerp_op(const Tensor& start, const Tensor& end, const Tensor& weight) {
  check_lerp_operand(start, end, "end");
  check_lerp_operand(start, weight, "weight");
  const Shape shape = broadcast_shapes(broadcast_shapes(start.shape(), end.shape(), "lerp"),
                                       weight.shape(), "lerp");
  Tensor out = empty(shape, options(start, start.dtype()));
  lerp_kernel(start.device())(out, broadcast_view(start, shape), broadcast_view(end, shape),
                              broadcast_view(weight, shape), 0.0);
  if (Recorder rec{"LerpBackward1", {&start, &end, &weight}}) {
    rec.save(start).save(end).save(weight);
    rec.finish(
        out,
        [ss = start.shape(), se = end.shape(), sw = weight.shape()](BackwardContext& ctx) -> Grads {
          const Tensor g = ctx.grad(), s = ctx.saved(0), e = ctx.saved(1), w = ctx.saved(2);
          return {ctx.needs(0) ? sum_to(g * (1.0 - w), ss) : Tensor(),
                  ctx.needs(1) ? sum_to(g * w, se) : Tensor(),
                  ctx.needs(2) ? sum_to(g * (e - s), sw) : Tensor()};
        });
  }
  return out;
}

Tensor lerp_op(const Tensor& start, const Tensor& end, const Scalar& weight) {
  check_lerp_operand(start, end, "end");
  const Shape shape = broadcast_shapes(start.shape(), end.shape(), "lerp");
  Tensor out = empty(shape, options(start, start.dtype()));
  const double w = weight.to_double();
  lerp_kernel(start.device())(out, broadcast_view(start, shape), broadcast_view(end, shape),
                              Tensor(), w);
  if (Recorder rec{"LerpBackward0", {&start, &end}}) {
    rec.finish(out, [w, ss = start.shape(), se = end.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      return {ctx.needs(0) ? sum_to(g * (1.0 - w), ss) : Tensor(),
              ctx.needs(1) ? sum_to(g * w, se) : Tensor()};
    });
  }
  return out;
}

Tensor addcmul_op(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  ops::check_same_device("addcmul", self, t1);
  ops::check_same_device("addcmul", self, t2);
  const DType dtype = ops::result_type_of({&self, &t1, &t2});
  const Tensor s = self.to(dtype), x = t1.to(dtype), y = t2.to(dtype);
  const Shape shape =
      broadcast_shapes(broadcast_shapes(s.shape(), x.shape(), "addcmul"), y.shape(), "addcmul");
  Tensor out = empty(shape, options(s, dtype));
  addcmul_kernel(s.device())(out, broadcast_view(s, shape), broadcast_view(x, shape),
                             broadcast_view(y, shape), value);
  if (is_floating(dtype)) {
    if (Recorder rec{"AddcmulBackward0", {&s, &x, &y}}) {
      rec.save(x).save(y);
      rec.finish(
          out,
          [value, ss = s.shape(), sx = x.shape(), sy = y.shape()](BackwardContext& ctx) -> Grads {
            const Tensor g = ctx.grad();
            return {ctx.needs(0) ? sum_to(g, ss) : Tensor(),
                    ctx.needs(1) ? sum_to(g * ctx.saved(1) * value, sx) : Tensor(),
                    ctx.needs(2) ? sum_to(g * ctx.saved(0) * value, sy) : Tensor()};
          });
    }
  }
  return out;
}

Tensor tril_op(const Tensor& x, int64_t diagonal) {
  return triangle("tril", "TrilBackward0", x, diagonal, false);
}

Tensor triu_op(const Tensor& x, int64_t diagonal) {
  return triangle("triu", "TriuBackward0", x, diagonal, true);
}

// ---- methods ----------------------------------------------------------------------------------

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  check_fits("masked_fill_", value, dtype());
  return masked_fill_inplace(*this, mask, ops::wrap_scalar(value, dtype(), device()));
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  return masked_fill_inplace(*this, mask, value);
}

}  // namespace mantissa
