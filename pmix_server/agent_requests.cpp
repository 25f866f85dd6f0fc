// SPDX-License-Identifier: Apache-2.0
// agent_requests.cpp - what the agent does for the node's PMIx server across
// nodes: failure events, direct modex, publish and lookup (fences:
// fence_relay.cpp; lost nodes: agent_lost.cpp). See agent.hpp.
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
    fences_.rank_dead(e.rank);
    node_.peer_failed(e);
}

// ---- direct modex ------------------------------------------------------------------

void Agent::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    if (rank >= map_->rank_node.size()) {
        done(protocol::pmix::not_found, {});
        return;
    }
    // Bounded: a request nobody answers fails.
    const std::uint64_t id = dmodex_waiting_.add(std::move(done), timeout_s > 0 ? timeout_s : default_timeout_s,
                                                 [](Done& waiting, std::uint64_t) { waiting(protocol::pmix::timeout, {}); });
    route(map_->rank_node[rank], protocol::DmodexReq{id, setup_.node_id, map_->rank_node[rank], rank}.encode());
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
    if (auto done = dmodex_waiting_.take(r.id))  // none: timed out already
        (*done)(r.status, r.data);
}

void Agent::data_request(protocol::DataRequest request, int timeout_s, DataDone done)
{
    const bool waits_for_publish = request.op == protocol::DataRequest::Op::lookup && request.wait;
    const int limit = timeout_s > 0 ? timeout_s : waits_for_publish ? 0 : default_timeout_s;
    request.id = data_waiting_.add(std::move(done), limit, [node = setup_.node_id](DataDone& waiting, std::uint64_t id) {
        waiting(protocol::DataReply{id, node, protocol::pmix::timeout, {}, {}, {}});
    });
    request.node = setup_.node_id;
    send_up(request.encode());
}

void Agent::on_data_reply(const protocol::DataReply& r)
{
    if (r.node != setup_.node_id) {
        route(r.node, r.encode());
        return;
    }
    if (auto done = data_waiting_.take(r.id))
        (*done)(r);
}

}  // namespace exitpolicy::pmix_server
