# SPDX-License-Identifier: Apache-2.0
# dsec_nested_test(NAME name [TIMEOUT seconds] [LABELS label...]
#                  [SKIP_REGULAR_EXPRESSION regex] [BED_ARGS arg...]
#                  [WORKING_DIRECTORY dir] COMMAND command arg...)
#
# Registers a ctest test that runs COMMAND inside L1 of the nested bed
# (tests/nested/bed.py run: QEMU TCG with an SVM CPU, L1's /dev/kvm has
# hardware-virtualisation semantics). Label "nested" (plus LABELS); exit 77
# (bed.py: no QEMU, no SVM, no kernel package, no /dev/kvm in L1) is a skip.
# The bed's own deadline is TIMEOUT minus 60 s, so that it, not ctest, stops
# QEMU and prints L1's console. Each L1 has one vCPU (bed.py's default), so
# each test takes one processor and two beds may run at once. COMMAND runs in L1 with cwd =
# WORKING_DIRECTORY (default: this test's binary dir) and sees the host's
# file system at the same paths (build tree, ~/.cache/dsec-vmm); generator
# expressions such as $<TARGET_FILE:dsec-vmm> work.
#
# Include this file to call it from any CMakeLists.txt:
#   include(${PROJECT_SOURCE_DIR}/tests/nested/DsecNested.cmake)
set(DSEC_NESTED_DIR ${CMAKE_CURRENT_LIST_DIR})
set(DSEC_NESTED_PYTHON /usr/bin/python3 CACHE FILEPATH "python3 (3.11, Debian) for tests/nested/bed.py")

function(dsec_nested_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT;SKIP_REGULAR_EXPRESSION;WORKING_DIRECTORY"
                        "COMMAND;LABELS;BED_ARGS" ${ARGN})
  if(NOT A_NAME OR NOT A_COMMAND)
    message(FATAL_ERROR "dsec_nested_test: NAME and COMMAND are required")
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 900)
  endif()
  if(NOT A_WORKING_DIRECTORY)
    set(A_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  math(EXPR bed_timeout "${A_TIMEOUT} - 60")
  # Label "nested", unless LABELS names the test's own (then only those:
  # tools/test.sh's default run leaves it out).
  if(A_LABELS)
    set(_labels "${A_LABELS}")
  else()
    set(_labels nested)
  endif()
  add_test(NAME ${A_NAME}
           COMMAND ${DSEC_NESTED_PYTHON} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/bed.py run --timeout ${bed_timeout}
                   ${A_BED_ARGS} -- ${A_COMMAND}
           WORKING_DIRECTORY ${A_WORKING_DIRECTORY})
  set_tests_properties(${A_NAME} PROPERTIES
                       LABELS "${_labels}"
                       SKIP_RETURN_CODE 77
                       TIMEOUT ${A_TIMEOUT}
                       PROCESSORS 1
                       # ctest starts tests in decreasing COST when it has
                       # no timings of its own (a fresh checkout, as in CI):
                       # beds first, so that the many short tests fill the
                       # other slot at the end instead of a bed at the end
                       # running alone.
                       COST ${A_TIMEOUT})
  if(A_SKIP_REGULAR_EXPRESSION)
    set_tests_properties(${A_NAME} PROPERTIES SKIP_REGULAR_EXPRESSION "${A_SKIP_REGULAR_EXPRESSION}")
  endif()
endfunction()
