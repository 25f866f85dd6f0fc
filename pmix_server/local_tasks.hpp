// SPDX-License-Identifier: Apache-2.0
// local_tasks.hpp - this node's tasks as processes: each one's pidfd and
// the watch on its exit, the moment the kernel said it exited, whose
// outcome slurmstepd has reported, and the node's teardown (SIGTERM, then
// SIGKILL to those left after a grace). The daemon tells it which process
// each rank is and when an outcome comes; it asks it what still runs.
//
// Loop thread only. A pidfd pins its process: a signal sent through it
// never reaches a stranger that got the pid later.
#pragma once

#include "protocol/handles.hpp"
#include "timers.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <sys/types.h>

struct event_base;

namespace exitpolicy::pmix_server {

class LocalTasks {
public:
    // `exit_seen` runs in a task's exit event, before its moment is taken:
    // what the task wrote on its sockets before it exited is read first.
    LocalTasks(event_base* base, Timers& timers, std::function<void()> exit_seen);
    LocalTasks(const LocalTasks&) = delete;
    LocalTasks& operator=(const LocalTasks&) = delete;

    bool known(std::uint32_t rank) const { return tasks_.count(rank) != 0; }
    // `rank` is process `pid`, watched through `pidfd` (none: this kernel
    // has no pidfds, and the outcome's own time stands).
    void add(std::uint32_t rank, pid_t pid, protocol::Fd pidfd);
    // slurmstepd reported the rank's outcome.
    void ended(std::uint32_t rank) { ended_.insert(rank); }
    // When the kernel said the rank exited, in µs of the wall clock; 0: not seen.
    std::int64_t exited_at_us(std::uint32_t rank) const;
    // The known tasks neither reported nor exited, as the kernel says now
    // (an exit whose event is still queued counts, and one under way).
    std::set<std::uint32_t> running();
    // The ranks our teardown signalled.
    bool torn_down(std::uint32_t rank) const { return torn_down_.count(rank) != 0; }
    // A teardown began here: there is only one per daemon.
    bool tearing_down() const { return !torn_down_.empty(); }
    // The teardown of `ranks`: SIGTERM (and SIGCONT, so that a stopped
    // task sees it), SIGKILL after kill_after_ms to those whose outcome has
    // not come by then.
    void terminate(const std::set<std::uint32_t>& ranks, std::uint32_t kill_after_ms);

private:
    struct Task {
        pid_t pid = -1;
        protocol::Fd pidfd;
        // The pidfd turns readable the moment the process exits, before
        // slurmstepd reaps it and reports its outcome: that moment is its
        // end (a peer's runtime may react to it before the report comes).
        protocol::EventHandle exit_watch;
        std::int64_t exited_at_us = 0;
        LocalTasks* owner = nullptr;
    };
    void watch_exit(Task& task);
    static bool exited(Task& task);
    void signal(int sig, const std::set<std::uint32_t>& ranks);

    event_base* base_;
    Timers& timers_;
    std::function<void()> exit_seen_;
    std::map<std::uint32_t, std::unique_ptr<Task>> tasks_;  // stable addresses: the watches hold them
    std::set<std::uint32_t> ended_;
    std::set<std::uint32_t> torn_down_;
};

}  // namespace exitpolicy::pmix_server
