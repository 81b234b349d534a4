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

# Sandbox networking's pkg-config libraries (libbpf, libnl-route-3, ldns):
# Debian ships their archives too, but pkg_check_modules' imported targets
# name the .so. dsec_pkg_use_archives(PREFIX [EXTRA...]), called where
# PkgConfig::PREFIX is made, points it at the archives `pkg-config --static
# --libs` lists (PREFIX_STATIC_LIBRARIES), each an imported target that
# links the next and the last EXTRA (what a .pc file leaves out: ldns's
# libcrypto), so that CMake keeps every archive before what it needs even
# where another component links the same library earlier. C library parts
# (pthread, dl, m, rt) stay -l flags. Without DSEC_STATIC_BINARY it does
# nothing.
function(dsec_pkg_use_archives prefix)
  if(NOT DSEC_STATIC_BINARY)
    return()
  endif()
  set(archives "")
  set(flags "")
  foreach(name IN LISTS ${prefix}_STATIC_LIBRARIES)
    if(name MATCHES "^(pthread|dl|m|rt)$")
      list(APPEND flags ${name})
      continue()
    endif()
    find_library(DSEC_ARCHIVE_${name} NAMES lib${name}.a HINTS ${${prefix}_STATIC_LIBRARY_DIRS})
    if(NOT DSEC_ARCHIVE_${name})
      message(FATAL_ERROR "static dsec-vmm: lib${name}.a (for ${prefix}) not found; "
                          "configure with -DDSEC_STATIC_BINARY=OFF for a dynamic build")
    endif()
    list(APPEND archives ${name})
  endforeach()
  # Last first: each links what follows it.
  set(next "${ARGN};${flags}")
  list(REVERSE archives)
  foreach(name IN LISTS archives)
    set(t dsec_archive_${prefix}_${name})
    add_library(${t} STATIC IMPORTED)
    set_target_properties(${t} PROPERTIES IMPORTED_LOCATION "${DSEC_ARCHIVE_${name}}"
                                          INTERFACE_LINK_LIBRARIES "${next}")
    set(next ${t})
  endforeach()
  set_target_properties(PkgConfig::${prefix} PROPERTIES INTERFACE_LINK_LIBRARIES "${next}")
endfunction()
