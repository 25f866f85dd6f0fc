// SPDX-License-Identifier: Apache-2.0
// tree.hpp - the overlay's k-ary tree over a step's nodes, rooted at srun's
// front end.
//
// Positions: the FE is 0, node id i is i + 1. The parent of position p is
// (p - 1) / k, its children are p*k + 1 .. p*k + k. A fan-out of at least
// the node count is a star. Shared by the FE and the daemons so that both
// sides agree on every route.
//
// Run-through: a node whose daemon has left the tree (it died, or finished
// its share of the step first) is marked gone; its children are adopted by
// the next live ancestor. parent(), children(), in_subtree() and next_hop()
// answer for the tree as it is now; static_parent() and in_static_subtree()
// for the tree as it was built (what a message may have been routed through).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace exitpolicy::protocol {

// The widest tree a site may configure (plugstack.conf's fanout=).
inline constexpr std::uint32_t max_fanout = 1024;

class Tree {
public:
    Tree(std::uint32_t nnodes, std::uint32_t fanout)
        : nnodes_(nnodes), fanout_(fanout < 1 ? 1 : fanout), gone_(nnodes, false) {}

    std::uint32_t nnodes() const noexcept { return nnodes_; }
    std::uint32_t fanout() const noexcept { return fanout_; }

    // Marks `node` as gone from the tree (idempotent; ids outside are ignored).
    // Returns whether it was present until now.
    bool leave(std::uint32_t node) noexcept;
    bool gone(std::uint32_t node) const noexcept { return node < nnodes_ && gone_[node]; }

    // The parent of node id `node` as built; none when it is the FE.
    std::optional<std::uint32_t> static_parent(std::uint32_t node) const noexcept;
    // The nearest ancestor that has not left; none when it is the FE.
    std::optional<std::uint32_t> parent(std::uint32_t node) const noexcept;
    // The nodes that have `node` (none given: the FE) as their parent now.
    std::vector<std::uint32_t> children(std::optional<std::uint32_t> node) const;
    // Whether `node` lies below `root` (or is `root`) now; the FE: every node.
    bool in_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept;
    // The same in the tree as built.
    bool in_static_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept;
    // The child of `from` (now) whose subtree holds `to`; none if `to` is not below `from`.
    std::optional<std::uint32_t> next_hop(std::optional<std::uint32_t> from, std::uint32_t to) const noexcept;

private:
    std::uint32_t nnodes_;
    std::uint32_t fanout_;
    std::vector<bool> gone_;
};

}  // namespace exitpolicy::protocol
