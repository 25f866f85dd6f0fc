// SPDX-License-Identifier: Apache-2.0
// agent_requests.cpp - what the agent does for the node's PMIx server across
// nodes: failure events, fences, direct modex, publish and lookup (lost
// nodes: agent_lost.cpp). See agent.hpp.
#include "agent.hpp"

#include "pmix_server/log.hpp"
#include "protocol/events.hpp"

#include <algorithm>
#include <utility>

namespace exitpolicy::pmix_server {

// ---- events --------------------------------------------------------------------

void Agent::on_event(const protocol::Event& e, bool from_above)
{
    if (!from_above) {  // on its way up to the FE, which sends it to everyone
        send_up(e.encode());
        return;
    }
    if (!events_seen_.insert(e.rank).second)
        return;  // a replay
    const protocol::Bytes frame = e.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    fail_fences_with(e.rank);
    node_.peer_failed(e);
}

// ---- fences ----------------------------------------------------------------------

// The instance's state here, opened on its first contribution.
Agent::Fences::Instance& Agent::open_fence(const std::string& key, const protocol::FenceKey& id)
{
    return fences_.open(key, id, [&] { return protocol::fence_expected(*tree_, map_->rank_node, setup_.node_id, id.ranks); });
}

void Agent::fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done)
{
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    protocol::FenceKey id;
    id.set = protocol::fence_set(ranks);
    id.instance = ++fence_calls_[id.set];
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
    auto& f = open_fence(key, id);
    f.extra = std::move(done);
    if (protocol::names_dead(f.id.ranks, dead_)) {
        fail_fence(key, protocol::pmix::proc_term_wo_sync);
        return;
    }
    const bool all_in = Fences::add(f, data);
    if (timeout_s > 0)
        timers_.after_ms(static_cast<std::uint32_t>(timeout_s) * 1000, [this, key] { fence_timed_out(key); });
    if (all_in)
        pass_fence_up(key, f);
}

void Agent::on_fence_up(const protocol::FenceUp& up)
{
    const auto id = *protocol::parse_fence_key(up.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    if (up.status != protocol::pmix::success) {
        // Failed below (a timeout): here, below, and through the FE everywhere.
        send_up(protocol::FenceUp{up.key, up.status, 0, {}}.encode());
        fail_fence(up.key, up.status);
        return;
    }
    if (protocol::names_dead(id.ranks, dead_)) {
        fail_fence(up.key, protocol::pmix::proc_term_wo_sync);
        return;
    }
    auto& f = open_fence(up.key, id);
    if (Fences::add(f, up.data))
        pass_fence_up(up.key, f);
}

// Everything below is in: up it goes, and the result comes back down with
// everyone's data.
void Agent::pass_fence_up(const std::string& key, Fences::Instance& f)
{
    auto frame = protocol::FenceUp{key, protocol::pmix::success, f.received, std::move(f.data)}.encode();
    f.data.clear();
    if (frame.empty()) {
        // This subtree's data alone is over what a frame carries: the
        // instance fails everywhere (the FE says why), no link breaks.
        log::error("fence %s: this subtree's data is over the %u MiB a frame carries", key.c_str(),
                   protocol::max_body_trusted >> 20);
        send_up(protocol::FenceUp{key, protocol::pmix::out_of_resource, 0, {}}.encode());
        fail_fence(key, protocol::pmix::out_of_resource);
        return;
    }
    send_up(frame);
}

void Agent::on_fence_down(const protocol::FenceDown& down)
{
    if (tree_ && !tree_->children(setup_.node_id).empty())  // a leaf has nothing to encode it for
        send_down(std::nullopt, down.encode());
    const auto id = *protocol::parse_fence_key(down.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    finish_fence(down.key, id, down.status, down.data);
}

// An instance is over here: recorded as finished (a late contribution or
// result of it is dropped), its local caller answered, and a local call of
// it that is still to come fails at once.
void Agent::finish_fence(const std::string& key, const protocol::FenceKey& id, int status, const protocol::Bytes& data)
{
    auto f = fences_.finish(key, id);
    const auto calls = fence_calls_.find(id.set);
    const bool called_here = calls != fence_calls_.end() && id.instance <= calls->second;
    if (status != protocol::pmix::success && !called_here &&
        std::any_of(setup_.ranks.begin(), setup_.ranks.end(), [&](std::uint32_t r) { return protocol::takes_part(id.ranks, r); }))
        failed_ahead_[key] = status;
    if (f && f->extra)
        (*f->extra)(status, data);
}

// The caller's PMIX_TIMEOUT expired: an instance still pending here fails
// here, below, and through the FE on every node.
void Agent::fence_timed_out(const std::string& key)
{
    if (!fences_.in_progress(key))
        return;  // over
    log::info("fence %s timed out", key.c_str());
    send_up(protocol::FenceUp{key, protocol::pmix::timeout, 0, {}}.encode());
    fail_fence(key, protocol::pmix::timeout);
}

void Agent::fail_fences_with(std::uint32_t rank)
{
    // Later fences over it fail at once.
    dead_.insert(rank);
    // The FE fails it for everyone as well; only the local caller here.
    for (const auto& key : fences_.affected([&](const auto& ranks) { return protocol::takes_part(ranks, rank); }))
        finish_fence(key, *protocol::parse_fence_key(key), protocol::pmix::proc_term_wo_sync, {});
}

// Fails an instance here and in the subtree below, which waits for its
// result from us.
void Agent::fail_fence(std::string key, int status)
{
    send_down(std::nullopt, protocol::FenceDown{key, status, {}}.encode());
    finish_fence(key, *protocol::parse_fence_key(key), status, {});
}

// ---- direct modex ------------------------------------------------------------------

void Agent::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    if (rank >= map_->rank_node.size()) {
        done(protocol::pmix::not_found, {});
        return;
    }
    const std::uint64_t id = next_dmodex_++;
    dmodex_waiting_.emplace(id, std::move(done));
    route(map_->rank_node[rank], protocol::DmodexReq{id, setup_.node_id, map_->rank_node[rank], rank}.encode());
    // Bounded: a request nobody answers fails.
    timers_.after_ms(static_cast<std::uint32_t>(timeout_s > 0 ? timeout_s : default_timeout_s) * 1000, [this, id] {
        auto it = dmodex_waiting_.find(id);
        if (it == dmodex_waiting_.end())
            return;  // answered
        auto waiting = std::move(it->second);
        dmodex_waiting_.erase(it);
        waiting(protocol::pmix::timeout, {});
    });
}

void Agent::on_dmodex_req(const protocol::DmodexReq& r)
{
    if (r.to != setup_.node_id) {
        route(r.to, r.encode());
        return;
    }
    node_.dmodex(r.rank, [this, r](int status, protocol::Bytes data) {
        route(r.from, protocol::DmodexResp{r.id, setup_.node_id, r.from, status, std::move(data)}.encode());
    });
}

void Agent::on_dmodex_resp(const protocol::DmodexResp& r)
{
    if (r.to != setup_.node_id) {
        route(r.to, r.encode());
        return;
    }
    auto it = dmodex_waiting_.find(r.id);
    if (it == dmodex_waiting_.end())
        return;  // timed out already
    auto done = std::move(it->second);
    dmodex_waiting_.erase(it);
    done(r.status, r.data);
}

void Agent::data_request(protocol::DataRequest request, int timeout_s, DataDone done)
{
    const std::uint64_t id = next_data_++;
    request.id = id;
    request.node = setup_.node_id;
    const bool waits_for_publish = request.op == protocol::DataRequest::Op::lookup && request.wait;
    data_waiting_.emplace(id, std::move(done));
    send_up(request.encode());
    if (waits_for_publish && timeout_s <= 0)
        return;
    timers_.after_ms(static_cast<std::uint32_t>(timeout_s > 0 ? timeout_s : default_timeout_s) * 1000, [this, id] {
        auto it = data_waiting_.find(id);
        if (it == data_waiting_.end())
            return;  // answered
        auto waiting = std::move(it->second);
        data_waiting_.erase(it);
        waiting(protocol::DataReply{id, setup_.node_id, protocol::pmix::timeout, {}, {}, {}});
    });
}

void Agent::on_data_reply(const protocol::DataReply& r)
{
    if (r.node != setup_.node_id) {
        route(r.node, r.encode());
        return;
    }
    if (auto it = data_waiting_.find(r.id); it != data_waiting_.end()) {
        auto done = std::move(it->second);
        data_waiting_.erase(it);
        done(r);
    }
}

}  // namespace exitpolicy::pmix_server
