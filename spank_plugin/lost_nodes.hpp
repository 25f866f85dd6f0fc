// SPDX-License-Identifier: Apache-2.0
// lost_nodes.hpp - whether each node of the step is still there, as srun's
// front end follows it: how many links its slurmstepd has open, whether its
// daemon left the tree, whether it was declared lost, and the ranks of the
// nodes declared lost.
//
// A node is declared lost once, when its daemon has left the tree and its
// slurmstepd has no link left while some of its ranks never reported an
// end. The tree itself is the root's (overlay_root.hpp): this reads it, and
// asks the root (Root) to take a daemon that left out of it and to tell
// every node of a loss; it never changes the tree itself.
//
// FE thread only, as the root.
#pragma once

#include "outcome_collector.hpp"

#include "protocol/tree.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace exitpolicy::spank_plugin {

class LostNodes {
public:
    // What a daemon's leaving and a node's loss do at the root.
    class Root {
    public:
        // Node `node`'s daemon left: the tree goes on without it.
        virtual void left_tree(std::uint32_t node) = 0;
        // `down` is declared: every node is told, its ranks count as
        // ended, and the fences over them fail.
        virtual void node_lost(const protocol::NodeDown& down) = 0;

    protected:
        ~Root() = default;
    };

    // `tree` is the root's, empty until the step map goes out; `lost_code`
    // is what a lost task counts as (for the PMIx events).
    LostNodes(std::uint32_t nnodes, int lost_code, const std::optional<protocol::Tree>& tree, Root& root,
              OutcomeCollector& collector);
    LostNodes(const LostNodes&) = delete;
    LostNodes& operator=(const LostNodes&) = delete;

    // Node `node`'s slurmstepd linked; one of its links closed: how many
    // it has left.
    void stepd_opened(std::uint32_t node);
    std::uint32_t stepd_closed(std::uint32_t node);
    // As OverlayRoot's (overlay_root.hpp): a link to the FE that was the
    // node's way up closed; an orphan below asks to be adopted.
    void tree_link_closed(std::uint32_t node, bool adopted);
    bool adopt(std::uint32_t node);
    // A daemon left the tree (its link to us closed, its parent reported
    // it, or an orphan below it asked us to adopt it).
    void node_left(std::uint32_t node);
    // An absent node's daemon, left out of the tree as it is made.
    void gone_from_start(std::uint32_t node) { daemon_gone_[node] = true; }
    // Declares node `node` lost if it now is.
    void check_lost(std::uint32_t node);

    bool daemon_gone(std::uint32_t node) const { return daemon_gone_[node]; }
    // Sorted: the ranks of the nodes declared lost.
    const std::vector<std::uint32_t>& lost_ranks() const noexcept { return lost_ranks_; }

private:
    const std::uint32_t nnodes_;
    const int lost_code_;
    const std::optional<protocol::Tree>& tree_;
    Root& root_;
    OutcomeCollector& collector_;
    // By node id.
    std::vector<std::uint32_t> stepd_links_;  // slurmstepd's open links
    std::vector<bool> daemon_gone_;           // left the tree
    std::vector<bool> declared_down_;
    std::vector<std::uint32_t> lost_ranks_;
};

}  // namespace exitpolicy::spank_plugin
