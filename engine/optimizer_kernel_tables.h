// Kernel tables of the optimizer steps (kernels/cpu/optimizer_kernels.cpp,
// kernels/cuda/optimizer_kernels.cu; the per-element math in kernels/optimizer_math.h). Each
// step's parameters are the optimizer's options struct (engine/optimizer_options.h) and the
// values of the step itself, so a hyperparameter reaches the math without being copied by name.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/dispatch.h"
#include "engine/optimizer_options.h"
#include "engine/tensor.h"

namespace mantissa {

// Fused optimizer steps: one pass over a parameter updating it and its state in place, in
// PyTorch's single-tensor arithmetic order (formulas in nn/optim/sgd.h, adam.h). All tensors are
// contiguous with the param's shape, dtype and device (the optimizer guarantees it); math is in
// opmath and the double factors are cast to opmath once.
struct SgdStepParams : optim::SGDOptions {
  bool first_step = false;  // buf = d_p instead of the momentum update
};
// momentum_buffer is undefined when momentum == 0.
using SgdStepKernel = void (*)(const Tensor& param, const Tensor& grad,
                               const Tensor& momentum_buffer, const SgdStepParams& p);
MT_KERNEL_TABLE(sgd_step, SgdStepKernel)
struct AdamStepParams : optim::AdamOptions {  // decoupled_weight_decay: AdamW
  int64_t step = 0;                           // 1 on the first update
  // Stores into bfloat16 (the state, or a bfloat16 parameter) round stochastically, with bits
  // drawn from (sr_seed, the parameter's index, step, element): kernels/optimizer_math.h.
  bool stochastic_rounding = false;
  uint64_t sr_seed = 0;
  int64_t param_index = 0;  // the per-parameter kernel's; lists carry `index`
  // The multi-tensor kernels read the learning rate here instead of `lr` when set: a float64 on
  // the parameters' device, refilled by the optimizer, so that a step captured into a CUDA graph
  // follows a schedule when replayed (Optimizer::set_lr_on_device).
  const double* lr_device = nullptr;
};
// max_exp_avg_sq is undefined unless amsgrad. The state tensors have the param's dtype, or
// bfloat16 (Adam's state_dtype), all three alike.
using AdamStepKernel = void (*)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                                const AdamStepParams& p);
MT_KERNEL_TABLE(adam_step, AdamStepKernel)
// Multi-tensor forms of the steps above: one call updates every parameter of a list (one device),
// with the same per-element arithmetic, so results equal the per-parameter kernels bit for bit.
// Entry i of each vector belongs to parameter i:
//   param  contiguous, updated in place (the float32 master copy under master weights)
//   grad   contiguous, param's dtype
//   model  empty, or per entry the float16/bfloat16 parameter that receives the rounded param in
//          the same pass (master weights; undefined entries: none)
//   state  SGD: [0] momentum_buffer (undefined when momentum == 0); Adam: [0] exp_avg,
//          [1] exp_avg_sq, [2] max_exp_avg_sq (undefined unless amsgrad); param's dtype (Adam:
//          or bfloat16)
//   step   int64 0-d per parameter on the device: Adam's update count (step + 1 is used and
//          stored), SGD's count of momentum updates (0 means buf = d, the first step)
//   index  the parameter's index in its optimizer (Optimizer::params order), for the random
//          bits of stochastic rounding; empty: the list position
// found_inf: undefined (always step) or float32, 1 element, on the device: when it is non-zero
// the kernels return without writing anything, so skipping a step needs no host sync.
struct OptimizerTensorLists {
  std::vector<Tensor> param, grad, model, step;
  std::vector<Tensor> state[3];
  std::vector<int64_t> index;
};
// p.first_step is ignored (read per parameter from step).
using SgdMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                    const SgdStepParams& p);
MT_KERNEL_TABLE(sgd_multi_step, SgdMultiStepKernel)
// p.step is ignored (read per parameter from step).
using AdamMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                     const AdamStepParams& p);
MT_KERNEL_TABLE(adam_multi_step, AdamMultiStepKernel)

// RMSprop, Adagrad, NAdam and RAdam (formulas in nn/optim/rmsprop.h, adagrad.h, nadam.h,
// radam.h), multi-tensor only: the per-parameter path passes a one-entry list. Lists as above;
// every kernel advances the step count of each parameter it updates (step + 1 is this update).
//   state  RMSprop: [0] square_avg, [1] momentum_buffer (undefined unless momentum > 0),
//                   [2] grad_avg (undefined unless centered)
//          Adagrad: [0] sum
//          NAdam:   [0] exp_avg, [1] exp_avg_sq, [2] mu_product (float32, 1 element)
//          RAdam:   [0] exp_avg, [1] exp_avg_sq
struct RmspropStepParams : optim::RMSpropOptions {};
using RmspropMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                        const RmspropStepParams& p);
MT_KERNEL_TABLE(rmsprop_multi_step, RmspropMultiStepKernel)
struct AdagradStepParams : optim::AdagradOptions {};
using AdagradMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                        const AdagradStepParams& p);
MT_KERNEL_TABLE(adagrad_multi_step, AdagradMultiStepKernel)
struct NadamStepParams : optim::NAdamOptions {};
using NadamMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                      const NadamStepParams& p);
MT_KERNEL_TABLE(nadam_multi_step, NadamMultiStepKernel)
struct RadamStepParams : optim::RAdamOptions {};
using RadamMultiStepKernel = void (*)(const OptimizerTensorLists& lists, const Tensor& found_inf,
                                      const RadamStepParams& p);
MT_KERNEL_TABLE(radam_multi_step, RadamMultiStepKernel)

}  // namespace mantissa
