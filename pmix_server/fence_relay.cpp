// SPDX-License-Identifier: Apache-2.0
// fence_relay.cpp - the fences with data at one node of the overlay tree.
// See fence_relay.hpp.
#include "fence_relay.hpp"

#include "pmix_server/log.hpp"
#include "protocol/events.hpp"

#include <algorithm>
#include <utility>

namespace exitpolicy::pmix_server {

FenceRelay::FenceRelay(event_base* base, std::vector<std::uint32_t> ranks, Links links)
    : ranks_(std::move(ranks)), links_(std::move(links)), timers_(base)
{
}

// The instance's state here, opened on its first contribution.
FenceRelay::Fences::Instance& FenceRelay::open(const std::string& key, const protocol::FenceKey& id)
{
    return fences_.open(key, id, [&] { return links_.expected(id.ranks); });
}

void FenceRelay::call(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done)
{
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    protocol::FenceKey id;
    id.set = protocol::fence_set(ranks);
    id.instance = ++calls_[id.set];
    id.ranks = std::move(ranks);
    const std::string key = protocol::fence_key(id.ranks, id.instance);
    if (key.size() > protocol::max_fence_key) {
        // Every participant names them alike and so ends here alike.
        log::error("a fence over %zu ranks is not supported: naming them takes %zu bytes, over %zu",
                   id.ranks.size(), key.size(), protocol::max_fence_key);
        done(protocol::pmix::not_supported, {});
        return;
    }
    if (auto ahead = failed_ahead_.find(key); ahead != failed_ahead_.end()) {
        const int status = ahead->second;
        failed_ahead_.erase(ahead);
        done(status, {});
        return;
    }
    if (fences_.finished(id)) {
        done(protocol::pmix::error, {});  // over without this node: its fences are numbered unlike the others'
        return;
    }
    auto& f = open(key, id);
    f.extra = std::move(done);
    if (protocol::names_dead(f.id.ranks, dead_)) {
        fail(key, protocol::pmix::proc_term_wo_sync);
        return;
    }
    const bool all_in = Fences::add(f, data);
    if (timeout_s > 0)
        timers_.after_ms(static_cast<std::uint32_t>(timeout_s) * 1000, [this, key] { timed_out(key); });
    if (all_in)
        pass_up(key, f);
}

void FenceRelay::from_below(const protocol::FenceUp& up)
{
    const auto id = *protocol::parse_fence_key(up.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    if (up.status != protocol::pmix::success) {
        // Failed below (a timeout): here, below, and through the FE everywhere.
        links_.up(protocol::FenceUp{up.key, up.status, 0, {}}.encode());
        fail(up.key, up.status);
        return;
    }
    if (protocol::names_dead(id.ranks, dead_)) {
        fail(up.key, protocol::pmix::proc_term_wo_sync);
        return;
    }
    auto& f = open(up.key, id);
    if (Fences::add(f, up.data))
        pass_up(up.key, f);
}

// Everything below is in: up it goes, and the result comes back down with
// everyone's data.
void FenceRelay::pass_up(const std::string& key, Fences::Instance& f)
{
    auto frame = protocol::FenceUp{key, protocol::pmix::success, f.received, std::move(f.data)}.encode();
    f.data.clear();
    if (frame.empty()) {
        // This subtree's data alone is over what a frame carries: the
        // instance fails everywhere (the FE says why), no link breaks.
        log::error("fence %s: this subtree's data is over the %u MiB a frame carries", key.c_str(),
                   protocol::max_body_trusted >> 20);
        links_.up(protocol::FenceUp{key, protocol::pmix::out_of_resource, 0, {}}.encode());
        fail(key, protocol::pmix::out_of_resource);
        return;
    }
    links_.up(frame);
}

void FenceRelay::from_above(const protocol::FenceDown& down)
{
    if (links_.relays())  // a leaf has nothing to encode it for
        links_.down(down.encode());
    const auto id = *protocol::parse_fence_key(down.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    finish(down.key, id, down.status, down.data);
}

// An instance is over here: recorded as finished (a late contribution or
// result of it is dropped), its local caller answered, and a local call of
// it that is still to come fails at once.
void FenceRelay::finish(const std::string& key, const protocol::FenceKey& id, int status, const protocol::Bytes& data)
{
    auto f = fences_.finish(key, id);
    const auto calls = calls_.find(id.set);
    const bool called_here = calls != calls_.end() && id.instance <= calls->second;
    if (status != protocol::pmix::success && !called_here &&
        std::any_of(ranks_.begin(), ranks_.end(), [&](std::uint32_t r) { return protocol::takes_part(id.ranks, r); }))
        failed_ahead_[key] = status;
    if (f && f->extra)
        (*f->extra)(status, data);
}

// The caller's PMIX_TIMEOUT expired: an instance still pending here fails
// here, below, and through the FE on every node.
void FenceRelay::timed_out(const std::string& key)
{
    if (!fences_.in_progress(key))
        return;  // over
    log::info("fence %s timed out", key.c_str());
    links_.up(protocol::FenceUp{key, protocol::pmix::timeout, 0, {}}.encode());
    fail(key, protocol::pmix::timeout);
}

void FenceRelay::rank_dead(std::uint32_t rank)
{
    // Later fences over it fail at once.
    dead_.insert(rank);
    // The FE fails it for everyone as well; only the local caller here.
    for (const auto& key : fences_.affected([&](const auto& ranks) { return protocol::takes_part(ranks, rank); }))
        finish(key, *protocol::parse_fence_key(key), protocol::pmix::proc_term_wo_sync, {});
}

void FenceRelay::fail_where(const Hit& hit, int status)
{
    for (auto key : fences_.affected(hit))
        fail(std::move(key), status);
}

// Fails an instance here and in the subtree below, which waits for its
// result from us.
void FenceRelay::fail(std::string key, int status)
{
    links_.down(protocol::FenceDown{key, status, {}}.encode());
    finish(key, *protocol::parse_fence_key(key), status, {});
}

}  // namespace exitpolicy::pmix_server
