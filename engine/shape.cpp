#include "engine/shape.h"

#include <ostream>

namespace mantissa {

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int64_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

void Shape::throw_numel_overflow() const {
  MT_THROW("shape ", *this, " has more elements than int64 can count");
}

int64_t checked_nbytes(const Shape& sizes, int64_t itemsize, const char* op) {
  int64_t bytes = 0;
  MT_CHECK(!__builtin_mul_overflow(sizes.numel(), itemsize, &bytes), op, ": shape ", sizes, " of ",
           itemsize, "-byte elements is more bytes than int64 can count");
  return bytes;
}

int64_t checked_extent(const Shape& sizes, const Shape& strides, const char* op) {
  int64_t extent = 1;  // elements spanned by the strided layout
  for (int64_t i = 0; i < sizes.size(); ++i) {
    MT_CHECK(sizes[i] >= 0 && strides[i] >= 0, op, ": negative size or stride in shape ", sizes,
             ", strides ", strides);
    if (sizes[i] == 0) return 0;
    int64_t span = 0;
    MT_CHECK(!__builtin_mul_overflow(sizes[i] - 1, strides[i], &span) &&
                 !__builtin_add_overflow(extent, span, &extent),
             op, ": shape ", sizes, " with strides ", strides,
             " spans more elements than int64 can count");
  }
  return extent;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size(), 1);
  int64_t acc = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    strides[i] = acc;
    if (i > 0 && __builtin_mul_overflow(acc, sizes[i] > 1 ? sizes[i] : 1, &acc)) [[unlikely]]
      MT_THROW("shape ", sizes, " has strides larger than int64 can hold");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = ndim > 0 ? ndim : 1;  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  MT_CHECK(dim >= -n && dim < n, op, ": dimension out of range (expected to be in range of [", -n,
           ", ", n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int64_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
             " cannot be broadcast together (size ", da, " vs ", db, " at dimension ", i, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace mantissa
