// SPDX-License-Identifier: Apache-2.0
// fences.hpp - the fence bookkeeping of every node of the overlay tree,
// written once for srun's front end (the root) and the node daemons.
//
// A fence instance (protocol::FenceKey) gathers one contribution from each
// place below a node that holds a participant: the node's own tasks, and
// each child whose subtree holds one. When a node has them all it passes
// the gathered data up (a daemon) or broadcasts the result (the FE). An
// instance that completes or fails is finished: a late contribution or
// result of it is dropped and never starts, completes or fails a later
// instance.
#pragma once

#include "tree.hpp"
#include "wire.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::protocol {

// Whether `rank` takes part in a fence over `ranks` (sorted; empty: all).
inline bool takes_part(const std::vector<std::uint32_t>& ranks, std::uint32_t rank)
{
    return ranks.empty() || std::binary_search(ranks.begin(), ranks.end(), rank);
}

// Whether any participant of a fence over `ranks` (sorted; empty: all) is
// in `dead`.
bool names_dead(const std::vector<std::uint32_t>& ranks, const std::set<std::uint32_t>& dead);

// The contributions node `at` (none: the FE) awaits for a fence over
// `ranks`: one from its own tasks when one of them takes part, and one per
// child it has now whose subtree holds a participant. `rank_node`: each
// rank's node.
std::uint32_t fence_expected(const Tree& tree, const std::vector<std::uint32_t>& rank_node,
                             std::optional<std::uint32_t> at, const std::vector<std::uint32_t>& ranks);

// Instances over one participant set mostly finish in order: those below a
// watermark are kept as one number, only the ones that finished ahead of an
// earlier one are kept each.
class FinishedFences {
public:
    // Instance `instance` (>= 1) over participant set `set` (protocol::fence_set) finished.
    void add(const std::string& set, std::uint64_t instance);
    bool contains(const std::string& set, std::uint64_t instance) const;

private:
    struct PerSet {
        std::uint64_t below = 1;           // every instance before this one finished
        std::set<std::uint64_t> beyond;    // finished ones after the first unfinished
    };
    std::map<std::string, PerSet> sets_;
};

// The instances in progress at one node, and those finished there. `Extra`
// is what the node keeps besides (a daemon: its local caller's callback).
struct NoExtra {};
template <typename Extra = NoExtra>
class FenceTable {
public:
    struct Instance {
        FenceKey id;
        std::uint32_t expected = 0;  // contributions awaited here
        std::uint32_t received = 0;
        Bytes data;                  // gathered so far
        Extra extra{};
    };

    bool finished(const FenceKey& id) const { return finished_.contains(id.set, id.instance); }
    Instance* find(const std::string& key)
    {
        auto it = in_progress_.find(key);
        return it == in_progress_.end() ? nullptr : &it->second;
    }
    // The instance, opened on its first contribution, awaiting `expected()`.
    template <typename Expected>
    Instance& open(const std::string& key, const FenceKey& id, Expected&& expected)
    {
        auto it = in_progress_.find(key);
        if (it == in_progress_.end()) {
            it = in_progress_.emplace(key, Instance{}).first;
            it->second.id = id;
            it->second.expected = std::forward<Expected>(expected)();
        }
        return it->second;
    }
    // One contribution: true when it was the last one awaited.
    static bool add(Instance& f, std::span<const std::uint8_t> data)
    {
        f.data.insert(f.data.end(), data.begin(), data.end());
        return ++f.received >= f.expected;
    }
    // The instance is over here (completed or failed): it is recorded as
    // finished, and what was in progress of it (none if nothing) returned.
    std::optional<Instance> finish(const std::string& key, const FenceKey& id)
    {
        finished_.add(id.set, id.instance);
        auto it = in_progress_.find(key);
        if (it == in_progress_.end())
            return std::nullopt;
        std::optional<Instance> out(std::move(it->second));
        in_progress_.erase(it);
        return out;
    }
    // The keys of the instances in progress whose participants (sorted;
    // empty: all) `hit` says are affected.
    template <typename Hit>
    std::vector<std::string> affected(Hit&& hit) const
    {
        std::vector<std::string> keys;
        for (const auto& [key, f] : in_progress_)
            if (hit(f.id.ranks))
                keys.push_back(key);
        return keys;
    }
    bool in_progress(const std::string& key) const { return in_progress_.count(key) != 0; }

private:
    std::map<std::string, Instance> in_progress_;
    FinishedFences finished_;
};

}  // namespace exitpolicy::protocol
