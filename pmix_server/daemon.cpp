// SPDX-License-Identifier: Apache-2.0
// daemon.cpp - the node's side of the step: the loop, the PMIx server's
// link to the overlay agent, the stop. The tasks and their ends are in
// daemon_tasks.cpp, the local socket in daemon_local.cpp. See daemon.hpp.
#include "daemon.hpp"
#include "daemon_local.hpp"

#include "event_anchor.hpp"
#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "log.hpp"
#include "pmix_host.hpp"
#include "protocol/events.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <pmix_common.h>

#include <algorithm>
#include <utility>
#include <charconv>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

namespace exitpolicy::pmixd {

Daemon::Daemon(Args args, wire::Secret secret) : args_(std::move(args)), secret_(secret) {}

Daemon::Task::~Task()
{
    if (exit_watch)
        event_free(exit_watch);
    if (pidfd >= 0)
        ::close(pidfd);
}

Daemon::~Daemon()
{
    // The links first: a child whose parent stops reroutes what it has not
    // had confirmed as soon as it sees the link close.
    agent_.reset();
    locals_.clear();
    anchor_.reset();  // a client of our server: it finalizes before the server
    // Work for the loop, which no longer runs, is dropped while the library
    // is still up: each upcall it carried answers its client then.
    posted_.close();
    pmix_.reset();
    timers_.reset();
    if (local_listener_)
        evconnlistener_free(local_listener_);
    if (wake_)
        event_free(wake_);
    for (event* e : signals_)
        event_free(e);
    tasks_.clear();  // their exit watches
    if (base_)
        event_base_free(base_);
}

void Daemon::post(std::function<void()> fn)
{
    if (posted_.push(std::move(fn)))
        event_active(wake_, EV_READ, 0);
}

int Daemon::run()
{
    evthread_use_pthreads();
    base_ = event_base_new();
    if (!base_)
        return 1;
    // Two priorities: a task's exit (0) is seen before anything else that
    // became ready with it (1, the default), such as another node's news.
    event_base_priority_init(base_, 2);
    wake_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->posted_.run(); },
        this);
    timers_ = std::make_unique<Timers>(base_);
    AgentSetup overlay;
    overlay.job_id = args_.job_id;
    overlay.step_id = args_.step_id;
    overlay.node_id = args_.node_id;
    overlay.hostname = args_.hostname;
    overlay.ranks = args_.ranks;
    overlay.fe_host = args_.fe_host;
    overlay.fe_port = args_.fe_port;
    agent_ = std::make_unique<Agent>(base_, std::move(overlay), secret_, static_cast<Agent::Node&>(*this));
    pmix_ = std::make_unique<PmixHost>(*this);
    pmix_->discover_topology();
    anchor_ = std::make_unique<EventAnchor>(*this);
    pmix_init_ = std::thread([this] {
        auto started = pmix_->init(args_.dir);
        post([this, started = std::move(started)] {
            pmix_init_result_ = started;
            if (started)
                anchor_->start([this](bool) {
                    anchor_settled_ = true;
                    // The tasks that asked meanwhile get their environment.
                    for (auto& [local, frame] : std::exchange(env_waiting_, {}))
                        if (std::any_of(locals_.begin(), locals_.end(), [&](const auto& l) { return l.get() == local; }))
                            on_local_frame(*local, wire::Type::env_request, frame);
                });
            serve();
        });
    });
    // Told to end (by hand, or by a process tracker that reaches us): the
    // same way out as at the step's end, so that the clients' cleanup runs.
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        event* e = evsignal_new(
            base_, sig,
            [](evutil_socket_t signo, short, void* arg) {
                auto* d = static_cast<Daemon*>(arg);
                log::info("%s: stopping", strsignal(static_cast<int>(signo)));
                d->agent_->drain();
            },
            this);
        if (e && event_add(e, nullptr) == 0)
            signals_.push_back(e);
        else if (e)
            event_free(e);
    }
    listen_local();
    agent_->start();
    event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY);
    if (pmix_init_.joinable())
        pmix_init_.join();
    return exit_code_;
}

// ---- the node's side of the overlay --------------------------------------------------

void Daemon::mapped()
{
    serve();
}

void Daemon::serve()
{
    const wire::StepMap* map = agent_->map();
    if (!map || !pmix_init_result_ || serving_ || stopping_)
        return;
    serving_ = true;
    if (!*pmix_init_result_) {
        log::error("PMIx server: %s", pmix_init_result_->error().c_str());
        stop(1);
        return;
    }
    auto registered = pmix_->register_namespace(*map, [this](int status) {
        if (status != PMIX_SUCCESS) {
            log::error("registering the namespace failed: %d", status);
            stop(1);
            return;
        }
        namespace_ready_ = true;
        ready();
    });
    if (!registered) {
        log::error("%s", registered.error().c_str());
        stop(1);
        return;
    }
    // A direct-modex request the agent held is queued by the library until
    // the namespace is registered and the rank has committed.
    agent_->serving();
}

void Daemon::linked_up()
{
    ready();
}

void Daemon::node_lost(const wire::NodeDown& d)
{
    std::vector<std::uint32_t> fresh;
    for (std::uint32_t r : d.ranks) {
        failure_known(r, true);  // lost: nothing it did can be a reaction
        if (notified_.insert(r).second)
            fresh.push_back(r);
    }
    pmix_->notify_node_down(d.node, d.hostname, d.ranks, fresh, d.exit_code);
}

void Daemon::relayed(const wire::Relay& r)
{
    pmix_->deliver_relayed(r.code, r.source_rank, r.info);
}

void Daemon::terminate(const wire::Terminate& t)
{
    terminate_local(t.reason, t.kill_after_ms);
}

void Daemon::dmodex(std::uint32_t rank, Agent::Done done)
{
    pmix_->dmodex(rank, std::move(done));
}

// ---- what the PMIx side asks of the step -----------------------------------------------

void Daemon::fence(std::vector<std::uint32_t> ranks, wire::Bytes data, int timeout_s, Done done)
{
    agent_->fence(std::move(ranks), std::move(data), timeout_s, std::move(done));
}

void Daemon::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    agent_->direct_modex(rank, timeout_s, std::move(done));
}

void Daemon::data_request(wire::DataRequest request, int timeout_s, DataDone done)
{
    agent_->data_request(std::move(request), timeout_s, std::move(done));
}


void Daemon::ready()
{
    // Serving once the namespace is in and the way up is open: a task's
    // first fence must find both.
    if (!namespace_ready_ || !agent_->linked_up())
        return;
    if (ready_sent_ || args_.ready_fd < 0)
        return;
    ready_sent_ = true;
    const std::string line = "ready " + std::to_string(::getpid()) + "\n";
    [[maybe_unused]] auto n = ::write(args_.ready_fd, line.data(), line.size());
    ::close(args_.ready_fd);
    args_.ready_fd = -1;
    log::info("serving %zu local ranks of %s", args_.ranks.size(), pmix_->nspace().c_str());
}

void Daemon::after_ms(std::uint32_t ms, std::function<void()> fn)
{
    timers_->after_ms(ms, std::move(fn));
}

void Daemon::stop(int code)
{
    if (stopping_)
        return;
    stopping_ = true;
    exit_code_ = code;
    Local* told = nullptr;
    if (agent_) {
        agent_->stop();
        told = confirm_to_slurmstepd();
    }
    if (anchor_)
        anchor_->release();
    if (args_.ready_fd >= 0) {  // never became ready: the plugin reads EOF
        ::close(args_.ready_fd);
        args_.ready_fd = -1;
    }
    if (!told) {
        event_base_loopexit(base_, nullptr);
        return;
    }
    // The loop ends once the control link has taken what slurmstepd is
    // told (or broke), within a bound: libevent writes it, not us.
    bufferevent_setcb(
        told->bev, nullptr,
        [](bufferevent* bev, void* arg) {
            if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
                event_base_loopexit(static_cast<event_base*>(arg), nullptr);
        },
        [](bufferevent*, short, void* arg) { event_base_loopexit(static_cast<event_base*>(arg), nullptr); }, base_);
    bufferevent_enable(told->bev, EV_WRITE);
    const timeval bound{0, 500'000};
    event_base_loopexit(base_, &bound);
}

// slurmstepd's last word from us: which of its outcomes srun has. It sends
// the others the direct way (an outcome is held until srun has it). Queued
// on the control link (after whatever waits there), which it returns.

}  // namespace exitpolicy::pmixd
