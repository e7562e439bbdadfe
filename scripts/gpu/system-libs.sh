# Sourced by stage.sh and check-stage.sh: the shared libraries a GPU stage may leave to the GPU
# machine, by soname. Everything else a staged file needs must be in the stage.
#   glibc's own libraries: every Linux machine has them (the build's GLIBC 2.36 symbols need
#     glibc >= 2.34 there; docs/gpu-runs.md);
#   the C++ runtime (libstdc++, libgcc_s): the machine's, or the build's copy in lib/compat/,
#     which run.sh puts first when the machine's are older;
#   the CUDA driver and libraries: the machine's driver, and cudart, cuBLAS, cuBLASLt, cuDNN and
#     NCCL from its PyTorch environment's nvidia-* wheels (run.sh puts them on the library path).
# is_glibc SONAME, is_cxx_runtime SONAME, is_cuda_library SONAME: exit 0 when it is one.
is_glibc() {
  [[ $1 =~ ^(ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1)$ ]]
}
is_cxx_runtime() {
  [[ $1 =~ ^(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$ ]]
}
is_cuda_library() {
  [[ $1 =~ ^lib(cuda|nvidia-ml|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc|nvrtc-builtins|nvJitLink)\.so(\.[0-9]+)*$ ]]
}
