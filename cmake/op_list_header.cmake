# Expands a file of the op list (engine/tensor_methods.in) with the C++ preprocessor into a
# header, and writes the header only when its text changes, so that the files including it are
# recompiled only then (the build's custom command is restat: an unchanged header stops there).
# cmake -DCOMPILER=... -DSOURCE_DIR=... -DINPUT=... -DOUTPUT=... -P op_list_header.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var COMPILER SOURCE_DIR INPUT OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "op_list_header.cmake: ${var} not set")
  endif()
endforeach()
execute_process(
  COMMAND ${COMPILER} -std=c++20 -E -P -x c++ -I${SOURCE_DIR} ${INPUT}
  OUTPUT_VARIABLE text
  ERROR_VARIABLE errors
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "op_list_header.cmake: expanding ${INPUT} failed:\n${errors}")
endif()
# The preprocessor keeps blank lines where the list has entries without output (ops without a
# method, comments): dropped, so that such an entry added or removed leaves the header unchanged.
string(REGEX REPLACE "\n[ \t\r\n]*\n" "\n" text "${text}")
string(REGEX REPLACE "^[ \t\r\n]+" "" text "${text}")
file(RELATIVE_PATH input_name ${SOURCE_DIR} ${INPUT})
set(content "// Generated from ${input_name} by cmake/op_list_header.cmake: do not edit.\n${text}")
set(old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUTPUT} "${content}")
endif()
