// CUDA kernels for the optimizer steps: SGD and Adam/AdamW first, then RMSprop, Adagrad, NAdam
// and RAdam.
//
// SGD and Adam/AdamW, per parameter and multi-tensor, with exactly the per-element arithmetic
// of kernels/cpu/optimizer_kernels.cpp (PyTorch's single-tensor order;
// see there): both call sgd_element/adam_element of kernels/optimizer_math.h, written once.
//
// To agree with the CPU bit for bit, this file is compiled with --fmad=false (CMakeLists.txt):
// nvcc would otherwise contract `p + neg_lr * d` and friends into fused multiply-adds, which
// round once instead of twice. Division and sqrt are IEEE-rounded under nvcc's defaults
// (-prec-div=true, -prec-sqrt=true). The per-parameter kernels get their scalar factors from the
// host in double, exactly as the CPU computes them. The multi-tensor Adam kernel reads the step
// count on the device, so it computes the bias corrections there, also in double; CUDA's pow may
// differ from the host's in the last bit of the double, which rarely survives the cast to float.
//
// Multi-tensor apply (as PyTorch's multi_tensor_apply): the host packs up to kListTensors
// parameters of one dtype combination and up to kListBlocks (tensor, chunk) pairs into a kernel
// argument (no device-side metadata, so no copy and no sync); each block updates one kChunk-element
// chunk. found_inf and the step counts are read on the device: a skipped step is a kernel that
// returns at once. The step counts are advanced by a small kernel before the update launches, so
// every chunk of a parameter reads the same count.
//
// Adam's state may be bfloat16 (type S, all three state tensors alike; lists are split by it too),
// and bfloat16 stores may round stochastically with philox4x32 bits keyed by (seed, parameter
// index, step) and the element index (kernels/optimizer_math.h): the same bits, and the same
// opmath values between stores, as the CPU's adam_range, so these agree bit for bit as well.
//
// RMSprop, Adagrad, NAdam and RAdam: multi-tensor launches (kernels/cuda/
// multi_tensor_apply.cuh) over the per-element math shared with the CPU (kernels/optimizer_math.h).
// Compiled with --fmad=false (CMakeLists.txt) so that products and sums round as the CPU's do.
//
// found_inf and the step counts stay on the device: a small kernel advances the counts (and
// NAdam's float32 mu_product, which must change once per step, not once per chunk) before the
// update launches, and every block derives the step's factors from the advanced count in double.
// CUDA's pow may differ from the host's in the last bit of a double, which rarely survives the
// cast to float.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cuda/current_stream.h"
#include "engine/optimizer_kernel_tables.h"
#include "engine/philox.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/optimizer_math.h"

namespace mantissa::cuda {
namespace {

namespace om = optim_math;
using mta::advance_steps;
using mta::chunk_of;
using mta::for_each_dtype_group;
using mta::for_each_dtype_state_group;
using mta::for_each_list;
using mta::found_inf_ptr;
using mta::kChunk;
using mta::ParamList;
using optim_math::adam_consts;
using optim_math::adam_element;
using optim_math::adam_set_lr;
using optim_math::adam_set_step;
using optim_math::AdamConsts;
using optim_math::sgd_consts;
using optim_math::sgd_element;
using optim_math::SgdConsts;
using optim_math::with_static_bool;

template <typename T>
T* maybe_data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

__device__ __forceinline__ bool skip(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

// ---- per-parameter kernels ------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    sgd_step_kernel_cuda(SgdConsts<opmath_t<T>> c, bool first, T* p, const T* g, T* buf,
                         int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    sgd_element(c, c.use_momentum, first, p, g, buf, static_cast<T*>(nullptr), i);
  }
}

void sgd_step_cuda(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                   const SgdStepParams& hp) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_dtype<kFloatingTypes>(param.dtype(), "sgd_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto c = sgd_consts<opmath_t<T>>(hp);
    T* buf = maybe_data<T>(momentum_buffer);
    MT_ASSERT(!c.use_momentum || buf != nullptr, "sgd_step: momentum without a buffer");
    DeviceGuard guard(param.device().index());
    sgd_step_kernel_cuda<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        c, hp.first_step, static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
        buf, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

template <typename T, typename S, bool kSr>
__global__ void __launch_bounds__(kBlockSize)
    adam_step_kernel_cuda(AdamConsts<opmath_t<T>> c, uint64_t key, T* p, const T* g, S* m1, S* m2,
                          S* mx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    adam_element<T, S, kSr>(c, c.amsgrad, key, p, g, m1, m2, mx, static_cast<T*>(nullptr), i);
  }
}

void adam_step_cuda(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                    const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                    const AdamStepParams& hp) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_dtype<kFloatingTypes>(param.dtype(), "adam_step", param.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto c = adam_consts<opmath_t<T>>(hp);
    adam_set_step(c, static_cast<double>(hp.step));  // on the host, as the CPU kernel
    const uint64_t key = hp.stochastic_rounding ? optim_math::stochastic_rounding_key(
                                                      hp.sr_seed, hp.param_index, hp.step)
                                                : 0;
    // The state's element type: the parameter's T, or bfloat16 (others are refused).
    optim_math::with_state_type<T>(exp_avg.dtype(), "adam_step", [&](auto* state_tag) {
      using S = std::remove_pointer_t<decltype(state_tag)>;
      S* mx = maybe_data<S>(max_exp_avg_sq);
      MT_ASSERT(!c.amsgrad || mx != nullptr, "adam_step: amsgrad without max_exp_avg_sq");
      DeviceGuard guard(param.device().index());
      with_static_bool(hp.stochastic_rounding, [&](auto stochastic) {
        adam_step_kernel_cuda<T, S, decltype(stochastic)::value>
            <<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
                c, key, static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
                static_cast<S*>(exp_avg.data_ptr()), static_cast<S*>(exp_avg_sq.data_ptr()), mx, n);
        MT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

// ---- multi-tensor kernels -------------------------------------------------------------------

// The list machinery (ParamList, for_each_list, ...) is in kernels/cuda/multi_tensor_apply.cuh.

template <typename T, typename Md>
__global__ void __launch_bounds__(kBlockSize)
    sgd_list_kernel(ParamList<T, Md> l, SgdConsts<opmath_t<T>> c, const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  // The count was advanced before this launch: 1 means this is the first momentum update.
  const bool first = c.use_momentum && *l.step[t] == 1;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    sgd_element(c, c.use_momentum, first, l.p[t], l.g[t], l.s[0][t], l.model[t], i);
  }
}

template <typename T, typename Md, typename S, bool kSr>
__global__ void __launch_bounds__(kBlockSize)
    adam_list_kernel(ParamList<T, Md, S> l, AdamConsts<opmath_t<T>> c, const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  const int64_t step = *l.step[t];  // advanced before this launch: 1 on the first update
  if (c.lr_device != nullptr) adam_set_lr(c, *c.lr_device);
  adam_set_step(c, static_cast<double>(step));
  const uint64_t key = kSr ? optim_math::stochastic_rounding_key(c.sr_seed, l.index[t], step) : 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    adam_element<T, S, kSr>(c, c.amsgrad, key, l.p[t], l.g[t], l.s[0][t], l.s[1][t], l.s[2][t],
                            l.model[t], i);
  }
}

// The list travels as a kernel argument, with the factors: within the 4 KiB limit.
static_assert(sizeof(ParamList<double, double, double>) + sizeof(AdamConsts<double>) +
                      sizeof(const float*) <=
                  4096,
              "adam_list_kernel's arguments exceed 4 KiB");

void sgd_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                         const SgdStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  const float* found = found_inf_ptr(found_inf);
  if (hp.momentum != 0.0) advance_steps(lists.step, found);
  for_each_dtype_group(lists, "sgd_multi_step", [&](auto tag, auto model_tag, const auto& entries) {
    using T = typename decltype(tag)::type;
    using Md = typename decltype(model_tag)::type;
    const auto c = sgd_consts<opmath_t<T>>(hp);
    for_each_list<T, Md>(lists, entries, [&](const ParamList<T, Md>& l, int blocks) {
      sgd_list_kernel<T, Md><<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found);
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

void adam_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                          const AdamStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  // A state dtype other than the parameter's or bfloat16 is refused before any count moves.
  for (size_t e = 0; e < lists.param.size(); ++e) {
    optim_math::bfloat16_state(lists.param[e].dtype(), lists.state[0][e].dtype(),
                               "adam_multi_step");
  }
  const float* found = found_inf_ptr(found_inf);
  advance_steps(lists.step, found);
  for_each_dtype_state_group(
      lists, "adam_multi_step", [&](auto tag, auto model_tag, auto state_tag, const auto& entries) {
        using T = typename decltype(tag)::type;
        using Md = typename decltype(model_tag)::type;
        using S = typename decltype(state_tag)::type;
        const auto c = adam_consts<opmath_t<T>>(hp);
        with_static_bool(hp.stochastic_rounding, [&](auto stochastic) {
          constexpr bool kSr = decltype(stochastic)::value;
          for_each_list<T, Md, S>(lists, entries, [&](const ParamList<T, Md, S>& l, int blocks) {
            adam_list_kernel<T, Md, S, kSr>
                <<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found);
            MT_CUDA_CHECK_LAUNCH();
          });
        });
      });
}

template <typename T, typename Md>
__global__ void __launch_bounds__(kBlockSize)
    rmsprop_list_kernel(ParamList<T, Md> l, om::RmspropConsts<opmath_t<T>> c,
                        const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    om::rmsprop_element(c, l.p[t], l.g[t], l.s[0][t], l.s[1][t], l.s[2][t], i);
    om::store_model(l.model[t], i, l.p[t][i]);
  }
}

template <typename T, typename Md>
__global__ void __launch_bounds__(kBlockSize)
    adagrad_list_kernel(ParamList<T, Md> l, om::AdagradConsts<opmath_t<T>> c,
                        const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  om::adagrad_set_step(c, static_cast<double>(*l.step[t]));  // advanced before this launch
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    om::adagrad_element(c, l.p[t], l.g[t], l.s[0][t], i);
    om::store_model(l.model[t], i, l.p[t][i]);
  }
}

template <typename T, typename Md>
__global__ void __launch_bounds__(kBlockSize)
    nadam_list_kernel(ParamList<T, Md> l, om::NadamConsts<opmath_t<T>> c, const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  // state[2] holds the float32 mu_product, advanced before this launch.
  const float mu_product = *reinterpret_cast<const float*>(l.s[2][t]);
  om::nadam_set_step(c, static_cast<double>(*l.step[t]), mu_product);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    om::nadam_element(c, l.p[t], l.g[t], l.s[0][t], l.s[1][t], i);
    om::store_model(l.model[t], i, l.p[t][i]);
  }
}

template <typename T, typename Md>
__global__ void __launch_bounds__(kBlockSize)
    radam_list_kernel(ParamList<T, Md> l, om::RadamConsts<opmath_t<T>> c, const float* found_inf) {
  if (skip(found_inf)) return;
  int t;
  int64_t begin, end;
  chunk_of(l, t, begin, end);
  om::radam_set_step(c, static_cast<double>(*l.step[t]));
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    om::radam_element(c, l.p[t], l.g[t], l.s[0][t], l.s[1][t], i);
    om::store_model(l.model[t], i, l.p[t][i]);
  }
}

// NAdam's mu_product *= mu, once per parameter and step (after the counts were advanced).
struct MuList {
  const int64_t* step[mta::kStepList];
  float* mu_product[mta::kStepList];
};

__global__ void nadam_mu_kernel(MuList list, int n, om::NadamConsts<double> c,
                                const float* found_inf) {
  if (skip(found_inf)) return;
  const int i = static_cast<int>(threadIdx.x);
  if (i < n)
    om::nadam_advance_mu_product(c, static_cast<double>(*list.step[i]), list.mu_product[i]);
}

// Advances the counts, then launches `kernel` over every list of the parameters.
template <typename MakeConsts, typename Launch>
void run_lists(const OptimizerTensorLists& lists, const Tensor& found_inf, const char* op,
               const MakeConsts& make_consts, const Launch& launch) {
  const float* found = mta::found_inf_ptr(found_inf);
  mta::for_each_dtype_group(lists, op, [&](auto tag, auto model_tag, const auto& entries) {
    using T = typename decltype(tag)::type;
    using Md = typename decltype(model_tag)::type;
    const auto c = make_consts(tag);
    mta::for_each_list<T, Md>(lists, entries, [&](const ParamList<T, Md>& l, int blocks) {
      launch(l, blocks, c, found);
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

void rmsprop_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                             const RmspropStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  mta::advance_steps(lists.step, mta::found_inf_ptr(found_inf));
  run_lists(
      lists, found_inf, "rmsprop_multi_step",
      [&](auto tag) { return om::rmsprop_consts<opmath_t<typename decltype(tag)::type>>(hp); },
      [](const auto& l, int blocks, const auto& c, const float* found) {
        rmsprop_list_kernel<<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found);
      });
}

void adagrad_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                             const AdagradStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  mta::advance_steps(lists.step, mta::found_inf_ptr(found_inf));
  run_lists(
      lists, found_inf, "adagrad_multi_step",
      [&](auto tag) { return om::adagrad_consts<opmath_t<typename decltype(tag)::type>>(hp); },
      [](const auto& l, int blocks, const auto& c, const float* found) {
        adagrad_list_kernel<<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found);
      });
}

void nadam_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                           const NadamStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  const float* found = mta::found_inf_ptr(found_inf);
  mta::advance_steps(lists.step, found);
  const auto mu_consts = om::nadam_consts<double>(hp);
  for (size_t first = 0; first < lists.step.size(); first += mta::kStepList) {
    const int n = static_cast<int>(std::min<size_t>(mta::kStepList, lists.step.size() - first));
    MuList list{};
    for (int k = 0; k < n; ++k) {
      list.step[k] = static_cast<const int64_t*>(lists.step[first + k].data_ptr());
      list.mu_product[k] = static_cast<float*>(lists.state[2][first + k].data_ptr());
    }
    nadam_mu_kernel<<<1, mta::kStepList, 0, detail::current_stream()>>>(list, n, mu_consts, found);
    MT_CUDA_CHECK_LAUNCH();
  }
  run_lists(
      lists, found_inf, "nadam_multi_step",
      [&](auto tag) { return om::nadam_consts<opmath_t<typename decltype(tag)::type>>(hp); },
      [](const auto& l, int blocks, const auto& c, const float* found_ptr) {
        nadam_list_kernel<<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found_ptr);
      });
}

void radam_multi_step_cuda(const OptimizerTensorLists& lists, const Tensor& found_inf,
                           const RadamStepParams& hp) {
  if (lists.param.empty()) return;
  DeviceGuard guard(lists.param.front().device().index());
  mta::advance_steps(lists.step, mta::found_inf_ptr(found_inf));
  run_lists(
      lists, found_inf, "radam_multi_step",
      [&](auto tag) { return om::radam_consts<opmath_t<typename decltype(tag)::type>>(hp); },
      [](const auto& l, int blocks, const auto& c, const float* found) {
        radam_list_kernel<<<blocks, kBlockSize, 0, detail::current_stream()>>>(l, c, found);
      });
}

}  // namespace

MT_REGISTER_KERNEL(sgd_step_kernel, kCUDA, &sgd_step_cuda);
MT_REGISTER_KERNEL(adam_step_kernel, kCUDA, &adam_step_cuda);
MT_REGISTER_KERNEL(sgd_multi_step_kernel, kCUDA, &sgd_multi_step_cuda);
MT_REGISTER_KERNEL(adam_multi_step_kernel, kCUDA, &adam_multi_step_cuda);
MT_REGISTER_KERNEL(rmsprop_multi_step_kernel, kCUDA, &rmsprop_multi_step_cuda);
MT_REGISTER_KERNEL(adagrad_multi_step_kernel, kCUDA, &adagrad_multi_step_cuda);
MT_REGISTER_KERNEL(nadam_multi_step_kernel, kCUDA, &nadam_multi_step_cuda);
MT_REGISTER_KERNEL(radam_multi_step_kernel, kCUDA, &radam_multi_step_cuda);

}  // namespace mantissa::cuda
