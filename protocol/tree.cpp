// SPDX-License-Identifier: Apache-2.0
// tree.cpp - see tree.hpp.
#include "tree.hpp"

#include <algorithm>

namespace exitpolicy::protocol {
namespace {

std::uint64_t position(std::optional<std::uint32_t> node) noexcept
{
    return node ? std::uint64_t{*node} + 1 : 0;
}

}  // namespace

bool Tree::leave(std::uint32_t node) noexcept
{
    if (node >= nnodes_ || gone_[node])
        return false;
    gone_[node] = true;
    return true;
}

std::optional<std::uint32_t> Tree::static_parent(std::uint32_t node) const noexcept
{
    const std::uint64_t p = (position(node) - 1) / fanout_;
    if (p == 0)
        return std::nullopt;
    return static_cast<std::uint32_t>(p - 1);
}

std::optional<std::uint32_t> Tree::parent(std::uint32_t node) const noexcept
{
    auto p = static_parent(node);
    while (p && gone_[*p])
        p = static_parent(*p);
    return p;
}

std::vector<std::uint32_t> Tree::children(std::optional<std::uint32_t> node) const
{
    std::vector<std::uint32_t> out;
    std::vector<std::uint64_t> todo{position(node)};
    while (!todo.empty()) {
        const std::uint64_t at = todo.back();
        todo.pop_back();
        const std::uint64_t first = at * fanout_ + 1;
        // Backwards, so that the stack hands them out in order.
        for (std::uint64_t p = std::min<std::uint64_t>(first + fanout_ - 1, nnodes_); p >= first; --p) {
            if (gone_[p - 1])
                todo.push_back(p);  // its children are ours now
            else
                out.push_back(static_cast<std::uint32_t>(p - 1));
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

bool Tree::in_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept
{
    if (node >= nnodes_)
        return false;
    if (root && *root == node)
        return true;
    return next_hop(root, node).has_value();
}

bool Tree::in_static_subtree(std::uint32_t node, std::optional<std::uint32_t> root) const noexcept
{
    if (node >= nnodes_)
        return false;
    const std::uint64_t top = position(root);
    for (std::uint64_t p = position(node); p >= top; p = (p - 1) / fanout_) {
        if (p == top)
            return true;
        if (p == 0)
            break;
    }
    return false;
}

std::optional<std::uint32_t> Tree::next_hop(std::optional<std::uint32_t> from, std::uint32_t to) const noexcept
{
    if (to >= nnodes_ || (from && *from >= nnodes_))
        return std::nullopt;
    std::optional<std::uint32_t> at = to;
    while (at) {
        const auto up = parent(*at);
        if (up == from)
            return at;
        at = up;
    }
    return std::nullopt;
}

}  // namespace exitpolicy::protocol
