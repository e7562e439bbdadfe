// Check macros for CUDA runtime, cuBLAS, cuDNN and NCCL calls. A failing call throws
// mantissa::Error naming the call, file:line and the library's own description of the status;
// nothing aborts.
//
// The cuBLAS/cuDNN/NCCL macros take the status as an int so that this header needs only the CUDA
// runtime: the status strings are looked up out of line, in cuda_check.cpp.
#pragma once

#include <cuda_runtime.h>

namespace mantissa::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int status, const char* call, const char* file, int line);
// Defined with the NCCL process group (distributed/nccl_process_group.cpp), built with NCCL only.
[[noreturn]] void throw_nccl_error(int status, const char* call, const char* file, int line);
}  // namespace mantissa::cuda::detail

#define MT_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t mt_cuda_status_ = (call);                                               \
    if (mt_cuda_status_ != cudaSuccess) [[unlikely]] {                                        \
      ::mantissa::cuda::detail::throw_cuda_error(mt_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

// cublasStatus_t: CUBLAS_STATUS_SUCCESS is 0.
#define MT_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                            \
    const int mt_cublas_status_ = static_cast<int>(call);                                         \
    if (mt_cublas_status_ != 0) [[unlikely]] {                                                    \
      ::mantissa::cuda::detail::throw_cublas_error(mt_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

// cudnnStatus_t: CUDNN_STATUS_SUCCESS is 0.
#define MT_CUDNN_CHECK(call)                                                                    \
  do {                                                                                          \
    const int mt_cudnn_status_ = static_cast<int>(call);                                        \
    if (mt_cudnn_status_ != 0) [[unlikely]] {                                                   \
      ::mantissa::cuda::detail::throw_cudnn_error(mt_cudnn_status_, #call, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)

// ncclResult_t: ncclSuccess is 0.
#define MT_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    const int mt_nccl_status_ = static_cast<int>(call);                                       \
    if (mt_nccl_status_ != 0) [[unlikely]] {                                                  \
      ::mantissa::cuda::detail::throw_nccl_error(mt_nccl_status_, #call, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

// After a kernel launch: reports a bad launch configuration or an earlier asynchronous fault.
#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())
