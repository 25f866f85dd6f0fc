// SPDX-License-Identifier: Apache-2.0
// daemon_local.hpp - one connection to the node daemon's local socket (a
// task's environment request, or slurmstepd's control link): shared by
// daemon.cpp, which owns them, and daemon_local.cpp, which serves them.
#pragma once

#include "protocol/handles.hpp"

#include "daemon.hpp"

#include <event2/bufferevent.h>

#include <algorithm>
#include <sys/types.h>

namespace exitpolicy::pmix_server {

struct Daemon::Local {
    Daemon* d = nullptr;
    protocol::BufferEventHandle bev;
    uid_t uid = static_cast<uid_t>(-1);
    pid_t pid = -1;  // the peer, as the kernel says
    bool control = false;  // slurmstepd's control link
    // Serves every whole frame in the input, in order (the rest waits for
    // more); may drop this Local.
    void read_frames() noexcept;
    void serve_frames();
    // Closes the connection and frees this Local, with any request of it
    // still waiting (a later Local may get its address). The caller, maybe
    // its own callback, returns at once.
    void drop()
    {
        Daemon* daemon = d;
        const Local* self = this;
        std::erase_if(daemon->env_waiting_, [self](const auto& w) { return w.first == self; });
        std::erase_if(daemon->locals_, [self](const auto& p) { return p.get() == self; });
    }
};

}  // namespace exitpolicy::pmix_server
