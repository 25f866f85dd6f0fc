// SPDX-License-Identifier: Apache-2.0
// place.hpp - where one node's part of a step is: the step (job, step),
// the node (its index among the step's nodes, its name) and the ranks of
// its tasks. slurmstepd learns it from Slurm and passes it on the daemon's
// command line; the daemon hands it to its agent. Each setup that needs it
// is one (derives from it) and passes it on whole (place()), so that it is
// declared here alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exitpolicy::protocol {

struct NodePlace {
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    std::uint32_t node_id = 0;
    std::string hostname;              // this node's name
    std::vector<std::uint32_t> ranks;  // this node's tasks

    NodePlace& place() noexcept { return *this; }
    const NodePlace& place() const noexcept { return *this; }
    bool operator==(const NodePlace&) const = default;
};

}  // namespace exitpolicy::protocol
