#include "kernels/cpu/gemm/blas.h"

#include <algorithm>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "engine/cpu_matmul_paths.h"
#include "engine/error.h"
#include "engine/fast_path_stats.h"
#include "kernels/cpu/gemm/onednn_matmul.h"
#include "kernels/cpu/worker_pool.h"

namespace mantissa::cpu {
namespace {

// Multiply-adds from which a product is split across the pool: below it a wake-up of the pool's
// workers costs about as much as the share they would take.
constexpr int64_t kSplitMacs = int64_t(1) << 20;
// Slab boundaries fall on multiples of this, so every slab keeps OpenBLAS's register blocking.
constexpr int64_t kSlabAlign = 16;

void keep_openblas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    // An OpenBLAS built on OpenMP sets OpenMP's thread count too: the pool's count is read
    // first, and OpenMP's restored after.
    (void)pool_threads();
#if defined(_OPENMP)
    const int omp_threads = omp_get_max_threads();
#endif
    openblas_set_num_threads(1);
#if defined(_OPENMP)
    omp_set_num_threads(omp_threads);
#endif
  });
}

// oneDNN instead of OpenBLAS when OpenBLAS's kernels predate the CPU (engine/cpu_matmul_paths.h).
// False when oneDNN refused the layout (counted; strict fast paths throw).
bool call_onednn(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc) {
  if (K <= 0) return false;  // C = beta C: OpenBLAS's job, not a refusal
  OneDnnProduct p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a = {A, 0, ta == CblasTrans, lda};
  p.b = {B, 0, tb == CblasTrans, ldb};
  p.c = C;
  p.ldc = ldc;
  p.alpha = alpha;
  p.beta = beta;
  if (onednn_matmul(p) != OneDnnRun::Refused) {
    ::mantissa::detail::count_fast_path("cpu.float32_gemm", "onednn");
    return true;
  }
  if (::mantissa::detail::count_fallback("cpu.float32_gemm", "NoKernel", /*refusal=*/true)) {
    MT_THROW("float32 GEMM: oneDNN refused [", M, ", ", K, "] x [", K, ", ", N, "] (A ",
             ta == CblasTrans ? "transposed" : "row-major", ", ld ", lda, "; B ",
             tb == CblasTrans ? "transposed" : "row-major", ", ld ", ldb,
             "); strict fast paths are on (MANTISSA_STRICT_FAST_PATHS=1), without them "
             "OpenBLAS would run it");
  }
  return false;
}

inline void call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc) {
  if (cpu_float32_gemm_library() == Float32GemmLibrary::OneDnn &&
      call_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
  cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta,
              C, int(ldc));
}
inline void call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
                 double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                 double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta,
              C, int(ldc));
}

template <typename T>
void split_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, T alpha,
                const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  keep_openblas_single_threaded();
  if (M <= 0 || N <= 0) return;
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t units = (extent + kSlabAlign - 1) / kSlabAlign;
  const int64_t tasks =
      M * N * K >= kSplitMacs ? std::min<int64_t>(pool_threads(), units) : int64_t(1);
  if (tasks <= 1) return call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const int64_t per_task = (units + tasks - 1) / tasks * kSlabAlign;
  parallel_in_pool(tasks, [&](int64_t t) {
    const int64_t b = t * per_task, e = std::min(extent, b + per_task);
    if (b >= e) return;
    if (by_rows) {
      // Rows b..e of op(A): rows of A, or columns of A when it is transposed ([K, M]).
      const T* a = ta == CblasNoTrans ? A + b * lda : A + b;
      call(ta, tb, e - b, N, K, alpha, a, lda, B, ldb, beta, C + b * ldc, ldc);
    } else {
      // Columns b..e of op(B): columns of B, or rows of B when it is transposed ([N, K]).
      const T* bb = tb == CblasNoTrans ? B + b : B + b * ldb;
      call(ta, tb, M, e - b, K, alpha, A, lda, bb, ldb, beta, C + b, ldc);
    }
  });
}

}  // namespace

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  split_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
               double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
               double beta, double* C, int64_t ldc) {
  split_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mantissa::cpu
