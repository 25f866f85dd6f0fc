// SPDX-License-Identifier: Apache-2.0
// local_ends.hpp - what the node daemon knows of how its tasks end: which
// called abort (the first call's status and moment), which connected as
// PMIx clients and which of those finalized, and the failures the node
// learned of, here or elsewhere. From these facts each local outcome gets
// its flags, and the node's judgement of it (own failure or collateral)
// comes from the pure core (exitpolicy/node_failures.hpp); the daemon only
// tells it what happened and when. Loop thread only.
#pragma once

#include "exitpolicy/node_failures.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

namespace exitpolicy::pmix_server {

class LocalEnds {
public:
    using Running = std::function<std::set<std::uint32_t>()>;

    // A local task called abort now; `message` is its reason. Returns the
    // moment of its first call, which is the failure's (Open MPI calls
    // twice, its teardown in between). `running` names the local tasks the
    // kernel still runs (asked only when the core needs it).
    std::int64_t abort_called(std::uint32_t rank, int status, const std::string& message, const Running& running);
    void connected(std::uint32_t rank) { connected_.insert(rank); }
    void finalized(std::uint32_t rank) { finalized_.insert(rank); }
    // `rank` (a local task, or another node's) ended abnormally, learned
    // now; by_itself: an exit or a signal of its own, not an abort or our
    // teardown's kill.
    void failure_known(std::uint32_t rank, bool by_itself);

    // What a local outcome says besides its wait status: whether it called
    // abort (its status, and its end moved to the first call's moment) and,
    // for a client, whether it finalized.
    void describe(protocol::Outcome& o) const;
    // The node's judgement of a local task's abnormal end (o described):
    // whether it ended by itself, and whether it is collateral to a
    // failure known before it; torn_down: our teardown signalled it.
    struct Verdict {
        bool by_itself = false;
        bool collateral = false;
    };
    Verdict judge(const protocol::Outcome& o, bool torn_down) const;

private:
    struct AbortCall {
        int status = 0;
        std::int64_t when_us = 0;  // the failure's moment: the kill comes later
    };
    exitpolicy::NodeFailures failures_;  // on this node's clock
    std::map<std::uint32_t, AbortCall> aborts_;
    std::set<std::uint32_t> connected_;
    std::set<std::uint32_t> finalized_;
};

// Whether an end with this wait status was the task's own (an exit or a
// signal), as exitpolicy::ended_by_itself says; an abort never is.
bool ended_by_itself(int wait_status, bool aborted, bool oom_killed = false);

}  // namespace exitpolicy::pmix_server
