// SPDX-License-Identifier: Apache-2.0
// fences.cpp - see fences.hpp.
#include "fences.hpp"

namespace exitpolicy::protocol {

bool names_dead(const std::vector<std::uint32_t>& ranks, const std::set<std::uint32_t>& dead)
{
    if (ranks.empty())
        return !dead.empty();
    // Few are dead, a fence may name thousands: look the dead up.
    return std::any_of(dead.begin(), dead.end(),
                       [&](std::uint32_t r) { return std::binary_search(ranks.begin(), ranks.end(), r); });
}

std::uint32_t fence_expected(const Tree& tree, const std::vector<std::uint32_t>& rank_node,
                             std::optional<std::uint32_t> at, const std::vector<std::uint32_t>& ranks)
{
    // The nodes that hold a participant.
    std::vector<bool> holds(tree.nnodes(), false);
    auto hold = [&](std::uint32_t rank) {
        if (rank < rank_node.size() && rank_node[rank] < holds.size())
            holds[rank_node[rank]] = true;
    };
    if (ranks.empty())
        for (std::uint32_t r = 0; r < rank_node.size(); ++r)
            hold(r);
    for (std::uint32_t r : ranks)
        hold(r);
    const std::uint32_t nnodes = tree.nnodes();
    std::uint32_t n = at && *at < nnodes && holds[*at] ? 1 : 0;
    if (at && (*at >= nnodes || tree.gone(*at)))
        return n;  // nothing is routed through a node that left
    // The subtree of `at` as built (tree.hpp's positions), walked once. A
    // holder's contribution comes through the child of `at` now: the highest
    // node on its way up that has not left, or itself when every one between
    // has left. Each node's work is its subtree's size, not the step's.
    const std::uint64_t k = tree.fanout();
    constexpr std::uint32_t none = ~std::uint32_t{0};
    struct Visit {
        std::uint64_t position;
        std::uint32_t via;  // the child of `at` now on the way down, or none
    };
    std::vector<Visit> todo;
    auto below = [&](std::uint64_t position, std::uint32_t via) {
        const std::uint64_t first = position * k + 1;
        for (std::uint64_t p = first; p < first + k && p <= nnodes; ++p)
            todo.push_back({p, via});
    };
    below(at ? std::uint64_t{*at} + 1 : 0, none);
    std::vector<bool> counted(nnodes, false);
    while (!todo.empty()) {
        auto [position, via] = todo.back();
        todo.pop_back();
        const auto node = static_cast<std::uint32_t>(position - 1);
        if (via == none && !tree.gone(node))
            via = node;
        if (holds[node]) {
            const std::uint32_t child = via == none ? node : via;
            if (!counted[child]) {
                counted[child] = true;
                ++n;
            }
        }
        below(position, via);
    }
    return n;
}

void FinishedFences::add(const std::string& set, std::uint64_t instance)
{
    PerSet& s = sets_[set];
    if (instance < s.below)
        return;
    s.beyond.insert(instance);
    while (!s.beyond.empty() && *s.beyond.begin() == s.below) {
        s.beyond.erase(s.beyond.begin());
        ++s.below;
    }
}

bool FinishedFences::contains(const std::string& set, std::uint64_t instance) const
{
    const auto it = sets_.find(set);
    if (it == sets_.end())
        return false;
    return instance < it->second.below || it->second.beyond.count(instance) != 0;
}

}  // namespace exitpolicy::protocol
