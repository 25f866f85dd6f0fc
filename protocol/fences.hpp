// fences.hpp - which fence instances have finished (completed or failed),
// kept by the FE and by every daemon so that a late contribution or result
// of one is dropped: it never starts, completes or fails a later instance.
//
// Instances over one participant set mostly finish in order: those below a
// watermark are kept as one number, only the ones that finished ahead of an
// earlier one are kept each.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace exitpolicy::wire {

class FinishedFences {
public:
    // Instance `instance` (>= 1) over participant set `set` (wire::fence_set) finished.
    void add(const std::string& set, std::uint64_t instance);
    bool contains(const std::string& set, std::uint64_t instance) const;

private:
    struct PerSet {
        std::uint64_t below = 1;           // every instance before this one finished
        std::set<std::uint64_t> beyond;    // finished ones after the first unfinished
    };
    std::map<std::string, PerSet> sets_;
};

}  // namespace exitpolicy::wire
