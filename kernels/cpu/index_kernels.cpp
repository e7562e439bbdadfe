// CPU kernels for gather, scatter_add, index_select and index_add.
//
// Each is one loop over an "iteration shape" (the index's shape for gather/scatter_add, the
// output's or source's shape for index_select/index_add). The indexed operand is viewed with that
// shape and stride 0 along `dim`, and every element's address is moved by index * stride(dim).
// index_select/index_add broadcast their 1-D index over the iteration shape the same way, so they
// share the gather and scatter loops (PyTorch's TensorIterator does the same).
//
// Gathers run in parallel. Scatters are serial: duplicate indices would race. Half types scatter
// into a float32 copy of `self` that is rounded once at the end, so that many adds landing on one
// element do not round after each add; the copy costs O(self), as much as the op's clone.
// Out-of-range indices are collected during the loop and thrown after it, outside any OpenMP
// region (an exception must not escape a parallel region).
#include <atomic>
#include <type_traits>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/index_views.h"

namespace mantissa::cpu {
namespace {

using index_views::restride;
using index_views::spread_index;

// The first out-of-range index any thread saw.
class BadIndex {
 public:
  void record(int64_t value) {
    if (!seen_.exchange(true)) value_ = value;
  }
  void throw_if_any(const char* op, int64_t dim, int64_t size) const {
    if (seen_.load()) index_views::throw_out_of_bounds(op, value_, dim, size);
  }

 private:
  std::atomic<bool> seen_{false};
  int64_t value_ = 0;
};

// out[p] = in[p with p[dim] = index[p]]; in_r and index_r are already viewed with out's shape.
void gather_loop(const char* op, const Tensor& out, const Tensor& in_r, const Tensor& index_r,
                 int64_t dim, int64_t dim_size, int64_t dim_stride) {
  if (out.numel() == 0) return;
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), op, out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t step = dim_stride * static_cast<int64_t>(sizeof(T));
    BadIndex bad;
    Layout<3> layout(out.shape(), std::array<const Tensor*, 3>{&out, &in_r, &index_r});
    parallel_for_each_run(layout, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t idx = *reinterpret_cast<const int64_t*>(p[2] + i * s[2]);
        if (idx < 0 || idx >= dim_size) [[unlikely]] {
          bad.record(idx);
          return;
        }
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const T*>(p[1] + i * s[1] + idx * step);
      }
    });
    bad.throw_if_any(op, dim, dim_size);
  });
}

// acc[p with p[dim] = index[p]] += src[p] over the iteration shape, one element at a time.
// Acc is the accumulator's storage type (float for half types), S the source's.
template <typename Acc, typename S>
void scatter_add_loop(const Tensor& acc_r, const Tensor& index_r, const Tensor& src_r,
                      int64_t dim_size, int64_t step, BadIndex& bad) {
  using M = opmath_t<Acc>;
  Layout<3> layout(src_r.shape(), std::array<const Tensor*, 3>{&acc_r, &index_r, &src_r});
  layout.for_each_run(0, layout.numel, [&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t idx = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
      if (idx < 0 || idx >= dim_size) [[unlikely]] {
        bad.record(idx);
        return;
      }
      Acc& dst = *reinterpret_cast<Acc*>(p[0] + i * s[0] + idx * step);
      dst = static_cast<Acc>(M(dst) + M(*reinterpret_cast<const S*>(p[2] + i * s[2])));
    }
  });
}

// self[p with p[dim] = index[p]] += src[p]; index_r and src_r share the iteration shape.
void scatter_add_impl(const char* op, const Tensor& self, int64_t dim, const Tensor& index_r,
                      const Tensor& src_r) {
  if (src_r.numel() == 0) return;
  const int64_t dim_size = self.size(dim);
  dispatch_dtype<kAllTypes>(self.dtype(), op, self.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BadIndex bad;
    if constexpr (std::is_same_v<opmath_t<T>, T>) {
      scatter_add_loop<T, T>(restride(self, src_r.shape(), dim), index_r, src_r, dim_size,
                             self.stride(dim) * static_cast<int64_t>(sizeof(T)), bad);
      bad.throw_if_any(op, dim, dim_size);
    } else {
      Tensor acc = empty(self.shape(), TensorOptions(self.device()).dtype(kFloat32));
      mantissa::detail::copy_into(acc, self);
      scatter_add_loop<float, T>(restride(acc, src_r.shape(), dim), index_r, src_r, dim_size,
                                 acc.stride(dim) * static_cast<int64_t>(sizeof(float)), bad);
      bad.throw_if_any(op, dim, dim_size);  // before touching self
      mantissa::detail::copy_into(self, acc);
    }
  });
}

void gather_cpu(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_loop("gather", out, restride(in, out.shape(), dim), index, dim, in.size(dim),
              in.stride(dim));
}

void index_select_cpu(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_loop("index_select", out, restride(in, out.shape(), dim),
              spread_index(index, out.shape(), dim), dim, in.size(dim), in.stride(dim));
}

void scatter_add_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  // src may be larger than index; only its leading index-shaped block takes part.
  const Tensor src_r =
      mantissa::detail::make_view(src, index.shape(), src.strides(), src.storage_offset());
  scatter_add_impl("scatter_add", self, dim, index, src_r);
}

void index_add_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_add_impl("index_add", self, dim, spread_index(index, src.shape(), dim), src);
}

}  // namespace

MT_REGISTER_KERNEL(gather_kernel, kCPU, &gather_cpu);
MT_REGISTER_KERNEL(index_select_kernel, kCPU, &index_select_cpu);
MT_REGISTER_KERNEL(scatter_add_kernel, kCPU, &scatter_add_cpu);
MT_REGISTER_KERNEL(index_add_kernel, kCPU, &index_add_cpu);

}  // namespace mantissa::cpu
