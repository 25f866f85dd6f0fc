// SPDX-License-Identifier: Apache-2.0
// event_anchor.hpp - makes the node's PMIx server keep clients' default
// event handlers.
//
// OpenPMIx 4.2 and 5.0 drop a client's default (code-less) event-handler
// registration on the server side unless the server's list of registrations
// already holds an entry for PMIX_MAX_ERR_CONSTANT (pmix_server_register_events
// in src/server/pmix_server_ops.c; fixed upstream only after 5.0). Such
// clients, Open MPI 4.1 among them, then hear of no event at all: a dead
// peer stays unknown and the rank waits in its collective. A client that
// registers that code explicitly creates the entry, and every later default
// registration is added to it.
//
// The anchor is that client: exitpolicy-pmixd run again as
// `exitpolicy-pmixd --event-anchor`, a PMIx client of a one-process
// namespace of its own on this node's server, which registers for
// PMIX_MAX_ERR_CONSTANT, says "registered" on its stdout and then waits for
// its stdin to close (the daemon's end, when the daemon stops); it never
// holds the daemon's exit up. It starts as
// soon as the server is initialised, overlapping the enrollment, the
// namespace and slurmstepd's launch of the tasks; a task's request for its
// PMIx environment (so the task itself) waits until the anchor has
// registered or failed, within a bound. Without it the step runs as before:
// clients that register specific codes are told; default handlers are not.
//
// Threads: start() and the rest run on the daemon's loop thread; the PMIx
// library's callbacks post back to it.
#pragma once

#include "protocol/daemon_args.hpp"
#include "protocol/handles.hpp"
#include "timers.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <sys/types.h>

struct event;

namespace exitpolicy::pmix_server {

class EventAnchor {
public:
    // What the anchor uses of its daemon: the step it serves, the loop it
    // watches the anchor's process on, its timers, and how a callback of
    // the PMIx library (any thread) hands work to that loop.
    struct Services {
        const protocol::DaemonArgs& args;
        event_base* base;
        Timers& timers;
        std::function<void(std::function<void()>)> post;
    };
    explicit EventAnchor(Services services);
    ~EventAnchor();
    EventAnchor(const EventAnchor&) = delete;
    EventAnchor& operator=(const EventAnchor&) = delete;

    // Loop thread, once the PMIx server is initialised. `settled` runs
    // once: the anchor registered (true) or could not (false, logged).
    void start(std::function<void(bool registered)> settled);
    // Loop thread, as the daemon stops: closes the anchor's stdin, so
    // that it finalizes (our server answers that at once) and exits.
    void release();
    // Reaps it (the destructor does, then deregisters its namespace): a
    // moment to exit, then SIGKILL.
    void reap();

    // The namespace of the anchor, never the step's.
    static std::string nspace_of(std::uint32_t job_id, std::uint32_t step_id)
    {
        return "exitpolicy-anchor." + std::to_string(job_id) + "." + std::to_string(step_id);
    }

private:
    void namespace_in(int status);  // on the loop: the library has the namespace, or not
    void spawn();                   // the anchor's process, once its client is registered
    void watch_word();              // until it says it registered, or the bound
    void settle(bool ok, const char* why);

    Services services_;
    std::string nspace_;
    std::function<void(bool)> settled_;
    pid_t pid_ = -1;
    protocol::Fd to_child_;    // the anchor's stdin: it ends when this closes
    protocol::Fd from_child_;  // the anchor's stdout: "registered\n"
    protocol::EventHandle reading_;
    long long started_us_ = 0;
    bool registered_ = false;  // its namespace: deregistered at the end
};

// The anchor process itself (main.cpp runs it for --event-anchor).
int run_event_anchor();

}  // namespace exitpolicy::pmix_server
