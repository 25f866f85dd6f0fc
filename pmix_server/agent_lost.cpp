// SPDX-License-Identifier: Apache-2.0
// agent_lost.cpp - nodes that leave the tree and nodes that are lost, as a
// node's agent follows them (srun's side: spank_plugin/lost_nodes.cpp).
//
// - A daemon leaves the tree when its link closes: a child's link closing
//   here (node_left, and Gone up to the FE, which decides), or the parent's
//   (parent_lost: fences through it fail, its requests are answered
//   unreachable, and connect_up asks the nearest live ancestor, the FE
//   last, to adopt this node). An ancestor that adopts a child whose own
//   parent was another (adopt) takes the daemons in between as gone and
//   sends the child what came down meanwhile.
// - A node is lost only when the FE says so (NodeDown, on_node_down): its
//   daemon left and its slurmstepd's link closed with ranks unreported.
//   Every agent passes it down, fails the fences over its ranks and tells
//   its node (Node::node_lost: the daemon raises PMIX_EVENT_NODE_DOWN and a
//   termination event per lost rank, pmix_host.cpp notify_node_down).
#include "agent.hpp"

#include "pmix_server/log.hpp"
#include "protocol/events.hpp"

#include <algorithm>
#include <utility>

namespace exitpolicy::pmix_server {

void Agent::on_node_down(const protocol::NodeDown& d)
{
    if (!nodes_down_.insert(d.node).second)
        return;  // a replay
    const protocol::Bytes frame = d.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    log::info("node %s is lost with %zu ranks", d.hostname.c_str(), d.ranks.size());
    tree_->leave(d.node);
    for (std::uint32_t r : d.ranks)
        fences_.rank_dead(r);
    node_.node_lost(d);
}

void Agent::parent_lost(const std::string& why)
{
    if (stopping_)
        return;
    if (up_node_) {
        log::info("the parent daemon on %s left the tree (%s): asking the next live ancestor",
                  map_->hostnames[*up_node_].c_str(), why.c_str());
        tree_->leave(*up_node_);
    } else {
        log::info("the link to the front end closed (%s): reconnecting once", why.c_str());
    }
    // Every fence in progress here went, or would have gone, through the
    // parent: it fails here and below (never succeeds short, never hangs).
    fences_.fail_where([](const auto&) { return true; }, protocol::pmix::unreach);
    // Publish / lookup requests it carried are lost with it.
    for (auto& [id, done] : data_waiting_.take_all())
        done(protocol::DataReply{id, setup_.node_id, protocol::pmix::unreach, {}, {}, {}});
    connect_up();
}

// Asks the nearest ancestor still in the tree (the FE last) to adopt us; an
// ancestor that cannot be reached is gone too, and the next one is asked.
void Agent::connect_up()
{
    const auto target = tree_->parent(setup_.node_id);
    protocol::Hello me;
    me.role = protocol::Role::orphan;
    me.node_id = setup_.node_id;
    me.hostname = setup_.hostname;
    auto h = overlay_handlers();
    h.ready = [this](protocol::Channel& c) {
        log::info("adopted by %s", up_node_ ? map_->hostnames[*up_node_].c_str() : "the front end");
        fe_.reset();  // the enrollment link, if it was still open
        flush_up(c);
        outcomes_.resend();  // what the lost parent took but may not have passed on
        node_.linked_up();
    };
    h.closed = [this, target](protocol::Channel& c, protocol::Channel::Reason, const std::string& why) {
        const bool was_ready = c.is_ready();
        timers_.defer([this, target, was_ready, why] {
            if (was_ready) {
                parent_lost(why);
            } else if (target) {
                log::info("ancestor %s unreachable (%s)", map_->hostnames[*target].c_str(), why.c_str());
                tree_->leave(*target);
                connect_up();
            } else {
                log::error("lost the front end: %s", why.c_str());
                quit(1);
            }
        });
    };
    const std::string host = target ? map_->hosts[*target] : setup_.fe_host;
    const auto port = target ? static_cast<std::uint16_t>(map_->ports[*target]) : setup_.fe_port;
    auto c = protocol::Channel::connect(base_, host, port, secret_, setup_.job_id, setup_.step_id, me, std::move(h));
    if (!c) {
        log::error("%s: %s", target ? map_->hostnames[*target].c_str() : "front end", c.error().c_str());
        quit(1);
        return;
    }
    up_ = std::move(*c);
    up_node_ = target;
}

// A child came: when its own parent was not us, the daemons in between left
// the tree; it may have missed what came down meanwhile.
void Agent::adopt(protocol::Channel& child)
{
    if (!tree_)
        return;
    const std::uint32_t node = child.tag;
    if (node == setup_.node_id || !tree_->in_static_subtree(node, setup_.node_id)) {
        child.close("node " + std::to_string(node) + " is not below this node");
        return;
    }
    bool skipped = false;
    for (auto a = tree_->static_parent(node); a && *a != setup_.node_id; a = tree_->static_parent(*a)) {
        node_left(*a);
        skipped = true;
    }
    if (skipped || child.peer().role == protocol::Role::orphan) {
        log::info("adopted %s", map_->hostnames[node].c_str());
        for (const auto& frame : history_)
            child.send(frame);
    }
}

void Agent::node_left(std::uint32_t node)
{
    if (!tree_ || stopping_ || !tree_->leave(node))
        return;
    log::debug("node %u left the tree", node);
    down_queue_.erase(node);
    send_up(protocol::Gone{node}.encode());
    // Fences whose contributions may have been on their way through it.
    fences_.fail_where(
        [&](const std::vector<std::uint32_t>& ranks) {
            return ranks.empty() || std::any_of(ranks.begin(), ranks.end(), [&](std::uint32_t r) {
                       return r < map_->rank_node.size() && tree_->in_static_subtree(map_->rank_node[r], node);
                   });
        },
        protocol::pmix::unreach);
}

}  // namespace exitpolicy::pmix_server
