// SPDX-License-Identifier: Apache-2.0
// fence_relay.hpp - the fences with data at one node of the overlay tree.
//
// Each instance over a set of participants (empty: every rank) gathers
// this node's data and its subtree's, goes up as one contribution when
// everything below is in, and ends when its result comes down (srun's
// front end completes it at the root). It fails, here, below and through
// the front end everywhere, as soon as it cannot succeed: a participant
// known dead, the caller's PMIX_TIMEOUT, a subtree's data over what a
// frame carries, a link it went through gone. An instance that failed here
// before the local call came makes that call fail at once; one that ended
// here is over, and a late contribution or result of it is dropped.
//
// It owns the instances (in progress and finished), the local calls per
// participant set and the ranks known dead; it reaches the tree only
// through Links, which its agent (agent.hpp) gives. Loop thread only.
#pragma once

#include "timers.hpp"

#include "protocol/fences.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct event_base;

namespace exitpolicy::pmix_server {

class FenceRelay {
public:
    using Done = std::function<void(int status, protocol::Bytes data)>;
    using Hit = std::function<bool(const std::vector<std::uint32_t>& ranks)>;  // sorted; empty: all

    // What the relay asks of the tree, as it is at the time of asking.
    struct Links {
        std::function<void(const protocol::Bytes& frame)> up;    // to the parent (the FE at the top)
        std::function<void(const protocol::Bytes& frame)> down;  // to every child
        // Contributions awaited here for an instance over `ranks` (this
        // node's own, if it takes part, and each child's subtree's).
        std::function<std::uint32_t(const std::vector<std::uint32_t>& ranks)> expected;
        // Whether any child is below this node.
        std::function<bool()> relays;
    };

    // ranks: this node's tasks' ranks.
    FenceRelay(event_base* base, std::vector<std::uint32_t> ranks, Links links);
    FenceRelay(const FenceRelay&) = delete;
    FenceRelay& operator=(const FenceRelay&) = delete;

    // The local call: the next instance over `ranks` (empty: all) with this
    // node's data; with timeout_s > 0 an instance still pending here after
    // that long fails everywhere with PMIX_ERR_TIMEOUT. done runs once.
    void call(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done);
    // A child's subtree's contribution (or its failure), and the result
    // from above.
    void from_below(const protocol::FenceUp& up);
    void from_above(const protocol::FenceDown& down);
    // `rank` ended abnormally or was lost: instances over it fail here,
    // later ones at once.
    void rank_dead(std::uint32_t rank);
    // Instances in progress over what `hit` says fail with `status` here and
    // below (a link they went through is gone).
    void fail_where(const Hit& hit, int status);

private:
    using Fences = protocol::FenceTable<std::optional<Done>>;  // the local caller's

    Fences::Instance& open(const std::string& key, const protocol::FenceKey& id);
    void pass_up(const std::string& key, Fences::Instance& f);
    void finish(const std::string& key, const protocol::FenceKey& id, int status, const protocol::Bytes& data);
    void timed_out(const std::string& key);
    void fail(std::string key, int status);

    std::vector<std::uint32_t> ranks_;
    Links links_;
    Timers timers_;
    Fences fences_;                                     // instances in progress here, and those finished
    std::map<std::string, std::uint64_t> calls_;        // local calls per participant set
    // Instances that failed here before the local call came (their status):
    // that call fails at once.
    std::map<std::string, int> failed_ahead_;
    std::set<std::uint32_t> dead_;  // ranks known to have ended abnormally or been lost
};

}  // namespace exitpolicy::pmix_server
