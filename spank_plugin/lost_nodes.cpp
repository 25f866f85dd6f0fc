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
// lost_nodes.hpp; the FE thread.
#include "lost_nodes.hpp"
#include "user_line.hpp"

#include "exitpolicy/report.hpp"

#include <algorithm>

namespace exitpolicy::spank_plugin {

LostNodes::LostNodes(std::uint32_t nnodes, int lost_code, const std::optional<protocol::Tree>& tree, Root& root,
                     OutcomeCollector& collector)
    : nnodes_(nnodes),
      lost_code_(lost_code),
      tree_(tree),
      root_(root),
      collector_(collector),
      stepd_links_(nnodes, 0),
      daemon_gone_(nnodes, false),
      declared_down_(nnodes, false)
{
}

void LostNodes::stepd_opened(std::uint32_t node)
{
    ++stepd_links_[node];
}

std::uint32_t LostNodes::stepd_closed(std::uint32_t node)
{
    return --stepd_links_[node];
}

void LostNodes::tree_link_closed(std::uint32_t node, bool adopted)
{
    // Its way up was this link (not just the enrollment): it left. Not the
    // tree as it is now: a node whose parent daemon has just left is
    // below the FE now, yet its enrollment link was not its way up.
    if (tree_ && (adopted || !tree_->static_parent(node)))
        node_left(node);
}

bool LostNodes::adopt(std::uint32_t node)
{
    if (!tree_)
        return false;
    for (auto a = tree_->static_parent(node); a; a = tree_->static_parent(*a))
        node_left(*a);
    return true;
}

void LostNodes::node_left(std::uint32_t node)
{
    if (!tree_ || node >= nnodes_)
        return;
    daemon_gone_[node] = true;
    root_.left_tree(node);
    check_lost(node);
}

// A node is lost when its daemon left the tree and its slurmstepd's
// link is closed while some of its ranks never reported an end: the
// daemons tell their clients (PMIX_EVENT_NODE_DOWN, and a termination
// event per lost rank).
void LostNodes::check_lost(std::uint32_t node)
{
    if (!tree_ || !daemon_gone_[node] || stepd_links_[node] != 0 || declared_down_[node])
        return;
    protocol::NodeDown down;
    down.node = node;
    down.exit_code = lost_code_;
    down.hostname = collector_.node_name(node);
    down.ranks = collector_.unreported(node);
    if (down.ranks.empty())
        return;
    declared_down_[node] = true;
    lost_ranks_.insert(lost_ranks_.end(), down.ranks.begin(), down.ranks.end());
    std::sort(lost_ranks_.begin(), lost_ranks_.end());
    user_line("%s: node lost (its node daemon and slurmstepd are gone) with rank%s %s", down.hostname.c_str(),
              down.ranks.size() == 1 ? "" : "s", compress_ranks(down.ranks).c_str());
    root_.node_lost(down);
}

}  // namespace exitpolicy::spank_plugin
