// Elementwise ops with their backward formulas: binary arithmetic with broadcasting and type
// promotion, unary math with sigmoid and tanh, clamp, where, comparisons, and the in-place forms
// (the other activations are in activations.cpp).
#include <cmath>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/activation_formulas.h"

namespace mantissa {
namespace ops {

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.device() == b.device(), "expected all tensors to be on the same device, but found ",
           a.device(), " and ", b.device(), " (op: ", op, ")");
}

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape strides(shape.size(), 0);
  const int64_t lead = shape.size() - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) strides[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return detail::make_view(t, shape, strides, t.storage_offset());
}

Tensor run_unary(const KernelTable<UnaryKernel>& table, const Tensor& in) {
  Tensor out = empty(in.shape(), TensorOptions(in.device()).dtype(in.dtype()));
  table(in.device())(out, in);
  return out;
}

Tensor run_binary_same(const KernelTable<BinaryKernel>& table, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), table.op_name);
  Tensor out = empty(shape, TensorOptions(a.device()).dtype(a.dtype()));
  table(a.device())(out, broadcast_view(a, shape), broadcast_view(b.to(a.dtype()), shape));
  return out;
}

// Unchecked, unlike full: the scalar side of an op converts as a cast does (a float16 tensor plus
// 1e5 is infinity, as in PyTorch).
Tensor wrap_scalar(const Scalar& s, DType dtype, Device device) {
  Tensor t = empty(Shape{}, TensorOptions(device).dtype(dtype));
  fill_kernel(device)(t, s);
  return t;
}

Tensor scalar_operand(const Tensor& t, const Scalar& s) {
  return wrap_scalar(s, result_type(t, s), t.device());
}

}  // namespace ops

namespace {

using autograd::BackwardContext;
using autograd::creating_graph;
using autograd::DoubleBackward;
using autograd::Recorder;
using autograd::sum_to;
using Grads = std::vector<Tensor>;
using ops::broadcast_view;
using ops::floating_of;
using ops::kSaveIn;
using ops::kSaveNone;
using ops::kSaveOut;
using ops::run_binary_same;
using ops::run_unary;
using ops::Saves;
using ops::unary_op;

// PyTorch's combine_categories: a higher-priority group's dtype wins unless a lower group has a
// higher category.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

struct Prepared {
  Tensor a, b;  // cast to dtype (recorded casts), not yet broadcast
  Shape shape;
  DType dtype;
  Device device;
};

Prepared prepare(const char* op, const Tensor& a, const Tensor& b, DType compute) {
  ops::check_same_device(op, a, b);
  Prepared p{a.to(compute), b.to(compute), broadcast_shapes(a.shape(), b.shape(), op), compute,
             a.device()};
  return p;
}

Tensor alloc(const Prepared& p, DType dtype) {
  return empty(p.shape, TensorOptions(p.device).dtype(dtype));
}

// Binary ops that produce their inputs' dtype. The output is saved only when the formula reads
// it (`save_out`): a saved output can't be modified in place afterwards. Formulas are written
// with the differentiable ops, so they also serve create_graph.
template <typename Backward>
Tensor binary_op(const char* op, const char* node, const KernelTable<BinaryKernel>& table,
                 const Tensor& a, const Tensor& b, DType compute, Backward backward,
                 bool save_out = false) {
  Prepared p = prepare(op, a, b, compute);
  Tensor out = alloc(p, compute);
  table(p.device)(out, broadcast_view(p.a, p.shape), broadcast_view(p.b, p.shape));
  if (is_floating(compute)) {
    if (Recorder rec{node, {&p.a, &p.b}}) {
      rec.save(p.a).save(p.b).save(save_out ? out : Tensor());
      rec.finish(
          out,
          [backward, sa = p.a.shape(), sb = p.b.shape()](BackwardContext& ctx) -> Grads {
            auto [ga, gb] = backward(ctx, ctx.grad(), ctx.saved(0), ctx.saved(1), ctx.saved(2));
            return {ga.defined() ? sum_to(ga, sa) : ga, gb.defined() ? sum_to(gb, sb) : gb};
          },
          DoubleBackward::Supported);
    }
  }
  return out;
}

Tensor comparison(const char* op, const KernelTable<BinaryKernel>& table, const Tensor& a,
                  const Tensor& b) {
  ops::check_same_device(op, a, b);
  const DType compute = result_type(a, b);
  autograd::NoGradGuard no_grad;
  const Tensor x = a.to(compute), y = b.to(compute);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, TensorOptions(a.device()).dtype(kBool));
  table(a.device())(out, broadcast_view(x, shape), broadcast_view(y, shape));
  return out;
}

}  // namespace

DType ops::result_type_of(std::initializer_list<const Tensor*> tensors) {
  std::optional<DType> dim_result, zero_result;
  for (const Tensor* t : tensors) {
    auto& slot = t->dim() > 0 ? dim_result : zero_result;
    slot = slot ? promote_types(*slot, t->dtype()) : t->dtype();
  }
  return *combine(dim_result, zero_result);
}

DType result_type(const Tensor& a, const Tensor& b) { return ops::result_type_of({&a, &b}); }

DType result_type(const Tensor& a, const Scalar& s) {
  const DType wrapped = s.is_floating() ? kFloat32 : s.is_bool() ? kBool : kInt64;
  std::optional<DType> dim_result, zero_result;
  (a.dim() > 0 ? dim_result : zero_result) = a.dtype();
  return *combine(dim_result, combine(zero_result, wrapped));
}

// ---- binary arithmetic ----------------------------------------------------------------------
Tensor add_op(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  const DType compute = result_type(a, b);
  MT_CHECK(!alpha.is_floating() || is_floating(compute),
           "add: for integral input tensors, "
           "argument alpha must not be a floating point number");
  Prepared p = prepare("add", a, b, compute);
  Tensor out = alloc(p, compute);
  add_kernel(p.device)(out, broadcast_view(p.a, p.shape), broadcast_view(p.b, p.shape), alpha);
  if (is_floating(compute)) {
    if (Recorder rec{"AddBackward0", {&p.a, &p.b}}) {
      rec.finish(
          out,
          [alpha, sa = p.a.shape(), sb = p.b.shape()](BackwardContext& ctx) -> Grads {
            const Tensor g = ctx.grad();
            Tensor gb;
            if (ctx.needs(1)) gb = sum_to(alpha.to_double() == 1.0 ? g : g * alpha, sb);
            return {ctx.needs(0) ? sum_to(g, sa) : Tensor(), gb};
          },
          DoubleBackward::Supported);
    }
  }
  return out;
}

Tensor sub_op(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  MT_CHECK(a.dtype() != kBool && b.dtype() != kBool,
           "sub: subtraction, the `-` operator, with a "
           "bool tensor is not supported; use logical_not() to invert a mask");
  const Scalar neg = alpha.is_floating() ? Scalar(-alpha.to_double()) : Scalar(-alpha.to_int64());
  return add(a, b, neg);
}

Tensor mul_op(const Tensor& a, const Tensor& b) {
  return binary_op(
      "mul", "MulBackward0", mul_kernel, a, b, result_type(a, b),
      [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor&) {
        return std::pair{ctx.needs(0) ? g * y : Tensor(), ctx.needs(1) ? g * x : Tensor()};
      });
}

Tensor div_op(const Tensor& a, const Tensor& b) {
  return binary_op(
      "div", "DivBackward0", div_kernel, a, b, floating_of(result_type(a, b)),
      [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor&) {
        return std::pair{ctx.needs(0) ? g / y : Tensor(),
                         ctx.needs(1) ? -g * x / (y * y) : Tensor()};
      });
}

Tensor pow_op(const Tensor& a, const Tensor& e) {
  return binary_op(
      "pow", "PowBackward1", pow_kernel, a, e, result_type(a, e),
      [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y,
         const Tensor& out) {
        Tensor gx, gy;
        if (ctx.needs(0)) gx = g * y * pow(x, y - 1.0);
        // d/dy x^y = x^y log x; defined as 0 where x == 0 and y >= 0.
        if (ctx.needs(1)) gy = where((x == 0.0) & (y >= 0.0), zeros_like(g), g * out * log(x));
        return std::pair{gx, gy};
      },
      /*save_out=*/true);
}

Tensor pow_op(const Tensor& a, const Scalar& e) {
  const DType compute = result_type(a, e);
  MT_CHECK(is_floating(compute) || e.is_floating() || e.to_int64() >= 0,
           "pow: integers to negative integer powers are not allowed (exponent ", e, ")");
  const Tensor x = a.to(compute);
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(compute));
  pow_kernel(x.device())(out, x,
                         broadcast_view(ops::wrap_scalar(e, compute, x.device()), x.shape()));
  if (is_floating(compute)) {
    if (Recorder rec{"PowBackward0", {&x}}) {
      rec.save(x);
      rec.finish(
          out,
          [e](BackwardContext& ctx) -> Grads {
            const double p = e.to_double();
            if (p == 0.0) return {zeros_like(ctx.grad())};
            return {ctx.grad() * p * pow(ctx.saved(0), Scalar(p - 1.0))};
          },
          DoubleBackward::Supported);
    }
  }
  return out;
}

namespace {
// Gradient routing of maximum/minimum: the larger (smaller) input gets it, ties split it.
std::pair<Tensor, Tensor> extremum_backward(BackwardContext& ctx, const Tensor& g, const Tensor& x,
                                            const Tensor& y, bool is_max) {
  const Tensor half = g * 0.5;
  const Tensor x_wins = is_max ? x > y : x < y;
  const Tensor tie = x == y;
  Tensor gx, gy;
  if (ctx.needs(0)) gx = where(tie, half, where(x_wins, g, zeros_like(g)));
  if (ctx.needs(1)) gy = where(tie, half, where(x_wins, zeros_like(g), g));
  return {gx, gy};
}
}  // namespace

Tensor maximum_op(const Tensor& a, const Tensor& b) {
  return binary_op("maximum", "MaximumBackward0", maximum_kernel, a, b, result_type(a, b),
                   [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y,
                      const Tensor&) { return extremum_backward(ctx, g, x, y, true); });
}

Tensor minimum_op(const Tensor& a, const Tensor& b) {
  return binary_op("minimum", "MinimumBackward0", minimum_kernel, a, b, result_type(a, b),
                   [](BackwardContext& ctx, const Tensor& g, const Tensor& x, const Tensor& y,
                      const Tensor&) { return extremum_backward(ctx, g, x, y, false); });
}

Tensor add_op(const Tensor& a, const Scalar& b) { return add(a, ops::scalar_operand(a, b)); }
Tensor sub_op(const Tensor& a, const Scalar& b) { return sub(a, ops::scalar_operand(a, b)); }
Tensor mul_op(const Tensor& a, const Scalar& b) { return mul(a, ops::scalar_operand(a, b)); }
Tensor div_op(const Tensor& a, const Scalar& b) { return div(a, ops::scalar_operand(a, b)); }

// ---- unary math -----------------------------------------------------------------------------
Tensor neg_op(const Tensor& x) {
  MT_CHECK(x.dtype() != kBool,
           "neg: negation, the `-` operator, on a bool tensor is not supported");
  return unary_op("NegBackward0", neg_kernel, x, false, kSaveNone,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return -g; });
}

Tensor abs_op(const Tensor& x) {
  return unary_op("AbsBackward0", abs_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g * sign(in); });
}

Tensor exp_op(const Tensor& x) {
  return unary_op("ExpBackward0", exp_kernel, x, true, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) { return g * out; });
}

Tensor log_op(const Tensor& x) {
  return unary_op("LogBackward0", log_kernel, x, true, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g / in; });
}

Tensor sqrt_op(const Tensor& x) {
  return unary_op(
      "SqrtBackward0", sqrt_kernel, x, true, kSaveOut,
      [](const Tensor& g, const Tensor&, const Tensor& out) { return g / (out * 2.0); });
}

Tensor rsqrt_op(const Tensor& x) {
  return unary_op(
      "RsqrtBackward0", rsqrt_kernel, x, true, kSaveOut,
      [](const Tensor& g, const Tensor&, const Tensor& out) { return g * out * out * out * -0.5; });
}

Tensor square_op(const Tensor& x) {
  return unary_op("PowBackward0", square_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g * in * 2.0; });
}

Tensor sign_op(const Tensor& x) {
  return unary_op("SignBackward0", sign_kernel, x, false, kSaveNone,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}

Tensor reciprocal_op(const Tensor& x) {
  return unary_op("ReciprocalBackward0", reciprocal_kernel, x, true, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) { return -g * out * out; });
}

Tensor sin_op(const Tensor& x) {
  return unary_op("SinBackward0", sin_kernel, x, true, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g * cos(in); });
}

Tensor cos_op(const Tensor& x) {
  return unary_op("CosBackward0", cos_kernel, x, true, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return -g * sin(in); });
}

Tensor log1p_op(const Tensor& x) {
  return unary_op("Log1PBackward0", log1p_kernel, x, true, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) { return g / (in + 1.0); });
}

Tensor expm1_op(const Tensor& x) {
  return unary_op(
      "Expm1Backward0", expm1_kernel, x, true, kSaveOut,
      [](const Tensor& g, const Tensor&, const Tensor& out) { return g * (out + 1.0); });
}

// ---- sigmoid and tanh ------------------------------------------------------------------------
Tensor sigmoid_op(const Tensor& x) {
  return unary_op("SigmoidBackward0", sigmoid_kernel, x, true, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) {
                    if (creating_graph()) return formulas::sigmoid_grad(g, out);
                    return run_binary_same(sigmoid_backward_kernel, g, out);
                  });
}

Tensor tanh_op(const Tensor& x) {
  return unary_op("TanhBackward0", tanh_kernel, x, true, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) {
                    if (creating_graph()) return formulas::tanh_grad(g, out);
                    return run_binary_same(tanh_backward_kernel, g, out);
                  });
}

Tensor clamp_op(const Tensor& x_in, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  MT_CHECK(lo || hi, "clamp: at least one of 'min' or 'max' must not be None");
  MT_CHECK(x_in.dtype() != kBool, "clamp: not implemented for bool tensors");
  // Bounds take part in type promotion: clamp(int_tensor, 0.5) is float32, as in PyTorch
  // (converting the bound to the integer type instead would truncate it).
  Tensor x = x_in;
  if (lo) x = x.to(result_type(x, *lo));
  if (hi) x = x.to(result_type(x, *hi));
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  clamp_kernel(x.device())(out, x, lo ? &*lo : nullptr, hi ? &*hi : nullptr);
  if (Recorder rec{"ClampBackward1", {&x}}) {
    rec.save(x);
    rec.finish(
        out,
        [lo, hi](BackwardContext& ctx) -> Grads {
          const Tensor in = ctx.saved(0), g = ctx.grad();
          Tensor inside = ones_like(in, kBool);
          if (lo) inside = inside & (in >= *lo);
          if (hi) inside = inside & (in <= *hi);
          return {where(inside, g, zeros_like(g))};
        },
        DoubleBackward::Supported);
  }
  return out;
}

Tensor where_op(const Tensor& cond, const Tensor& a, const Tensor& b) {
  MT_CHECK(cond.dtype() == kBool, "where: expected condition to be a bool tensor, got ",
           cond.dtype());
  ops::check_same_device("where", cond, a);
  const DType compute = result_type(a, b);
  Prepared p = prepare("where", a, b, compute);
  p.shape = broadcast_shapes(cond.shape(), p.shape, "where");
  Tensor out = alloc(p, compute);
  where_kernel(p.device)(out, broadcast_view(cond, p.shape), broadcast_view(p.a, p.shape),
                         broadcast_view(p.b, p.shape));
  if (is_floating(compute)) {
    if (Recorder rec{"WhereBackward0", {&p.a, &p.b}}) {
      rec.save(cond);
      rec.finish(
          out,
          [sa = p.a.shape(), sb = p.b.shape()](BackwardContext& ctx) -> Grads {
            const Tensor g = ctx.grad(), c = ctx.saved(0), z = zeros_like(g);
            return {ctx.needs(0) ? sum_to(where(c, g, z), sa) : Tensor(),
                    ctx.needs(1) ? sum_to(where(c, z, g), sb) : Tensor()};
          },
          DoubleBackward::Supported);
    }
  }
  return out;
}

Tensor where_op(const Tensor& cond, const Tensor& a, const Scalar& b) {
  return where(cond, a, ops::scalar_operand(a, b));
}

// ---- comparisons ----------------------------------------------------------------------------
Tensor eq_op(const Tensor& a, const Tensor& b) { return comparison("eq", eq_kernel, a, b); }
Tensor ne_op(const Tensor& a, const Tensor& b) { return comparison("ne", ne_kernel, a, b); }
Tensor lt_op(const Tensor& a, const Tensor& b) { return comparison("lt", lt_kernel, a, b); }
Tensor le_op(const Tensor& a, const Tensor& b) { return comparison("le", le_kernel, a, b); }
Tensor gt_op(const Tensor& a, const Tensor& b) { return comparison("gt", gt_kernel, a, b); }
Tensor ge_op(const Tensor& a, const Tensor& b) { return comparison("ge", ge_kernel, a, b); }

bool equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return false;
  for (bool v : eq(a, b).to_vector<bool>())
    if (!v) return false;
  return true;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (!(a.shape() == b.shape())) return false;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (x[i] == y[i]) continue;
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

}  // namespace mantissa
