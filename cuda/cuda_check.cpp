#include "cuda/cuda_check.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include "engine/error.h"

namespace mantissa::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clear the runtime's last-error slot so that a later, unrelated MT_CUDA_CHECK_LAUNCH does not
  // report this failure again (sticky errors such as a device fault stay set regardless).
  (void)cudaGetLastError();
  MT_THROW("CUDA error: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), " = ",
           static_cast<int>(err), ") in ", call, " at ", file, ":", line);
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  MT_THROW("cuBLAS error: ", cublasGetStatusString(static_cast<cublasStatus_t>(status)), " (",
           status, ") in ", call, " at ", file, ":", line);
}

void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  MT_THROW("cuDNN error: ", cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), " (", status,
           ") in ", call, " at ", file, ":", line);
}

}  // namespace mantissa::cuda::detail
