# Installs the already-built mantissa into a scratch prefix, then configures, builds and runs a
# consumer that finds it with find_package(mantissa).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${MANTISSA_BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()

# The installed headers are the public API (CMakeLists.txt's MANTISSA_PUBLIC_HEADERS): every
# header they include is installed with them, and these internals are not.
set(include_dir ${WORK_DIR}/prefix/include)
set(internals engine/amp_kernel_tables.h engine/backend_hooks.h engine/cpu_allocator.h
              engine/dispatch.h engine/kernel_tables.h
              engine/philox.h autograd/autocast_wrapper.h autograd/view_history.h autograd/ops
              cuda/allocator.h cuda/block_allocator.h cuda/cublas_handle.h cuda/cuda_check.h
              cuda/current_stream.h cuda/device_guard.h cuda/pinned_allocator.h
              kernels runner/training/checkpoint_json.h runner/files/json.h
              runner/training/metrics_json.h runner/files/run_lock.h runner/files/text.h)
foreach(internal ${internals})
  if(EXISTS ${include_dir}/mantissa/${internal})
    message(FATAL_ERROR "cmake --install installed the internal ${internal}")
  endif()
endforeach()
file(GLOB_RECURSE installed_headers RELATIVE ${include_dir} ${include_dir}/*.h)
list(LENGTH installed_headers count)
if(count LESS 10)
  message(FATAL_ERROR "cmake --install installed only ${count} headers under ${include_dir}")
endif()
foreach(header ${installed_headers})
  file(STRINGS ${include_dir}/${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line ${includes})
    string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" included "${line}")
    if(NOT EXISTS ${include_dir}/mantissa/${included} AND NOT EXISTS ${include_dir}/${included})
      message(FATAL_ERROR "installed ${header} includes ${included}, which is not installed: add "
                          "it to MANTISSA_PUBLIC_HEADERS (CMakeLists.txt) or drop the include")
    endif()
  endforeach()
endforeach()

set(extra)
if(SANITIZE)
  # A sanitized libmantissa needs the sanitizer runtimes linked into the program itself.
  list(APPEND extra "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release ${extra}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer program failed (${rc})")
endif()
