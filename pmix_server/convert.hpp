// SPDX-License-Identifier: Apache-2.0
// convert.hpp - PMIx <-> wire: the one place where PMIx's types (procs,
// info arrays, values, data buffers) become the overlay's (ranks, keys,
// packed bytes) and back. Packing uses the PMIx library's own buffer format,
// so a value packed on one node unpacks on another with the same library.
//
// Threads: any; PMIx_Data_* need the library initialised (PMIx_server_init).
#pragma once

#include "info_array.hpp"

#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <pmix_common.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exitpolicy::pmix_server {

// The ranks of `procs`; empty (everyone) if any is PMIX_RANK_WILDCARD.
std::vector<std::uint32_t> ranks_of(const pmix_proc_t procs[], size_t nprocs);
// The caller's PMIX_TIMEOUT in seconds; 0 when it gave none.
int timeout_of(const pmix_info_t info[], size_t ninfo);
// PMIX_WAIT among the directives. It is an int (0: wait for every key, N:
// for N of them); a bool is taken as well, true meaning wait.
bool wait_of(const pmix_info_t info[], size_t ninfo);
// A NULL-terminated key list.
std::vector<std::string> keys_of(char** keys);
// Keys under "pmix." are directives (PMIX_RANGE, PMIX_TIMEOUT, ...), not data.
bool is_directive(const char* key);

// One pmix_info_t (key and value), packed.
Result<protocol::Bytes> pack_info(const pmix_info_t& info);
// Into `info` (constructed, empty); false on bytes that are not one info.
bool unpack_info(const protocol::Bytes& bytes, pmix_info_t& info);

// An info array, packed as its count and its elements.
Result<protocol::Bytes> pack_infos(const pmix_info_t info[], size_t ninfo);
// Back; an error for bytes that are not such an array or hold more than
// max_infos elements.
inline constexpr std::int32_t max_infos = 1024;
Result<std::unique_ptr<InfoArray>> unpack_infos(const protocol::Bytes& bytes);

// A lookup's answer as PMIx data, each value owned by its proc (nspace,
// rank). Values that do not unpack are left out.
struct PdataArray {
    pmix_pdata_t* data = nullptr;
    size_t capacity = 0;
    size_t n = 0;  // filled in
    PdataArray() = default;
    explicit PdataArray(size_t count);
    ~PdataArray();
    PdataArray(const PdataArray&) = delete;
    PdataArray& operator=(const PdataArray&) = delete;
};
std::unique_ptr<PdataArray> to_pdata(const protocol::DataReply& reply, const std::string& nspace);

// Owned data lent to the PMIx library as a callback's cbdata, and taken
// back (and freed) when the library calls back.
template <typename T>
void* lend(std::unique_ptr<T> owned) noexcept
{
    return owned.release();
}
template <typename T>
std::unique_ptr<T> reclaim(void* cbdata) noexcept
{
    return std::unique_ptr<T>(static_cast<T*>(cbdata));
}

}  // namespace exitpolicy::pmix_server
