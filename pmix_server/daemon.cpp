// SPDX-License-Identifier: Apache-2.0
// daemon.cpp - the node's side of the step: the loop, the PMIx server's
// link to the overlay agent, the stop, and what the local links ask. The
// tasks and their ends are in daemon_tasks.cpp, the local socket and
// slurmstepd's control link in local_links.cpp. See daemon.hpp.
#include "daemon.hpp"

#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "pmix_server/log.hpp"
#include "pmix_host.hpp"
#include "protocol/events.hpp"
#include "protocol/process.hpp"
#include "protocol/timeouts.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <algorithm>
#include <utility>
#include <charconv>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <netinet/tcp.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {

Daemon::Daemon(protocol::DaemonArgs args, protocol::Secret secret)
    : args_(std::move(args)), secret_(secret), ready_(std::exchange(args_.ready_fd, -1))
{
    served_.place() = args_.place();
    served_.ntasks = args_.ntasks;
    served_.dir = args_.dir;
    served_.topology = args_.topology;
}

Daemon::~Daemon()
{
    // The links first: a child whose parent stops reroutes what it has not
    // had confirmed as soon as it sees the link close.
    agent_.reset();
    local_.reset();
    pmi_.reset();
    if (pmix_)
        pmix_->drop_anchor();  // a client of our server: it finalizes before the server
    // Work for the loop, which no longer runs, is dropped while the library
    // is still up: each upcall it carried answers its client then.
    posted_.close();
    pmix_.reset();
    timers_.reset();
    wake_.reset();
    signals_.clear();
    tasks_.reset();  // their exit watches
    base_.reset();
}

void Daemon::post(std::function<void()> fn)
{
    if (posted_.push(std::move(fn)))
        event_active(wake_.get(), EV_READ, 0);
}

int Daemon::run()
{
    if (!make_loop())
        return 1;
    AgentSetup setup;
    setup.place() = args_.place();
    setup.fe_host = args_.fe_host;
    setup.fe_port = args_.fe_port;
    agent_ = std::make_unique<Agent>(base_.get(), std::move(setup), secret_, static_cast<Agent::Node&>(*this));
    pmix_ = std::make_unique<PmixService>(args_, base_.get(), *timers_, *this, static_cast<PmixService::Step&>(*this));
    adopt_pmi_sockets();
    pmix_->plan(std::exchange(args_.reserved_fd, -1));
    pmix_->start_when_asked();
    watch_signals();
    open_local_links();
    if (pmix_->planned())
        ready();  // the tasks may start: their server's socket is there
    agent_->start();
    event_base_loop(base_.get(), EVLOOP_NO_EXIT_ON_EMPTY);
    pmix_->join();
    return exit_code_;
}

bool Daemon::make_loop()
{
    // A pidfd per local task, and a PMI socket each: a node of many tasks
    // needs more descriptors than the soft limit the tasks got (often
    // 1 024); the hard one is the user's to take.
    if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        const rlim_t was = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &lim) == 0)
            log::debug("descriptor limit raised from %llu to %llu", static_cast<unsigned long long>(was),
                       static_cast<unsigned long long>(lim.rlim_max));
    }
    evthread_use_pthreads();
    base_.reset(event_base_new());
    if (!base_)
        return false;
    // Two priorities: a task's exit (0) is seen before anything else that
    // became ready with it (1, the default), such as another node's news.
    event_base_priority_init(base_.get(), 2);
    wake_.reset(event_new(
        base_.get(), -1, EV_PERSIST,
        [](evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->posted_.run(); },
        this));
    timers_ = std::make_unique<Timers>(base_.get());
    tasks_ = std::make_unique<LocalTasks>(base_.get(), *timers_, [this] {
        if (pmi_)
            pmi_->read_pending();
    });
    return true;
}

// Told to end (by hand, or by a process tracker that reaches us): the same
// way out as at the step's end, so that the clients' cleanup runs.
void Daemon::watch_signals()
{
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        protocol::EventHandle e(evsignal_new(
            base_.get(), sig,
            [](evutil_socket_t signo, short, void* arg) {
                auto* d = static_cast<Daemon*>(arg);
                log::info("%s: stopping", strsignal(static_cast<int>(signo)));
                guarded("stopping", [d] { d->agent_->drain(); });
            },
            this));
        if (e && event_add(e.get(), nullptr) == 0)
            signals_.push_back(std::move(e));
    }
}

// ---- the PMI service --------------------------------------------------------------------

void Daemon::adopt_pmi_sockets()
{
    if (args_.pmi_fd < 0)
        return;
    std::vector<int> sockets;
    for (std::size_t i = 0; i < args_.ranks.size(); ++i) {
        const int fd = args_.pmi_fd + static_cast<int>(i);
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // nothing the daemon starts holds a task's socket
        // Above what the PMIx library select()s on (process::move_above).
        sockets.push_back(protocol::process::move_above(fd, FD_SETSIZE));
    }
    pmi_ = std::make_unique<PmiServer>(base_.get(), *this);
    pmi_->adopt(args_.ranks, sockets);
}

// ---- the node's side of the overlay --------------------------------------------------

void Daemon::mapped()
{
    serve();
}

void Daemon::serve()
{
    const protocol::StepMap* map = agent_->map();
    if (!map || stopping_)
        return;
    if (pmi_)
        pmi_->serve(*map);
    // A planned server's node serves the overlay without it: what needs the
    // server waits for it (when_served, dmodex).
    if (pmix_->planned())
        agent_->serving();
    // Any other's once its namespace is being registered: a direct-modex
    // request the agent held is queued by the library until the namespace
    // is registered and the rank has committed.
    if (pmix_->register_namespace(*map))
        agent_->serving();
}

void Daemon::linked_up()
{
    ready();
    pmix_->check_served();
}

// ---- PmixService::Step ----------------------------------------------------------------

bool Daemon::way_up_open() const
{
    return agent_->linked_up();
}

void Daemon::initialized()
{
    serve();
}

void Daemon::registered()
{
    ready();
}

void Daemon::environment_released()
{
    // The tasks that asked meanwhile get their environment.
    if (local_)
        local_->release_waiting();
}

void Daemon::failed()
{
    stop(1);
}

void Daemon::node_lost(const protocol::NodeDown& d)
{
    std::vector<std::uint32_t> fresh;
    for (std::uint32_t r : d.ranks) {
        failure_known(r, true);  // lost: nothing it did can be a reaction
        if (notified_.insert(r).second)
            fresh.push_back(r);
    }
    pmix_->when_served([this, d, fresh] { pmix_->host().notify_node_down(d.node, d.hostname, d.ranks, fresh, d.exit_code); });
}

void Daemon::relayed(const protocol::Relay& r)
{
    pmix_->when_served([this, r] { pmix_->host().deliver_relayed(r.code, r.source_rank, r.info); });
}

void Daemon::terminate(const protocol::Terminate& t)
{
    terminate_local(t.reason, t.kill_after_ms);
}

void Daemon::dmodex(std::uint32_t rank, Agent::Done done)
{
    // A peer wants what a local rank committed: it will, once it connects.
    pmix_->start();
    pmix_->when_served([this, rank, done = std::move(done)]() mutable { pmix_->host().dmodex(rank, std::move(done)); });
}

// ---- what the PMIx side asks of the step -----------------------------------------------

void Daemon::fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done)
{
    agent_->fence(std::move(ranks), std::move(data), timeout_s, std::move(done));
}

void Daemon::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    agent_->direct_modex(rank, timeout_s, std::move(done));
}

void Daemon::data_request(protocol::DataRequest request, int timeout_s, DataDone done)
{
    agent_->data_request(std::move(request), timeout_s, std::move(done));
}


void Daemon::ready()
{
    // Serving once the namespace is in and the way up is open: a task's
    // first fence must find both. A planned server's clients wait for
    // both at its gate (PmixService::check_served) instead, so its tasks start at once.
    if (!pmix_->planned() && (!pmix_->namespace_ready() || !agent_->linked_up()))
        return;
    if (!ready_)
        return;
    const std::string line = "ready " + std::to_string(::getpid()) + "\n";
    [[maybe_unused]] auto n = ::write(ready_.get(), line.data(), line.size());
    ready_.reset();
    if (!pmix_->planned())
        log::info("serving %zu local ranks of %s", args_.ranks.size(), pmix_->host().nspace().c_str());
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
    bool told = false;
    if (agent_) {
        agent_->stop();
        // The loop ends once the control link has taken it (or broke).
        told = local_ && local_->tell_slurmstepd(agent_->confirmed(), [base = base_.get()] {
            event_base_loopexit(base, nullptr);
        });
    }
    pmix_->stop();
    ready_.reset();  // never became ready: the plugin reads EOF
    if (!told) {
        event_base_loopexit(base_.get(), nullptr);
        return;
    }
    // Or at the latest after this bound: libevent writes the last word, not us.
    constexpr auto last_word = protocol::timeouts::daemon_last_word;
    const timeval bound{last_word.count() / 1000, last_word.count() % 1000 * 1000};
    event_base_loopexit(base_.get(), &bound);
}

void Daemon::open_local_links()
{
    local_ = std::make_unique<LocalLinks>(base_.get(), static_cast<uid_t>(args_.uid), args_.ranks,
                                          static_cast<LocalLinks::Node&>(*this));
    local_->listen(args_.dir + "/daemon.sock");
    if (args_.control_fd >= 0)
        local_->adopt_control(std::exchange(args_.control_fd, -1), std::exchange(args_.control_backlog_fd, -1));
}

// ---- LocalLinks::Node ----------------------------------------------------------------

// A task starts once the event anchor is in place: its default event
// handler must find the anchor's registration. A planned server's clients
// wait for it at the gate instead: the task has its environment at once.
bool Daemon::environment_ready() const
{
    return pmix_->environment_ready();
}

Result<std::vector<std::string>> Daemon::task_environment(std::uint32_t rank, pid_t pid)
{
    auto env = pmix_->environment(rank);
    // The task itself asks, before exec: its pid is the peer's.
    if (env)
        tasks_->add(rank, pid, protocol::Fd(protocol::process::move_above(protocol::process::open_pidfd(pid), FD_SETSIZE)));
    return env;
}

void Daemon::task_started(const protocol::TaskStarted& t)
{
    if (tasks_->known(t.rank))
        return;
    const pid_t pid = static_cast<pid_t>(t.pid);
    // Above the descriptors the PMIx library select()s on (a node of a
    // thousand tasks holds a thousand pidfds).
    protocol::Fd pidfd(protocol::process::move_above(protocol::process::open_pidfd_of(pid, t.start_time), FD_SETSIZE));
    if (!pidfd && errno == ESRCH) {
        log::debug("rank %u (pid %d) ended before this daemon heard it start", t.rank, static_cast<int>(pid));
        return;  // nothing to signal: its pid may be another's now
    }
    tasks_->add(t.rank, pid, std::move(pidfd));
}

void Daemon::step_ends()
{
    log::debug("stopping at the step's end (%zu outcomes to flush)", agent_->unacked());
    agent_->drain();
}

// slurmstepd is gone (killed, crashed): nobody is left to stop this daemon
// at the step's end, so it stops now, as at that end (drained within its
// bound). It never outlives root.
void Daemon::slurmstepd_gone()
{
    agent_->drain();
}

}  // namespace exitpolicy::pmix_server
