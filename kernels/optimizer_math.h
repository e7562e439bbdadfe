// Per-element math of the SGD, Adam/AdamW, RMSprop, Adagrad, NAdam and RAdam steps, with the
// stochastic rounding of Adam's bfloat16 stores, written once for the CPU kernels
// (kernels/cpu/optimizer_kernels.cpp) and the CUDA ones (kernels/cuda/optimizer_kernels.cu), so
// both round identically.
//
// Each step follows PyTorch 1.13's single-tensor implementation op by op: wherever PyTorch
// materialises a tensor (grad.add(param), exp_avg.mul_(beta1), sqrt(), ...) the value is rounded
// to the parameter's dtype (rnd), and a Python scalar meets a tensor cast to opmath. Scalar
// factors that depend on the step (bias corrections, NAdam's momentum cache, RAdam's
// rectification) are computed once per parameter in double, as Python does; NAdam's mu_product
// is a float32 tensor in PyTorch whatever the parameter's dtype, and is kept as one here too.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/half.h"
#include "engine/macros.h"
#include "engine/opmath.h"
#include "engine/optimizer_kernel_tables.h"
#include "engine/philox.h"
#include "kernels/activation_math.h"

namespace mantissa::optim_math {

// A value as PyTorch holds it after an op that writes a tensor of dtype T.
template <typename T>
MT_HOST_DEVICE inline opmath_t<T> rnd(opmath_t<T> x) {
  return static_cast<opmath_t<T>>(static_cast<T>(x));
}

// ---- Stochastic rounding (Adam/AdamW's stochastic_rounding) ---------------------------------
// A float rounded to bfloat16 up or down at random, up with probability equal to the fraction of
// the gap between its two neighbours that it lies above the lower one, so that the rounding is
// unbiased: E[round(x)] = x. An update smaller than half a bfloat16 ulp (every AdamW weight decay
// of a weight above ~0.01 at lr 1e-3) then survives on average, where round-to-nearest drops it.
// Adding 16 random bits below the kept 16 and truncating does exactly that, in magnitude, for
// either sign. inf and NaN round as to nearest.
MT_HOST_DEVICE inline BFloat16 round_bf16_stochastic(float x, uint32_t random_bits) {
  const uint32_t u = mantissa::detail::float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return BFloat16(x);
  return BFloat16(static_cast<uint16_t>((u + (random_bits & 0xffffu)) >> 16), FromBits{});
}

// The Philox key of one parameter's update: the run's seed, the parameter's index in the
// optimizer and the step (1 on the first update), mixed (splitmix64's finaliser) so that nearby
// indices and steps give unrelated streams. Element i then draws philox4x32(key, i): word 0 for
// the parameter, 1 for exp_avg, 2 for exp_avg_sq, 3 for max_exp_avg_sq. The bits depend only on
// (seed, index, step, i): the same on every device and thread split, and again after a resume.
MT_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
MT_HOST_DEVICE inline uint64_t stochastic_rounding_key(uint64_t seed, int64_t param_index,
                                                       int64_t step) {
  return mix64(seed ^ mix64(static_cast<uint64_t>(param_index) * 0x9e3779b97f4a7c15ull +
                            static_cast<uint64_t>(step)));
}

// x stored as S: to nearest, or stochastically when `stochastic` and S is bfloat16.
template <typename S, typename M>
MT_HOST_DEVICE inline S store_as(M x, bool stochastic, uint32_t random_bits) {
  if constexpr (std::is_same_v<S, BFloat16>) {
    if (stochastic) return round_bf16_stochastic(static_cast<float>(x), random_bits);
  }
  return static_cast<S>(x);
}

// ---- Host-side dispatch of the fused optimizer kernels (both devices) -------------------------

// Calls f(std::true_type{}) or f(std::false_type{}): an option that decides whether a loop stores
// somewhere, or draws random bits, becomes a compile-time constant, so each variant has no
// per-element test.
template <typename F>
void with_static_bool(bool value, const F& f) {
  if (value) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// Whether Adam's state beside a parameter of dtype `param` is bfloat16 (Adam's state_dtype)
// rather than the parameter's own dtype; any other state dtype is refused, naming `op`.
inline bool bfloat16_state(DType param, DType state, const char* op) {
  if (state == param) return false;
  if (state == DType::BFloat16) return true;
  MT_THROW(op, ": optimizer state of dtype ", state, " for a parameter of dtype ", param,
           " (the state is the parameter's dtype or bfloat16)");
}

// Calls f(static_cast<S*>(nullptr)) with S the element type of a state of dtype `state` beside a
// parameter of element type T: T itself, or BFloat16.
template <typename T, typename F>
void with_state_type(DType state, const char* op, const F& f) {
  if (bfloat16_state(dtype_of_v<T>, state, op)) {
    f(static_cast<BFloat16*>(nullptr));
  } else {
    f(static_cast<T*>(nullptr));
  }
}

// Stands for "no lower-precision model copy to write" (master weights off), so that the store
// is compiled out rather than tested per element.
struct NoModel {};

template <typename Md, typename T>
MT_HOST_DEVICE inline void store_model(Md* model, int64_t i, T value) {
  if constexpr (!std::is_same_v<Md, NoModel>) {
    if (model != nullptr) model[i] = static_cast<Md>(value);
  }
}

// Option flags of the element functions below are a bool (tested per element) or a
// std::integral_constant<bool, ...> (with_static_bool's, compiled in or out: what lets the CPU's
// loops vectorise with only the stores they need).

// ---- SGD ------------------------------------------------------------------------------------

template <typename M>
struct SgdConsts {
  M wd, mom, keep, neg_lr;
  bool use_wd, use_momentum, maximize, nesterov;
};

template <typename M>
SgdConsts<M> sgd_consts(const SgdStepParams& hp) {
  SgdConsts<M> c;
  c.use_wd = hp.weight_decay != 0.0;
  c.use_momentum = hp.momentum != 0.0;
  c.maximize = hp.maximize;
  c.nesterov = hp.nesterov;
  c.wd = static_cast<M>(hp.weight_decay);
  c.mom = static_cast<M>(hp.momentum);
  c.keep = static_cast<M>(1.0 - hp.dampening);
  c.neg_lr = static_cast<M>(-hp.lr);
  return c;
}

// buf: momentum_buffer (read and written only when use_momentum); first: its first update.
template <typename T, typename Md, typename UseMomentum>
MT_HOST_DEVICE inline void sgd_element(const SgdConsts<opmath_t<T>>& c, UseMomentum use_momentum,
                                       bool first, T* p, const T* g, T* buf, Md* model, int64_t i) {
  using M = opmath_t<T>;
  const M pv = static_cast<M>(p[i]);
  M d = static_cast<M>(g[i]);
  // Selects rather than branches, which the CPU's compiler turns into blends.
  d = c.maximize ? -d : d;
  d = c.use_wd ? d + c.wd * pv : d;  // grad.add(param, alpha=weight_decay)
  if (use_momentum) {
    // buf = clone(d) on the first step, else buf.mul_(momentum).add_(d, alpha=1-dampening)
    const M old = static_cast<M>(static_cast<T>(static_cast<M>(buf[i]) * c.mom));
    const T b = static_cast<T>(first ? d : old + c.keep * d);
    buf[i] = b;
    d = c.nesterov ? d + c.mom * static_cast<M>(b) : static_cast<M>(b);
  }
  p[i] = static_cast<T>(pv + c.neg_lr * d);  // param.add_(d, alpha=-lr)
  store_model(model, i, p[i]);
}

// ---- Adam / AdamW ---------------------------------------------------------------------------

// The step-independent factors; adam_set_step sets the step-dependent ones (neg_step_size,
// bc2_sqrt) from the step count, in double as PyTorch's Python does.
template <typename M>
struct AdamConsts {
  M wd, decay, w1, one_minus_w1, beta2, w2, neg_step_size, bc2_sqrt, eps;
  double lr, beta1_d, beta2_d, wd_d;
  const double* lr_device;  // AdamStepParams::lr_device
  uint64_t sr_seed;
  bool maximize, amsgrad, coupled_wd, decoupled_wd, lerp_small;
};

template <typename M>
MT_HOST_DEVICE inline void adam_set_step(AdamConsts<M>& c, double step) {
  const double bias_correction1 = 1.0 - MT_MATH(pow)(c.beta1_d, step);
  const double bias_correction2 = 1.0 - MT_MATH(pow)(c.beta2_d, step);
  c.neg_step_size = static_cast<M>(-(c.lr / bias_correction1));
  c.bc2_sqrt = static_cast<M>(MT_MATH(sqrt)(bias_correction2));
}

// The learning rate's factors, from lr as the host computes them (in double).
template <typename M>
MT_HOST_DEVICE inline void adam_set_lr(AdamConsts<M>& c, double lr) {
  c.lr = lr;
  c.decay = static_cast<M>(1.0 - lr * c.wd_d);
}

template <typename M>
AdamConsts<M> adam_consts(const AdamStepParams& hp) {
  AdamConsts<M> c;
  c.maximize = hp.maximize;
  c.amsgrad = hp.amsgrad;
  c.coupled_wd = hp.weight_decay != 0.0 && !hp.decoupled_weight_decay;
  c.decoupled_wd = hp.weight_decay != 0.0 && hp.decoupled_weight_decay;
  c.wd = static_cast<M>(hp.weight_decay);
  c.wd_d = hp.weight_decay;
  adam_set_lr(c, hp.lr);
  c.lr_device = hp.lr_device;
  // exp_avg.lerp_(grad, 1 - beta1), with lerp's two-sided formula for accuracy near 1.
  c.w1 = static_cast<M>(1.0 - hp.betas.first);
  c.lerp_small = std::abs(c.w1) < M(0.5);
  c.one_minus_w1 = M(1) - c.w1;
  c.beta2 = static_cast<M>(hp.betas.second);
  c.w2 = static_cast<M>(1.0 - hp.betas.second);
  c.eps = static_cast<M>(hp.eps);
  c.beta1_d = hp.betas.first;
  c.beta2_d = hp.betas.second;
  c.sr_seed = hp.sr_seed;
  c.neg_step_size = M(0);
  c.bc2_sqrt = M(1);
  return c;
}

// S: the state's element type (T or bfloat16). kSr: stores into bfloat16 round stochastically,
// with the bits of philox4x32(key, i) (key: stochastic_rounding_key of the parameter's update):
// word 0 for the parameter, 1 exp_avg, 2 exp_avg_sq, 3 max_exp_avg_sq (read and written only
// when amsgrad).
template <typename T, typename S, bool kSr, typename Md, typename Amsgrad>
MT_HOST_DEVICE inline void adam_element(const AdamConsts<opmath_t<T>>& c, Amsgrad amsgrad,
                                        uint64_t key, T* p, const T* g, S* m1, S* m2, S* mx,
                                        Md* model, int64_t i) {
  using M = opmath_t<T>;
  // PyTorch's intermediate roundings (to the parameter's dtype, where its separate tensor ops
  // round) hold when the state has that dtype and stores round to nearest; otherwise every value
  // stays in opmath and rounds once, on its store.
  constexpr bool kExact = std::is_same_v<S, T> && !kSr;
  Philox4 r{};
  if constexpr (kSr) r = philox4x32(key, static_cast<uint64_t>(i));
  M pv = static_cast<M>(p[i]);
  M gv = static_cast<M>(g[i]);
  if (c.maximize) gv = -gv;
  if (c.coupled_wd) gv = gv + c.wd * pv;  // grad.add(param, alpha=wd)
  if (c.decoupled_wd) {
    pv = kExact ? static_cast<M>(static_cast<T>(pv * c.decay)) : pv * c.decay;  // mul_(1-lr*wd)
  }
  const M a = static_cast<M>(m1[i]);
  m1[i] =
      store_as<S>(c.lerp_small ? a + c.w1 * (gv - a) : gv - (gv - a) * c.one_minus_w1, kSr, r.v[1]);
  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  const M old_v = static_cast<M>(m2[i]) * c.beta2;
  const M v = kExact ? static_cast<M>(static_cast<T>(old_v)) : old_v;
  m2[i] = store_as<S>(v + c.w2 * gv * gv, kSr, r.v[2]);
  M second = static_cast<M>(m2[i]);
  if (amsgrad) {
    const M old = static_cast<M>(mx[i]);
    // torch.maximum propagates NaN from either side (x != x: x is NaN)
    const M best = (old != old || old > second) && second == second ? old : second;
    mx[i] = store_as<S>(best, kSr, r.v[3]);
    second = static_cast<M>(mx[i]);
  }
  const M denom = MT_MATH(sqrt)(second) / c.bc2_sqrt + c.eps;
  p[i] = store_as<T>(pv + c.neg_step_size * static_cast<M>(m1[i]) / denom, kSr,
                     r.v[0]);  // addcdiv_
  store_model(model, i, p[i]);
}

// ---- RMSprop --------------------------------------------------------------------------------

template <typename M>
struct RmspropConsts {
  M lr_neg, alpha, one_minus_alpha, eps, wd, momentum;
  bool maximize, use_wd, centered, use_momentum;
};

template <typename M>
RmspropConsts<M> rmsprop_consts(const RmspropStepParams& hp) {
  return {static_cast<M>(-hp.lr),
          static_cast<M>(hp.alpha),
          static_cast<M>(1.0 - hp.alpha),
          static_cast<M>(hp.eps),
          static_cast<M>(hp.weight_decay),
          static_cast<M>(hp.momentum),
          hp.maximize,
          hp.weight_decay != 0.0,
          hp.centered,
          hp.momentum > 0.0};
}

// sq: square_avg; buf: momentum_buffer (momentum > 0); ga: grad_avg (centered).
template <typename T>
MT_HOST_DEVICE inline void rmsprop_element(const RmspropConsts<opmath_t<T>>& c, T* p, const T* g,
                                           T* sq, T* buf, T* ga, int64_t i) {
  using M = opmath_t<T>;
  const M pv = static_cast<M>(p[i]);
  M gv = static_cast<M>(g[i]);
  if (c.maximize) gv = -gv;
  if (c.use_wd) gv = rnd<T>(gv + c.wd * pv);  // grad.add(param, alpha=weight_decay)
  // square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
  const M s = rnd<T>(rnd<T>(static_cast<M>(sq[i]) * c.alpha) + c.one_minus_alpha * gv * gv);
  sq[i] = static_cast<T>(s);
  M avg;
  if (c.centered) {
    // grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha); square_avg.addcmul(grad_avg, grad_avg,
    // value=-1).sqrt_()
    const M a = rnd<T>(rnd<T>(static_cast<M>(ga[i]) * c.alpha) + c.one_minus_alpha * gv);
    ga[i] = static_cast<T>(a);
    avg = rnd<T>(MT_MATH(sqrt)(rnd<T>(s + M(-1) * a * a)));
  } else {
    avg = rnd<T>(MT_MATH(sqrt)(s));
  }
  avg = rnd<T>(avg + c.eps);
  if (c.use_momentum) {
    // buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
    const M b = rnd<T>(rnd<T>(static_cast<M>(buf[i]) * c.momentum) + M(1) * gv / avg);
    buf[i] = static_cast<T>(b);
    p[i] = static_cast<T>(pv + c.lr_neg * b);
  } else {
    p[i] = static_cast<T>(pv + c.lr_neg * gv / avg);  // param.addcdiv_(grad, avg, value=-lr)
  }
}

// ---- Adagrad --------------------------------------------------------------------------------

template <typename M>
struct AdagradConsts {
  M neg_clr, eps, wd;
  bool maximize, use_wd;
  double lr, lr_decay;
};

template <typename M>
AdagradConsts<M> adagrad_consts(const AdagradStepParams& hp) {
  return {M(0),        static_cast<M>(hp.eps), static_cast<M>(hp.weight_decay),
          hp.maximize, hp.weight_decay != 0.0, hp.lr,
          hp.lr_decay};
}

// `step` is the count after this update (1 on the first).
template <typename M>
MT_HOST_DEVICE inline void adagrad_set_step(AdagradConsts<M>& c, double step) {
  c.neg_clr = static_cast<M>(-(c.lr / (1.0 + (step - 1.0) * c.lr_decay)));
}

template <typename T>
MT_HOST_DEVICE inline void adagrad_element(const AdagradConsts<opmath_t<T>>& c, T* p, const T* g,
                                           T* sum, int64_t i) {
  using M = opmath_t<T>;
  const M pv = static_cast<M>(p[i]);
  M gv = static_cast<M>(g[i]);
  if (c.maximize) gv = -gv;
  if (c.use_wd) gv = rnd<T>(gv + c.wd * pv);
  const M s = rnd<T>(static_cast<M>(sum[i]) + M(1) * gv * gv);  // state_sum.addcmul_(grad, grad)
  sum[i] = static_cast<T>(s);
  const M std_ = rnd<T>(rnd<T>(MT_MATH(sqrt)(s)) + c.eps);  // state_sum.sqrt().add_(eps)
  p[i] = static_cast<T>(pv + c.neg_clr * gv / std_);        // param.addcdiv_(grad, std, value=-clr)
}

// ---- NAdam ----------------------------------------------------------------------------------

template <typename M>
struct NadamConsts {
  M beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd, decay, bc2, c_grad, c_avg;
  bool use_wd, decoupled;
  double lr, beta1_d, beta2_d, momentum_decay;
};

template <typename M>
NadamConsts<M> nadam_consts(const NadamStepParams& hp) {
  NadamConsts<M> c{};
  c.beta1 = static_cast<M>(hp.betas.first);
  c.one_minus_beta1 = static_cast<M>(1.0 - hp.betas.first);
  c.beta2 = static_cast<M>(hp.betas.second);
  c.one_minus_beta2 = static_cast<M>(1.0 - hp.betas.second);
  c.eps = static_cast<M>(hp.eps);
  c.wd = static_cast<M>(hp.weight_decay);
  c.use_wd = hp.weight_decay != 0.0;
  c.decoupled = hp.decoupled_weight_decay;
  c.decay = static_cast<M>(1.0 - hp.lr * hp.weight_decay);  // a Python float in PyTorch
  c.lr = hp.lr;
  c.beta1_d = hp.betas.first;
  c.beta2_d = hp.betas.second;
  c.momentum_decay = hp.momentum_decay;
  return c;
}

template <typename M>
MT_HOST_DEVICE inline double nadam_mu(const NadamConsts<M>& c, double step) {
  return c.beta1_d * (1.0 - 0.5 * MT_MATH(pow)(0.96, step * c.momentum_decay));
}

// Multiplies the float32 mu_product by this step's mu (`step` counts this update); done once per
// parameter and step, before the elements are updated.
template <typename M>
MT_HOST_DEVICE inline void nadam_advance_mu_product(const NadamConsts<M>& c, double step,
                                                    float* mu_product) {
  *mu_product = *mu_product * static_cast<float>(nadam_mu(c, step));  // mu_product *= mu
}

// The step's factors, from the already advanced mu_product. As today's PyTorch:
// mu_product_next = mu_product.item() * mu_next, in double (PyTorch 1.13 multiplied by mu a second
// time, in float32).
template <typename M>
MT_HOST_DEVICE inline void nadam_set_step(NadamConsts<M>& c, double step, float mu_product) {
  const double mu = nadam_mu(c, step), mu_next = nadam_mu(c, step + 1.0);
  const double next = static_cast<double>(mu_product) * mu_next;
  c.bc2 = static_cast<M>(1.0 - MT_MATH(pow)(c.beta2_d, step));
  c.c_grad = static_cast<M>(-c.lr * (1.0 - mu) / (1.0 - static_cast<double>(mu_product)));
  c.c_avg = static_cast<M>(-c.lr * mu_next / (1.0 - next));
}

template <typename T>
MT_HOST_DEVICE inline void nadam_element(const NadamConsts<opmath_t<T>>& c, T* p, const T* g, T* m1,
                                         T* m2, int64_t i) {
  using M = opmath_t<T>;
  M pv = static_cast<M>(p[i]);
  M gv = static_cast<M>(g[i]);
  if (c.use_wd && c.decoupled) {
    pv = rnd<T>(pv * c.decay);  // param.mul_(1 - lr * weight_decay)
  } else if (c.use_wd) {
    gv = rnd<T>(gv + c.wd * pv);
  }
  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(...)
  const M a = rnd<T>(rnd<T>(static_cast<M>(m1[i]) * c.beta1) + c.one_minus_beta1 * gv);
  m1[i] = static_cast<T>(a);
  const M v = rnd<T>(rnd<T>(static_cast<M>(m2[i]) * c.beta2) + c.one_minus_beta2 * gv * gv);
  m2[i] = static_cast<T>(v);
  // exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
  const M denom = rnd<T>(rnd<T>(MT_MATH(sqrt)(rnd<T>(v / c.bc2))) + c.eps);
  pv = rnd<T>(pv + c.c_grad * gv / denom);  // two addcdiv_, each rounded
  p[i] = static_cast<T>(pv + c.c_avg * a / denom);
}

// ---- RAdam ----------------------------------------------------------------------------------

template <typename M>
struct RadamConsts {
  M beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd, decay, lr, bc1, sqrt_bc2, rect;
  bool use_wd, decoupled, rectified;
  double lr_d, beta1_d, beta2_d;
};

template <typename M>
RadamConsts<M> radam_consts(const RadamStepParams& hp) {
  RadamConsts<M> c{};
  c.beta1 = static_cast<M>(hp.betas.first);
  c.one_minus_beta1 = static_cast<M>(1.0 - hp.betas.first);
  c.beta2 = static_cast<M>(hp.betas.second);
  c.one_minus_beta2 = static_cast<M>(1.0 - hp.betas.second);
  c.eps = static_cast<M>(hp.eps);
  c.wd = static_cast<M>(hp.weight_decay);
  c.lr = static_cast<M>(hp.lr);
  c.use_wd = hp.weight_decay != 0.0;
  c.decoupled = hp.decoupled_weight_decay;
  c.decay = static_cast<M>(1.0 - hp.lr * hp.weight_decay);  // a Python float in PyTorch
  c.lr_d = hp.lr;
  c.beta1_d = hp.betas.first;
  c.beta2_d = hp.betas.second;
  return c;
}

template <typename M>
MT_HOST_DEVICE inline void radam_set_step(RadamConsts<M>& c, double step) {
  const double bias_correction1 = 1.0 - MT_MATH(pow)(c.beta1_d, step);
  const double beta2_t = MT_MATH(pow)(c.beta2_d, step);
  const double bias_correction2 = 1.0 - beta2_t;
  const double rho_inf = 2.0 / (1.0 - c.beta2_d) - 1.0;
  const double rho_t = rho_inf - 2.0 * step * beta2_t / bias_correction2;
  c.bc1 = static_cast<M>(bias_correction1);
  c.rectified = rho_t > 5.0;
  c.sqrt_bc2 = static_cast<M>(MT_MATH(sqrt)(bias_correction2));
  c.rect = c.rectified ? static_cast<M>(MT_MATH(sqrt)((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                                                      ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)))
                       : M(0);
}

template <typename T>
MT_HOST_DEVICE inline void radam_element(const RadamConsts<opmath_t<T>>& c, T* p, const T* g, T* m1,
                                         T* m2, int64_t i) {
  using M = opmath_t<T>;
  M pv = static_cast<M>(p[i]);
  M gv = static_cast<M>(g[i]);
  if (c.use_wd && c.decoupled) {
    pv = rnd<T>(pv * c.decay);  // param.mul_(1 - lr * weight_decay)
  } else if (c.use_wd) {
    gv = rnd<T>(gv + c.wd * pv);
  }
  const M a = rnd<T>(rnd<T>(static_cast<M>(m1[i]) * c.beta1) + c.one_minus_beta1 * gv);
  m1[i] = static_cast<T>(a);
  const M v = rnd<T>(rnd<T>(static_cast<M>(m2[i]) * c.beta2) + c.one_minus_beta2 * gv * gv);
  m2[i] = static_cast<T>(v);
  const M corrected = rnd<T>(a / c.bc1);  // exp_avg / bias_correction1
  M update = rnd<T>(corrected * c.lr);
  if (c.rectified) {
    // sqrt(bias_correction2) / exp_avg_sq.sqrt().add_(eps): a Python float over a tensor is
    // tensor.reciprocal() * float
    const M denom = rnd<T>(rnd<T>(MT_MATH(sqrt)(v)) + c.eps);
    const M adaptive = rnd<T>(rnd<T>(M(1) / denom) * c.sqrt_bc2);
    update = rnd<T>(rnd<T>(update * adaptive) * c.rect);
  }
  p[i] = static_cast<T>(pv + M(-1) * update);  // param.add_(..., alpha=-1.0)
}

}  // namespace mantissa::optim_math
