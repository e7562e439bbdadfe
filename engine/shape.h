// Shape: a small inline vector of dimension sizes (or strides). Tensors in mantissa have at most
// kMaxDims dimensions, which keeps shapes off the heap: every op builds a few of them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <vector>

#include "engine/error.h"

namespace mantissa {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT
  template <typename It>
  Shape(It first, It last) {
    assign(first, last);
  }
  explicit Shape(int64_t ndim, int64_t fill) {
    check_ndim(ndim);
    n_ = static_cast<int8_t>(ndim);
    for (int64_t i = 0; i < ndim; ++i) d_[i] = fill;
  }

  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int64_t i) { return d_[i]; }
  int64_t operator[](int64_t i) const { return d_[i]; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  const int64_t* data() const { return d_; }
  int64_t back() const { return d_[n_ - 1]; }
  void push_back(int64_t v) {
    check_ndim(n_ + 1);
    d_[n_++] = v;
  }
  void insert(int64_t pos, int64_t v) {
    check_ndim(n_ + 1);
    for (int64_t i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(int64_t pos) {
    for (int64_t i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int64_t n, int64_t fill = 0) {
    check_ndim(n);
    for (int64_t i = n_; i < n; ++i) d_[i] = fill;
    n_ = static_cast<int8_t>(n);
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  // The product of the sizes; throws (naming the shape) when it does not fit in int64, so that no
  // element count in the library overflows.
  int64_t numel() const {
    int64_t p = 1;
    for (int64_t i = 0; i < n_; ++i)
      if (__builtin_mul_overflow(p, d_[i], &p)) [[unlikely]]
        throw_numel_overflow();
    return p;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (int64_t i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  [[noreturn]] void throw_numel_overflow() const;
  static void check_ndim(int64_t n) {
    MT_CHECK(n >= 0 && n <= kMaxDims, "tensors have at most ", kMaxDims, " dimensions, but ", n,
             " were requested");
  }
  template <typename It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  int64_t d_[kMaxDims] = {};
  int8_t n_ = 0;
};

// Prints [2, 3, 4] like torch.Size.
std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major strides for a shape.
Shape contiguous_strides(const Shape& sizes);
// numel * itemsize, or throws naming `op` when it does not fit in int64.
int64_t checked_nbytes(const Shape& sizes, int64_t itemsize, const char* op);
// The number of elements a strided layout spans (0 when empty), or throws naming `op` when a
// size or stride is negative or the span does not fit in int64.
int64_t checked_extent(const Shape& sizes, const Shape& strides, const char* op);
// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// PyTorch's broadcasting of two shapes; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mantissa
