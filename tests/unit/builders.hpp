// SPDX-License-Identifier: Apache-2.0
// builders.hpp - terse task outcomes for the table-driven unit tests.
#pragma once

#include "exitpolicy/policy.hpp"

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

namespace exitpolicy::test {

// A task as its node reports it; end time in microseconds.
struct T {
    TaskOutcome o;
    T& at(std::int64_t end_us) { o.end_time_us = end_us; return *this; }
    T& on(std::uint32_t node) { o.node = node; return *this; }
    T& unfinalized() { o.finalized = false; return *this; }
    T& epoch(std::uint32_t e) { o.epoch = e; return *this; }
    // The kernel's OOM killer ended it, or a process of it (its node says so).
    T& oom(std::uint64_t memory_limit = 0)
    {
        o.oom_killed = true;
        o.memory_limit = memory_limit;
        return *this;
    }
    operator TaskOutcome() const { return o; }  // NOLINT: builder
};

inline T exits(std::uint32_t rank, int code)
{
    T t;
    t.o.rank = rank;
    t.o.pid = 1000 + rank;
    t.o.wait_status = WaitStatus::exited(code).raw();
    t.o.end_time_us = 1'000'000 + rank;
    return t;
}
inline T ok(std::uint32_t rank) { return exits(rank, 0); }
inline T killed(std::uint32_t rank, int sig, bool core = false)
{
    T t = exits(rank, 0);
    t.o.wait_status = WaitStatus::signaled(sig, core).raw();
    return t;
}
inline T segv(std::uint32_t rank) { return killed(rank, SIGSEGV, true); }
// PMIx_Abort(status); the launcher then SIGKILLs the task.
inline T aborts(std::uint32_t rank, int status)
{
    T t = killed(rank, SIGKILL);
    t.o.abort_status = status;
    return t;
}
// A task its node reported collateral: it ended after the node had learned
// of another task's abnormal end, or the node killed it in a teardown.
inline T flagged(T t)
{
    t.o.collateral = true;
    return t;
}
inline T lost(std::uint32_t rank)
{
    T t;
    t.o.rank = rank;
    t.o.lost = true;
    return t;
}

// Nodes node1..nodeN; task i on node (i % N).
inline StepOutcomes step(std::vector<TaskOutcome> tasks, std::uint32_t nnodes = 1)
{
    StepOutcomes s;
    for (std::uint32_t n = 1; n <= nnodes; ++n)
        s.nodes.push_back("node" + std::to_string(n));
    s.tasks = std::move(tasks);
    return s;
}

// The same step as a heterogeneous one whose components start at `starts`.
inline StepOutcomes heterogeneous(StepOutcomes s, std::vector<std::uint32_t> starts)
{
    s.components = std::move(starts);
    return s;
}

}  // namespace exitpolicy::test
