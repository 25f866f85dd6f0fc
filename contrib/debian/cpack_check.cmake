# SPDX-License-Identifier: Apache-2.0
# contrib/debian/cpack_check.cmake - run by cpack before it packs: a package
# from a tree that is not configured for Debian's paths would name paths in
# its plugin that it does not hold (see package.cmake).
if(CPACK_GENERATOR STREQUAL "DEB" AND CPACK_EXITPOLICY_REFUSAL)
  string(REGEX REPLACE ",$" "" refusal "${CPACK_EXITPOLICY_REFUSAL}")
  message(FATAL_ERROR "exitpolicy: this build tree cannot make the Debian package; it needs${refusal}. "
    "bash contrib/deb configures one that can.")
endif()
