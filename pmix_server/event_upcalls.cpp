// SPDX-License-Identifier: Apache-2.0
// event_upcalls.cpp - events clients raise, and their registrations.
#include "upcalls.hpp"

#include "convert.hpp"
#include "pmix_server/log.hpp"

#include <pmix.h>

#include <memory>

namespace exitpolicy::pmix_server {

// The library has delivered the event to this node's clients already; the
// other nodes get it through the overlay. Its callback for this upcall must
// not be called from another thread (OpenPMIx 4.2.2 does not thread-shift
// it and corrupts its heap), so the answer is the return value, always.
pmix_status_t on_notify_event(pmix_status_t code, const pmix_proc_t* source, pmix_data_range_t range,
                              pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return upcall("notify_event", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        if (range == PMIX_RANGE_LOCAL || range == PMIX_RANGE_PROC_LOCAL)
            return done.returned(PMIX_OPERATION_SUCCEEDED);
        // A copy crosses to the loop thread, which packs it.
        auto copy = std::make_shared<InfoArray>(ninfo);
        for (size_t i = 0; i < ninfo; ++i)
            PMIx_Info_xfer(&copy->info[i], &info[i]);
        const std::uint32_t rank = source ? source->rank : PMIX_RANK_UNDEF;
        step.post([&step, code, rank, copy] {
            auto packed = pack_infos(copy->info, copy->n);
            if (packed)
                step.relay(code, rank, std::move(*packed));
            else
                log::error("an event from rank %u could not be packed: %s", rank, packed.error().c_str());
        });
        return done.returned(PMIX_OPERATION_SUCCEEDED);
    });
}

// Clients register for events we generate ourselves: nothing to set up.
pmix_status_t on_register_events(pmix_status_t*, size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t cbfunc,
                                 void* cbdata) noexcept
{
    return guard_upcall("register_events", cbfunc, cbdata,
                        [](OpCompletion& done) { return done.returned(PMIX_OPERATION_SUCCEEDED); });
}

pmix_status_t on_deregister_events(pmix_status_t*, size_t, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    return guard_upcall("deregister_events", cbfunc, cbdata,
                        [](OpCompletion& done) { return done.returned(PMIX_OPERATION_SUCCEEDED); });
}

}  // namespace exitpolicy::pmix_server
