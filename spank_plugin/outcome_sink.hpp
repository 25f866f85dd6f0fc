// outcome_sink.hpp - where the slurmstepd side sends a task's outcome.
//
// slurmstepd.cpp tries its sinks in order: today the front end directly;
// the node daemon will come first once it exists, with the direct path kept
// as the fallback. A sink never throws, bounds every wait, and gives up
// for the rest of the step once it has failed twice in a row, so that a
// dead peer cannot slow every task exit on the node.
#pragma once

#include "node_link.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace exitpolicy::plugin {

class OutcomeSink {
public:
    virtual ~OutcomeSink() = default;
    // Accepted for delivery (acknowledged, or on its way and flush() will
    // see to it); on failure the error says why.
    virtual Result<bool> deliver(const wire::Outcome& outcome) = 0;
    // At the step's end: everything delivered is acknowledged, within the
    // bound; else the error says what is not.
    virtual Result<bool> flush(std::chrono::milliseconds) { return Result<bool>::ok(true); }
};

// Straight to srun's front end over one authenticated connection, opened
// once (open()) and reopened once when it breaks. Outcomes are pipelined: a
// task's exit does not wait for its acknowledgement (a round trip through
// srun's busy thread); acknowledgements are collected as they come and at
// flush(), and whatever is unacknowledged when the link breaks is sent again
// on the new one (the FE deduplicates).
class FrontEndSink final : public OutcomeSink {
public:
    FrontEndSink(LinkSetup setup, std::chrono::milliseconds connect_timeout,
                 std::chrono::milliseconds ack_timeout);
    Result<bool> open();
    Result<bool> deliver(const wire::Outcome& outcome) override;
    Result<bool> flush(std::chrono::milliseconds timeout) override;
    bool gave_up() const noexcept { return gave_up_; }
    // Tells srun's user something (connecting first if need be).
    Result<bool> notice(const std::string& text);

private:
    Result<bool> reconnect_and_resend();
    void take_acks(const std::vector<wire::Ack>& acks);
    std::vector<wire::Outcome> unacked_;
    LinkSetup setup_;
    std::chrono::milliseconds connect_timeout_;
    std::chrono::milliseconds ack_timeout_;
    NodeLink link_;
    bool gave_up_ = false;
};

}  // namespace exitpolicy::plugin
