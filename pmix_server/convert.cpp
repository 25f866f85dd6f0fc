// SPDX-License-Identifier: Apache-2.0
// convert.cpp - see convert.hpp.
#include "convert.hpp"

#include <pmix.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace exitpolicy::pmix_server {

namespace {

// A data buffer of ours: destructed whatever happens.
struct Buffer {
    pmix_data_buffer_t buf;
    Buffer() { PMIX_DATA_BUFFER_CONSTRUCT(&buf); }
    // Loads a copy of `bytes` (the buffer owns the copy).
    explicit Buffer(const protocol::Bytes& bytes) : Buffer()
    {
        pmix_byte_object_t payload;
        payload.size = bytes.size();
        payload.bytes = static_cast<char*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
        if (!payload.bytes)
            throw std::bad_alloc();
        if (!bytes.empty())
            std::memcpy(payload.bytes, bytes.data(), bytes.size());
        PMIx_Data_load(&buf, &payload);
    }
    ~Buffer() { PMIX_DATA_BUFFER_DESTRUCT(&buf); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    Result<protocol::Bytes> unload()
    {
        pmix_byte_object_t payload{nullptr, 0};
        const pmix_status_t rc = PMIx_Data_unload(&buf, &payload);
        if (rc != PMIX_SUCCESS)
            return Result<protocol::Bytes>::fail(PMIx_Error_string(rc));
        protocol::Bytes out(payload.bytes, payload.bytes + payload.size);
        PMIX_BYTE_OBJECT_DESTRUCT(&payload);
        return Result<protocol::Bytes>::ok(std::move(out));
    }
};

}  // namespace

std::vector<std::uint32_t> ranks_of(const pmix_proc_t procs[], size_t nprocs)
{
    std::vector<std::uint32_t> ranks;
    for (size_t i = 0; i < nprocs; ++i) {
        if (procs[i].rank == PMIX_RANK_WILDCARD)
            return {};
        ranks.push_back(procs[i].rank);
    }
    return ranks;
}

int timeout_of(const pmix_info_t info[], size_t ninfo)
{
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_TIMEOUT) && info[i].value.type == PMIX_INT)
            return std::max(0, info[i].value.data.integer);
    return 0;
}

bool wait_of(const pmix_info_t info[], size_t ninfo)
{
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_WAIT) && (info[i].value.type != PMIX_BOOL || PMIX_INFO_TRUE(&info[i])))
            return true;
    return false;
}

std::vector<std::string> keys_of(char** keys)
{
    std::vector<std::string> out;
    for (char** k = keys; k && *k; ++k)
        out.emplace_back(*k);
    return out;
}

bool is_directive(const char* key)
{
    return std::strncmp(key, "pmix.", 5) == 0;
}

Result<protocol::Bytes> pack_info(const pmix_info_t& info)
{
    Buffer b;
    const pmix_status_t rc = PMIx_Data_pack(nullptr, &b.buf, const_cast<pmix_info_t*>(&info), 1, PMIX_INFO);
    if (rc != PMIX_SUCCESS)
        return Result<protocol::Bytes>::fail(PMIx_Error_string(rc));
    return b.unload();
}

bool unpack_info(const protocol::Bytes& bytes, pmix_info_t& info)
{
    Buffer b(bytes);
    std::int32_t n = 1;
    return PMIx_Data_unpack(nullptr, &b.buf, &info, &n, PMIX_INFO) == PMIX_SUCCESS && n == 1;
}

Result<protocol::Bytes> pack_infos(const pmix_info_t info[], size_t ninfo)
{
    if (ninfo > static_cast<size_t>(max_infos))
        return Result<protocol::Bytes>::fail("too many infos: " + std::to_string(ninfo));
    Buffer b;
    std::int32_t n = static_cast<std::int32_t>(ninfo);
    pmix_status_t rc = PMIx_Data_pack(nullptr, &b.buf, &n, 1, PMIX_INT32);
    if (rc == PMIX_SUCCESS && n > 0)
        rc = PMIx_Data_pack(nullptr, &b.buf, const_cast<pmix_info_t*>(info), n, PMIX_INFO);
    if (rc != PMIX_SUCCESS)
        return Result<protocol::Bytes>::fail(PMIx_Error_string(rc));
    return b.unload();
}

Result<std::unique_ptr<InfoArray>> unpack_infos(const protocol::Bytes& bytes)
{
    using R = Result<std::unique_ptr<InfoArray>>;
    Buffer b(bytes);
    std::int32_t n = 0, one = 1;
    if (PMIx_Data_unpack(nullptr, &b.buf, &n, &one, PMIX_INT32) != PMIX_SUCCESS)
        return R::fail("no count of infos");
    if (n < 0 || n > max_infos)
        return R::fail("a count of infos out of range: " + std::to_string(n));
    auto info = std::make_unique<InfoArray>(static_cast<size_t>(n));
    std::int32_t count = n;
    if (n > 0 && (PMIx_Data_unpack(nullptr, &b.buf, info->info, &count, PMIX_INFO) != PMIX_SUCCESS || count != n))
        return R::fail("infos that do not unpack");
    return R::ok(std::move(info));
}

PdataArray::PdataArray(size_t count) : capacity(count)
{
    if (capacity)
        PMIX_PDATA_CREATE(data, capacity);
}

PdataArray::~PdataArray()
{
    if (data)
        PMIX_PDATA_FREE(data, capacity);
}

std::unique_ptr<PdataArray> to_pdata(const protocol::DataReply& reply, const std::string& nspace)
{
    const size_t count = std::min({reply.keys.size(), reply.values.size(), reply.ranks.size()});
    auto out = std::make_unique<PdataArray>(count);
    for (size_t i = 0; i < count; ++i) {
        pmix_info_t info;
        PMIX_INFO_CONSTRUCT(&info);
        if (!unpack_info(reply.values[i], info)) {
            PMIX_INFO_DESTRUCT(&info);
            continue;
        }
        pmix_pdata_t& d = out->data[out->n];
        PMIX_PROC_LOAD(&d.proc, nspace.c_str(), reply.ranks[i]);
        PMIX_LOAD_KEY(d.key, reply.keys[i].c_str());
        const pmix_status_t rc = PMIx_Value_xfer(&d.value, &info.value);
        PMIX_INFO_DESTRUCT(&info);
        if (rc == PMIX_SUCCESS)
            ++out->n;
    }
    return out;
}

}  // namespace exitpolicy::pmix_server
