// SPDX-License-Identifier: Apache-2.0
// lost_nodes.cpp - nodes that leave the tree and nodes that are lost, as
// srun's front end follows them (a node's agent: pmix_server/agent_lost.cpp).
//
// A daemon leaves the tree when its way up closes (tree_link_closed), its
// parent reports it gone (Gone), or an orphan below it asks the FE to adopt
// it (adopt): node_left. A node is lost when its daemon has left and its
// slurmstepd's link is closed (stepd_closed) while some of its ranks never
// reported an end: check_lost declares it once (NodeDown down the tree, to
// every daemon's clients as PMIX_EVENT_NODE_DOWN and a termination event per
// lost rank), its ranks count as lost_code, and fences over them fail. See
// overlay_root.hpp.
#include "overlay_root.hpp"
#include "user_line.hpp"

#include "exitpolicy/report.hpp"
#include "protocol/events.hpp"

#include <algorithm>

namespace exitpolicy::spank_plugin {

void OverlayRoot::stepd_opened(std::uint32_t node)
{
    ++stepd_links[node];
}

void OverlayRoot::stepd_closed(std::uint32_t node)
{
    --stepd_links[node];
    // A standby whose slurmstepd is gone will never be woken: its node is
    // done with the step before any daemon of it enrolled.
    if (stepd_links[node] == 0 && standbys[node] && !enrolled[node])
        make_absent(node);
    check_lost(node);
}

void OverlayRoot::tree_link_closed(std::uint32_t node, bool adopted)
{
    // Its way up was this link (not just the enrollment): it left. Not the
    // tree as it is now: a node whose parent daemon has just left is
    // below the FE now, yet its enrollment link was not its way up.
    if (tree && (adopted || !tree->static_parent(node)))
        node_left(node);
}

bool OverlayRoot::adopt(std::uint32_t node)
{
    if (!tree)
        return false;
    for (auto a = tree->static_parent(node); a; a = tree->static_parent(*a))
        node_left(*a);
    return true;
}

// A daemon left the tree (its link to us closed, its parent reported
// it, or an orphan below it asked us to adopt it).
void OverlayRoot::node_left(std::uint32_t node)
{
    if (!tree || node >= setup.nnodes)
        return;
    daemon_gone[node] = true;
    if (tree->leave(node)) {
        // Fences whose contributions may have been on their way through it.
        fail_fences(protocol::pmix::unreach, [&](const std::vector<std::uint32_t>& ranks) {
            return collector.with_rank_nodes([&](const std::vector<std::uint32_t>& node_of_rank) {
                return std::any_of(ranks.begin(), ranks.end(), [&](std::uint32_t r) {
                    return r < node_of_rank.size() && tree->in_static_subtree(node_of_rank[r], node);
                });
            });
        });
    }
    check_lost(node);
}

// A node is lost when its daemon left the tree and its slurmstepd's
// link is closed while some of its ranks never reported an end: the
// daemons tell their clients (PMIX_EVENT_NODE_DOWN, and a termination
// event per lost rank).
void OverlayRoot::check_lost(std::uint32_t node)
{
    if (!map_sent() || !daemon_gone[node] || stepd_links[node] != 0 || declared_down[node])
        return;
    protocol::NodeDown down;
    down.node = node;
    down.exit_code = setup.lost_code;
    down.hostname = collector.node_name(node);
    down.ranks = collector.unreported(node);
    if (down.ranks.empty())
        return;
    declared_down[node] = true;
    dead.insert(down.ranks.begin(), down.ranks.end());
    lost_ranks.insert(lost_ranks.end(), down.ranks.begin(), down.ranks.end());
    std::sort(lost_ranks.begin(), lost_ranks.end());
    user_line("%s: node lost (its node daemon and slurmstepd are gone) with rank%s %s", down.hostname.c_str(),
              down.ranks.size() == 1 ? "" : "s", compress_ranks(down.ranks).c_str());
    fail_fences(protocol::pmix::proc_term_wo_sync, [&](const std::vector<std::uint32_t>& ranks) {
        return std::any_of(down.ranks.begin(), down.ranks.end(),
                           [&](std::uint32_t r) { return std::binary_search(ranks.begin(), ranks.end(), r); });
    });
    const protocol::Bytes frame = down.encode();
    history_.push_back(frame);
    broadcast(frame);
    failure(down.hostname + " was lost");
    outcome_recorded();  // the others may be over already
}

}  // namespace exitpolicy::spank_plugin
