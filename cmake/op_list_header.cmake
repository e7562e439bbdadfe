# Expands a file of the op list (engine/tensor_methods.in, engine/kernel_lists.in) with the C++
# preprocessor into a header, and writes the header only when its text changes, so that the files
# including it are recompiled only then (the build's custom command is restat: an unchanged
# header stops there). FORM lists: the expansion is lines "MT_KERNEL_LIST_ENTRY LIST table
# Functor", written as one macro per list, #define MT_FORALL_LIST_OPS(X) X(table, Functor) ...
# cmake -DCOMPILER=... -DSOURCE_DIR=... -DINPUT=... -DOUTPUT=... [-DFORM=lists] -P op_list_header.cmake
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
if(FORM STREQUAL "lists")
  string(REPLACE "\n" ";" lines "${text}")
  set(lists "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^MT_KERNEL_LIST_ENTRY ([A-Z_]+) ([a-z0-9_]+) ([A-Za-z0-9_]+)$")
      set(list_name ${CMAKE_MATCH_1})
      if(NOT list_name IN_LIST lists)
        list(APPEND lists ${list_name})
        set(entries_${list_name} "")
      endif()
      string(APPEND entries_${list_name} " \\\n  X(${CMAKE_MATCH_2}, ${CMAKE_MATCH_3})")
    elseif(NOT line STREQUAL "")
      message(FATAL_ERROR "op_list_header.cmake: ${INPUT} expanded to a line that is not one "
                          "MT_KERNEL entry (one MT_KERNEL per line in engine/ops.def): ${line}")
    endif()
  endforeach()
  set(text "#pragma once\n")
  foreach(list_name IN LISTS lists)
    string(APPEND text "#define MT_FORALL_${list_name}_OPS(X)${entries_${list_name}}\n")
  endforeach()
endif()
file(RELATIVE_PATH input_name ${SOURCE_DIR} ${INPUT})
set(content "// Generated from ${input_name} by cmake/op_list_header.cmake: do not edit.\n${text}")
set(old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUTPUT} "${content}")
endif()
