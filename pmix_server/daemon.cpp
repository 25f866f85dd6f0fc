// SPDX-License-Identifier: Apache-2.0
// daemon.cpp - the node's side of the step: the loop, the PMIx server's
// link to the overlay agent, the stop, and what the local links ask. The
// tasks and their ends are in daemon_tasks.cpp, the local socket and
// slurmstepd's control link in local_links.cpp. See daemon.hpp.
#include "daemon.hpp"

#include "event_anchor.hpp"
#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "pmix_server/log.hpp"
#include "pmix_compat.hpp"
#include "pmix_host.hpp"
#include "protocol/events.hpp"
#include "protocol/process.hpp"
#include "protocol/timeouts.hpp"

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
#include <sys/resource.h>
#include <sys/select.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {

Daemon::Daemon(protocol::DaemonArgs args, protocol::Secret secret) : args_(std::move(args)), secret_(secret) {}

Daemon::~Daemon()
{
    // The links first: a child whose parent stops reroutes what it has not
    // had confirmed as soon as it sees the link close.
    agent_.reset();
    local_.reset();
    pmi_.reset();
    anchor_.reset();  // a client of our server: it finalizes before the server
    // Work for the loop, which no longer runs, is dropped while the library
    // is still up: each upcall it carried answers its client then.
    posted_.close();
    pmix_.reset();
    timers_.reset();
    first_client_.reset();
    if (reserved_.fd >= 0)
        ::close(reserved_.fd);
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
    pmix_ = std::make_unique<PmixHost>(*this);
    anchor_ = std::make_unique<EventAnchor>(EventAnchor::Services{
        args_, base_.get(), *timers_, [this](std::function<void()> fn) { post(std::move(fn)); }});
    adopt_pmi_sockets();
    plan_server();
    start_pmix_when_asked();
    watch_signals();
    open_local_links();
    if (planned_)
        ready();  // the tasks may start: their server's socket is there
    agent_->start();
    event_base_loop(base_.get(), EVLOOP_NO_EXIT_ON_EMPTY);
    if (pmix_init_.joinable())
        pmix_init_.join();
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

// A planned server starts when its first client connects (the reserved
// socket turns readable); any other now.
void Daemon::start_pmix_when_asked()
{
    if (!planned_) {
        start_pmix();
        return;
    }
    first_client_.reset(event_new(
        base_.get(), reserved_.fd, EV_READ,
        [](evutil_socket_t, short, void* arg) {
            log::debug("a PMIx client connects: the PMIx server starts");
            guarded("starting the PMIx server", [arg] { static_cast<Daemon*>(arg)->start_pmix(); });
        },
        this));
    if (!first_client_ || event_add(first_client_.get(), nullptr) != 0)
        start_pmix();
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

void Daemon::plan_server()
{
    if (args_.reserved_fd < 0) {
        log::debug("the PMIx server starts before the tasks: slurmstepd planned no environment for them");
        return;
    }
    reserved_.fd = std::exchange(args_.reserved_fd, -1);
    ::fcntl(reserved_.fd, F_SETFD, FD_CLOEXEC);
    sockaddr_in sin{};
    socklen_t len = sizeof sin;
    if (::getsockname(reserved_.fd, reinterpret_cast<sockaddr*>(&sin), &len) == 0 && sin.sin_family == AF_INET)
        reserved_.port = ntohs(sin.sin_port);
    // slurmstepd planned the tasks' environment for the library the project
    // was built with. Another release of the same minor version serves it
    // alike (PMIX_VERSION tells a client its server's major and minor); any
    // other library cannot adopt the socket the tasks were told of: they
    // fail at once rather than wait for a server that never answers.
    const auto version = compat::running_version();
    const auto planned = protocol::library_version(args_.planned_version);
    const int gate = version ? compat::activation_errno(*version) : 0;
    if (!version || !planned || version->major != planned->major || version->minor != planned->minor || !gate ||
        reserved_.port == 0) {
        log::error("the tasks' PMIx environment names OpenPMIx %s, this node runs %s: their PMIx_Init fails "
                   "(rebuild exitpolicy for the installed OpenPMIx)",
                   args_.planned_version.c_str(), version ? version->text.c_str() : "an unknown version");
        ::close(std::exchange(reserved_.fd, -1));
        return;
    }
    if (version->text != planned->text)
        log::info("the tasks' PMIx environment names OpenPMIx %s, this node runs %s", planned->text.c_str(),
                  version->text.c_str());
    planned_ = PlannedServer{reserved_.port, args_.node_id, args_.dir, args_.hostname, planned->text};
    // Before any thread of ours: the clients' job data comes over the socket
    // (planned_environment), not from a shared-memory store that would have
    // to exist before the server does.
    ::setenv("PMIX_MCA_gds", "hash", 1);
    activation::arm(reserved_, gate);
    log::debug("the PMIx server will listen on 127.0.0.1:%u once a client connects", reserved_.port);
}

void Daemon::start_pmix()
{
    if (pmix_started_ || stopping_)
        return;
    pmix_started_ = true;
    first_client_.reset();
    pmix_->discover_topology();
    // Before the library listens: another user's process never gets a
    // byte of it, whatever uid its client claims (OpenPMIx's native
    // security over TCP takes the one it says).
    const auto running = compat::running_version();
    const int went_away = running && compat::activation_errno(*running) ? compat::activation_errno(*running) : EAGAIN;
    activation::serve_only(static_cast<uid_t>(args_.uid), went_away);
    pmix_init_ = std::thread([this] {
        auto started = pmix_->init(args_.dir, planned_ ? &*planned_ : nullptr);
        post([this, started = std::move(started)] {
            pmix_init_result_ = started;
            if (started)
                anchor_->start([this](bool) {
                    anchor_settled_ = true;
                    // The tasks that asked meanwhile get their environment.
                    if (local_)
                        local_->release_waiting();
                    pmix_served();
                });
            serve();
        });
    });
}

void Daemon::when_served(std::function<void()> fn)
{
    if (pmix_served_)
        fn();
    else if (!stopping_)
        until_served_.push_back(std::move(fn));
}

void Daemon::pmix_served()
{
    if (pmix_served_ || !namespace_ready_ || !anchor_settled_ || !agent_->linked_up() || stopping_)
        return;
    pmix_served_ = true;
    for (auto& fn : std::exchange(until_served_, {}))
        fn();
    if (planned_) {
        check_planned_environment();
        log::info("serving %zu local ranks of %s (%zu clients waited)", args_.ranks.size(),
                  pmix_->nspace().c_str(), activation::held());
        activation::open();
    }
}

void Daemon::check_planned_environment()
{
    if (args_.ranks.empty())
        return;
    const std::uint32_t rank = args_.ranks.front();
    auto actual = pmix_->environment(rank);
    if (!actual) {
        log::error("cannot check the tasks' PMIx environment: %s", actual.error().c_str());
        return;
    }
    const auto differences = environment_differences(planned_environment(*planned_, pmix_->nspace(), rank), *actual);
    for (const auto& d : differences)
        log::error("the tasks' PMIx environment is not the library's: %s", d.c_str());
    if (differences.empty())
        log::debug("the tasks' PMIx environment is the library's");
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
    if (planned_)
        agent_->serving();
    if (!pmix_init_result_ || serving_)
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
        pmix_served();
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
    pmix_served();
}

void Daemon::node_lost(const protocol::NodeDown& d)
{
    std::vector<std::uint32_t> fresh;
    for (std::uint32_t r : d.ranks) {
        failure_known(r, true);  // lost: nothing it did can be a reaction
        if (notified_.insert(r).second)
            fresh.push_back(r);
    }
    when_served([this, d, fresh] { pmix_->notify_node_down(d.node, d.hostname, d.ranks, fresh, d.exit_code); });
}

void Daemon::relayed(const protocol::Relay& r)
{
    when_served([this, r] { pmix_->deliver_relayed(r.code, r.source_rank, r.info); });
}

void Daemon::terminate(const protocol::Terminate& t)
{
    terminate_local(t.reason, t.kill_after_ms);
}

void Daemon::dmodex(std::uint32_t rank, Agent::Done done)
{
    // A peer wants what a local rank committed: it will, once it connects.
    start_pmix();
    when_served([this, rank, done = std::move(done)]() mutable { pmix_->dmodex(rank, std::move(done)); });
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
    // both at its gate (pmix_served) instead, so its tasks start at once.
    if (!planned_ && (!namespace_ready_ || !agent_->linked_up()))
        return;
    if (ready_sent_ || args_.ready_fd < 0)
        return;
    ready_sent_ = true;
    const std::string line = "ready " + std::to_string(::getpid()) + "\n";
    [[maybe_unused]] auto n = ::write(args_.ready_fd, line.data(), line.size());
    ::close(args_.ready_fd);
    args_.ready_fd = -1;
    if (!planned_)
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
    bool told = false;
    if (agent_) {
        agent_->stop();
        // The loop ends once the control link has taken it (or broke).
        told = local_ && local_->tell_slurmstepd(agent_->confirmed(), [base = base_.get()] {
            event_base_loopexit(base, nullptr);
        });
    }
    // Clients held at the gate hear at once that there is no server.
    activation::close_held();
    if (anchor_)
        anchor_->release();
    if (args_.ready_fd >= 0) {  // never became ready: the plugin reads EOF
        ::close(args_.ready_fd);
        args_.ready_fd = -1;
    }
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
    return planned_ || anchor_settled_;
}

Result<std::vector<std::string>> Daemon::task_environment(std::uint32_t rank, pid_t pid)
{
    auto env = planned_ ? Result<std::vector<std::string>>::ok(planned_environment(
                              *planned_, protocol::step_nspace(args_.job_id, args_.step_id), rank))
                        : pmix_->environment(rank);
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
