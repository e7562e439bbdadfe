// Multi-tensor apply for the fused optimizer steps (as PyTorch's multi_tensor_apply): the host
// packs up to kListTensors parameters of one dtype combination and up to kListBlocks (tensor,
// chunk) pairs into a kernel argument (no device-side metadata, so no copy and no sync); each
// block updates one kChunk-element chunk. Used by every optimizer of
// kernels/cuda/optimizer_kernels.cu. The state's element type S is the parameter's T except
// for Adam, whose state may be bfloat16 (for_each_dtype_state_group); each list also carries the
// parameters' indices in their optimizer, for the random bits of stochastic rounding.
#pragma once

#include <algorithm>
#include <vector>

#include "cuda/current_stream.h"
#include "engine/dispatch.h"
#include "engine/optimizer_kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/optimizer_math.h"

namespace mantissa::cuda::mta {

inline constexpr int kListTensors = 24;
inline constexpr int kListBlocks = 320;
inline constexpr int64_t kChunk = 16 * kBlockSize;
inline constexpr int kStepList = 256;

// One launch's worth of parameters (about 3.3 KiB, within the 4 KiB kernel-argument limit).
template <typename T, typename Md, typename S = T>
struct ParamList {
  T* p[kListTensors];
  const T* g[kListTensors];
  S* s[3][kListTensors];
  Md* model[kListTensors];
  const int64_t* step[kListTensors];
  int64_t numel[kListTensors];
  int64_t index[kListTensors];  // lists.index, or the position in the lists when it is empty
  unsigned char block_tensor[kListBlocks];
  int32_t block_chunk[kListBlocks];

  void move_slot(int to, int from) {
    p[to] = p[from];
    g[to] = g[from];
    for (auto& list : s) list[to] = list[from];
    model[to] = model[from];
    step[to] = step[from];
    numel[to] = numel[from];
    index[to] = index[from];
  }
};

struct StepList {
  int64_t* count[kStepList];
};

// A template only so that every file including this header may define it.
template <int kUnused = 0>
__global__ void advance_steps_kernel(StepList list, int n, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) ++*list.count[i];
}

inline void advance_steps(const std::vector<Tensor>& steps, const float* found_inf) {
  for (size_t first = 0; first < steps.size(); first += kStepList) {
    const int n = static_cast<int>(std::min<size_t>(kStepList, steps.size() - first));
    StepList list{};
    for (int k = 0; k < n; ++k) list.count[k] = static_cast<int64_t*>(steps[first + k].data_ptr());
    advance_steps_kernel<><<<1, kStepList, 0, detail::current_stream()>>>(list, n, found_inf);
    MT_CUDA_CHECK_LAUNCH();
  }
}

// The range of chunk `blockIdx.x` of a list.
template <typename L>
__device__ __forceinline__ void chunk_of(const L& l, int& t, int64_t& begin, int64_t& end) {
  t = l.block_tensor[blockIdx.x];
  begin = static_cast<int64_t>(l.block_chunk[blockIdx.x]) * kChunk;
  end = begin + kChunk < l.numel[t] ? begin + kChunk : l.numel[t];
}

// Packs the entries (indices into `lists`, all of param type T, model type Md and state type S)
// into ParamLists and calls launch(list, blocks) for each full one and the rest.
template <typename T, typename Md, typename S = T, typename Launch>
void for_each_list(const OptimizerTensorLists& lists, const std::vector<size_t>& entries,
                   const Launch& launch) {
  ParamList<T, Md, S> l{};
  int nt = 0, nb = 0;
  for (size_t e : entries) {
    const int64_t n = lists.param[e].numel();
    if (n == 0) continue;
    l.p[nt] = static_cast<T*>(lists.param[e].data_ptr());
    l.g[nt] = static_cast<const T*>(lists.grad[e].data_ptr());
    for (int k = 0; k < 3; ++k) {  // SGD fills only state[0]
      l.s[k][nt] = lists.state[k].empty() ? nullptr
                                          : (lists.state[k][e].defined()
                                                 ? static_cast<S*>(lists.state[k][e].data_ptr())
                                                 : nullptr);
    }
    l.model[nt] =
        lists.model.empty()
            ? nullptr
            : (lists.model[e].defined() ? static_cast<Md*>(lists.model[e].data_ptr()) : nullptr);
    l.step[nt] = static_cast<const int64_t*>(lists.step[e].data_ptr());
    l.numel[nt] = n;
    l.index[nt] = lists.index.empty() ? static_cast<int64_t>(e) : lists.index[e];
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      l.block_tensor[nb] = static_cast<unsigned char>(nt);
      l.block_chunk[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb == kListBlocks || (nt == kListTensors - 1 && last_chunk)) {
        launch(l, nb);
        nb = 0;
        if (last_chunk) {
          nt = -1;  // the next parameter starts the next list
        } else {
          l.move_slot(0, nt);  // the rest of this parameter continues in slot 0
          nt = 0;
        }
      }
    }
    ++nt;
  }
  if (nb > 0) launch(l, nb);
}

// Calls f(TypeTag<T>, TypeTag<Md>, TypeTag<S>, entries) for each (param dtype, model dtype, state
// dtype) combination of the lists; Md = T when there is no model parameter. With by_state, S is
// state[0]'s dtype (T or bfloat16: optim_math::bfloat16_state), else always T.
template <typename F>
void for_each_dtype_group_impl(const OptimizerTensorLists& lists, const char* op, bool by_state,
                               const F& f) {
  std::vector<size_t> groups[kNumDTypes][kNumDTypes + 1][2];
  for (size_t e = 0; e < lists.param.size(); ++e) {
    const DType param = lists.param[e].dtype();
    const bool has_model = !lists.model.empty() && lists.model[e].defined();
    const int md = has_model ? static_cast<int>(lists.model[e].dtype()) : kNumDTypes;
    const bool has_state = by_state && !lists.state[0].empty() && lists.state[0][e].defined();
    const int sd = has_state && optim_math::bfloat16_state(param, lists.state[0][e].dtype(), op);
    groups[static_cast<int>(param)][md][sd].push_back(e);
  }
  const Device device = lists.param.front().device();
  for (int pd = 0; pd < kNumDTypes; ++pd) {
    for (int md = 0; md <= kNumDTypes; ++md) {
      for (int sd = 0; sd < 2; ++sd) {
        const std::vector<size_t>& entries = groups[pd][md][sd];
        if (entries.empty()) continue;
        dispatch_dtype<kFloatingTypes>(static_cast<DType>(pd), op, device, [&](auto tag) {
          using T = typename decltype(tag)::type;
          const auto with_state = [&](auto model_tag) {
            if (sd == 0) {
              f(tag, model_tag, TypeTag<T>{}, entries);
            } else {
              f(tag, model_tag, TypeTag<BFloat16>{}, entries);
            }
          };
          if (md == kNumDTypes) {
            with_state(TypeTag<T>{});
            return;
          }
          constexpr uint32_t kModelTypes = dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16);
          dispatch_dtype<kModelTypes>(static_cast<DType>(md), op, device, with_state);
        });
      }
    }
  }
}

// Calls f(TypeTag<T>, TypeTag<Md>, entries) for each (param dtype, model dtype) combination of
// the lists; Md = T when there is no model parameter. The state has the parameter's dtype.
template <typename F>
void for_each_dtype_group(const OptimizerTensorLists& lists, const char* op, const F& f) {
  for_each_dtype_group_impl(lists, op, false,
                            [&](auto tag, auto model_tag, auto /*state_tag*/, const auto& entries) {
                              f(tag, model_tag, entries);
                            });
}

// As for_each_dtype_group, and also split by the state's dtype: calls f(TypeTag<T>, TypeTag<Md>,
// TypeTag<S>, entries) with S the dtype of state[0] (all state tensors alike): T or bfloat16.
template <typename F>
void for_each_dtype_state_group(const OptimizerTensorLists& lists, const char* op, const F& f) {
  for_each_dtype_group_impl(lists, op, true, f);
}

inline const float* found_inf_ptr(const Tensor& found_inf) {
  return found_inf.defined() ? static_cast<const float*>(found_inf.data_ptr()) : nullptr;
}

}  // namespace mantissa::cuda::mta
