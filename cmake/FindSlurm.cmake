# SPDX-License-Identifier: Apache-2.0
# cmake/FindSlurm.cmake - the Slurm that exitpolicy is built for: its headers,
# its libslurm, its plugin directory and its release. A SPANK plugin loads only
# into the Slurm release (major.minor) whose headers it was built with, so
# everything here comes from one installation:
#
#   -DSLURM_ROOT=DIR   the prefix Slurm was installed into (./configure
#                      --prefix=DIR, or /usr for Slurm's RPMs): its slurm.pc
#                      when it has one, else DIR/include and DIR/lib64|lib;
#                      nothing outside DIR is looked at
#   (unset)            the system's default paths, as Debian's libslurm-dev
#                      installs them
#
# Sets SLURM_INCLUDE_DIR, SLURM_LIBRARY (may be empty: the plugin does not link
# it), SLURM_PLUGIN_DIR (the directory holding libslurmfull.so, Slurm's
# PluginDir default; -DSLURM_PLUGIN_DIR=DIR overrides), SLURM_VERSION
# (26.05.3), SLURM_RELEASE (26.05), slurm_major and slurm_minor (two digits).
# A missing header, or a Slurm older than 22.05, is one fatal error that says
# what to do.

set(SLURM_ROOT "" CACHE PATH "The prefix of the Slurm installation to build for (default: the system's)")
set(slurm_min_release 22.05)

# A changed SLURM_ROOT finds everything again (but a plugin directory given
# with -DSLURM_PLUGIN_DIR).
if(NOT "${SLURM_ROOT}" STREQUAL "${SLURM_ROOT_FOUND_FOR}")
  unset(SLURM_INCLUDE_DIR CACHE)
  unset(SLURM_LIBRARY CACHE)
  unset(SLURM_PC CACHE)
  if("${SLURM_PLUGIN_DIR}" STREQUAL "${SLURM_PLUGIN_DIR_FOUND}")
    unset(SLURM_PLUGIN_DIR CACHE)
  endif()
endif()
set(SLURM_ROOT_FOUND_FOR "${SLURM_ROOT}" CACHE INTERNAL "")

set(slurm_where "the system's default paths")
set(slurm_search "")
if(SLURM_ROOT)
  get_filename_component(SLURM_ROOT "${SLURM_ROOT}" ABSOLUTE)
  if(NOT IS_DIRECTORY "${SLURM_ROOT}")
    message(FATAL_ERROR "exitpolicy: -DSLURM_ROOT=${SLURM_ROOT} is not a directory: give the prefix "
      "Slurm was installed into (the directory holding include/slurm/spank.h).")
  endif()
  set(slurm_where "SLURM_ROOT=${SLURM_ROOT}")
  set(slurm_search NO_DEFAULT_PATH)
  # slurm.pc (./configure --enable-pkgconfig, Slurm's RPMs) says where the
  # headers and the library are.
  find_file(SLURM_PC slurm.pc PATHS ${SLURM_ROOT}
    PATH_SUFFIXES lib64/pkgconfig lib/pkgconfig lib/${CMAKE_LIBRARY_ARCHITECTURE}/pkgconfig share/pkgconfig
    NO_DEFAULT_PATH DOC "Slurm's pkg-config file")
  set(slurm_pc_includedir "")
  set(slurm_pc_libdir "")
  if(SLURM_PC AND PKG_CONFIG_EXECUTABLE)
    execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --variable=includedir ${SLURM_PC}
      OUTPUT_VARIABLE slurm_pc_includedir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --variable=libdir ${SLURM_PC}
      OUTPUT_VARIABLE slurm_pc_libdir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(SLURM_INCLUDE_DIR slurm/spank.h PATHS ${slurm_pc_includedir} ${SLURM_ROOT}/include NO_DEFAULT_PATH)
  find_library(SLURM_LIBRARY slurm
    PATHS ${slurm_pc_libdir} ${SLURM_ROOT}/lib64 ${SLURM_ROOT}/lib ${SLURM_ROOT}/lib/${CMAKE_LIBRARY_ARCHITECTURE}
    NO_DEFAULT_PATH)
else()
  find_path(SLURM_INCLUDE_DIR slurm/spank.h)
  find_library(SLURM_LIBRARY slurm)
endif()

if(NOT SLURM_INCLUDE_DIR OR NOT EXISTS "${SLURM_INCLUDE_DIR}/slurm/slurm_version.h")
  message(FATAL_ERROR "exitpolicy: no Slurm headers (slurm/spank.h, slurm/slurm_version.h) in ${slurm_where}. "
    "Install Slurm's headers (Debian: apt-get install libslurm-dev; Slurm's RPMs: slurm-devel), or give "
    "the prefix of the Slurm to build for: cmake -DSLURM_ROOT=/opt/slurm (the directory of its include/slurm).")
endif()

# The release: SLURM_VERSION_NUMBER is 0xMMmmuu (Slurm's own SLURM_VERSION_NUM).
file(STRINGS ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h slurm_version_number REGEX "^#define SLURM_VERSION_NUMBER +0x")
file(STRINGS ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h slurm_version_string REGEX "^#define SLURM_VERSION_STRING ")
string(REGEX MATCH "0x[0-9A-Fa-f]+" slurm_version_number "${slurm_version_number}")
if(NOT slurm_version_number)
  message(FATAL_ERROR "exitpolicy: ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h defines no SLURM_VERSION_NUMBER: "
    "it is not a Slurm installation's header (${slurm_where})")
endif()
math(EXPR slurm_major "(${slurm_version_number} >> 16) & 255")
math(EXPR slurm_minor "(${slurm_version_number} >> 8) & 255")
math(EXPR slurm_micro "${slurm_version_number} & 255")
string(REGEX REPLACE "^([0-9])$" "0\\1" slurm_minor ${slurm_minor})
set(SLURM_RELEASE ${slurm_major}.${slurm_minor})
string(REGEX MATCH "\"([^\"]+)\"" _ "${slurm_version_string}")
set(SLURM_VERSION "${CMAKE_MATCH_1}")
if(NOT SLURM_VERSION)
  set(SLURM_VERSION ${SLURM_RELEASE}.${slurm_micro})
endif()
if(SLURM_RELEASE VERSION_LESS slurm_min_release)
  message(FATAL_ERROR "exitpolicy: the Slurm in ${slurm_where} is ${SLURM_VERSION} "
    "(${SLURM_INCLUDE_DIR}/slurm/slurm_version.h); exitpolicy needs Slurm ${slurm_min_release} or newer. "
    "Give the prefix of a newer Slurm with -DSLURM_ROOT=DIR.")
endif()

# Slurm's plugin directory (its PluginDir default, <libdir>/slurm; Debian:
# <libdir>/slurm-wlm): where it keeps libslurmfull.so and its own plugins.
if(SLURM_LIBRARY)
  get_filename_component(slurm_libdir ${SLURM_LIBRARY} DIRECTORY)
  find_path(SLURM_PLUGIN_DIR libslurmfull.so PATHS ${slurm_libdir} PATH_SUFFIXES slurm-wlm slurm
    NO_DEFAULT_PATH DOC "Slurm's plugin directory")
elseif(SLURM_ROOT)
  find_path(SLURM_PLUGIN_DIR libslurmfull.so PATHS ${SLURM_ROOT}/lib64 ${SLURM_ROOT}/lib
    PATH_SUFFIXES slurm slurm-wlm NO_DEFAULT_PATH DOC "Slurm's plugin directory")
endif()
set(SLURM_PLUGIN_DIR_FOUND "${SLURM_PLUGIN_DIR}" CACHE INTERNAL "")
