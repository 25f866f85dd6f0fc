// SPDX-License-Identifier: Apache-2.0
// local_tasks.cpp - see local_tasks.hpp.
#include "local_tasks.hpp"

#include "pmix_server/log.hpp"
#include "protocol/process.hpp"

#include <event2/event.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace exitpolicy::pmix_server {

LocalTasks::LocalTasks(event_base* base, Timers& timers, std::function<void()> exit_seen)
    : base_(base), timers_(timers), exit_seen_(std::move(exit_seen))
{
}

void LocalTasks::add(std::uint32_t rank, pid_t pid, protocol::Fd pidfd)
{
    auto task = std::make_unique<Task>();
    task->pid = pid;
    task->pidfd = std::move(pidfd);
    task->owner = this;
    watch_exit(*task);
    tasks_[rank] = std::move(task);
}

std::int64_t LocalTasks::exited_at_us(std::uint32_t rank) const
{
    const auto it = tasks_.find(rank);
    return it == tasks_.end() ? 0 : it->second->exited_at_us;
}

std::set<std::uint32_t> LocalTasks::running()
{
    std::set<std::uint32_t> out;
    for (auto& [rank, task] : tasks_)
        if (!ended_.count(rank) && !exited(*task))
            out.insert(rank);
    return out;
}

// Asks the kernel, not the loop: an exit whose event is still queued
// behind the one being handled counts, and so does one under way.
bool LocalTasks::exited(Task& task)
{
    if (task.exited_at_us == 0 && task.pidfd) {
        // Should the pid be gone and taken by another process between the
        // two looks, the task has exited all the same.
        if (protocol::process::ended(task.pidfd.get()) || protocol::process::exiting(task.pid))
            task.exited_at_us = protocol::process::realtime_us();
    }
    return task.exited_at_us != 0;
}

void LocalTasks::watch_exit(Task& task)
{
    if (!task.pidfd)
        return;  // no pidfds on this kernel: the outcome's own time stands
    task.exit_watch.reset(event_new(
        base_, task.pidfd.get(), EV_READ,
        [](evutil_socket_t, short, void* arg) {
            auto* t = static_cast<Task*>(arg);
            // What a task wrote on its PMI socket before this exit came
            // first (an MPICH rank's abort, then its exit, then a peer's
            // end over it): read now, not after this event of higher
            // priority.
            if (t->owner->exit_seen_)
                guarded("a task's exit", t->owner->exit_seen_);
            if (t->exited_at_us == 0)
                t->exited_at_us = protocol::process::realtime_us();
        },
        &task));
    if (!task.exit_watch)
        return;
    event_priority_set(task.exit_watch.get(), 0);
    if (event_add(task.exit_watch.get(), nullptr) != 0)
        task.exit_watch.reset();
}

void LocalTasks::signal(int sig, const std::set<std::uint32_t>& ranks)
{
    for (std::uint32_t rank : ranks) {
        auto it = tasks_.find(rank);
        if (it == tasks_.end() || ended_.count(rank))
            continue;
        const Task& t = *it->second;
        if (t.pidfd) {
            if (!protocol::process::signal(t.pidfd.get(), sig) && errno != ESRCH)
                log::error("cannot signal rank %u: %s", rank, std::strerror(errno));
        } else if (t.pid > 0) {
            ::kill(t.pid, sig);  // no pidfds on this kernel
        }
    }
}

void LocalTasks::terminate(const std::set<std::uint32_t>& ranks, std::uint32_t kill_after_ms)
{
    torn_down_.insert(ranks.begin(), ranks.end());
    signal(SIGTERM, ranks);
    signal(SIGCONT, ranks);  // a stopped task must see its SIGTERM
    timers_.after_ms(kill_after_ms, [this] {
        std::set<std::uint32_t> left;
        for (std::uint32_t rank : torn_down_)
            if (!ended_.count(rank))
                left.insert(rank);
        if (left.empty())
            return;
        log::info("%zu local tasks outlived SIGTERM: SIGKILL", left.size());
        signal(SIGKILL, left);
    });
}

}  // namespace exitpolicy::pmix_server
