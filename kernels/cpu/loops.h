// The CPU elementwise engine. Every elementwise kernel (math, casts, comparisons, fills) goes
// through for_each_run(): operands are described by byte strides over one shared shape, adjacent
// dims are merged where all operands allow it, and the loop body sees runs along the innermost
// dim. Contiguous runs get a plain indexed loop the compiler vectorises; tensors from kPoolGrain
// elements are split across the worker pool by element range, so results never depend on the
// thread count.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "engine/dispatch.h"
#include "engine/tensor.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/layout.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mantissa::cpu {

// The element count from which the convolution and pooling loops' OpenMP regions use threads.
inline constexpr int64_t kOmpGrain = 32768;

// t's data, or nullptr for an undefined tensor (optional optimizer state).
template <typename T>
T* maybe_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// For the loops that still split with OpenMP (reductions, scans): elements below which a loop
// stays on the calling thread. High on purpose: after a parallel
// region libgomp's workers spin-wait (OMP_WAIT_POLICY's default), and on a machine with few
// cores they take the cores OpenBLAS's own threads need for the next GEMM, which costs more than
// a second thread saves on a memory-bound loop of a few million elements (bench/NOTES.md). Only
// loops over 16M elements (64 MB of float32) are split, where the loop itself outlasts the
// spinning.
inline constexpr int64_t kParallelGrain = int64_t(1) << 24;

// Whether a loop over `work` elements gets a parallel region (never nested in another).
inline bool use_threads(int64_t work) {
#if defined(_OPENMP)
  return work >= kParallelGrain && omp_get_max_threads() > 1 && !omp_in_parallel();
#else
  return false;
#endif
}

// Runs fn(task) for task in [0, tasks), split across the worker pool in contiguous ranges of
// tasks when the `work` behind them (elements touched) reaches kPoolGrain. Tasks must be
// independent; each task's result then never depends on the thread count.
template <typename Fn>
void parallel_tasks(int64_t tasks, int64_t work, const Fn& fn) {
  parallel_ranges(
      tasks,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) fn(t);
      },
      work);
}

// Runs loop(ptrs, inner_strides, n) over every run of `layout`, split by element range across
// the worker pool (kernels/cpu/worker_pool.h: its workers sleep between loops instead of
// spinning like OpenMP's) from kPoolGrain elements, so the result never depends on the thread
// count. A training step's copies, adds and selects are a few hundred thousand elements each:
// on one thread they left the second core idle for a tenth of a GPT step.
template <int N, typename Loop>
void parallel_for_each_run(const Layout<N>& layout, Loop&& loop) {
  parallel_ranges(layout.numel, [&](int64_t b, int64_t e) { layout.for_each_run(b, e, loop); });
}

namespace detail {
template <typename Out, typename... In, typename F, size_t... I>
inline void elementwise_run(char* const* ptrs, const int64_t* s, int64_t n, const F& f,
                            std::index_sequence<I...>) {
  Out* out = reinterpret_cast<Out*>(ptrs[0]);
  if (s[0] == sizeof(Out) && ((s[I + 1] == static_cast<int64_t>(sizeof(In))) && ...)) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(reinterpret_cast<const In*>(ptrs[I + 1])[i]...);
  } else if (s[0] == sizeof(Out) &&
             ((s[I + 1] == 0 || s[I + 1] == static_cast<int64_t>(sizeof(In))) && ...)) {
    // dense output with some broadcast (stride-0) inputs
    if constexpr (sizeof...(In) == 2) {
      // A tensor and a scalar (x / 2, x * w[0]): the scalar is loaded once and the loop
      // vectorises; through the byte strides below it runs one element at a time.
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      const A* a = reinterpret_cast<const A*>(ptrs[1]);
      const B* b = reinterpret_cast<const B*>(ptrs[2]);
      if (s[1] != 0 && s[2] == 0) {
        const B bv = *b;
        for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
        return;
      }
      if (s[1] == 0 && s[2] != 0) {
        const A av = *a;
        for (int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(*reinterpret_cast<const In*>(ptrs[I + 1] + i * s[I + 1])...);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<Out*>(ptrs[0] + i * s[0]) =
          f(*reinterpret_cast<const In*>(ptrs[I + 1] + i * s[I + 1])...);
  }
}
}  // namespace detail

// out[i] = f(in0[i], in1[i], ...) over out's shape; inputs are already expanded to it.
// Out and In... are the storage types; f receives storage values and returns something
// convertible to Out.
template <typename Out, typename... In, typename F, typename... Ts>
void elementwise(const Tensor& out, const F& f, const Ts&... ins) {
  static_assert(sizeof...(In) == sizeof...(Ts), "one storage type per input");
  constexpr int N = 1 + sizeof...(Ts);
  if (out.numel() == 0) return;
  Layout<N> layout(out.shape(), std::array<const Tensor*, N>{&out, &ins...});
  parallel_for_each_run(layout, [&](char* const* ptrs, const int64_t* s, int64_t n) {
    detail::elementwise_run<Out, In...>(ptrs, s, n, f, std::index_sequence_for<In...>{});
  });
}

}  // namespace mantissa::cpu
