// SPDX-License-Identifier: Apache-2.0
// daemon_tasks.cpp - the node's tasks: their clients' abort, log and
// finalization, failures known here and elsewhere (the facts: which end is
// collateral to them is exitpolicy/node_failures.hpp's judgement), the
// local teardown, each task's exit watched through its pidfd, and the
// outcomes passed on. See daemon.hpp.
#include "daemon.hpp"

#include "event_anchor.hpp"
#include "exitpolicy/outcome.hpp"
#include "pmix_server/log.hpp"
#include "pmi_encoding.hpp"
#include "pmix_host.hpp"
#include "protocol/process.hpp"
#include "protocol/events.hpp"

#include <event2/event.h>

#include <pmix_common.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <utility>

namespace exitpolicy::pmix_server {
namespace {

std::int64_t now_us()
{
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
}

bool ended_by_itself(int wait_status, bool aborted)
{
    TaskOutcome t;
    t.wait_status = wait_status;
    if (aborted)
        t.abort_status = 0;  // whatever its status: an abort
    return exitpolicy::ended_by_itself(t);
}

}  // namespace

void Daemon::peer_failed(const protocol::Event& e)
{
    failure_known(e.rank, ended_by_itself(e.wait_status, e.code == protocol::pmix::proc_requested_abort));
    if (notified_.insert(e.rank).second)  // the origin told its own clients already
        when_served([this, e] { pmix_->notify_terminated(e.rank, e.code, e.exit_code); });
}

// ---- abort, clients ----------------------------------------------------------------

void Daemon::abort(std::uint32_t rank, int status, std::string message)
{
    // The first call is the failure's moment: Open MPI's MPI_Abort calls
    // PMIx_Abort twice (its peers, then everyone), the teardown in between.
    const std::int64_t at_us = aborts_.try_emplace(rank, AbortCall{status, now_us()}).first->second.when_us;
    // MPICH 4.2 does not wait to be ended after its abort: a node-mate can
    // fail over the aborting rank a few milliseconds later (MPI_Finalize's
    // flush to it, say). A task the kernel still runs now cannot be what
    // the application reacted to.
    failures_.abort_called(rank, at_us, application_abort(message), [this] {
        std::set<std::uint32_t> running;
        for (auto& [r, task] : tasks_)
            if (!ended_.count(r) && !exited(*task))
                running.insert(r);
        return running;
    });
    failure_known(rank, false);  // the PMI service's clients hear of it; the first failure is set above
    log::info("rank %u called abort with status %d: %s", rank, status, message.c_str());
    agent_->to_root(protocol::Abort{rank, status, protocol::clipped(message)}.encode());
}


void Daemon::relay(int code, std::uint32_t source_rank, protocol::Bytes info)
{
    agent_->to_root(protocol::Relay{args_.node_id, code, source_rank, std::move(info)}.encode());
}

void Daemon::terminate_step(const std::string& why)
{
    agent_->to_root(protocol::Terminate{protocol::clipped(why)}.encode());
}

void Daemon::task_log(std::uint32_t rank, const std::string& text)
{
    // A long line goes whole, in pieces the FE prints one after the other.
    for (std::size_t at = 0; at < text.size() || at == 0; at += protocol::max_string)
        agent_->to_root(protocol::Notice{args_.node_id, rank, text.substr(at, protocol::max_string)}.encode());
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

void Daemon::failure_known(std::uint32_t rank, bool by_itself)
{
    if (pmi_)
        pmi_->failed(rank);
    failures_.known(rank, now_us(), by_itself);
}

bool Daemon::collateral(std::uint32_t rank, std::int64_t when_us, bool by_itself) const
{
    exitpolicy::NodeFailures::End end;
    end.rank = rank;
    end.when_us = when_us;
    end.by_itself = by_itself;
    end.client = connected_.count(rank) != 0;
    end.torn_down = torn_down_.count(rank) != 0;
    end.aborted = aborts_.count(rank) != 0;
    return failures_.collateral(end);
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
        // Should the pid be gone and taken by another process between the
        // two looks, the task has exited all the same.
        if (protocol::process::ended(task.pidfd) || protocol::process::exiting(task.pid))
            task.exited_at_us = now_us();
    }
    return task.exited_at_us != 0;
}

void Daemon::watch_exit(Task& task)
{
    if (task.pidfd < 0)
        return;  // no pidfds on this kernel: the outcome's own time stands
    task.daemon = this;
    task.exit_watch = event_new(
        base_, task.pidfd, EV_READ,
        [](evutil_socket_t, short, void* arg) {
            auto* t = static_cast<Task*>(arg);
            // What a task wrote on its PMI socket before this exit came
            // first (an MPICH rank's abort, then its exit, then a peer's
            // end over it): read now, not after this event of higher
            // priority.
            if (t->daemon->pmi_)
                t->daemon->pmi_->read_pending();
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
            if (!protocol::process::signal(t.pidfd, sig) && errno != ESRCH)
                log::error("cannot signal rank %u: %s", rank, std::strerror(errno));
        } else if (t.pid > 0) {
            ::kill(t.pid, sig);  // no pidfds on this kernel
        }
    }
}

// ---- outcomes ----------------------------------------------------------------------

void Daemon::outcome(const protocol::Outcome& in)
{
    protocol::Outcome o = in;
    log::debug("rank %u ended: wait status %d, at %lld us", o.rank, o.wait_status,
               static_cast<long long>(o.end_time_us));
    ended_.insert(o.rank);
    if (const auto task = tasks_.find(o.rank); task != tasks_.end() && task->second->exited_at_us > 0)
        o.end_time_us = std::min(o.end_time_us, task->second->exited_at_us);
    const auto aborted = aborts_.find(o.rank);
    if (aborted != aborts_.end()) {
        o.flags |= protocol::Outcome::flag_aborted;
        o.abort_status = aborted->second.status;
        o.end_time_us = std::min(o.end_time_us, aborted->second.when_us);
    }
    const bool was_client = connected_.count(o.rank) != 0;
    if (was_client) {
        o.flags |= protocol::Outcome::flag_finalized_known;
        if (finalized_.count(o.rank))
            o.flags |= protocol::Outcome::flag_finalized;
    }
    if (const auto event = protocol::pmix::termination_event(o, args_.node_id)) {
        const bool called_abort = aborted != aborts_.end();
        const std::int64_t when = called_abort ? aborted->second.when_us : o.end_time_us;
        const bool own = ended_by_itself(o.wait_status, called_abort);
        if (collateral(o.rank, when, own))
            o.flags |= protocol::Outcome::flag_collateral;
        failure_known(o.rank, own);
        // Our own clients first, then everyone else through the FE.
        if (notified_.insert(o.rank).second)
            when_served([this, rank = o.rank, code = event->code, exit_code = event->exit_code] {
                pmix_->notify_terminated(rank, code, exit_code);
            });
        agent_->task_failed(*event);
    }
    agent_->report(o);
}

}  // namespace exitpolicy::pmix_server
