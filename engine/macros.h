// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MT_HOST_DEVICE __host__ __device__
#define MT_DEVICE __device__
#else
#define MT_HOST_DEVICE
#define MT_DEVICE
#endif

#define MT_CONCAT_IMPL(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_IMPL(a, b)
#define MT_UNIQUE_NAME(prefix) MT_CONCAT(prefix, __COUNTER__)
