// SPDX-License-Identifier: Apache-2.0
// outcome_sink.hpp - where the slurmstepd side sends a task's outcome.
//
// slurmstepd.cpp tries its sinks in order: the node daemon first, when the
// step has exitpolicy's PMIx service (DaemonSink, daemon_link.hpp), then
// srun's front end directly (FrontEndSink), which every step served by a
// front end has. A sink never throws, bounds every wait, counts only an
// acknowledgement that names the rank and epoch it sent, and gives up for
// the rest of the step once it has failed (the front end's after a
// reconnection failed too), so that a dead peer cannot slow every task exit
// on the node.
#pragma once

#include "node_link.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::spank_plugin {

// The bootstrap variable as srun hands it to the step (plugin.hpp):
// "1:PORT:SECRET", plus ":pmix:FANOUT" when the step gets exitpolicy's PMIx
// service, or ":het" in a heterogeneous step (srun A : B; no PMIx service).
struct Bootstrap {
    std::uint16_t port = 0;
    protocol::Secret secret{};
    bool heterogeneous = false;           // ":het"
    bool pmix = false;                    // more than "1:PORT:SECRET" (not ":het"): the PMIx service is asked for
    std::optional<std::uint32_t> fanout;  // with pmix: none when that part is malformed
};
// Fails when the front end cannot be found from it (malformed input is an
// error result, never an exception; the error never shows the secret). A
// malformed PMIx part is no failure: the front end still takes the
// outcomes, and only the PMIx service fails.
Result<Bootstrap> parse_bootstrap(std::string_view text);

// When an outcome goes on its way. Slurm reaps every task that has ended
// in one turn, and only then tells srun of them: a success may wait for
// its node-mates' outcomes of the same turn and go with them, in one
// write and one wake of srun, where each would cost both (1 024 tasks that
// end together). A failure goes at once: it is what a policy acts on.
enum class Send { now, with_next };
// `with_next` for a task that ended with status 0 while another of the
// node's tasks has ended and waits for slurmstepd to reap it (its
// task_exit comes next, in the same turn); `now` otherwise.
Send send_for(int wait_status, bool node_mate_waiting) noexcept;

class OutcomeSink {
public:
    virtual ~OutcomeSink() = default;
    // Accepted for delivery (acknowledged, or on its way and flush() will
    // see to it); on failure the error says why. `with_next`: the sink may
    // hold it until the next delivery that is `now`, or flush().
    virtual Result<bool> deliver(const protocol::Outcome& outcome, Send send) = 0;
    // At the step's end: everything delivered is acknowledged, within the
    // bound; else the error says what is not.
    virtual Result<bool> flush(std::chrono::milliseconds) { return Result<bool>::ok(true); }
};

// Straight to srun's front end over one authenticated connection, opened
// once (open()) and reopened once when it breaks. Outcomes are pipelined: a
// task's exit does not wait for its acknowledgement (a round trip through
// srun's busy thread); acknowledgements are collected as they come and at
// flush(), and whatever is unacknowledged when the link breaks is sent again
// on the new one (the FE deduplicates). Outcomes delivered `with_next` are
// held and go in one write with the next one delivered `now` (or at
// release() or flush()). An acknowledgement of an outcome not awaiting one
// (held ones included) breaks the protocol: the sink gives up on the front
// end.
class FrontEndSink final : public OutcomeSink {
public:
    FrontEndSink(LinkSetup setup, std::chrono::milliseconds connect_timeout,
                 std::chrono::milliseconds ack_timeout);
    Result<bool> open();
    Result<bool> deliver(const protocol::Outcome& outcome, Send send) override;
    // Sends what is held (nothing to do when nothing is).
    Result<bool> release();
    Result<bool> flush(std::chrono::milliseconds timeout) override;
    // Tells srun's user something (connecting first if need be).
    Result<bool> notice(const std::string& text);
    // Tells the FE where this node's standing-by daemon is woken (the
    // link must be open).
    Result<bool> standby(std::uint16_t port);
    // This end's address while the link is open (NodeLink::local_address).
    std::optional<std::uint32_t> local_address() const noexcept { return link_.local_address(); }

private:
    Result<bool> reconnect_and_resend();
    // Closes the link for the rest of the step; fails with why.
    Result<bool> give_up(std::string why);
    // Fails on a read error, and gives up on an acknowledgement of what is
    // not unacknowledged.
    Result<bool> take_acks(const Result<std::vector<protocol::Ack>>& acks);
    // Sent or held, not acknowledged; the last held_ of them are held.
    std::vector<protocol::Outcome> unacked_;
    std::size_t held_ = 0;
    LinkSetup setup_;
    std::chrono::milliseconds connect_timeout_;
    std::chrono::milliseconds ack_timeout_;
    NodeLink link_;
    bool gave_up_ = false;
    std::string gave_up_why_;
};

}  // namespace exitpolicy::spank_plugin
