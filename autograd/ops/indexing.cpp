// Indexing and joining ops with their backward formulas. gather and scatter_add are each other's
// adjoints, as are index_select and index_add; cat's gradient is the matching slices of the
// incoming gradient, and stack is cat of unsqueezed inputs.
//
// The kernels work on tensors with at least one dim; 0-d operands are passed as 1-element 1-D
// views, which is how PyTorch treats them for these ops.
#include <algorithm>
#include <limits>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;
using ops::check_same_device;

TensorOptions options_of(const Tensor& t) { return TensorOptions(t.device()).dtype(t.dtype()); }

// A 0-d tensor as a 1-element 1-D view (no autograd recording); others unchanged.
Tensor at_least_1d(const Tensor& t) {
  return t.dim() > 0 ? t : detail::make_view(t, Shape{1}, Shape{1}, t.storage_offset());
}

// A copy of x that records nothing (the op records its own node).
Tensor plain_clone(const Tensor& x) {
  Tensor out = empty(x.shape(), options_of(x));
  detail::copy_into(out, x);
  return out;
}

void check_int64_index(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == kInt64, op, ": expected index to have dtype int64, got ",
           index.dtype());
}

// A 0-D or 1-D int64/int32 index as a 1-D int64 tensor.
Tensor vector_index(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op,
           ": expected index to have dtype int64 or int32, got ", index.dtype());
  MT_CHECK(index.dim() <= 1, op, ": index must be a 0-D or 1-D tensor, got shape ", index.shape());
  return at_least_1d(index).to(kInt64);
}

// gather/scatter_add's rule: index has the tensor's rank, and is no larger than it along every
// dim (except `dim` when `except_dim`).
void check_index_fits(const char* op, const Tensor& index1, const Tensor& t1, int64_t dim,
                      bool except_dim, const char* name, const Tensor& index, const Tensor& t) {
  MT_CHECK(index1.dim() == t1.dim(), op, ": index tensor must have the same number of dimensions ",
           "as ", name, " tensor, got index ", index.shape(), " and ", name, " ", t.shape());
  for (int64_t d = 0; d < t1.dim(); ++d) {
    if (except_dim && d == dim) continue;
    MT_CHECK(index1.size(d) <= t1.size(d), op, ": size does not match at dimension ", d,
             ": expected index ", index.shape(), " to be no larger than ", name, " ", t.shape(),
             except_dim ? " apart from dimension " : "", except_dim ? std::to_string(dim) : "");
  }
}

}  // namespace

// ---- gather / scatter_add -----------------------------------------------------------------------
Tensor gather_op(const Tensor& x, int64_t dim, const Tensor& index) {
  check_int64_index("gather", index);
  check_same_device("gather", x, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index);
  check_index_fits("gather", index1, x1, d, true, "input", index, x);
  Tensor out = empty(index.shape(), options_of(x));
  if (out.numel() > 0) gather_kernel(x.device())(at_least_1d(out), x1, d, index1);
  if (Recorder rec{"GatherBackward0", {&x}}) {
    rec.save(index);
    rec.finish(out, [d, shape = x.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      return {scatter_add(zeros(shape, options_of(g)), d, ctx.saved(0), g)};
    });
  }
  return out;
}

Tensor scatter_add_op(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_int64_index("scatter_add", index);
  check_same_device("scatter_add", x, index);
  check_same_device("scatter_add", x, src);
  MT_CHECK(x.dtype() == src.dtype(), "scatter_add: expected self and src to have the same dtype, ",
           "got ", x.dtype(), " and ", src.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index), src1 = at_least_1d(src);
  if (index.numel() > 0) {  // PyTorch checks shapes only when there is something to scatter
    check_index_fits("scatter_add", index1, x1, d, true, "self", index, x);
    check_index_fits("scatter_add", index1, src1, d, false, "src", index, src);
  }
  Tensor out = plain_clone(x);
  if (index.numel() > 0) scatter_add_kernel(x.device())(at_least_1d(out), d, index1, src1);
  if (Recorder rec{"ScatterAddBackward0", {&x, &src}}) {
    rec.save(index);
    rec.finish(out, [d, src_shape = src.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      Tensor gsrc;
      if (ctx.needs(1)) {
        const Tensor index = ctx.saved(0);
        gsrc = gather(g, d, index);
        if (!(gsrc.shape() == src_shape)) {
          // src larger than index: the elements outside the index's block got no gradient.
          Tensor padded = zeros(src_shape, options_of(g));
          const Tensor p1 = at_least_1d(padded);
          detail::copy_into(
              detail::make_view(p1, at_least_1d(index).shape(), p1.strides(), p1.storage_offset()),
              at_least_1d(gsrc));
          gsrc = padded;
        }
      }
      return {ctx.needs(0) ? g : Tensor(), gsrc};
    });
  }
  return out;
}

// ---- index_select / index_add -------------------------------------------------------------------
Tensor index_select_op(const Tensor& x, int64_t dim, const Tensor& index) {
  check_same_device("index_select", x, index);
  const Tensor idx = vector_index("index_select", index);
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  MT_CHECK(x.dim() > 0 || idx.numel() == 1, "index_select: index to a 0-D tensor can have only ",
           "one value, got ", idx.numel());
  const Tensor x1 = at_least_1d(x);
  Shape shape = x.shape();
  if (x.dim() > 0) shape[d] = idx.numel();
  Tensor out = empty(shape, options_of(x));
  if (out.numel() > 0) index_select_kernel(x.device())(at_least_1d(out), x1, d, idx);
  if (Recorder rec{"IndexSelectBackward0", {&x}}) {
    rec.save(idx);
    rec.finish(out, [d, shape = x.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      return {index_add(zeros(shape, options_of(g)), d, ctx.saved(0), g)};
    });
  }
  return out;
}

Tensor index_add_op(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_same_device("index_add", x, index);
  check_same_device("index_add", x, src);
  const Tensor idx = vector_index("index_add", index);
  MT_CHECK(x.dtype() == src.dtype(), "index_add: expected self and source to have the same dtype, ",
           "got ", x.dtype(), " and ", src.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  const Tensor x1 = at_least_1d(x), src1 = at_least_1d(src);
  MT_CHECK(src1.dim() == x1.dim(), "index_add: source and self must have the same number of ",
           "dimensions, got source ", src.shape(), " and self ", x.shape());
  MT_CHECK(src1.size(d) == idx.numel(), "index_add: number of indices (", idx.numel(),
           ") should be equal to source.size(", d, ") (", src1.size(d), ")");
  for (int64_t k = 0; k < x1.dim(); ++k) {
    MT_CHECK(k == d || src1.size(k) == x1.size(k), "index_add: source ", src.shape(), " and self ",
             x.shape(), " must have the same size apart from dimension ", d);
  }
  Tensor out = plain_clone(x);
  if (src1.numel() > 0) index_add_kernel(x.device())(at_least_1d(out), d, idx, src1);
  if (Recorder rec{"IndexAddBackward0", {&x, &src}}) {
    rec.save(idx);
    rec.finish(out, [d, src_shape = src.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      return {ctx.needs(0) ? g : Tensor(),
              ctx.needs(1) ? index_select(g, d, ctx.saved(0)).reshape(src_shape) : Tensor()};
    });
  }
  return out;
}

// ---- one_hot ------------------------------------------------------------------------------------
Tensor one_hot_op(const Tensor& indices, int64_t num_classes) {
  MT_CHECK(indices.dtype() == kInt64, "one_hot: expected an int64 index tensor, got ",
           indices.dtype());
  MT_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 or non-negative, got ", num_classes);
  // The class range check reads the values on the host, as PyTorch does.
  if (indices.numel() == 0) {
    MT_CHECK(num_classes != -1, "one_hot: cannot infer the number of classes from an empty tensor");
  } else {
    const std::vector<int64_t> values = indices.to_vector<int64_t>();
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    MT_CHECK(*lo >= 0, "one_hot: class values must be non-negative, got ", *lo);
    if (num_classes == -1) num_classes = *hi + 1;
    MT_CHECK(*hi < num_classes, "one_hot: class values must be smaller than num_classes (got ", *hi,
             " with num_classes ", num_classes, ")");
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, TensorOptions(indices.device()).dtype(kInt64));
  if (indices.numel() > 0) {
    // Scatter a broadcast 1 along the new trailing dim at each index.
    Shape index_shape = indices.shape(), index_strides = indices.strides();
    index_shape.push_back(1);
    index_strides.push_back(1);
    const Tensor index =
        detail::make_view(indices, index_shape, index_strides, indices.storage_offset());
    const Tensor one = full(Shape{}, 1, TensorOptions(indices.device()).dtype(kInt64));
    const Tensor src = detail::make_view(one, index_shape, Shape(index_shape.size(), 0), 0);
    scatter_add_kernel(out.device())(out, out.dim() - 1, index, src);
  }
  return out;
}

// ---- cat / stack --------------------------------------------------------------------------------
namespace {

Tensor cat_body(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  // As in PyTorch, 1-D tensors of size 0 are accepted next to tensors of any rank and skipped.
  const auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  const Tensor* ref = nullptr;
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MT_CHECK(t.defined(), "cat: tensor ", i, " in the list is undefined");
    MT_CHECK(t.dim() > 0, "cat: zero-dimensional tensor (at position ", i,
             ") cannot be concatenated");
    check_same_device("cat", tensors[0], t);
    dtype = promote_types(dtype, t.dtype());
    if (ref == nullptr && !skipped(t)) ref = &t;
  }
  if (ref == nullptr) ref = &tensors[0];
  const int64_t d = wrap_dim(dim, ref->dim(), "cat");
  Shape shape = ref->shape();
  shape[d] = 0;
  std::vector<int64_t> offsets(tensors.size(), 0), lengths(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    offsets[i] = shape[d];
    if (skipped(t)) continue;
    MT_CHECK(t.dim() == ref->dim(), "cat: tensors must have the same number of dimensions: got ",
             ref->dim(), " and ", t.dim(), " (shapes ", ref->shape(), " and ", t.shape(),
             " at tensor number ", i, ")");
    for (int64_t k = 0; k < t.dim(); ++k) {
      MT_CHECK(k == d || t.size(k) == ref->size(k), "cat: sizes of tensors must match except in ",
               "dimension ", d, ". Expected size ", ref->size(k), " but got size ", t.size(k),
               " for tensor number ", i, " in the list (shapes ", ref->shape(), " and ", t.shape(),
               ")");
    }
    lengths[i] = t.size(d);
    shape[d] += lengths[i];
  }
  Tensor out = empty(shape, TensorOptions(tensors[0].device()).dtype(dtype));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (lengths[i] == 0) continue;
    Shape part = shape;
    part[d] = lengths[i];
    detail::copy_into(detail::make_view(out, part, out.strides(),
                                        out.storage_offset() + offsets[i] * out.stride(d)),
                      tensors[i]);
  }

  std::vector<const Tensor*> inputs;
  inputs.reserve(tensors.size());
  for (const Tensor& t : tensors) inputs.push_back(&t);
  if (Recorder rec{"CatBackward0", inputs}) {
    std::vector<autograd::FunctionNode::OutputInfo> infos;
    infos.reserve(tensors.size());
    for (const Tensor& t : tensors) infos.push_back({t.shape(), t.dtype(), t.device()});
    rec.finish(
        out,
        [d, offsets, lengths, infos](BackwardContext& ctx) -> Grads {
          const Tensor g = ctx.grad();
          Grads grads(infos.size());
          for (size_t i = 0; i < infos.size(); ++i) {
            if (!ctx.needs(i)) continue;
            const auto& info = infos[i];
            if (lengths[i] == 0 && !(info.shape.size() == g.dim())) {  // a skipped legacy [0]
              grads[i] = zeros(info.shape, TensorOptions(info.device).dtype(info.dtype));
            } else {
              grads[i] = g.narrow(d, offsets[i], lengths[i]).to(info.dtype);
            }
          }
          return grads;
        },
        autograd::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

Tensor cat_op(const std::vector<Tensor>& tensors, int64_t dim) { return cat_body(tensors, dim); }

Tensor stack_op(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].defined(), "stack: tensor ", i, " in the list is undefined");
    MT_CHECK(tensors[i].shape() == tensors[0].shape(),
             "stack expects each tensor to be equal size, ", "but got ", tensors[0].shape(),
             " at entry 0 and ", tensors[i].shape(), " at entry ", i);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat_body(parts, d);
}

}  // namespace mantissa
