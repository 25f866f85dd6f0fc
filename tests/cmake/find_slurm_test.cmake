# SPDX-License-Identifier: Apache-2.0
# tests/cmake/find_slurm_test.cmake - what cmake says about the Slurm it is
# given (cmake/FindSlurm.cmake), by configuring this source tree for real:
#   -DSLURM_ROOT=<missing directory>       one error: not a directory
#   -DSLURM_ROOT=<directory, no headers>   one error: no Slurm headers, what to install
#   -DSLURM_ROOT=<Slurm 21.08's headers>   one error: 22.05 or newer needed
#   the Slurm of this build (its SLURM_ROOT, or none) found: its release, its plugin directory
#   by default the plugin knows no build tree's daemon (whoever owns the
#   tree would run code as every job's user); -DEXITPOLICY_BUILD_TREE_DAEMON=ON asks for it
# Run by ctest: cmake -DSOURCE=... -DWORK=... -DSLURM_INCLUDE_DIR=... -DSLURM_ROOT=...
#   -DSLURM_VERSION=... -P find_slurm_test.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/empty ${WORK}/old/include)

function(configure name root expect_rc expect_output)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build-${name} -DSLURM_ROOT=${root}
      -DEXITPOLICY_BUILD_TESTS=OFF -DEXITPOLICY_BUILD_BENCH=OFF
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " said "${out}${err}")
  if(expect_rc EQUAL 0 AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed (${rc}):\n${out}${err}")
  elseif(NOT expect_rc EQUAL 0 AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure succeeded, an error was expected:\n${out}")
  endif()
  if(NOT said MATCHES "${expect_output}")
    message(FATAL_ERROR "${name}: the output does not say '${expect_output}':\n${out}${err}")
  endif()
  string(REGEX MATCHALL "CMake Error" errors "${err}")
  list(LENGTH errors n)
  if(NOT expect_rc EQUAL 0 AND NOT n EQUAL 1)
    message(FATAL_ERROR "${name}: ${n} errors, one was expected:\n${err}")
  endif()
  message(STATUS "${name}: as expected")
endfunction()

configure(missing ${WORK}/missing 1 "SLURM_ROOT=${WORK}/missing is not a directory")
configure(empty ${WORK}/empty 1
  "no Slurm headers .*in SLURM_ROOT=${WORK}/empty.*libslurm-dev.*slurm-devel.*-DSLURM_ROOT=")

# The real headers of this build's Slurm, declaring themselves 21.08.
file(COPY ${SLURM_INCLUDE_DIR}/slurm DESTINATION ${WORK}/old/include)
file(READ ${WORK}/old/include/slurm/slurm_version.h header)
string(REGEX REPLACE "#define SLURM_VERSION_NUMBER +0x[0-9a-fA-F]+" "#define SLURM_VERSION_NUMBER 0x150808"
  header "${header}")
string(REGEX REPLACE "#define SLURM_VERSION_STRING +\"[^\"]*\"" "#define SLURM_VERSION_STRING \"21.08.8\""
  header "${header}")
file(WRITE ${WORK}/old/include/slurm/slurm_version.h "${header}")
configure(old ${WORK}/old 1 "is 21.08.8 .*needs Slurm 22.05 or newer")

# This build's own Slurm: in its prefix (the plugin goes beside it), or the
# system's.
string(REPLACE "." "\\." version "${SLURM_VERSION}")
if(SLURM_ROOT)
  configure(this "${SLURM_ROOT}" 0 "Slurm ${version} \\(slurm/spank.h in ${SLURM_ROOT}/include\\), the plugin goes to ${SLURM_ROOT}/lib")
else()
  configure(this "" 0 "Slurm ${version} \\(slurm/spank.h in ${SLURM_INCLUDE_DIR}\\)")
endif()

# The plugin's compile definitions, as configured.
function(plugin_defines build out)
  file(READ ${build}/spank_plugin/CMakeFiles/exitpolicy_spank.dir/flags.make flags)
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
plugin_defines(${WORK}/build-this flags)
if(NOT flags MATCHES "EXITPOLICY_INSTALLED_DAEMON=" OR flags MATCHES "EXITPOLICY_BUILD_DAEMON=")
  message(FATAL_ERROR "default: the plugin must know the installed daemon only:\n${flags}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build-this -DEXITPOLICY_BUILD_TREE_DAEMON=ON
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
plugin_defines(${WORK}/build-this flags)
if(NOT rc EQUAL 0 OR NOT flags MATCHES "EXITPOLICY_BUILD_DAEMON=")
  message(FATAL_ERROR "-DEXITPOLICY_BUILD_TREE_DAEMON=ON: the plugin must know this tree's daemon (${rc}):\n${flags}")
endif()
# Such a tree is never installed: nothing of it reaches the prefix.
execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/build-this --prefix ${WORK}/prefix
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "This tree is a development build" OR EXISTS ${WORK}/prefix)
  message(FATAL_ERROR "-DEXITPOLICY_BUILD_TREE_DAEMON=ON: cmake --install must refuse the tree (${rc}):\n${out}${err}")
endif()
message(STATUS "build-tree daemon: off by default, on when asked for, never installed")
file(REMOVE_RECURSE ${WORK})
