// split, chunk and repeat. split and chunk return narrow views (as PyTorch's do), so their
// gradients come from narrow's. repeat tiles one dim at a time with unsqueeze, expand and reshape
// (recorded ops, so the gradient sums the tiles) and always returns a new tensor.
#include <algorithm>
#include <string>

#include "autograd/functions.h"

namespace mantissa {
namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
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
  std::vector<Tensor> out;
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    out.push_back(x.narrow(d, start, i + 1 < pieces ? split_size : n - start));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
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
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MT_CHECK(x.dim() > 0, "chunk expects at least a 1-dimensional tensor");
  MT_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d), size = (n + chunks - 1) / chunks;
  // An empty dim still gives `chunks` (empty) pieces.
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), d);
  return split(x, size, d);
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
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

Tensor Tensor::repeat(const Shape& repeats) const { return mantissa::repeat(*this, repeats); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return mantissa::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& split_sizes, int64_t dim) const {
  return mantissa::split(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return mantissa::chunk(*this, chunks, dim);
}

}  // namespace mantissa
