// SPDX-License-Identifier: Apache-2.0
// module.cpp - the PMIx server module table (upcalls.hpp).
#include "upcalls.hpp"

#include <atomic>
#include <cstring>

namespace exitpolicy::pmix_server {

namespace {

std::atomic<StepServices*> the_step{nullptr};  // one daemon per process

pmix_server_module_t module = [] {
    pmix_server_module_t m;
    std::memset(&m, 0, sizeof(m));
    m.client_connected = on_client_connected;
    m.client_finalized = on_client_finalized;
    m.abort = on_abort;
    m.fence_nb = on_fence;
    m.direct_modex = on_direct_modex;
    m.publish = on_publish;
    m.lookup = on_lookup;
    m.unpublish = on_unpublish;
    m.notify_event = on_notify_event;
    m.register_events = on_register_events;
    m.deregister_events = on_deregister_events;
    m.job_control = on_job_control;
    m.log = on_log;
    m.spawn = on_spawn;
    m.connect = on_connect;
    m.disconnect = on_disconnect;
    m.group = on_group;
    // Not registered, so answered by the library itself: query, tool
    // connections, allocation, monitoring.
    return m;
}();

}  // namespace

pmix_server_module_t* server_module() noexcept
{
    return &module;
}

void set_step(StepServices* step) noexcept
{
    the_step.store(step);
}

StepServices* current_step() noexcept
{
    return the_step.load();
}

}  // namespace exitpolicy::pmix_server
