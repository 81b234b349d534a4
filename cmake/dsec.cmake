# SPDX-License-Identifier: Apache-2.0
# Helpers every component uses, so that flags, include roots and test labels
# are set in one place.

set(DSEC_HOST_COMPILE_OPTIONS "")
set(DSEC_HOST_LINK_OPTIONS "")
if(DSEC_SANITIZE)
  list(APPEND DSEC_HOST_COMPILE_OPTIONS -fsanitize=${DSEC_SANITIZE} -fno-omit-frame-pointer)
  list(APPEND DSEC_HOST_LINK_OPTIONS -fsanitize=${DSEC_SANITIZE})
endif()
if(DSEC_FUZZ)
  list(APPEND DSEC_HOST_COMPILE_OPTIONS -fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer)
  list(APPEND DSEC_HOST_LINK_OPTIONS -fsanitize=address)
endif()

# Every function and object in its own section, so that the static dsec-vmm
# can drop what no code path reaches (--gc-sections in cmd/): one monitor
# process runs per VM, and its resident text is a per-VM cost.
list(APPEND DSEC_HOST_COMPILE_OPTIONS -ffunction-sections -fdata-sections)

function(_dsec_host_target target)
  target_compile_options(${target} PRIVATE ${DSEC_HOST_COMPILE_OPTIONS})
  target_link_options(${target} PRIVATE ${DSEC_HOST_LINK_OPTIONS})
endfunction()

# dsec_cc_library(NAME dsec_x SRCS a.cc b.cc DEPS dsec_y absl::status)
function(dsec_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  if(A_SRCS)
    add_library(${A_NAME} STATIC ${A_SRCS})
    target_include_directories(${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
    _dsec_host_target(${A_NAME})
  else()
    add_library(${A_NAME} INTERFACE)
    target_include_directories(${A_NAME} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${A_NAME} INTERFACE ${A_DEPS})
  endif()
endfunction()

# dsec_cc_binary(NAME x SRCS main.cc DEPS ...)
function(dsec_cc_binary)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  _dsec_host_target(${A_NAME})
endfunction()

# dsec_cc_test(NAME foo_test SRCS foo_test.cc DEPS dsec_foo [LABEL unit|integration]
#              [KVM] [TIMEOUT seconds])
# Unit tests default to the "unit" label. KVM: the test boots guests through
# /dev/kvm; its name joins the global list DSEC_KVM_TESTS, which
# tests/nested runs inside L1 of the nested bed on hosts that have no
# /dev/kvm of their own (a second label would not do: gtest_discover_tests
# splits a list-valued LABELS into separate properties). Tests are
# discovered when ctest runs (PRE_TEST), so building never executes
# guest-touching code.
function(dsec_cc_test)
  if(DSEC_FUZZ)
    return()
  endif()
  cmake_parse_arguments(A "KVM" "NAME;LABEL;TIMEOUT" "SRCS;DEPS" ${ARGN})
  if(NOT A_LABEL)
    set(A_LABEL unit)
  endif()
  if(A_KVM)
    set_property(GLOBAL APPEND PROPERTY DSEC_KVM_TESTS ${A_NAME})
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  _dsec_host_target(${A_NAME})
  gtest_discover_tests(${A_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS ${A_LABEL} TIMEOUT ${A_TIMEOUT}
    TEST_PREFIX "${A_NAME}.")
endfunction()

# dsec_fuzzer(NAME foo_fuzzer SRCS foo_fuzzer.cc DEPS dsec_foo)
# Only built in a DSEC_FUZZ tree; tools/test.sh runs each briefly.
function(dsec_fuzzer)
  if(NOT DSEC_FUZZ)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_include_directories(${A_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  target_compile_options(${A_NAME} PRIVATE -fsanitize=fuzzer,address)
  target_link_options(${A_NAME} PRIVATE -fsanitize=fuzzer,address)
  set_property(GLOBAL APPEND PROPERTY DSEC_FUZZERS ${A_NAME})
endfunction()
