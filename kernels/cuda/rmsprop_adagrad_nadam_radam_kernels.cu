// CUDA fused RMSprop, Adagrad, NAdam and RAdam steps: multi-tensor launches (kernels/cuda/
// multi_tensor_apply.cuh) over the per-element math shared with the CPU (kernels/optimizer_math.h).
// Compiled with --fmad=false (CMakeLists.txt) so that products and sums round as the CPU's do.
//
// found_inf and the step counts stay on the device: a small kernel advances the counts (and
// NAdam's float32 mu_product, which must change once per step, not once per chunk) before the
// update launches, and every block derives the step's factors from the advanced count in double.
// CUDA's pow may differ from the host's in the last bit of a double, which rarely survives the
// cast to float.
#include <algorithm>
#include <vector>

#include "cuda/current_stream.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/optimizer_math.h"

namespace mantissa::cuda {
namespace {

namespace om = optim_math;
using mta::chunk_of;
using mta::ParamList;

__device__ __forceinline__ bool skip(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

template <typename T, typename Md>
__device__ __forceinline__ void store_model(Md* model, const T* p, int64_t i) {
  if (model != nullptr) model[i] = static_cast<Md>(p[i]);
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
    store_model(l.model[t], l.p[t], i);
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
    store_model(l.model[t], l.p[t], i);
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
    store_model(l.model[t], l.p[t], i);
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
    store_model(l.model[t], l.p[t], i);
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

MT_REGISTER_KERNEL(rmsprop_multi_step_kernel, kCUDA, &rmsprop_multi_step_cuda);
MT_REGISTER_KERNEL(adagrad_multi_step_kernel, kCUDA, &adagrad_multi_step_cuda);
MT_REGISTER_KERNEL(nadam_multi_step_kernel, kCUDA, &nadam_multi_step_cuda);
MT_REGISTER_KERNEL(radam_multi_step_kernel, kCUDA, &radam_multi_step_cuda);

}  // namespace mantissa::cuda
