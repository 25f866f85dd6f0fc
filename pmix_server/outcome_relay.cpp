// SPDX-License-Identifier: Apache-2.0
// outcome_relay.cpp - the task outcomes on their way up through one node.
// See outcome_relay.hpp.
#include "outcome_relay.hpp"

namespace exitpolicy::pmix_server {

OutcomeRelay::OutcomeRelay(Timers& timers, Links links) : links_(std::move(links)), timers_(timers) {}

void OutcomeRelay::report(const protocol::Outcome& o, std::optional<std::uint32_t> from_child)
{
    if (from_child)
        relayed_for_[{o.rank, o.epoch}] = *from_child;
    unacked_[{o.rank, o.epoch}] = o;
    outgoing_.push_back(o);
    schedule();
}

void OutcomeRelay::acknowledged(const protocol::Acks& acks)
{
    std::map<std::uint32_t, protocol::Acks> down;  // by the child that sent them up
    for (const auto& one : acks.list) {
        const Key key{one.rank, one.epoch};
        if (unacked_.erase(key) == 0)
            continue;  // a repeat: it was sent up twice
        if (const auto child = relayed_for_.find(key); child != relayed_for_.end()) {
            down[child->second].list.push_back(one);
            relayed_for_.erase(child);
        } else {
            confirmed_.push_back(one);
        }
    }
    for (const auto& to : down)
        protocol::in_pieces(to.second.list, protocol::max_ranks, [&](std::vector<protocol::Ack> part) {
            links_.child(to.first, protocol::Acks{std::move(part)}.encode());
        });
}

void OutcomeRelay::resend()
{
    // What waited for the turn's end is among it.
    outgoing_.clear();
    for (const auto& [key, o] : unacked_)
        outgoing_.push_back(o);
    if (!outgoing_.empty())
        schedule();
}

void OutcomeRelay::schedule()
{
    if (!std::exchange(scheduled_, true))
        timers_.defer([this] { send(); });
}

void OutcomeRelay::send()
{
    scheduled_ = false;
    protocol::in_pieces(std::exchange(outgoing_, {}), protocol::max_ranks,
                        [&](std::vector<protocol::Outcome> batch) { links_.up(protocol::Outcomes{std::move(batch)}.encode()); });
}

}  // namespace exitpolicy::pmix_server
