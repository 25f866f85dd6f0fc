// SPDX-License-Identifier: Apache-2.0
// pmix_service.hpp - the node's PMIx server from its plan to its service:
// the reserved socket and the tasks' planned environment
// (socket_activation.hpp), the server's start (with the daemon, or when its
// first client connects or another node asks for a local rank's data), the
// event anchor (event_anchor.hpp), the namespace's registration, and the
// work for the clients that waits until the server serves.
//
// The server serves once the namespace is registered, the anchor has
// settled and the way up the overlay tree is open, in whichever order they
// come; a planned server's clients wait for that at its gate, and then get
// through. The daemon owns the step (its map, the overlay, the stop); the
// service asks it through Step.
//
// Threads: everything runs on the daemon's loop thread, but the library's
// PMIx_server_init, which runs on a thread of its own and posts its result
// back to the loop.
#pragma once

#include "event_anchor.hpp"
#include "exitpolicy/result.hpp"
#include "pmix_host.hpp"
#include "socket_activation.hpp"
#include "protocol/daemon_args.hpp"
#include "protocol/fd.hpp"
#include "protocol/handles.hpp"
#include "step_services.hpp"
#include "timers.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

struct event_base;

namespace exitpolicy::pmix_server {

class PmixService {
public:
    // What the service asks of the daemon.
    class Step {
    public:
        virtual bool way_up_open() const = 0;               // the way up the tree is open
        virtual void initialized() = 0;                     // the server's start has a result
        virtual void registered() = 0;                      // the namespace is in
        virtual void environment_released() = 0;            // tasks that asked may have theirs
        virtual void failed() = 0;                          // the server cannot serve: the daemon stops

    protected:
        ~Step() = default;
    };

    PmixService(const protocol::DaemonArgs& args, event_base* base, Timers& timers, StepServices& services,
                Step& step);
    // Joins the start's thread; then the anchor goes before the server
    // finalizes (the members' order), the daemon's posted work before both
    // (drop_anchor()).
    ~PmixService();
    PmixService(const PmixService&) = delete;
    PmixService& operator=(const PmixService&) = delete;

    // Takes the socket slurmstepd reserved (-1: none) and plans the tasks'
    // environment on it, when this library allows it; else the server
    // starts with the daemon, as it always did.
    void plan(int reserved_fd);
    // A planned server starts when its first client connects (the reserved
    // socket turns readable); any other now.
    void start_when_asked();
    // Starts the server (once): at the daemon's start, or in a planned step
    // when the first client connects or another node asks for a local
    // rank's data.
    void start();
    // Registers the namespace of `map` once the server has started; true
    // when the registration began now. A start that failed makes the
    // daemon stop.
    bool register_namespace(const protocol::StepMap& map);
    // PMIx work for the clients: now if the server serves, else then, in
    // order. It never starts the server: with no client, nobody is told.
    void when_served(std::function<void()> fn);
    // One of the conditions to serve may have come (the way up opened).
    void check_served();
    // The daemon stops: clients held at the gate hear at once that there
    // is no server, the anchor lets go, and no more work waits.
    void stop();
    // The event anchor, a client of this server, finalizes first.
    void drop_anchor();
    // After the daemon's loop ended: the start's thread has returned.
    void join();

    bool planned() const noexcept { return planned_.has_value(); }
    bool namespace_ready() const noexcept { return namespace_ready_; }
    // A task may have its environment: a planned server's at once (its
    // clients wait at the gate), any other's once the anchor settled.
    bool environment_ready() const noexcept { return planned_ || anchor_settled_; }
    Result<std::vector<std::string>> environment(std::uint32_t rank);
    PmixHost& host() noexcept { return host_; }

private:
    void begin_serving();
    void check_planned_environment();

    const protocol::DaemonArgs& args_;
    event_base* base_;
    StepServices& services_;
    Step& step_;
    PmixHost host_;
    std::optional<PlannedServer> planned_;
    activation::Reserved reserved_;
    protocol::EventHandle first_client_;  // the reserved socket turns readable
    // Keeps clients' default event handlers registered (event_anchor.hpp).
    // It starts with the server and overlaps the rest of the start-up: only
    // the tasks' environment requests wait until it registered or failed
    // (bounded), so that no task starts before it; with a planned server,
    // the clients wait at the gate instead.
    std::unique_ptr<EventAnchor> anchor_;
    // PMIx_server_init takes ~20 ms, more on a loaded machine: it runs on
    // its own thread while the daemon enrolls, and posts its result to the
    // loop.
    std::thread init_;
    std::optional<Result<bool>> init_result_;
    std::vector<std::function<void()>> until_served_;
    bool started_ = false;
    bool registering_ = false;
    bool namespace_ready_ = false;
    bool anchor_settled_ = false;
    bool serving_ = false;
    bool stopping_ = false;
};

}  // namespace exitpolicy::pmix_server
