// fences.cpp - finished fence instances. See fences.hpp.
#include "fences.hpp"

namespace exitpolicy::wire {

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
