// SPDX-License-Identifier: Apache-2.0
// node_failures.hpp - a node's judgement of its own tasks' ends: which is
// a failure of its own, and which is collateral to a failure the node knew
// of before it (srun's report labels it, and the policies look past it to
// the root cause; policy.hpp).
//
// Pure: ranks, times (microseconds on the node's clock) and flags in, a
// verdict out; no clock, no process, no I/O. The node daemon gathers the
// facts (pmix_server/daemon_tasks.cpp: which tasks connected as PMIx
// clients, which its teardown signalled, which called abort and when) and
// asks.
//
// The rules, each learned from a real runtime:
// - a task our teardown signalled is collateral, unless it called abort
//   (its abort was its own failure; the teardown may still find it running);
// - a task that never connected as a PMIx client heard of nothing: its
//   failure is its own;
// - the first failure the node knew of is its own;
// - an application's own MPI_Abort known first makes the local tasks still
//   running then collateral whenever they end: they cannot be what it
//   reacted to (MPICH 4.2's abort returns, and a node-mate can fail over
//   the aborting rank a few milliseconds later);
// - otherwise a client's end is collateral when it came after the first
//   failure; an end of its own (exitpolicy::ended_by_itself) gets
//   reaction_window_us of grace when the first failure was not one (an
//   abort, Open MPI 5's on a peer's closed socket, can be on record before
//   the end it reacted to).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>

namespace exitpolicy {

class NodeFailures {
public:
    // The first abnormal end this node learned of (its own tasks' or, by an
    // event, another node's), and when.
    struct First {
        std::uint32_t rank = 0;
        std::int64_t at_us = 0;
        bool by_itself = false;  // an end of its own (exitpolicy::ended_by_itself)
        // An application's own MPI_Abort, known here first: the local tasks
        // still running then.
        std::set<std::uint32_t> running_at_abort;
    };

    // A local task's end, as the daemon saw it.
    struct End {
        std::uint32_t rank = 0;
        std::int64_t when_us = 0;  // its first abort call's moment, else its end
        bool by_itself = false;    // exitpolicy::ended_by_itself of its outcome
        bool client = false;       // it connected as a PMIx client (it could be told)
        bool torn_down = false;    // our teardown signalled it
        bool aborted = false;      // it called abort
    };

    // A failure learned of at `at_us`: a local task's abnormal end, or
    // another node's by an event. Only the first counts.
    void known(std::uint32_t rank, std::int64_t at_us, bool by_itself);

    // A local task's call to abort at `at_us`: a failure, not of its own.
    // When it is the first failure known and an application's own MPI_Abort
    // (`application`), `running()` names the other local tasks the kernel
    // still runs (asked only then).
    void abort_called(std::uint32_t rank, std::int64_t at_us, bool application,
                      const std::function<std::set<std::uint32_t>()>& running);

    bool collateral(const End& end) const;

    const std::optional<First>& first() const noexcept { return first_; }

private:
    std::optional<First> first_;
};

}  // namespace exitpolicy
