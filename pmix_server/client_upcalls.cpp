// SPDX-License-Identifier: Apache-2.0
// client_upcalls.cpp - a client's life: connected, finalized, abort.
#include "upcalls.hpp"

#include "event_anchor.hpp"

#include <string>

namespace exitpolicy::pmixd {

namespace {

// The event anchor (event_anchor.hpp) is a client of ours too, in a
// namespace of its own: it is none of the step's tasks.
bool is_anchor(const Overlay& overlay, const pmix_proc_t* proc)
{
    const Args& args = overlay.args();
    return EventAnchor::nspace_of(args.job_id, args.step_id) == proc->nspace;
}

}  // namespace

pmix_status_t on_client_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("client_connected", cbfunc, cbdata, [&](Overlay& overlay, OpCompletion& done) {
        const bool anchor = is_anchor(overlay, proc);
        const std::uint32_t rank = proc->rank;
        overlay.post([&overlay, anchor, rank, done]() mutable {
            if (!anchor)
                overlay.client_connected(rank);
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_client_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("client_finalized", cbfunc, cbdata, [&](Overlay& overlay, OpCompletion& done) {
        // The anchor finalizes while the daemon stops, when the loop may no
        // longer run: answered here, at once.
        if (is_anchor(overlay, proc))
            return done.returned(PMIX_OPERATION_SUCCEEDED);
        const std::uint32_t rank = proc->rank;
        overlay.post([&overlay, rank, done]() mutable {
            overlay.client_finalized(rank);
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("abort", cbfunc, cbdata, [&](Overlay& overlay, OpCompletion& done) {
        const std::uint32_t rank = proc->rank;
        std::string message = msg ? msg : "";
        overlay.post([&overlay, rank, status, message = std::move(message), done]() mutable {
            overlay.abort(rank, status, std::move(message));
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

}  // namespace exitpolicy::pmixd
