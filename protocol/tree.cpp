// tree.cpp - see tree.hpp.
#include "tree.hpp"

namespace exitpolicy::wire {
namespace {

std::uint64_t position(std::optional<std::uint32_t> node) noexcept
{
    return node ? std::uint64_t{*node} + 1 : 0;
}

}  // namespace

std::optional<std::uint32_t> Tree::parent(std::uint32_t node) const noexcept
{
    const std::uint64_t p = (position(node) - 1) / fanout_;
    if (p == 0)
        return std::nullopt;
    return static_cast<std::uint32_t>(p - 1);
}

std::vector<std::uint32_t> Tree::children(std::optional<std::uint32_t> node) const
{
    std::vector<std::uint32_t> out;
    const std::uint64_t first = position(node) * fanout_ + 1;
    for (std::uint64_t p = first; p < first + fanout_ && p <= nnodes_; ++p)
        out.push_back(static_cast<std::uint32_t>(p - 1));
    return out;
}

bool Tree::in_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept
{
    return next_hop(root, node).has_value() || (root && *root == node);
}

std::optional<std::uint32_t> Tree::next_hop(std::optional<std::uint32_t> from, std::uint32_t to) const noexcept
{
    if (to >= nnodes_)
        return std::nullopt;
    const std::uint64_t top = position(from);
    std::uint64_t p = position(to);
    while (p > top) {
        const std::uint64_t up = (p - 1) / fanout_;
        if (up == top)
            return static_cast<std::uint32_t>(p - 1);
        p = up;
    }
    return std::nullopt;
}

}  // namespace exitpolicy::wire
