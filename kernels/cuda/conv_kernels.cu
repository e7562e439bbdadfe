// CUDA 2-D convolution through cuDNN's legacy (descriptor) API, still present in cuDNN 9.
//
// Each call builds NCHW tensor/filter descriptors (the op hands over contiguous operands, see
// engine/kernel_tables.h) and a cross-correlation descriptor with the group count, asks cuDNN's
// heuristics (the *_v7 queries: no benchmarking, so no device sync and no timing noise) for an
// algorithm, and runs it with a workspace from mantissa's caching allocator, released as soon as
// the call is enqueued: the caching allocator reuses a block only on the stream that freed it
// (the current stream), so later users of that block are ordered after this convolution.
//
// Precision (kernels/conv_math.h): float16/bfloat16 compute in float on tensor cores; float64
// in double; float32 in FMA math (true float32) under the "highest" matmul precision and with
// TF32 permitted under "high", as torch.backends.cudnn.allow_tf32 would. No dtype ever runs with
// TENSOR_OP_MATH_ALLOW_CONVERSION, which may down-convert float32 operands to float16. The first
// heuristic candidate whose reported math type keeps that contract, and that cuDNN then accepts
// for the call, runs. When none does, the composed convolution (kernels/conv_composite.h: im2col,
// bmm, col2im, with the same precision contract through bmm) runs instead and is counted
// (engine/fast_path_stats.h, path "cuda.conv"); in strict mode that is an error naming the call
// (shapes, dtype, geometry) and why each candidate was passed over, rather than a bare cuDNN
// status.
//
// The handle of each device is created once, kept for the life of the process (like the cuBLAS
// handles) and used under a mutex, so concurrent threads never share descriptor-free state.
#include <cudnn.h>

#include <climits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cudnn_handle.h"
#include "engine/allocator.h"
#include "engine/fast_path_stats.h"
#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "kernels/conv_columns.h"
#include "kernels/conv_composite.h"
#include "kernels/conv_math.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

// ---- descriptors --------------------------------------------------------------------------
int to_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= INT_MAX, "conv2d (cuDNN): ", what, " ", v, " does not fit in int");
  return static_cast<int>(v);
}

cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      MT_THROW("conv2d: op not implemented for dtype ", dtype_name(dt), " on CUDA");
  }
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit TensorDesc(const Tensor& t) {  // contiguous NCHW
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
        d, CUDNN_TENSOR_NCHW, data_type(t.dtype()), to_int(t.size(0), "batch"),
        to_int(t.size(1), "channels"), to_int(t.size(2), "height"), to_int(t.size(3), "width")));
  }
  ~TensorDesc() { (void)cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const Tensor& w) {  // [O, C/groups, kh, kw]
    MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    MT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        d, data_type(w.dtype()), CUDNN_TENSOR_NCHW, to_int(w.size(0), "out_channels"),
        to_int(w.size(1), "in_channels/groups"), to_int(w.size(2), "kernel height"),
        to_int(w.size(3), "kernel width")));
  }
  ~FilterDesc() { (void)cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

static_assert(static_cast<int>(ConvMath::Default) == CUDNN_DEFAULT_MATH &&
              static_cast<int>(ConvMath::TensorOp) == CUDNN_TENSOR_OP_MATH &&
              static_cast<int>(ConvMath::TensorOpAllowConversion) ==
                  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
              static_cast<int>(ConvMath::Fma) == CUDNN_FMA_MATH);

ConvMath to_conv_math(cudnnMathType_t m) { return static_cast<ConvMath>(static_cast<int>(m)); }

// What one convolution call is, for the math rule and for error messages. The precision is read
// once per call so the descriptor and the candidate filter cannot disagree.
struct ConvCall {
  const char* op;
  const Tensor& input;
  const Tensor& weight;
  const Tensor& output;
  DType dt;
  const Conv2dParams& p;
  MatmulPrecision precision = effective_matmul_precision(DeviceType::CUDA);

  std::string describe() const {
    return describe_conv(op, input.shape(), weight.shape(), output.shape(), dt, p, precision);
  }
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const ConvCall& call) {
    const Conv2dParams& p = call.p;
    MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    const cudnnDataType_t compute =
        call.dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, to_int(p.padding[0], "padding"), to_int(p.padding[1], "padding"),
        to_int(p.stride[0], "stride"), to_int(p.stride[1], "stride"),
        to_int(p.dilation[0], "dilation"), to_int(p.dilation[1], "dilation"),
        CUDNN_CROSS_CORRELATION, compute));
    MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, to_int(p.groups, "groups")));
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(
        d, static_cast<cudnnMathType_t>(conv_requested_math(call.dt, call.precision))));
  }
  ~ConvDesc() { (void)cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

bool not_supported(cudnnStatus_t st) {
  // cuDNN 9 splits NOT_SUPPORTED into sub-codes (3000-3999: shape, layout, padding, ...).
#ifdef CUDNN_STATUS_CATEGORY
  return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED;
#else
  return st == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

// Device scratch memory from mantissa's caching allocator, returned when the call is enqueued.
class Workspace {
 public:
  Workspace(Device device, size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) {
      allocator_ = allocator_for(device);
      ptr_ = allocator_->allocate(bytes_);
    }
  }
  ~Workspace() {
    if (ptr_ != nullptr) allocator_->deallocate(ptr_, bytes_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// alpha = 1 and beta = 0 in the scaling type cuDNN expects: double for double data, else float.
struct Scaling {
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scaling(DType dt) : dbl(dt == DType::Float64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
};

void zero_fill(const Tensor& t) {
  MT_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), detail::current_stream()));
}

// Runs the first of cuDNN's heuristic candidates (best first) that the heuristics marked usable,
// whose math type keeps the dtype's contract, and that cuDNN accepts for this call: cuDNN 9's
// legacy heuristics can propose an algorithm that the workspace query or the launch then reports
// as not supported (a refused launch has enqueued nothing), and the next candidate is tried. The
// chosen math type is set on the descriptor, as cuDNN expects of an algorithm picked this way.
// True when one ran; otherwise false, with `why` saying why each candidate was passed over.
template <typename Perf, typename WorkspaceSize, typename Execute>
bool run_first_usable(const ConvCall& call, const Perf* perf, int count, const ConvDesc& conv,
                      Device device, const WorkspaceSize& workspace_size, const Execute& execute,
                      std::string* why) {
  std::string passed_over;
  const auto note = [&](const Perf& r, const char* why) {
    passed_over += mantissa::detail::str_cat(passed_over.empty() ? "" : "; ", "algo ",
                                             static_cast<int>(r.algo), " ",
                                             conv_math_name(to_conv_math(r.mathType)), ": ", why);
  };
  for (int i = 0; i < count; ++i) {
    const Perf& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS) {
      note(r, cudnnGetErrorString(r.status));
      continue;
    }
    if (!conv_math_allowed(call.dt, call.precision, to_conv_math(r.mathType))) {
      note(r, "math type breaks the precision contract");
      continue;
    }
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, r.mathType));
    size_t bytes = 0;
    cudnnStatus_t st = workspace_size(r.algo, &bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      const Workspace ws(device, bytes);
      st = execute(r.algo, ws);
      if (st == CUDNN_STATUS_SUCCESS) return true;
    }
    if (!not_supported(st)) MT_THROW(call.describe(), ": cuDNN failed: ", cudnnGetErrorString(st));
    note(r, cudnnGetErrorString(st));
  }
  *why = mantissa::detail::str_cat("cuDNN has no usable algorithm (its heuristics proposed ", count,
                                   count == 1 ? " candidate" : " candidates",
                                   count == 0 ? "" : ": ", passed_over, ")");
  return false;
}

// After cuDNN ran the call (`ran`), or offered nothing for it: then the composed convolution
// (kernels/conv_composite.h) runs instead, counted; with strict fast paths that is an error.
template <typename Composed>
void counted(bool ran, const char* direction, const ConvCall& call, const std::string& why,
             const Composed& composed) {
  if (ran) {
    ::mantissa::detail::count_fast_path("cuda.conv", direction, call.dt);
    return;
  }
  if (::mantissa::detail::count_fallback("cuda.conv", direction, /*refusal=*/true, call.dt,
                                         call.describe() + ": " + why)) {
    MT_THROW(call.describe(), ": ", why, "; strict fast paths forbid the composed convolution");
  }
  composed();
}

// ---- the column matrices of the composed convolution -----------------------------------------
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    im2col_kernel(T* cols, const T* x, conv_columns::Geometry g, int64_t n) {
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride())
    cols[e] = conv_columns::im2col_element(x, g, e);
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    col2im_kernel(T* x, const T* cols, conv_columns::Geometry g, int64_t n) {
  using M = opmath_t<T>;
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride())
    x[e] = static_cast<T>(conv_columns::col2im_element<M>(cols, g, e));
}

void conv2d_im2col_cuda(const Tensor& cols, const Tensor& input, const Conv2dParams& p, int64_t kh,
                        int64_t kw) {
  const int64_t n = cols.numel();
  if (n == 0) return;
  DeviceGuard guard(cols.device().index());
  const conv_columns::Geometry g = conv_composite::geometry(input.shape(), p, kh, kw);
  dispatch_dtype<kFloatingTypes>(cols.dtype(), "conv2d_im2col", cols.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    im2col_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        static_cast<T*>(cols.data_ptr()), static_cast<const T*>(input.data_ptr()), g, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void conv2d_col2im_cuda(const Tensor& input, const Tensor& cols, const Conv2dParams& p, int64_t kh,
                        int64_t kw) {
  const int64_t n = input.numel();
  if (n == 0) return;
  DeviceGuard guard(input.device().index());
  const conv_columns::Geometry g = conv_composite::geometry(input.shape(), p, kh, kw);
  dispatch_dtype<kFloatingTypes>(input.dtype(), "conv2d_col2im", input.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    col2im_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        static_cast<T*>(input.data_ptr()), static_cast<const T*>(cols.data_ptr()), g, n);
    MT_CUDA_CHECK_LAUNCH();
  });
}

// ---- bias ---------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    add_bias_kernel(T* out, const T* bias, int64_t n, int64_t plane, int64_t channels) {
  using M = opmath_t<T>;
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const int64_t o = (i / plane) % channels;
    out[i] = static_cast<T>(static_cast<M>(out[i]) + static_cast<M>(bias[o]));
  }
}

void add_bias(const Tensor& out, const Tensor& bias) {
  const int64_t n = out.numel(), plane = out.size(2) * out.size(3), channels = out.size(1);
  dispatch_dtype<kFloatingTypes>(out.dtype(), "conv2d", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_bias_kernel<T><<<grid_for(n), kBlockSize, 0, detail::current_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(bias.data_ptr()), n, plane,
        channels);
    MT_CUDA_CHECK_LAUNCH();
  });
}

// ---- kernels ------------------------------------------------------------------------------
void conv2d_forward_cuda(const Tensor& out, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const Conv2dParams& p) {
  if (out.numel() == 0) return;
  const int device = out.device().index();
  DeviceGuard guard(device);
  if (input.numel() == 0 || weight.numel() == 0) {
    zero_fill(out);  // an empty reduction (no input channels)
  } else {
    const ConvCall call{"conv2d forward", input, weight, out, out.dtype(), p};
    const TensorDesc x(input), y(out);
    const FilterDesc w(weight);
    const ConvDesc conv(call);
    CudnnLease lease(device);
    constexpr int kMaxAlgos = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    int count = 0;
    MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(lease.handle(), x.d, w.d, conv.d, y.d,
                                                          kMaxAlgos, &count, perf));
    const Scaling s(call.dt);
    std::string why;
    const bool ran = run_first_usable(
        call, perf, count, conv, out.device(),
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(lease.handle(), x.d, w.d, conv.d, y.d,
                                                         algo, bytes);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, const Workspace& ws) {
          return cudnnConvolutionForward(lease.handle(), s.one(), x.d, input.data_ptr(), w.d,
                                         weight.data_ptr(), conv.d, algo, ws.get(), ws.size(),
                                         s.zero(), y.d, out.data_ptr());
        },
        &why);
    lease.release();
    counted(ran, "forward", call, why, [&] { conv_composite::forward(out, input, weight, p); });
  }
  if (bias.defined()) add_bias(out, bias);
}

void conv2d_backward_input_cuda(const Tensor& grad_input, const Tensor& grad_out,
                                const Tensor& weight, const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int device = grad_input.device().index();
  DeviceGuard guard(device);
  if (grad_out.numel() == 0 || weight.numel() == 0) {
    zero_fill(grad_input);
    return;
  }
  const ConvCall call{"conv2d backward input", grad_input, weight, grad_out, grad_input.dtype(), p};
  const TensorDesc dx(grad_input), dy(grad_out);
  const FilterDesc w(weight);
  const ConvDesc conv(call);
  CudnnLease lease(device);
  constexpr int kMaxAlgos = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
  int count = 0;
  MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(lease.handle(), w.d, dy.d, conv.d,
                                                             dx.d, kMaxAlgos, &count, perf));
  const Scaling s(call.dt);
  std::string why;
  const bool ran = run_first_usable(
      call, perf, count, conv, grad_input.device(),
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(lease.handle(), w.d, dy.d, conv.d, dx.d,
                                                            algo, bytes);
      },
      [&](cudnnConvolutionBwdDataAlgo_t algo, const Workspace& ws) {
        return cudnnConvolutionBackwardData(lease.handle(), s.one(), w.d, weight.data_ptr(), dy.d,
                                            grad_out.data_ptr(), conv.d, algo, ws.get(), ws.size(),
                                            s.zero(), dx.d, grad_input.data_ptr());
      },
      &why);
  lease.release();
  counted(ran, "backward_input", call, why,
          [&] { conv_composite::backward_input(grad_input, grad_out, weight, p); });
}

void conv2d_backward_weight_cuda(const Tensor& grad_weight, const Tensor& grad_out,
                                 const Tensor& input, const Conv2dParams& p) {
  if (grad_weight.numel() == 0) return;
  const int device = grad_weight.device().index();
  DeviceGuard guard(device);
  if (grad_out.numel() == 0 || input.numel() == 0) {
    zero_fill(grad_weight);
    return;
  }
  const DType dt = grad_weight.dtype();
  const ConvCall call{"conv2d backward weight", input, grad_weight, grad_out, dt, p};
  const TensorDesc x(input), dy(grad_out);
  const FilterDesc dw(grad_weight);
  const ConvDesc conv(call);
  CudnnLease lease(device);
  constexpr int kMaxAlgos = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
  int count = 0;
  MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(lease.handle(), x.d, dy.d, conv.d,
                                                               dw.d, kMaxAlgos, &count, perf));
  const Scaling s(call.dt);
  std::string why;
  const bool ran = run_first_usable(
      call, perf, count, conv, grad_weight.device(),
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(lease.handle(), x.d, dy.d, conv.d,
                                                              dw.d, algo, bytes);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, const Workspace& ws) {
        return cudnnConvolutionBackwardFilter(lease.handle(), s.one(), x.d, input.data_ptr(), dy.d,
                                              grad_out.data_ptr(), conv.d, algo, ws.get(),
                                              ws.size(), s.zero(), dw.d, grad_weight.data_ptr());
      },
      &why);
  lease.release();
  counted(ran, "backward_weight", call, why,
          [&] { conv_composite::backward_weight(grad_weight, grad_out, input, p); });
}

}  // namespace

MT_REGISTER_KERNEL(conv2d_im2col_kernel, kCUDA, &conv2d_im2col_cuda);
MT_REGISTER_KERNEL(conv2d_col2im_kernel, kCUDA, &conv2d_col2im_cuda);
MT_REGISTER_KERNEL(conv2d_forward_kernel, kCUDA, &conv2d_forward_cuda);
MT_REGISTER_KERNEL(conv2d_backward_input_kernel, kCUDA, &conv2d_backward_input_cuda);
MT_REGISTER_KERNEL(conv2d_backward_weight_kernel, kCUDA, &conv2d_backward_weight_cuda);

}  // namespace mantissa::cuda
