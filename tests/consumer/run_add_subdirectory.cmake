# Configures, builds and runs the consumer with mantissa pulled in by add_subdirectory().
file(REMOVE_RECURSE ${WORK_DIR})
# Same sources and flags as the enclosing build: let ccache reuse its objects even in builds
# with debug info (which otherwise hash the build directory).
set(ENV{CCACHE_NOHASHDIR} true)
set(args -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR} -G Ninja -DMANTISSA_SOURCE_DIR=${MANTISSA_SOURCE_DIR}
         -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DMANTISSA_CUDA=${MANTISSA_CUDA}
         -DMANTISSA_WERROR=${WERROR} -DMANTISSA_SANITIZE=${SANITIZE})
if(CUDA_ARCHITECTURES)
  list(APPEND args -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer program failed (${rc})")
endif()
