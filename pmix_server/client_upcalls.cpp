// SPDX-License-Identifier: Apache-2.0
// client_upcalls.cpp - a client's life: connected, finalized, abort.
#include "upcalls.hpp"

#include "event_anchor.hpp"

#include <string>

namespace exitpolicy::pmix_server {

namespace {

// The event anchor (event_anchor.hpp) is a client of ours too, in a
// namespace of its own: it is none of the step's tasks.
bool is_anchor(const StepServices& step, const pmix_proc_t* proc)
{
    const ServedStep& args = step.served();
    return EventAnchor::nspace_of(args.job_id, args.step_id) == proc->nspace;
}

}  // namespace

pmix_status_t on_client_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("client_connected", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        const bool anchor = is_anchor(step, proc);
        const std::uint32_t rank = proc->rank;
        step.post([&step, anchor, rank, done]() mutable {
            if (!anchor)
                step.client_connected(rank);
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_client_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("client_finalized", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        // The anchor finalizes while the daemon stops, when the loop may no
        // longer run: answered here, at once.
        if (is_anchor(step, proc))
            return done.returned(PMIX_OPERATION_SUCCEEDED);
        const std::uint32_t rank = proc->rank;
        step.post([&step, rank, done]() mutable {
            step.client_finalized(rank);
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("abort", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        const std::uint32_t rank = proc->rank;
        std::string message = msg ? msg : "";
        step.post([&step, rank, status, message = std::move(message), done]() mutable {
            step.abort(rank, status, std::move(message));
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

}  // namespace exitpolicy::pmix_server
