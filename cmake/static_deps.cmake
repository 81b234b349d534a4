# SPDX-License-Identifier: Apache-2.0
# Makes a static dsec-vmm possible with Debian's packages:
# - Abseil ships both .so and .a, but its CMake targets name the .so; point
#   every absl:: target at its archive instead.
# - spdlog and fmt ship only shared libraries; use their header-only targets
#   (DSEC_LOG_DEPS) everywhere so nothing links libspdlog.so/libfmt.so.
if(DSEC_STATIC_BINARY)
  get_target_property(_dsec_absl_so absl::base IMPORTED_LOCATION_NONE)
  get_filename_component(_dsec_absl_dir "${_dsec_absl_so}" DIRECTORY)
  file(GLOB _dsec_absl_archives "${_dsec_absl_dir}/libabsl_*.a")
  foreach(_archive IN LISTS _dsec_absl_archives)
    get_filename_component(_name "${_archive}" NAME_WE)
    string(REGEX REPLACE "^libabsl_" "" _name "${_name}")
    if(TARGET absl::${_name})
      set_target_properties(absl::${_name} PROPERTIES
        IMPORTED_LOCATION_NONE "${_archive}"
        IMPORTED_SONAME_NONE "")
    endif()
  endforeach()
  # spdlog's header-only target still links the shared fmt; make it use
  # fmt's header-only target too.
  set_target_properties(spdlog::spdlog_header_only PROPERTIES
    INTERFACE_LINK_LIBRARIES "Threads::Threads;fmt::fmt-header-only")
  set(DSEC_LOG_DEPS spdlog::spdlog_header_only fmt::fmt-header-only)
else()
  set(DSEC_LOG_DEPS spdlog::spdlog)
endif()

# liburing: Debian ships liburing.a too; the pkg-config imported target names
# the .so, which a -static link cannot use.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
if(DSEC_STATIC_BINARY)
  find_library(DSEC_LIBURING_ARCHIVE NAMES liburing.a REQUIRED)
  add_library(dsec_liburing INTERFACE)
  target_link_libraries(dsec_liburing INTERFACE ${DSEC_LIBURING_ARCHIVE})
  target_include_directories(dsec_liburing INTERFACE ${LIBURING_INCLUDE_DIRS})
else()
  add_library(dsec_liburing INTERFACE)
  target_link_libraries(dsec_liburing INTERFACE PkgConfig::LIBURING)
endif()

# libseccomp (the container tier's filters, the monitor's jail): a static
# link needs its archive (the imported target names the .so).
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
if(DSEC_STATIC_BINARY)
  find_library(DSEC_SECCOMP_ARCHIVE NAMES libseccomp.a REQUIRED)
  add_library(dsec_seccomp INTERFACE)
  target_link_libraries(dsec_seccomp INTERFACE ${DSEC_SECCOMP_ARCHIVE})
  target_include_directories(dsec_seccomp INTERFACE ${SECCOMP_INCLUDE_DIRS})
else()
  add_library(dsec_seccomp INTERFACE)
  target_link_libraries(dsec_seccomp INTERFACE PkgConfig::SECCOMP)
endif()
