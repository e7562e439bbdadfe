// split, chunk and repeat. split and chunk return views of consecutive pieces (as PyTorch's
// do), recorded as one node for all pieces (PyTorch's SplitBackward0): its backward writes each
// piece's gradient once into one tensor of the input's shape (cat), where one narrow node per
// piece would give each its own zero-filled tensor of the whole input and the engine would then
// add those together (qkv's split in attention: 3 full fills, 3 copies and 2 full adds per layer).
// The pieces are views like narrow's, so in-place changes through them rewrite history the same
// way (autograd/view_history.h). repeat tiles one dim at a time with unsqueeze, expand and
// reshape (recorded ops, so the gradient sums the tiles) and always returns a new tensor.
#include <algorithm>
#include <string>

#include "autograd/op_bodies.h"
#include "autograd/recorder.h"
#include "autograd/view_history.h"

namespace mantissa {
namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The pieces of x along d of the given sizes (summing to x.size(d)), as views recorded by one
// node whose backward concatenates their gradients (zeros for a piece that got none).
std::vector<Tensor> split_views(const char* name, const Tensor& x, int64_t d,
                                const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape shape = x.shape();
    shape[d] = s;
    out.push_back(autograd::as_view(
        x, detail::make_view(x, shape, x.strides(), x.storage_offset() + start * x.stride(d))));
    start += s;
  }
  if (autograd::Recorder rec{name, {&x}}) {
    rec.finish(
        out,
        [d, sizes, shape = x.shape(), options = TensorOptions(x.device()).dtype(x.dtype())](
            autograd::BackwardContext& ctx) -> std::vector<Tensor> {
          std::vector<Tensor> grads;
          grads.reserve(sizes.size());
          for (size_t i = 0; i < sizes.size(); ++i) {
            Tensor g = ctx.grad(i);
            if (!g.defined()) {
              Shape piece = shape;
              piece[d] = sizes[i];
              g = zeros(piece, options);
            }
            grads.push_back(std::move(g));
          }
          return {cat(grads, d)};
        },
        autograd::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

std::vector<Tensor> split_op(const Tensor& x, int64_t split_size, int64_t dim) {
  MT_CHECK(x.dim() != 0, "split expects at least a 1-dimensional tensor");
  MT_CHECK(split_size >= 0,
           "split expects split_size be non-negative, but got split_size=", split_size);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  MT_CHECK(split_size > 0 || n == 0,
           "split_size can only be 0 if dimension size is 0, but got dimension size of ", n);
  // At least one piece, also when split_size exceeds the dim (PyTorch keeps that working).
  const int64_t pieces =
      split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    sizes.push_back(i + 1 < pieces ? split_size : n - start);
  }
  return split_views("SplitBackward0", x, d, sizes);
}

std::vector<Tensor> split_op(const Tensor& x, const std::vector<int64_t>& split_sizes,
                             int64_t dim) {
  MT_CHECK(x.dim() != 0, "split expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    MT_CHECK(s >= 0, "split_with_sizes expects split_sizes have only non-negative entries, but ",
             "got split_sizes=", list_str(split_sizes));
    total += s;
  }
  MT_CHECK(total == x.size(d), "split_with_sizes expects split_sizes to sum exactly to ", x.size(d),
           " (input tensor's size at dimension ", d,
           "), but got split_sizes=", list_str(split_sizes));
  return split_views("SplitWithSizesBackward0", x, d, split_sizes);
}

std::vector<Tensor> chunk_op(const Tensor& x, int64_t chunks, int64_t dim) {
  MT_CHECK(x.dim() > 0, "chunk expects at least a 1-dimensional tensor");
  MT_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d), size = (n + chunks - 1) / chunks;
  // An empty dim still gives `chunks` (empty) pieces.
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), d);
  return split(x, size, d);
}

Tensor repeat_op(const Tensor& x, const Shape& repeats) {
  MT_CHECK(repeats.size() >= x.dim(),
           "Number of dimensions of repeat dims can not be smaller than number of dimensions of "
           "tensor (repeats ",
           repeats, " for input ", x.shape(), ")");
  for (int64_t r : repeats)
    MT_CHECK(r >= 0, "repeat: Trying to create tensor with negative dimension ", r, " (repeats ",
             repeats, ")");
  Shape padded(repeats.size() - x.dim(), 1);
  for (int64_t s : x.shape()) padded.push_back(s);
  Tensor y = x.reshape(padded);
  for (int64_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] == 1) continue;
    Shape tiled = y.shape(), merged = y.shape();
    tiled.insert(d, repeats[d]);
    merged[d] *= repeats[d];
    y = y.unsqueeze(d).expand(tiled).reshape(merged);
  }
  // Every step may have been a view (repeats of 1, or tiling a size-1 dim): copy then.
  return y.storage() == x.storage() ? y.clone() : y;
}


}  // namespace mantissa
