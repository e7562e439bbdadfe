# The Tensor methods header follows the op list's methods and nothing else: made from a copy of
# the list, it equals the build's header; an op without a method (and a comment) added to the
# list leaves it byte for byte as it was and unwritten (its time set back to 2000 stays); an op
# with a method adds that method's declaration.
# cmake -DCOMPILER=... -DSOURCE_DIR=... -DBUILT=... -DWORK_DIR=... -P op_list_header_check.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/engine)
file(COPY ${SOURCE_DIR}/engine/ops.def ${SOURCE_DIR}/engine/activations.def
          ${SOURCE_DIR}/engine/tensor_methods.in DESTINATION ${WORK_DIR}/engine)
set(list ${WORK_DIR}/engine/ops.def)
file(READ ${list} original)
set(out ${WORK_DIR}/tensor_methods.h)
function(make_header)
  execute_process(COMMAND ${CMAKE_COMMAND} -DCOMPILER=${COMPILER} -DSOURCE_DIR=${WORK_DIR}
                          -DINPUT=${WORK_DIR}/engine/tensor_methods.in -DOUTPUT=${out}
                          -P ${SOURCE_DIR}/cmake/op_list_header.cmake
                  RESULT_VARIABLE rc ERROR_VARIABLE errors)
  if(rc)
    message(FATAL_ERROR "making the header failed: ${errors}")
  endif()
endfunction()
# An entry added just before the list's closing #undef lines.
function(add_entries text)
  string(FIND "${original}" "#undef MT_OP\n" at REVERSE)
  if(at LESS 0)
    message(FATAL_ERROR "engine/ops.def has no closing #undef MT_OP")
  endif()
  string(SUBSTRING "${original}" 0 ${at} head)
  string(SUBSTRING "${original}" ${at} -1 tail)
  file(WRITE ${list} "${head}${text}${tail}")
endfunction()

make_header()
file(READ ${out} made)
file(READ ${BUILT} built)
if(NOT made STREQUAL built)
  message(FATAL_ERROR "the header made from engine/ops.def differs from the build's ${BUILT}")
endif()
string(FIND "${made}" "Tensor sum(" has_sum)
if(has_sum LESS 0)
  message(FATAL_ERROR "the header declares no sum method:\n${made}")
endif()

add_entries("// an op without a method\nMT_OP(no_method_op, None, No, \"\")\nMT_SIG(no_method_op, Tensor, (const Tensor& x, double p MT_DEFAULT(2)), (x, p))\n\n")
execute_process(COMMAND touch -d 2000-01-01 ${out} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "touch -d failed on ${out}")
endif()
make_header()
file(READ ${out} after)
file(TIMESTAMP ${out} year "%Y")
if(NOT after STREQUAL made)
  message(FATAL_ERROR "an op without a method changed the Tensor methods header")
elseif(NOT year STREQUAL "2000")
  message(FATAL_ERROR "an op without a method rewrote the Tensor methods header (same text): "
                      "the files including engine/tensor.h would be recompiled")
endif()

add_entries("MT_OP(method_op, None, No, \"\")\nMT_SIG_METHOD(method_op, Tensor, (const Tensor& x, double p MT_DEFAULT(2)), (x, p))\n")
make_header()
file(READ ${out} after)
string(FIND "${after}" "Tensor method_op(double p = 2) const;" at)
if(after STREQUAL made OR at LESS 0)
  message(FATAL_ERROR "an op with a method did not declare it:\n${after}")
endif()
