// SPDX-License-Identifier: Apache-2.0
// daemon.cpp - the node's side of the step: the loop, the local socket and
// tasks, the PMIx server's link to the overlay agent. See daemon.hpp.
#include "daemon.hpp"

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
namespace {

std::int64_t now_us()
{
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
}

// The process has begun to exit (PF_EXITING in /proc/PID/stat's flags): a
// signal can no longer change how it ends. Its sockets may be closed and
// its peers told, while its pidfd turns readable only once it is gone.
bool exiting(pid_t pid)
{
    constexpr unsigned long pf_exiting = 0x4;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat))
        return false;
    const auto paren = stat.rfind(')');  // the name may hold anything
    if (paren == std::string::npos)
        return false;
    std::istringstream fields(stat.substr(paren + 1));
    std::string skip;
    unsigned long flags = 0;
    for (int i = 3; i < 9; ++i)  // state ppid pgrp session tty_nr tpgid
        fields >> skip;
    return fields >> flags && (flags & pf_exiting) != 0;
}

// A failure of the task's own: an exit or a signal, not an abort or the
// SIGTERM or SIGKILL of a teardown.
bool own_end(int wait_status, bool aborted)
{
    TaskOutcome t;
    t.wait_status = wait_status;
    return !aborted && !killed_by_teardown(t);
}

}  // namespace

// One connection on the local socket.
struct Daemon::Local {
    Daemon* d = nullptr;
    bufferevent* bev = nullptr;
    uid_t uid = static_cast<uid_t>(-1);
    pid_t pid = -1;  // the peer, as the kernel says
    bool control = false;  // slurmstepd's control link
    ~Local()
    {
        if (bev)
            bufferevent_free(bev);
    }
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

void Daemon::peer_failed(const wire::Event& e)
{
    failure_known(e.rank, own_end(e.wait_status, e.code == wire::pmix::proc_requested_abort));
    if (notified_.insert(e.rank).second)  // the origin told its own clients already
        pmix_->notify_terminated(e.rank, e.code, e.exit_code);
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


// ---- abort, clients ----------------------------------------------------------------

void Daemon::abort(std::uint32_t rank, int status, std::string message)
{
    // The first call is the failure's moment: Open MPI's MPI_Abort calls
    // PMIx_Abort twice (its peers, then everyone), the teardown in between.
    aborts_.try_emplace(rank, AbortCall{status, now_us()});
    failure_known(rank, false);
    log::info("rank %u called abort with status %d: %s", rank, status, message.c_str());
    agent_->to_root(wire::Abort{rank, status, wire::clipped(message)}.encode());
}


void Daemon::relay(int code, std::uint32_t source_rank, wire::Bytes info)
{
    agent_->to_root(wire::Relay{args_.node_id, code, source_rank, std::move(info)}.encode());
}

void Daemon::terminate_step(const std::string& why)
{
    agent_->to_root(wire::Terminate{wire::clipped(why)}.encode());
}

void Daemon::task_log(std::uint32_t rank, const std::string& text)
{
    // A long line goes whole, in pieces the FE prints one after the other.
    for (std::size_t at = 0; at < text.size() || at == 0; at += wire::max_string)
        agent_->to_root(wire::Notice{args_.node_id, rank, text.substr(at, wire::max_string)}.encode());
}

void Daemon::client_connected(std::uint32_t rank)
{
    connected_.insert(rank);
    // OpenPMIx talks to its clients over loopback TCP without TCP_NODELAY:
    // an event sent while the client still owes a delayed ACK (right after a
    // fence, say) waits up to 40 ms. The sockets are the library's, but
    // they live in this process: turn Nagle off on every TCP socket we have.
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", std::filesystem::directory_options::skip_permission_denied)) {
        int fd = -1;
        const std::string name = entry.path().filename();
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc())
            continue;
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
            (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) ||
            ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
            continue;
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    }
}

void Daemon::client_finalized(std::uint32_t rank)
{
    finalized_.insert(rank);
}

void Daemon::failure_known(std::uint32_t rank, bool own_end)
{
    if (!first_known_)
        first_known_ = KnownFailure{rank, now_us(), own_end};
}

// Signalled by our own teardown, or a PMIx client (which can have been
// told) that ended or aborted at `when_us`, after this node knew of another
// task's failure. A task that never used PMIx heard of nothing: its failure
// is its own.
bool Daemon::collateral(std::uint32_t rank, std::int64_t when_us, bool own_end) const
{
    // A task that called abort failed by itself when it did: the teardown
    // that abort started may still find it running.
    if (torn_down_.count(rank) && !aborts_.count(rank))
        return true;
    if (!connected_.count(rank) || !first_known_ || first_known_->rank == rank)
        return false;
    // An abort, and the teardown it starts, can be a reaction to this
    // task's own end, whose sockets closed before the end was seen: then
    // the root cause decides (reaction_window_us in policy.hpp).
    const std::int64_t margin = own_end && !first_known_->own_end ? reaction_window_us : 0;
    return when_us > first_known_->at_us + margin;
}

void Daemon::terminate_local(const std::string& why, std::uint32_t kill_after_ms)
{
    if (!torn_down_.empty())
        return;  // a teardown is under way here already
    std::set<std::uint32_t> running;
    for (const auto& [rank, task] : tasks_)
        if (!ended_.count(rank) && !exited(*task))
            running.insert(rank);
    log::info("terminating %zu local tasks: %s", running.size(), why.c_str());
    if (running.empty())
        return;
    torn_down_ = running;
    signal_local(SIGTERM, running);
    signal_local(SIGCONT, running);  // a stopped task must see its SIGTERM
    after_ms(kill_after_ms, [this] {
        std::set<std::uint32_t> left;
        for (std::uint32_t rank : torn_down_)
            if (!ended_.count(rank))
                left.insert(rank);
        if (left.empty())
            return;
        log::info("%zu local tasks outlived SIGTERM: SIGKILL", left.size());
        signal_local(SIGKILL, left);
    });
}

// Asks the kernel, not the loop: an exit whose event is still queued
// behind the one being handled counts, and so does one under way.
bool Daemon::exited(Task& task)
{
    if (task.exited_at_us == 0 && task.pidfd >= 0) {
        pollfd p{task.pidfd, POLLIN, 0};
        // Should the pid be gone and taken by another process between the
        // two looks, the task has exited all the same.
        if ((::poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) || exiting(task.pid))
            task.exited_at_us = now_us();
    }
    return task.exited_at_us != 0;
}

void Daemon::watch_exit(Task& task)
{
    if (task.pidfd < 0)
        return;  // no pidfds on this kernel: the outcome's own time stands
    task.exit_watch = event_new(
        base_, task.pidfd, EV_READ,
        [](evutil_socket_t, short, void* arg) {
            auto* t = static_cast<Task*>(arg);
            if (t->exited_at_us == 0)
                t->exited_at_us = now_us();
        },
        &task);
    if (!task.exit_watch)
        return;
    event_priority_set(task.exit_watch, 0);
    if (event_add(task.exit_watch, nullptr) != 0) {
        event_free(task.exit_watch);
        task.exit_watch = nullptr;
    }
}

void Daemon::signal_local(int sig, const std::set<std::uint32_t>& ranks)
{
    for (std::uint32_t rank : ranks) {
        auto it = tasks_.find(rank);
        if (it == tasks_.end() || ended_.count(rank))
            continue;
        const Task& t = *it->second;
        if (t.pidfd >= 0) {
            if (::syscall(SYS_pidfd_send_signal, t.pidfd, sig, nullptr, 0) != 0 && errno != ESRCH)
                log::error("cannot signal rank %u: %s", rank, std::strerror(errno));
        } else if (t.pid > 0) {
            ::kill(t.pid, sig);  // no pidfds on this kernel
        }
    }
}

// ---- outcomes ----------------------------------------------------------------------

void Daemon::outcome(const wire::Outcome& in)
{
    wire::Outcome o = in;
    log::debug("rank %u ended: wait status %d, at %lld us", o.rank, o.wait_status,
               static_cast<long long>(o.end_time_us));
    ended_.insert(o.rank);
    if (const auto task = tasks_.find(o.rank); task != tasks_.end() && task->second->exited_at_us > 0)
        o.end_time_us = std::min(o.end_time_us, task->second->exited_at_us);
    const auto aborted = aborts_.find(o.rank);
    if (aborted != aborts_.end()) {
        o.flags |= wire::Outcome::flag_aborted;
        o.abort_status = aborted->second.status;
        o.end_time_us = std::min(o.end_time_us, aborted->second.when_us);
    }
    const bool was_client = connected_.count(o.rank) != 0;
    if (was_client) {
        o.flags |= wire::Outcome::flag_finalized_known;
        if (finalized_.count(o.rank))
            o.flags |= wire::Outcome::flag_finalized;
    }
    if (const auto event = wire::pmix::termination_event(o, args_.node_id)) {
        const bool called_abort = aborted != aborts_.end();
        const std::int64_t when = called_abort ? aborted->second.when_us : o.end_time_us;
        const bool own = own_end(o.wait_status, called_abort);
        if (collateral(o.rank, when, own))
            o.flags |= wire::Outcome::flag_collateral;
        failure_known(o.rank, own);
        // Our own clients first, then everyone else through the FE.
        if (notified_.insert(o.rank).second)
            pmix_->notify_terminated(o.rank, event->code, event->exit_code);
        agent_->task_failed(*event);
    }
    agent_->report(o);
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
Daemon::Local* Daemon::confirm_to_slurmstepd()
{
    const auto control = std::find_if(locals_.begin(), locals_.end(), [](const auto& l) { return l->control; });
    const auto& confirmed = agent_->confirmed();
    if (control == locals_.end()) {
        log::debug("no control link to tell slurmstepd that srun has %zu of its outcomes", confirmed.size());
        return nullptr;
    }
    log::debug("telling slurmstepd that srun has %zu of its outcomes", confirmed.size());
    if (confirmed.empty())
        return nullptr;  // its silence says as much
    // Frames on the control link are read as unauthenticated ones: at most
    // wire::max_body bytes, a count and 8 bytes an ack.
    constexpr std::size_t per_frame = (wire::max_body - 4) / 8;
    wire::in_pieces(
        confirmed, per_frame,
        [&](std::vector<wire::Ack> part) {
            const wire::Bytes frame = wire::Acks{std::move(part)}.encode();
            bufferevent_write((*control)->bev, frame.data(), frame.size());
        });
    return control->get();
}

// ---- local socket --------------------------------------------------------------------

// A local connection: a task's or root's by the socket's path (pid and
// uid as the kernel says), or slurmstepd's control link.
void Daemon::add_local(int fd, uid_t uid, pid_t pid, bool control)
{
    auto l = std::make_unique<Local>();
    l->d = this;
    l->uid = uid;
    l->pid = pid;
    l->control = control;
    l->bev = bufferevent_socket_new(base_, fd, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(
        l->bev,
        [](bufferevent* bev, void* arg) noexcept {
            auto* l = static_cast<Local*>(arg);
            try {
                evbuffer* in = bufferevent_get_input(bev);
                while (evbuffer_get_length(in) >= wire::header_size) {
                    std::array<std::uint8_t, wire::header_size> head{};
                    evbuffer_copyout(in, head.data(), head.size());
                    auto h = wire::decode_header(head);
                    if (!h || (h->type != wire::Type::env_request && h->type != wire::Type::outcome &&
                               h->type != wire::Type::stop)) {
                        // Bad magic, version, type or length: nothing more of it is read.
                        const std::string why = h ? "a " + std::string(wire::type_name(h->type)) +
                                                        " frame is no local request"
                                                  : h.error();
                        log::info("closed a local connection of pid %d: %s", static_cast<int>(l->pid),
                                  why.c_str());
                        l->drop();
                        return;
                    }
                    if (evbuffer_get_length(in) < wire::header_size + h->length)
                        return;  // the rest is on its way
                    evbuffer_drain(in, wire::header_size);
                    wire::Bytes body(h->length);
                    evbuffer_remove(in, body.data(), body.size());
                    try {
                        l->d->on_local_frame(*l, h->type, body);
                    } catch (const std::exception& e) {
                        log::error("local request: %s", e.what());
                    }
                }
            } catch (...) {
                log::error("closed a local connection of pid %d: internal error", static_cast<int>(l->pid));
                l->drop();
            }
        },
        nullptr,
        [](bufferevent*, short, void* arg) {
            auto* l = static_cast<Local*>(arg);
            Daemon* d = l->d;
            const bool control = l->control;
            l->drop();
            // slurmstepd is gone (killed, crashed): nobody is left to stop
            // this daemon at the step's end, so it stops now, as at that
            // end (drained within its bound). It never outlives root.
            if (control) {
                log::info("slurmstepd's control link closed: stopping");
                d->agent_->drain();
            }
        },
        l.get());
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    locals_.push_back(std::move(l));
}

void Daemon::listen_local()
{
    const std::string path = args_.dir + "/daemon.sock";
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path)) {
        log::error("socket path too long: %s", path.c_str());
        return;
    }
    std::strcpy(sun.sun_path, path.c_str());
    ::unlink(path.c_str());
    local_listener_ = evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Daemon*>(arg);
            ucred cred{};
            socklen_t len = sizeof(cred);
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                (cred.uid != 0 && cred.uid != d->args_.uid)) {
                ::close(fd);
                return;
            }
            d->add_local(fd, cred.uid, cred.pid, false);
        },
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 64, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
    if (!local_listener_)
        log::error("cannot listen on %s: %s", path.c_str(), std::strerror(errno));
    // slurmstepd's control link, which no other process holds.
    if (args_.control_fd >= 0) {
        ::fcntl(args_.control_fd, F_SETFD, FD_CLOEXEC);
        evutil_make_socket_nonblocking(args_.control_fd);
        add_local(std::exchange(args_.control_fd, -1), 0, -1, true);
    }
}

void Daemon::on_local_frame(Local& l, wire::Type type, std::span<const std::uint8_t> body)
{
    auto reply = [&](const wire::Bytes& frame) { bufferevent_write(l.bev, frame.data(), frame.size()); };
    switch (type) {
    case wire::Type::env_request: {
        // A task starts once the event anchor is in place: its default
        // event handler must find the anchor's registration.
        if (!anchor_settled_) {
            env_waiting_.emplace_back(&l, wire::Bytes(body.begin(), body.end()));
            return;
        }
        auto r = wire::EnvRequest::decode(body);
        wire::EnvReply out;
        if (!r || std::find(args_.ranks.begin(), args_.ranks.end(), r->rank) == args_.ranks.end()) {
            out.status = 1;
            out.error = r ? "rank " + std::to_string(r->rank) + " is not a task of this node" : r.error();
        } else if (auto env = pmix_->environment(r->rank); !env) {
            out.status = 1;
            out.error = env.error();
        } else {
            // The task itself asks, before exec: its pid is the peer's.
            auto task = std::make_unique<Task>();
            task->pid = l.pid;
            task->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, l.pid, 0));
            watch_exit(*task);
            tasks_[r->rank] = std::move(task);
            out.env = std::move(*env);
        }
        auto frame = out.encode();
        if (frame.empty() || frame.size() - wire::header_size > wire::max_body) {
            wire::EnvReply too_long;
            too_long.status = 1;
            too_long.error = "the PMIx environment of rank " + std::to_string(r->rank) +
                             " is over the " + std::to_string(wire::max_body / 1024) +
                             " KiB its reply carries (are PMIX_MCA_* settings that long?)";
            frame = too_long.encode();
        }
        reply(frame);
        return;
    }
    case wire::Type::outcome: {
        if (!l.control)
            return;  // only slurmstepd reports exits, on its control link
        auto o = wire::Outcome::decode(body);
        if (!o)
            return;
        if (std::find(args_.ranks.begin(), args_.ranks.end(), o->rank) == args_.ranks.end()) {
            log::error("an outcome for rank %u, which is not a task of this node, is ignored", o->rank);
            return;
        }
        outcome(*o);
        reply(wire::Ack{o->rank, o->epoch}.encode());
        return;
    }
    case wire::Type::stop:
        if (!l.control)
            return;
        log::debug("stopping at the step's end (%zu outcomes to flush)", agent_->unacked());
        reply(wire::Ack{}.encode());
        agent_->drain();
        return;
    default:
        return;
    }
}

}  // namespace exitpolicy::pmixd