// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MT_HOST_DEVICE __host__ __device__
#define MT_DEVICE __device__
#else
#define MT_HOST_DEVICE
#define MT_DEVICE
#endif

// Inlined whatever the compiler's size heuristics say: for small math functions called in loops
// that must vectorise (a call keeps a loop scalar; in a shared library it also goes through the
// PLT).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define MT_FORCE_INLINE __forceinline__
#else
#define MT_FORCE_INLINE __attribute__((always_inline)) inline
#endif

// std:: math on the host (float overloads); the CUDA math library's overloads on the device.
// The includer includes <cmath>.
#if defined(__CUDA_ARCH__)
#define MT_MATH(fn) ::fn
#else
#define MT_MATH(fn) std::fn
#endif

#define MT_CONCAT_IMPL(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_IMPL(a, b)
#define MT_UNIQUE_NAME(prefix) MT_CONCAT(prefix, __COUNTER__)
