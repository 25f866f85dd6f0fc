// SPDX-License-Identifier: Apache-2.0
// outcome_sink.cpp - see outcome_sink.hpp.
#include "outcome_sink.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <charconv>

namespace exitpolicy::spank_plugin {
namespace {

// A whole field as a number of type T, nothing else.
template <typename T>
std::optional<T> number(std::string_view field)
{
    T value{};
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || end != field.data() + field.size())
        return std::nullopt;
    return value;
}

}  // namespace

Result<Bootstrap> parse_bootstrap(std::string_view text)
{
    using R = Result<Bootstrap>;
    std::vector<std::string_view> fields;
    for (std::size_t pos = 0;;) {
        const auto colon = text.find(':', pos);
        fields.push_back(text.substr(pos, colon == std::string_view::npos ? colon : colon - pos));
        if (colon == std::string_view::npos)
            break;
        pos = colon + 1;
    }
    if (fields.size() < 3 || fields[0] != "1")
        return R::fail("not of the form 1:PORT:SECRET");
    Bootstrap b;
    const auto port = number<std::uint16_t>(fields[1]);
    if (!port || *port == 0)
        return R::fail("its port is not a port number");
    b.port = *port;
    auto secret = protocol::secret_from_hex(fields[2]);
    if (!secret)
        return R::fail("its secret is not 64 hex digits");
    b.secret = *secret;
    b.heterogeneous = fields.size() == 4 && fields[3] == "het";
    b.pmix = fields.size() > 3 && !b.heterogeneous;
    if (fields.size() == 5 && fields[3] == "pmix")
        if (const auto fanout = number<std::uint32_t>(fields[4]); fanout && *fanout >= 2)
            b.fanout = *fanout;
    return R::ok(b);
}

Send send_for(int wait_status, bool node_mate_waiting) noexcept
{
    return wait_status == 0 && node_mate_waiting ? Send::with_next : Send::now;
}

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

Result<bool> FrontEndSink::take_acks(const Result<std::vector<protocol::Ack>>& acks)
{
    if (!acks)
        return Result<bool>::fail(acks.error());
    for (const auto& a : *acks) {
        // Each outcome sent on a link is acknowledged once on it: an
        // acknowledgement of anything else (a held one included) is a
        // broken protocol, never progress.
        const auto sent_end = unacked_.end() - static_cast<std::ptrdiff_t>(held_);
        const auto gone = std::remove_if(unacked_.begin(), sent_end,
                                         [&](const protocol::Outcome& o) { return o.rank == a.rank && o.epoch == a.epoch; });
        if (gone == sent_end) {
            return give_up("the front end acknowledged rank " + std::to_string(a.rank) + " epoch " +
                           std::to_string(a.epoch) + ", which this node has not sent it");
        }
        unacked_.erase(gone, sent_end);
    }
    return Result<bool>::ok(true);
}

Result<bool> FrontEndSink::give_up(std::string why)
{
    link_.close();
    gave_up_ = true;
    gave_up_why_ = std::move(why);
    return Result<bool>::fail(gave_up_why_);
}

Result<bool> FrontEndSink::reconnect_and_resend()
{
    if (auto opened = open(); !opened)
        return opened;
    if (auto posted = link_.post_outcomes(unacked_, ack_timeout_); !posted)
        return posted;
    held_ = 0;
    return Result<bool>::ok(true);
}

Result<bool> FrontEndSink::deliver(const protocol::Outcome& outcome, Send send)
{
    if (gave_up_)
        return Result<bool>::fail("gave up on the front end earlier in this step: " + gave_up_why_);
    unacked_.push_back(outcome);
    ++held_;
    if (send == Send::with_next)
        return Result<bool>::ok(true);
    return release();
}

Result<bool> FrontEndSink::release()
{
    if (gave_up_)
        return Result<bool>::fail(gave_up_why_);
    if (held_ == 0)
        return Result<bool>::ok(true);
    std::string first_error;
    if (link_.connected()) {
        auto posted = link_.post_outcomes(std::span(unacked_).last(held_), ack_timeout_);
        if (posted) {
            held_ = 0;
            // A broken link shows at the next delivery or at flush.
            if (auto taken = take_acks(link_.read_acks(unacked_.size(), std::chrono::milliseconds(0)));
                !taken && gave_up_)
                return taken;
            return posted;
        }
        first_error = posted.error();
    }
    // Once more on a new connection, with everything not yet acknowledged.
    auto resent = reconnect_and_resend();
    if (resent)
        return resent;
    return give_up((first_error.empty() ? "" : first_error + "; then ") + resent.error());
}

Result<bool> FrontEndSink::notice(const std::string& text)
{
    if (!link_.connected())
        if (auto opened = open(); !opened)
            return opened;
    return link_.post_notice(text, ack_timeout_);
}

Result<bool> FrontEndSink::standby(std::uint16_t port)
{
    return link_.post_standby(port, ack_timeout_);
}

Result<bool> FrontEndSink::flush(std::chrono::milliseconds timeout)
{
    if (auto released = release(); !released)
        return released;
    for (int attempt = 0; attempt < 2 && !unacked_.empty() && !gave_up_; ++attempt) {
        if (!link_.connected())
            if (auto resent = reconnect_and_resend(); !resent)
                return give_up(resent.error());
        auto taken = take_acks(link_.read_acks(unacked_.size(), timeout));
        if (gave_up_)
            return taken;
        if (taken && !unacked_.empty())
            break;  // timed out waiting: no point in a new connection
    }
    if (unacked_.empty())
        return Result<bool>::ok(true);
    return Result<bool>::fail(std::to_string(unacked_.size()) + " outcomes not acknowledged by the front end");
}

}  // namespace exitpolicy::spank_plugin
