// fences.cpp - see fences.hpp.
#include "fences.hpp"

namespace exitpolicy::wire {

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
    std::uint32_t n = at && *at < holds.size() && holds[*at] ? 1 : 0;
    // Each child whose subtree holds one: the one next_hop leads through.
    std::vector<bool> counted(holds.size(), false);
    for (std::uint32_t node = 0; node < holds.size(); ++node) {
        if (!holds[node] || node == at)
            continue;
        const auto child = tree.next_hop(at, node);
        if (child && !counted[*child]) {
            counted[*child] = true;
            ++n;
        }
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

}  // namespace exitpolicy::wire
