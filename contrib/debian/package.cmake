# SPDX-License-Identifier: Apache-2.0
# contrib/debian/package.cmake - the Debian package, made by CPack's DEB
# generator from what `cmake --install` installs:
#
#   cmake -S . -B build-deb -DCMAKE_INSTALL_PREFIX=/usr -DEXITPOLICY_BUILD_TREE_DAEMON=OFF
#   cmake --build build-deb --target package         (bash contrib/deb does both)
#
# The package holds exactly the paths compiled into the plugin (the daemon in
# <prefix>/libexec), so it is made only from a tree configured for Debian's
# paths (prefix /usr, Slurm's plugin directory found) whose plugin knows no
# build tree; cpack_check.cmake refuses any other with what to change.
# Depends: the libraries' packages (dpkg-shlibdeps) and Slurm's own release,
# the only one whose daemons load the plugin.

# What the package's paths must be, and what is missing from this tree.
set(deb_refusal "")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  string(APPEND deb_refusal " -DCMAKE_INSTALL_PREFIX=/usr (not ${CMAKE_INSTALL_PREFIX}),")
endif()
if(EXITPOLICY_BUILD_TREE_DAEMON)
  string(APPEND deb_refusal " -DEXITPOLICY_BUILD_TREE_DAEMON=OFF,")
endif()
if(NOT SLURM_PLUGIN_DIR)
  string(APPEND deb_refusal " Slurm's plugin directory (libslurmfull.so not found beside libslurm: -DSLURM_PLUGIN_DIR=DIR),")
endif()

# Slurm's package: the one that holds Slurm's plugin directory and its
# /etc/slurm/plugstack.conf, which includes plugstack.conf.d (Debian:
# slurm-wlm-basic-plugins, which srun's and slurmd's packages depend on).
set(deb_slurm_package "")
if(SLURM_PLUGIN_DIR)
  execute_process(COMMAND dpkg-query --search ${SLURM_PLUGIN_DIR}/libslurmfull.so
    OUTPUT_VARIABLE deb_slurm_package ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX REPLACE ":.*" "" deb_slurm_package "${deb_slurm_package}")
endif()
if(NOT deb_slurm_package)
  string(APPEND deb_refusal " the Debian package of Slurm's plugin directory (dpkg-query --search ${SLURM_PLUGIN_DIR}/libslurmfull.so),")
endif()
# A Slurm release is major.minor (22.05); its packages' versions run from
# 22.05 up to, not including, 22.06.
math(EXPR slurm_next_minor "${slurm_minor} + 1")
string(REGEX REPLACE "^([0-9])$" "0\\1" slurm_next_minor ${slurm_next_minor})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME exitpolicy)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "exitpolicy maintainers <maintainers@users.noreply.a-seed-1a95ef53.example>"
  CACHE STRING "The Debian package's Maintainer field")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Slurm SPANK plugin: exit codes by policy, and a PMIx server")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "\
exitpolicy makes a Slurm job step end the way its users mean it to end:
srun --exit-policy=main-rank returns rank 0's real exit code (139 for a
segfault, the MPI_Abort code on abort) instead of Slurm's highest code, and
srun reports which ranks failed, where and how, also as JSON.

In steps without Slurm's own PMIx plugin (srun --mpi=none), one
exitpolicy-pmixd per node is the tasks' PMIx server: it wires MPI jobs up
and tells every surviving process when a peer dies.

The package enables the plugin for srun and slurmstepd in
/etc/slurm/plugstack.conf.d/exitpolicy.conf. Built for Slurm ${SLURM_RELEASE}.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(deb_slurm_package)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "${deb_slurm_package} (>= ${SLURM_RELEASE}), ${deb_slurm_package} (<< ${slurm_major}.${slurm_next_minor})")
endif()
# The plugstack.conf.d file is the site's to edit: a conffile.
configure_file(${CMAKE_CURRENT_LIST_DIR}/conffiles.in conffiles @ONLY)
# On purge, postrm removes what the plugin keeps on the node (/var/lib/exitpolicy).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_BINARY_DIR}/conffiles ${CMAKE_CURRENT_LIST_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_EXITPOLICY_REFUSAL "${deb_refusal}")
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/cpack_check.cmake)

# What Debian asks of every package: its copyright and changelog in its
# documentation directory, and lintian's overrides, each with its reason.
string(TIMESTAMP deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_LIST_DIR}/changelog.in changelog @ONLY)
add_custom_command(OUTPUT changelog.gz
  COMMAND gzip -9nf -k changelog
  DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/changelog
  VERBATIM)
add_custom_target(deb_changelog ALL DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/changelog.gz)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/copyright ${CMAKE_CURRENT_BINARY_DIR}/changelog.gz
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/lintian-overrides
  DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME exitpolicy)

include(CPack)
