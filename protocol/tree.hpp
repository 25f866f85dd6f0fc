// tree.hpp - the overlay's k-ary tree over a step's nodes, rooted at srun's
// front end.
//
// Positions: the FE is 0, node id i is i + 1. The parent of position p is
// (p - 1) / k, its children are p*k + 1 .. p*k + k. A fan-out of at least
// the node count is a star. Pure arithmetic, shared by the FE and the daemons
// so that both sides agree on every route.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace exitpolicy::wire {

class Tree {
public:
    Tree(std::uint32_t nnodes, std::uint32_t fanout) noexcept
        : nnodes_(nnodes), fanout_(fanout < 1 ? 1 : fanout) {}

    std::uint32_t nnodes() const noexcept { return nnodes_; }
    std::uint32_t fanout() const noexcept { return fanout_; }

    // The parent node of node id `node`; none when it is the FE.
    std::optional<std::uint32_t> parent(std::uint32_t node) const noexcept;
    // The node ids directly below `node`; none given: below the FE.
    std::vector<std::uint32_t> children(std::optional<std::uint32_t> node) const;
    // Whether `node` lies in the subtree rooted at `root` (the FE: every node).
    bool in_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept;
    // The child of `from` whose subtree holds `to`; none if `to` is not below `from`.
    std::optional<std::uint32_t> next_hop(std::optional<std::uint32_t> from, std::uint32_t to) const noexcept;

private:
    std::uint32_t nnodes_;
    std::uint32_t fanout_;
};

}  // namespace exitpolicy::wire
