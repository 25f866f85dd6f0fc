// SPDX-License-Identifier: Apache-2.0
// completion.hpp - the answer to one PMIx server upcall.
//
// Each upcall gets its client's callback (cbfunc, cbdata) and must end in
// exactly one answer: either its return value (PMIX_OPERATION_SUCCEEDED, or
// an error: the library answers the client then, and cbfunc must never be
// called), or, having returned PMIX_SUCCESS, one call of cbfunc. A
// Completion owns cbfunc/cbdata and makes that a property of the type:
//
// - copies share one answer; the first answer() wins, later ones do nothing;
// - returned(status) gives the answer as the upcall's return value (only
//   before any copy has left the upcall);
// - when the last copy goes unanswered (work dropped because the daemon
//   stops, a `done` never called, an exception), cbfunc gets
//   `unanswered` (PMIX_ERR_UNREACH: the step could not finish it).
//
// Any thread may answer: OpenPMIx thread-shifts these callbacks onto its
// progress thread (not the notify_event one: event_upcalls.cpp).
#pragma once

#include "pmix_server/log.hpp"

#include <pmix_server.h>

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

namespace exitpolicy::pmix_server {

// What a Completion dropped unanswered answers.
inline constexpr pmix_status_t unanswered = PMIX_ERR_UNREACH;

// A status-only answer, for each kind of upcall callback.
inline void answer_status(pmix_op_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) noexcept
{
    cbfunc(status, cbdata);
}
inline void answer_status(pmix_modex_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) noexcept
{
    cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
}
inline void answer_status(pmix_lookup_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) noexcept
{
    cbfunc(status, nullptr, 0, cbdata);
}
inline void answer_status(pmix_info_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) noexcept
{
    cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
}

template <typename Cbfunc>
class Completion {
public:
    Completion(Cbfunc cbfunc, void* cbdata) : state_(std::make_shared<State>(cbfunc, cbdata)) {}

    // Answers with `status` alone, unless answered already; true if this
    // call answered.
    bool answer(pmix_status_t status) noexcept
    {
        return answer_with([status](Cbfunc cbfunc, void* cbdata) { answer_status(cbfunc, cbdata, status); });
    }

    // Answers by `call(cbfunc, cbdata)`, which ends in calling cbfunc once,
    // unless answered already; true if this call answered. If `call` throws
    // (before cbfunc: it is C and cannot), the answer is PMIX_ERROR.
    template <typename Call>
    bool answer_with(Call&& call) noexcept
    {
        if (!take())
            return false;
        if (!state_->cbfunc)
            return true;
        try {
            std::forward<Call>(call)(state_->cbfunc, state_->cbdata);
        } catch (...) {
            answer_status(state_->cbfunc, state_->cbdata, PMIX_ERROR);
        }
        return true;
    }

    // The upcall answers by returning this status: cbfunc is never called.
    // Only while no copy has left the upcall.
    pmix_status_t returned(pmix_status_t status) noexcept
    {
        take();
        return status;
    }

    bool answered() const noexcept { return !state_->armed.load(); }
    // Some copy has left the upcall (into posted work, say).
    bool shared() const noexcept { return state_.use_count() > 1; }

private:
    struct State {
        State(Cbfunc cb, void* data) : cbfunc(cb), cbdata(data) {}
        ~State()
        {
            if (armed.exchange(false) && cbfunc)
                answer_status(cbfunc, cbdata, unanswered);
        }
        State(const State&) = delete;
        State& operator=(const State&) = delete;
        Cbfunc cbfunc;
        void* cbdata;
        std::atomic<bool> armed{true};
    };

    bool take() noexcept { return state_->armed.exchange(false); }

    std::shared_ptr<State> state_;
};

using OpCompletion = Completion<pmix_op_cbfunc_t>;
using ModexCompletion = Completion<pmix_modex_cbfunc_t>;
using LookupCompletion = Completion<pmix_lookup_cbfunc_t>;
using InfoCompletion = Completion<pmix_info_cbfunc_t>;

// The C boundary of an upcall: makes its Completion and runs
// `body(done)`, which returns the upcall's status. Nothing escapes: an
// exception answers PMIX_ERROR, as the return value while no copy of the
// Completion has left the upcall, else through cbfunc.
template <typename Cbfunc, typename Body>
pmix_status_t guard_upcall(const char* name, Cbfunc cbfunc, void* cbdata, Body&& body) noexcept
{
    std::optional<Completion<Cbfunc>> done;
    try {
        done.emplace(cbfunc, cbdata);
        return std::forward<Body>(body)(*done);
    } catch (const std::exception& e) {
        log::error("internal error in the %s upcall: %s", name, e.what());
    } catch (...) {
        log::error("internal error in the %s upcall: an unknown exception", name);
    }
    if (!done)
        return PMIX_ERR_NOMEM;
    if (done->answered())
        return PMIX_SUCCESS;  // through cbfunc already
    if (!done->shared())
        return done->returned(PMIX_ERROR);
    done->answer(PMIX_ERROR);
    return PMIX_SUCCESS;
}

}  // namespace exitpolicy::pmix_server
