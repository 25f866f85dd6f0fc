// SPDX-License-Identifier: Apache-2.0
// collective_upcalls.cpp - fence and direct modex: the overlay carries the
// data between the nodes (Daemon::fence, Daemon::direct_modex).
#include "upcalls.hpp"

#include "convert.hpp"

#include <memory>

namespace exitpolicy::pmix_server {

namespace {

// The data stays alive until the library releases it.
void answer_modex(ModexCompletion& done, int status, protocol::Bytes data) noexcept
{
    done.answer_with([&](pmix_modex_cbfunc_t cbfunc, void* cbdata) {
        auto keep = std::make_unique<protocol::Bytes>(std::move(data));
        const char* bytes = reinterpret_cast<const char*>(keep->data());
        const size_t size = keep->size();
        cbfunc(status, bytes, size, cbdata, [](void* kept) { reclaim<protocol::Bytes>(kept); }, lend(std::move(keep)));
    });
}

}  // namespace

pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("fence", cbfunc, cbdata, [&](StepServices& step, ModexCompletion& done) {
        auto ranks = ranks_of(procs, nprocs);
        protocol::Bytes bytes(data, data + ndata);
        // No PMIX_TIMEOUT: no timer, the fence waits as long as it takes.
        const int timeout_s = timeout_of(info, ninfo);
        step.post([&step, ranks = std::move(ranks), bytes = std::move(bytes), timeout_s, done]() mutable {
            step.fence(std::move(ranks), std::move(bytes), timeout_s, [done](int status, protocol::Bytes all) mutable {
                answer_modex(done, status, std::move(all));
            });
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("direct_modex", cbfunc, cbdata, [&](StepServices& step, ModexCompletion& done) {
        const std::uint32_t rank = proc->rank;
        const int timeout_s = timeout_of(info, ninfo);
        step.post([&step, rank, timeout_s, done] {
            step.direct_modex(rank, timeout_s, [done](int status, protocol::Bytes data) mutable {
                answer_modex(done, status, std::move(data));
            });
        });
        return PMIX_SUCCESS;
    });
}

}  // namespace exitpolicy::pmix_server
