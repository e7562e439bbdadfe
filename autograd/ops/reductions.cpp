// Reductions with their backward formulas: sum, mean, amax/amin, max/min (all, or along a dim
// with indices), argmax/argmin, var/std, norm, all_finite, logsumexp, prod and any/all.
//
// Every reduction runs its kernel on an output in keepdim form (reduced dims kept with size 1);
// without keepdim the result is a view of it with those dims dropped. Backward formulas undo
// that: the gradient is reshaped back to keepdim form and broadcast against the input.
// sum and norm take autocast's float32 policy (half inputs are reduced in float32).
// logsumexp is PyTorch's composition (amax, exp, sum, log) recorded as one node whose backward
// is g * exp(x - result). prod's backward multiplies g by the product of the other elements of
// each slice, built from exclusive scans from both ends, so zeros in the input need no special
// case; it runs kernels and is first-order only.
#include <algorithm>
#include <cmath>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa {

namespace ops {
// The dtype an integer-promoting op (prod, cumsum, cumprod) computes in: the requested one, else
// int64 for integer and bool inputs, else the input's.
DType integer_promoted(const Tensor& x, std::optional<DType> dtype) {
  return dtype.value_or(is_integral(x.dtype(), /*include_bool=*/true) ? kInt64 : x.dtype());
}
}  // namespace ops

namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

// Which dims a reduction removes, and the shapes it produces.
struct ReducedDims {
  bool reduced[kMaxDims] = {};
  Shape keep;         // input shape with reduced dims set to 1
  Shape result;       // keep, or keep without the reduced dims
  int64_t count = 1;  // input elements folded into each output

  Shape dims() const {
    Shape d;
    for (int64_t i = 0; i < keep.size(); ++i)
      if (reduced[i]) d.push_back(i);
    return d;
  }
  // Reshapes a result-shaped gradient back to keepdim form.
  Tensor to_keep(const Tensor& t) const { return t.shape() == keep ? t : t.reshape(keep); }
};

// `dims` empty means all dims. Dims may be negative; repeats are an error, as in PyTorch.
ReducedDims make_reduction(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  ReducedDims r;
  const int64_t nd = x.dim();
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) r.reduced[d] = true;
  } else {
    bool seen[kMaxDims] = {};
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, nd, op);
      MT_CHECK(!seen[w], op, ": dim ", w, " appears multiple times in the list of dims");
      seen[w] = true;
      if (nd > 0) r.reduced[w] = true;  // a 0-d tensor accepts dim 0 and -1 and keeps its shape
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    r.keep.push_back(r.reduced[d] ? 1 : x.size(d));
    if (r.reduced[d]) r.count *= x.size(d);
    if (!r.reduced[d] || keepdim) r.result.push_back(r.reduced[d] ? 1 : x.size(d));
  }
  return r;
}

// The user-facing view of a fresh keepdim-form output (not recorded: the op records on it).
Tensor result_view(const Tensor& keep_out, const Shape& result) {
  if (keep_out.shape() == result) return keep_out;
  return detail::make_view(keep_out, result, contiguous_strides(result), keep_out.storage_offset());
}

Tensor result_view(const Tensor& keep_out, const ReducedDims& r) {
  return result_view(keep_out, r.result);
}

// The shapes of a reduction over one dim (or, without a dim, over all of them): keep has the
// reduced dims as 1, result is what the user gets.
struct OneDimReduction {
  Shape keep, result;
};
OneDimReduction one_dim_reduction(const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                                  const char* op) {
  OneDimReduction r;
  const int64_t d = dim ? wrap_dim(*dim, x.dim(), op) : -1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const bool reduced = !dim || i == d;
    r.keep.push_back(reduced ? 1 : x.size(i));
    if (!reduced || (dim && keepdim)) r.result.push_back(reduced ? 1 : x.size(i));
  }
  return r;
}

// PyTorch's names for dtypes in its messages ("Got: Long").
const char* torch_name(DType t) {
  switch (t) {
    case kInt64:
      return "Long";
    case kInt32:
      return "Int";
    case kUInt8:
      return "Byte";
    case kBool:
      return "Bool";
    case kFloat32:
      return "Float";
    case kFloat64:
      return "Double";
    case kFloat16:
      return "Half";
    case kBFloat16:
      return "BFloat16";
    case kFloat8E4M3FN:
      return "Float8_e4m3fn";
    case kFloat8E5M2:
      return "Float8_e5m2";
  }
  return "?";
}

void check_nonempty_dims(const Tensor& x, const ReducedDims& r, const char* op) {
  for (int64_t d = 0; d < x.dim(); ++d) {
    MT_CHECK(!r.reduced[d] || x.size(d) != 0, op, "(): Expected reduction dim ", d,
             " to have non-zero size (input shape ", x.shape(), ")");
  }
}

// Gradient of an extremum (amax, amin, max(), min(), the inf-norms): split evenly among the
// elements equal to the result; a NaN result sends it to the NaN elements.
Tensor evenly_distribute(const Tensor& g_keep, const Tensor& x, const Tensor& result_keep,
                         const ReducedDims& r) {
  const Tensor hit = (x == result_keep) | ((x != x) & (result_keep != result_keep));
  const Tensor mask = hit.to(g_keep.dtype());
  return g_keep / sum(mask, r.dims(), true) * mask;
}

Tensor extremum(const Tensor& x, const Shape& dims, bool keepdim, bool is_max, const char* op,
                const char* node) {
  const ReducedDims r = make_reduction(x, dims, keepdim, op);
  check_nonempty_dims(x, r, op);
  Tensor out = ops::empty_on(r.keep, x.dtype(), x.device());
  (is_max ? amax_kernel : amin_kernel)(x.device())(out, x);
  Tensor res = result_view(out, r);
  if (Recorder rec{node, {&x}}) {
    rec.save(x).save(out);
    rec.finish(
        res,
        [r](BackwardContext& ctx) -> Grads {
          return {evenly_distribute(r.to_keep(ctx.grad()), ctx.saved(0), ctx.saved(1), r)};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

ValuesIndices arg_extremum(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const ReducedDims r = make_reduction(x, Shape{d}, keepdim, op);
  check_nonempty_dims(x, r, op);
  Tensor values = ops::empty_on(r.keep, x.dtype(), x.device());
  Tensor indices = ops::empty_on(r.keep, kInt64, x.device());
  (is_max ? max_dim_kernel : min_dim_kernel)(x.device())(values, indices, x, d);
  ValuesIndices res{result_view(values, r), result_view(indices, r)};
  if (Recorder rec{is_max ? "MaxBackward0" : "MinBackward0", {&x}}) {
    rec.save(indices);
    rec.finish(
        res.values,
        [r, d, shape = x.shape()](BackwardContext& ctx) -> Grads {
          // The gradient goes to the returned index only (not to ties): compare positions along
          // `dim` with it.
          const Tensor g = r.to_keep(ctx.grad());
          Shape pos_shape(shape.size(), 1);
          const int64_t n = shape.size() > 0 ? shape[d] : 1;
          if (shape.size() > 0) pos_shape[d] = n;
          const Tensor pos = arange(n, TensorOptions(g.device()).dtype(kInt64)).reshape(pos_shape);
          return {where(pos == ctx.saved(0), g, 0.0)};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

Tensor arg_index(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  autograd::NoGradGuard no_grad;
  if (dim) return arg_extremum(x, *dim, keepdim, is_max).indices;
  MT_CHECK(x.numel() > 0, is_max ? "argmax" : "argmin",
           "(): Expected reduction dim to be specified for input.numel() == 0.");
  const Tensor idx = arg_extremum(x.reshape(Shape{-1}), 0, false, is_max).indices;
  return keepdim ? idx.reshape(Shape(x.dim(), 1)) : idx;
}

Tensor var_or_std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim,
                  bool take_sqrt) {
  const char* op = take_sqrt ? "std" : "var";
  MT_CHECK(is_floating(x.dtype()), op,
           "(): std and var only support floating point and complex dtypes, got ", x.dtype());
  const ReducedDims r = make_reduction(x, dims, keepdim, op);
  // std of half types takes the root in float32 and rounds once.
  const bool via_float = take_sqrt && is_reduced_float(x.dtype());
  Tensor out = ops::empty_on(r.keep, via_float ? kFloat32 : x.dtype(), x.device());
  var_kernel(x.device())(out, x, correction);
  if (take_sqrt) sqrt_kernel(x.device())(out, out);
  if (via_float) {
    Tensor rounded = ops::empty_on(r.keep, x.dtype(), x.device());
    detail::copy_into(rounded, out);
    out = rounded;
  }
  Tensor res = result_view(out, r);
  if (Recorder rec{take_sqrt ? "StdBackward0" : "VarBackward0", {&x}}) {
    rec.save(x).save(take_sqrt ? out : Tensor());
    rec.finish(
        res,
        [r, correction, take_sqrt](BackwardContext& ctx) -> Grads {
          // var' = 2 (x - mean) / (N - correction); std' = var' / (2 std).
          const Tensor x = ctx.saved(0), g = r.to_keep(ctx.grad());
          const double divisor = std::max<double>(0.0, double(r.count - correction));
          const Tensor centered = x - mean(x, r.dims(), true);
          if (!take_sqrt) return {centered * (g * (2.0 / divisor))};
          // The saved result (the keepdim form) is not the recorded output, so it has no
          // history: under create_graph it is computed again, recorded.
          const Tensor s =
              ctx.create_graph() ? sqrt(var(x, r.dims(), correction, true)) : ctx.saved(1);
          return {centered * (g / (s * divisor))};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

// d||x||_p / dx for the norms, from the input, the keepdim-form norm and gradient.
Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& n, double p,
                     const ReducedDims& r) {
  if (p == 0.0) return zeros_like(x);
  if (p == 1.0) return sign(x) * g;
  if (p == 2.0) return x * where(n != 0.0, g / n, 0.0);
  if (std::isinf(p)) return sign(x) * evenly_distribute(g, abs(x), n, r);
  // sign(x) |x|^(p-1) g / n^(p-1), with 0 where x or n is 0 (and |x|^(p-1) would blow up).
  Tensor scaled = sign(x) * pow(abs(x), Scalar(p - 1.0));
  if (p < 1.0) scaled = where(x != 0.0, scaled, 0.0);
  return scaled * where(n != 0.0, g / pow(n, Scalar(p - 1.0)), 0.0);
}

// ---- prod -----------------------------------------------------------------------------------
// g (keepdim form) times the product of the other elements of x's slice along d.
Tensor prod_backward(const Tensor& g, const Tensor& x, int64_t d) {
  if (x.dim() == 0) return g.reshape(Shape{});
  const Tensor left = ops::empty_on(x.shape(), x.dtype(), x.device());
  const Tensor right = ops::empty_on(x.shape(), x.dtype(), x.device());
  cumprod_kernel(x.device())(left, x, d, /*reverse=*/false, /*exclusive=*/true);
  cumprod_kernel(x.device())(right, x, d, /*reverse=*/true, /*exclusive=*/true);
  return g * (left * right);
}

Tensor prod_body(const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                 std::optional<DType> dtype) {
  const OneDimReduction r = one_dim_reduction(x, dim, keepdim, "prod");
  const DType target = ops::integer_promoted(x, dtype);
  // The kernel multiplies integer/bool inputs straight into int64; other requests cast first.
  const bool integral_in = is_integral(x.dtype(), true);
  const Tensor in = integral_in && is_integral(target, true) ? x : x.to(target);
  Tensor out = ops::empty_on(r.keep, is_floating(target) ? target : kInt64, x.device());
  prod_kernel(x.device())(out, in);
  Tensor res = result_view(out, r.result);
  if (!is_floating(target)) return res.dtype() == target ? res : res.to(target);
  if (Recorder rec{dim ? "ProdBackward1" : "ProdBackward0", {&in}}) {
    rec.save(in);
    const int64_t d = dim ? wrap_dim(*dim, x.dim(), "prod") : 0;
    rec.finish(res, [keep = r.keep, d, all = !dim](BackwardContext& ctx) -> Grads {
      const Tensor x = ctx.saved(0), g = ctx.grad().to(x.dtype()).reshape(keep);
      if (!all || x.dim() <= 1) return {prod_backward(g, x, d)};
      // Over everything: one slice of all elements.
      const Tensor flat = x.reshape(Shape{-1});
      return {prod_backward(g.reshape(Shape{1}), flat, 0).reshape(x.shape())};
    });
  }
  return res;
}

// ---- any and all ----------------------------------------------------------------------------
Tensor logic_reduce(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_all) {
  const char* op = is_all ? "all" : "any";
  const OneDimReduction r = one_dim_reduction(x, dim, keepdim, op);
  Tensor out = ops::empty_on(r.keep, x.dtype() == kUInt8 ? kUInt8 : kBool, x.device());
  (is_all ? all_kernel : any_kernel)(x.device())(out, x);
  return result_view(out, r.result);
}

}  // namespace

Tensor sum_op(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  const ReducedDims r = make_reduction(x, dims, keepdim, "sum");
  const bool integral_in = is_integral(x.dtype(), /*include_bool=*/true);
  const DType target = dtype.value_or(integral_in ? kInt64 : x.dtype());
  // The kernel sums any integer/bool input straight into int64; other requests cast first.
  const Tensor in = integral_in && is_integral(target, true) ? x : x.to(target);
  Tensor out = ops::empty_on(r.keep, is_floating(target) ? target : kInt64, x.device());
  sum_kernel(x.device())(out, in);
  Tensor res = result_view(out, r);
  if (!is_floating(target)) return res.dtype() == target ? res : res.to(target);
  if (Recorder rec{dims.empty() ? "SumBackward0" : "SumBackward1", {&in}}) {
    rec.finish(
        res,
        [r, shape = in.shape()](BackwardContext& ctx) -> Grads {
          return {r.to_keep(ctx.grad()).expand(shape)};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

Tensor mean_op(const Tensor& x, const Shape& dims, bool keepdim) {
  MT_CHECK(is_floating(x.dtype()),
           "mean(): could not infer output dtype. Input dtype must be either a floating point or "
           "complex dtype. Got: ",
           torch_name(x.dtype()));
  const ReducedDims r = make_reduction(x, dims, keepdim, "mean");
  Tensor out = ops::empty_on(r.keep, x.dtype(), x.device());
  mean_kernel(x.device())(out, x);
  Tensor res = result_view(out, r);
  if (Recorder rec{dims.empty() ? "MeanBackward0" : "MeanBackward1", {&x}}) {
    rec.finish(
        res,
        [r, shape = x.shape()](BackwardContext& ctx) -> Grads {
          return {(r.to_keep(ctx.grad()) / double(r.count)).expand(shape)};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

Tensor amax_op(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(x, dims, keepdim, true, "amax", "AmaxBackward0");
}

Tensor amin_op(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(x, dims, keepdim, false, "amin", "AminBackward0");
}

Tensor max_op(const Tensor& x) {
  MT_CHECK(x.numel() > 0,
           "max(): Expected reduction dim to be specified for input.numel() == 0. "
           "Specify the reduction dim with the 'dim' argument.");
  return extremum(x, {}, false, true, "max", "MaxBackward1");
}

Tensor min_op(const Tensor& x) {
  MT_CHECK(x.numel() > 0,
           "min(): Expected reduction dim to be specified for input.numel() == 0. "
           "Specify the reduction dim with the 'dim' argument.");
  return extremum(x, {}, false, false, "min", "MinBackward1");
}

ValuesIndices max_op(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum(x, dim, keepdim, true);
}

ValuesIndices min_op(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum(x, dim, keepdim, false);
}

Tensor argmax_op(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, true);
}

Tensor argmin_op(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index(x, dim, keepdim, false);
}

Tensor var_op(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return var_or_std(x, dims, correction, keepdim, false);
}

Tensor std_op(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return var_or_std(x, dims, correction, keepdim, true);
}

Tensor norm_op(const Tensor& x, double p, const Shape& dims, bool keepdim) {
  MT_CHECK(is_floating(x.dtype()), "norm(): expected a floating point tensor as input, got ",
           x.dtype());
  const ReducedDims r = make_reduction(x, dims, keepdim, "norm");
  Tensor out = ops::empty_on(r.keep, x.dtype(), x.device());
  vector_norm_kernel(x.device())(out, x, p);
  Tensor res = result_view(out, r);
  if (Recorder rec{"NormBackward1", {&x}}) {
    rec.save(x).save(out);
    rec.finish(
        res,
        [r, p](BackwardContext& ctx) -> Grads {
          // As std's: the saved keepdim-form norm has no history, so create_graph recomputes it.
          const Tensor x = ctx.saved(0);
          const Tensor n = ctx.create_graph() ? norm(x, p, r.dims(), true) : ctx.saved(1);
          return {norm_backward(r.to_keep(ctx.grad()), x, n, p, r)};
        },
        autograd::DoubleBackward::Supported);
  }
  return res;
}

Tensor all_finite_op(const Tensor& x) {
  Tensor out = ops::empty_on(Shape{}, kBool, x.device());
  all_finite_kernel(x.device())(out, x);
  return out;
}

// ---- logsumexp ------------------------------------------------------------------------------
Tensor logsumexp_op(const Tensor& input, const Shape& dims, bool keepdim) {
  // Integer inputs reduce in the default floating dtype.
  const Tensor x = is_floating(input.dtype()) ? input : input.to(kFloat32);
  // Which dims are reduced (repeats are refused by amax and sum below).
  bool reduced[kMaxDims] = {};
  for (int64_t d = 0; d < x.dim(); ++d) reduced[d] = dims.empty();
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), "logsumexp");
    if (x.dim() > 0) reduced[w] = true;
  }
  Shape keep, result;
  for (int64_t d = 0; d < x.dim(); ++d) {
    keep.push_back(reduced[d] ? 1 : x.size(d));
    if (!reduced[d] || keepdim) result.push_back(reduced[d] ? 1 : x.size(d));
  }
  Tensor out_keep;
  {
    autograd::NoGradGuard no_grad;
    if (x.numel() != 0) {
      // An infinite max is not taken out: inf - inf would turn the sum into NaN.
      Tensor m = amax(x, dims, true);
      m = where(abs(m) != INFINITY, m, 0.0);
      out_keep = log(sum(exp(x - m), dims, true)) + m;
    } else {
      out_keep = log(sum(exp(x), dims, true));
    }
    out_keep = out_keep.contiguous();
  }
  const Tensor out = result_view(out_keep, result);
  if (Recorder rec{"LogsumexpBackward0", {&x}}) {
    rec.save(x).save(out_keep);
    rec.finish(out, [keep](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad().reshape(keep);
      return {g * exp(ctx.saved(0) - ctx.saved(1))};
    });
  }
  return out;
}

Tensor prod_op(const Tensor& x, std::optional<DType> dtype) {
  return prod_body(x, std::optional<int64_t>(), false, dtype);
}

Tensor prod_op(const Tensor& x, int64_t dim, bool keepdim, std::optional<DType> dtype) {
  return prod_body(x, std::optional<int64_t>(dim), keepdim, dtype);
}

Tensor any_op(const Tensor& x) { return logic_reduce(x, std::nullopt, false, false); }
Tensor any_op(const Tensor& x, int64_t dim, bool keepdim) {
  return logic_reduce(x, dim, keepdim, false);
}

Tensor all_op(const Tensor& x) { return logic_reduce(x, std::nullopt, false, true); }
Tensor all_op(const Tensor& x, int64_t dim, bool keepdim) {
  return logic_reduce(x, dim, keepdim, true);
}

// ---- Tensor methods -------------------------------------------------------------------------





}  // namespace mantissa
