// SPDX-License-Identifier: Apache-2.0
// outcome_relay.hpp - the task outcomes on their way up through one node
// of the overlay tree to srun's front end (FE): this node's own and those
// its children pass up.
//
// What is reported in one loop turn goes up in one frame. Every outcome is
// kept until the FE acknowledges it, and sent again on a new way up
// (resend) until then: a relay that dies with outcomes on their way loses
// nothing. A child's outcome is acknowledged to that child when the FE's
// acknowledgement comes down, not before, so that every holder keeps it
// until the FE has it. Loop thread only.
#pragma once

#include "timers.hpp"

#include "protocol/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace exitpolicy::pmix_server {

class OutcomeRelay {
public:
    struct Links {
        std::function<void(const protocol::Bytes& frame)> up;  // to the parent (the FE at the top)
        // To the child on node `node`, if it is linked here now (one that is
        // not sends its outcomes again on its new way up).
        std::function<void(std::uint32_t node, const protocol::Bytes& frame)> child;
    };

    // timers: its agent's, whose deferred work runs in the order it was
    // asked for, with the outcomes' among it.
    OutcomeRelay(Timers& timers, Links links);
    OutcomeRelay(const OutcomeRelay&) = delete;
    OutcomeRelay& operator=(const OutcomeRelay&) = delete;

    // An outcome to pass up: this node's own, or (from_child) one that the
    // child on that node sent up.
    void report(const protocol::Outcome& o, std::optional<std::uint32_t> from_child = std::nullopt);
    // The FE's acknowledgements: this node's own are confirmed(), a child's
    // go down to it.
    void acknowledged(const protocol::Acks& acks);
    // Everything not acknowledged, once more, on a new way up.
    void resend();

    std::size_t unacked() const noexcept { return unacked_.size(); }
    // This node's own outcomes that the FE acknowledged.
    const std::vector<protocol::Ack>& confirmed() const noexcept { return confirmed_; }

private:
    using Key = std::pair<std::uint32_t, std::uint32_t>;  // rank, epoch

    void schedule();
    void send();

    Links links_;
    Timers& timers_;
    // Sent up and not yet acknowledged; those waiting for the end of the
    // loop turn to go up together.
    std::map<Key, protocol::Outcome> unacked_;
    std::vector<protocol::Outcome> outgoing_;
    bool scheduled_ = false;
    std::map<Key, std::uint32_t> relayed_for_;  // which child sent up each outcome it relays
    std::vector<protocol::Ack> confirmed_;
};

}  // namespace exitpolicy::pmix_server
