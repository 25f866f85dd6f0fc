// SPDX-License-Identifier: Apache-2.0
// upcalls.hpp - the PMIx server module: the upcalls OpenPMIx makes into
// this daemon, one file per family, as PRRTE's src/prted/pmix/ has them:
//
//   client_upcalls.cpp      client connected, finalized, abort
//   collective_upcalls.cpp  fence, direct modex
//   data_upcalls.cpp        publish, lookup, unpublish
//   event_upcalls.cpp       notify event, register / deregister events
//   group_upcalls.cpp       connect, disconnect, group construct / destruct
//   tool_upcalls.cpp        job control, log; spawn refused
//
// Every upcall runs on PMIx's progress thread and never blocks: it copies
// what it needs into work posted to the daemon's loop and returns. It
// answers exactly once, on every path, through a Completion
// (completion.hpp) made at its C boundary (upcall() below).
#pragma once

#include "completion.hpp"
#include "step_services.hpp"

#include <pmix_server.h>

namespace exitpolicy::pmix_server {

// The table for PMIx_server_init.
pmix_server_module_t* server_module() noexcept;
// Whom the upcalls serve: set before PMIx_server_init, cleared after
// PMIx_server_finalize. Without one, an upcall answers `unanswered`.
void set_step(StepServices* step) noexcept;
StepServices* current_step() noexcept;

// An upcall's C boundary: guard_upcall() with the step.
template <typename Cbfunc, typename Body>
pmix_status_t upcall(const char* name, Cbfunc cbfunc, void* cbdata, Body&& body) noexcept
{
    return guard_upcall(name, cbfunc, cbdata, [&](Completion<Cbfunc>& done) -> pmix_status_t {
        StepServices* step = current_step();
        if (!step)
            return done.returned(unanswered);
        return body(*step, done);
    });
}

// ---- the upcalls, named as in pmix_server_module_t ----
pmix_status_t on_client_connected(const pmix_proc_t* proc, void* server_object, pmix_op_cbfunc_t cbfunc,
                                  void* cbdata) noexcept;
pmix_status_t on_client_finalized(const pmix_proc_t* proc, void* server_object, pmix_op_cbfunc_t cbfunc,
                                  void* cbdata) noexcept;
pmix_status_t on_abort(const pmix_proc_t* proc, void* server_object, int status, const char msg[],
                       pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc,
                         void* cbdata) noexcept;
pmix_status_t on_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                           pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_notify_event(pmix_status_t code, const pmix_proc_t* source, pmix_data_range_t range,
                              pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_register_events(pmix_status_t* codes, size_t ncodes, const pmix_info_t info[], size_t ninfo,
                                 pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_deregister_events(pmix_status_t* codes, size_t ncodes, pmix_op_cbfunc_t cbfunc,
                                   void* cbdata) noexcept;
pmix_status_t on_job_control(const pmix_proc_t* requestor, const pmix_proc_t targets[], size_t ntargets,
                             const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc,
                             void* cbdata) noexcept;
void on_log(const pmix_proc_t* client, const pmix_info_t data[], size_t ndata, const pmix_info_t directives[],
            size_t ndirs, pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_spawn(const pmix_proc_t* proc, const pmix_info_t job_info[], size_t ninfo, const pmix_app_t apps[],
                       size_t napps, pmix_spawn_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_connect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                         pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_disconnect(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept;
pmix_status_t on_group(pmix_group_operation_t op, char grp[], const pmix_proc_t procs[], size_t nprocs,
                       const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc, void* cbdata) noexcept;

}  // namespace exitpolicy::pmix_server
