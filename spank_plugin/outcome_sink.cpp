// outcome_sink.cpp - see outcome_sink.hpp.
#include "outcome_sink.hpp"

namespace exitpolicy::plugin {

FrontEndSink::FrontEndSink(LinkSetup setup, std::chrono::milliseconds connect_timeout,
                           std::chrono::milliseconds ack_timeout)
    : setup_(std::move(setup)), connect_timeout_(connect_timeout), ack_timeout_(ack_timeout)
{
}

Result<bool> FrontEndSink::open()
{
    auto link = NodeLink::connect(setup_, connect_timeout_);
    if (!link)
        return Result<bool>::fail(link.error());
    link_ = std::move(*link);
    return Result<bool>::ok(true);
}

Result<bool> FrontEndSink::deliver(const wire::Outcome& outcome)
{
    if (gave_up_)
        return Result<bool>::fail("gave up on the front end earlier in this step");
    std::string first_error;
    if (link_.connected()) {
        auto sent = link_.send_outcome(outcome, ack_timeout_);
        if (sent)
            return sent;
        first_error = sent.error();
    }
    // Once more on a new connection (the FE deduplicates a repeat).
    auto opened = open();
    if (opened) {
        auto sent = link_.send_outcome(outcome, ack_timeout_);
        if (sent)
            return sent;
        opened = Result<bool>::fail(sent.error());
    }
    gave_up_ = true;
    return Result<bool>::fail((first_error.empty() ? "" : first_error + "; then ") + opened.error());
}

}  // namespace exitpolicy::plugin
