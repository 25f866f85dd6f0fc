// SPDX-License-Identifier: Apache-2.0
// het_placement.hpp - where each component of a heterogeneous step
// (srun A : B) is in the whole step, as srun's front end learns it.
//
// Each component is a step of its own to its slurmstepd: its node ids and
// ranks start at 0, and SPANK says nothing of the other components. Each
// slurmstepd's Hello says which component it serves and the component's
// size (protocol::Component); the step's ranks and nodes are the
// components' in their order (Slurm's: a heterogeneous job's components
// by job id, the components of one job's step by index), so a component's
// first rank is the sum of the tasks of those before it. That is known
// once every component has spoken: until then the front end holds what a
// component's nodes sent.
//
// FE thread only. No sockets here: unit-tested alone.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {

class HetPlacement {
public:
    // The whole step's size.
    HetPlacement(std::uint32_t ntasks, std::uint32_t nnodes) : ntasks_(ntasks), nnodes_(nnodes) {}

    // A component's slurmstepd said what it is. Fails when that cannot be
    // (no task, a size other than another of its nodes said, more tasks or
    // nodes than the step has); what was known stays.
    Result<bool> add(const protocol::Component& c);
    // Every task of the step is in a component that has spoken.
    bool complete() const noexcept { return known_tasks_ == ntasks_; }

    struct Start {
        std::uint32_t rank = 0;
        std::uint32_t node = 0;
    };
    // Where the component's ranks and nodes start in the step; none until
    // complete(), and for a component that never spoke.
    std::optional<Start> start(const protocol::Component& c) const;

    // The components in the step's order, with their first rank and size
    // (for the report); empty until complete().
    struct Part {
        std::uint32_t first_rank = 0;
        std::uint32_t ntasks = 0;
    };
    std::vector<Part> parts() const;

private:
    using Key = std::pair<std::uint32_t, std::uint32_t>;  // job id, index
    static Key key(const protocol::Component& c) noexcept { return {c.job_id, c.index}; }
    std::uint32_t ntasks_;
    std::uint32_t nnodes_;
    std::uint64_t known_tasks_ = 0;
    std::uint64_t known_nodes_ = 0;
    std::map<Key, protocol::Component> components_;  // in the step's order
};

}  // namespace exitpolicy::spank_plugin
