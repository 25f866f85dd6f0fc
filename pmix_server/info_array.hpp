// SPDX-License-Identifier: Apache-2.0
// info_array.hpp - an owned pmix_info_t array (PMIX_INFO_CREATE / _FREE),
// for the daemon's calls into the PMIx library.
#pragma once

#include <pmix_common.h>

#include <cstddef>

namespace exitpolicy::pmix_server {

struct InfoArray {
    pmix_info_t* info = nullptr;
    size_t n = 0;
    explicit InfoArray(size_t count) : n(count) { PMIX_INFO_CREATE(info, n); }
    ~InfoArray() { PMIX_INFO_FREE(info, n); }
    InfoArray(const InfoArray&) = delete;
    InfoArray& operator=(const InfoArray&) = delete;
};

}  // namespace exitpolicy::pmix_server
