# Finds cuDNN explicitly (it is not part of CUDAToolkit) and defines the target mantissa_cudnn.
find_path(CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib)
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
  message(FATAL_ERROR
    "mantissa: the CUDA backend needs cuDNN 9, which was not found.\n"
    "  Install it (Debian/Ubuntu with NVIDIA's repository: apt-get install libcudnn9-dev-cuda-13,\n"
    "  or unpack NVIDIA's cuDNN archive and pass -DCUDNN_ROOT=/path/to/cudnn),\n"
    "  or configure a CPU-only build with -DMANTISSA_CUDA=OFF.")
endif()
file(READ ${CUDNN_INCLUDE_DIR}/cudnn_version.h _cudnn_version_h)
string(REGEX MATCH "#define CUDNN_MAJOR ([0-9]+)" _ ${_cudnn_version_h})
set(CUDNN_VERSION_MAJOR ${CMAKE_MATCH_1})
string(REGEX MATCH "#define CUDNN_MINOR ([0-9]+)" _ ${_cudnn_version_h})
set(CUDNN_VERSION "${CUDNN_VERSION_MAJOR}.${CMAKE_MATCH_1}")
if(CUDNN_VERSION_MAJOR LESS 9)
  message(FATAL_ERROR "mantissa: cuDNN ${CUDNN_VERSION} found at ${CUDNN_LIBRARY}, but cuDNN 9 or newer is required.")
endif()
add_library(mantissa_cudnn INTERFACE IMPORTED)
target_include_directories(mantissa_cudnn INTERFACE ${CUDNN_INCLUDE_DIR})
target_link_libraries(mantissa_cudnn INTERFACE ${CUDNN_LIBRARY})
