// CPU cross_entropy_rows (engine/kernel_tables.h): each row's loss, and with p.grad its gradient
// written over the logits, in three passes over the row (max, sum(z) and the target's logit; the
// sum of exponentials; the gradient). The math is kernels/cross_entropy_math.h, shared with CUDA.
//
// Numerics: exp runs in opmath (float32's on vmath::exp_f32, which vectorises; std::exp for
// float64) and the row sums accumulate in double, as the softmax kernels'. For float32 logits the
// second pass keeps the exponentials in the row (it is overwritten anyway), so the gradient pass
// does not recompute them; half types recompute them rather than round them twice.
#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/cross_entropy_math.h"
#include "kernels/vectorizable_math.h"

namespace mantissa::cpu {
namespace {

namespace ce = cross_entropy;

template <typename A>
inline A exp_opmath(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return vmath::exp_f32(x);
  } else {
    return std::exp(x);
  }
}

template <typename T>
void cross_entropy_rows_typed(const Tensor& logits, const Tensor& loss, const Tensor& target,
                              const Tensor& scale, const CrossEntropyRowsParams& p) {
  using A = opmath_t<T>;
  const int64_t n = logits.size(0), V = logits.size(1);
  T* z = static_cast<T*>(logits.data_ptr());
  A* out = static_cast<A*>(loss.data_ptr());
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  const A* sc = scale.defined() ? static_cast<const A*>(scale.data_ptr()) : nullptr;
  const int64_t sc_stride = scale.defined() ? scale.stride(0) : 0;
  const A s = static_cast<A>(p.label_smoothing), classes = static_cast<A>(V);
  const A nan = std::numeric_limits<A>::quiet_NaN();

  parallel_tasks(n, n * V * (p.grad ? 3 : 2), [&](int64_t row) {
    T* zr = z + row * V;
    const ce::RowTarget kind = ce::classify(t[row], V, p.ignore_index);
    if (kind != ce::RowTarget::Counted) {
      out[row] = kind == ce::RowTarget::Ignored ? A(0) : nan;
      if (p.grad) {
        const T fill = static_cast<T>(kind == ce::RowTarget::Ignored ? A(0) : nan);
        for (int64_t j = 0; j < V; ++j) zr[j] = fill;
      }
      return;
    }
    // std::max skips NaN here, but exp(NaN) then poisons the sum and so the row.
    A mx = -std::numeric_limits<A>::infinity();
    double sum_z = 0;
    for (int64_t j = 0; j < V; ++j) {
      const A v = static_cast<A>(zr[j]);
      mx = v > mx ? v : mx;
      sum_z += static_cast<double>(v);
    }
    const A z_target = static_cast<A>(zr[t[row]]);
    double sum = 0;
    constexpr bool kKeepExp = std::is_same_v<T, A>;
    if (kKeepExp && p.grad) {
      for (int64_t j = 0; j < V; ++j) {
        const A e = exp_opmath(static_cast<A>(zr[j]) - mx);
        zr[j] = static_cast<T>(e);
        sum += static_cast<double>(e);
      }
    } else {
      for (int64_t j = 0; j < V; ++j) sum += static_cast<double>(exp_opmath(A(zr[j]) - mx));
    }
    const A lse = mx + static_cast<A>(std::log(sum));
    out[row] = ce::row_loss(lse, z_target, static_cast<A>(sum_z), s, classes);
    if (!p.grad) return;
    const A r = sc ? sc[row * sc_stride] : A(1);
    const A inv = static_cast<A>(1.0 / sum);
    const int64_t hit = t[row];
    for (int64_t j = 0; j < V; ++j) {
      const A e = kKeepExp ? static_cast<A>(zr[j]) : exp_opmath(static_cast<A>(zr[j]) - mx);
      zr[j] = static_cast<T>(ce::element_grad(e * inv, false, s, classes, r));
    }
    // The target's term, from its exponential kept aside (its slot is overwritten above).
    const A e_target = exp_opmath(z_target - mx);
    zr[hit] = static_cast<T>(ce::element_grad(e_target * inv, true, s, classes, r));
  });
}

void cross_entropy_rows_cpu(const Tensor& logits, const Tensor& loss, const Tensor& target,
                            const Tensor& scale, const CrossEntropyRowsParams& p) {
  MT_ASSERT(logits.dim() == 2 && logits.is_contiguous() && loss.is_contiguous() &&
                target.is_contiguous() && target.dtype() == kInt64 &&
                loss.numel() == logits.size(0) && target.numel() == logits.size(0),
            "cross_entropy_rows: expected contiguous logits [n, V], loss [n] and int64 target "
            "[n], got ",
            logits.shape(), ", ", loss.shape(), ", ", target.shape(), " ", target.dtype());
  if (logits.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(
      logits.dtype(), "cross_entropy_rows", logits.device(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        MT_ASSERT(loss.dtype() == dtype_of_v<opmath_t<T>> &&
                      (!scale.defined() || scale.dtype() == loss.dtype()),
                  "cross_entropy_rows: loss and scale must be ", dtype_of_v<opmath_t<T>>, ", got ",
                  loss.dtype());
        cross_entropy_rows_typed<T>(logits, loss, target, scale, p);
      });
}

}  // namespace

MT_REGISTER_KERNEL(cross_entropy_rows_kernel, kCPU, &cross_entropy_rows_cpu);

}  // namespace mantissa::cpu
