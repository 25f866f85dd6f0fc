// SPDX-License-Identifier: Apache-2.0
// het_placement.cpp - see het_placement.hpp.
#include "het_placement.hpp"

namespace exitpolicy::spank_plugin {

Result<bool> HetPlacement::add(const protocol::Component& c)
{
    using R = Result<bool>;
    const std::string which = "component " + (c.index == protocol::Component::no_index
                                                  ? "of job " + std::to_string(c.job_id)
                                                  : std::to_string(c.index));
    if (c.ntasks == 0 || c.nnodes == 0)
        return R::fail(which + " has no task or no node");
    if (const auto it = components_.find(key(c)); it != components_.end()) {
        if (it->second == c)
            return R::ok(true);
        return R::fail(which + " was said to have " + std::to_string(it->second.ntasks) + " tasks on " +
                       std::to_string(it->second.nnodes) + " nodes, now " + std::to_string(c.ntasks) + " on " +
                       std::to_string(c.nnodes));
    }
    if (known_tasks_ + c.ntasks > ntasks_ || known_nodes_ + c.nnodes > nnodes_)
        return R::fail(which + " (" + std::to_string(c.ntasks) + " tasks on " + std::to_string(c.nnodes) +
                       " nodes) does not fit in the step's " + std::to_string(ntasks_) + " tasks on " +
                       std::to_string(nnodes_) + " nodes beside the components known");
    components_.emplace(key(c), c);
    known_tasks_ += c.ntasks;
    known_nodes_ += c.nnodes;
    return R::ok(true);
}

std::optional<HetPlacement::Start> HetPlacement::start(const protocol::Component& c) const
{
    if (!complete())
        return std::nullopt;
    Start at;
    for (const auto& [k, known] : components_) {
        if (k == key(c))
            return at;
        at.rank += known.ntasks;
        at.node += known.nnodes;
    }
    return std::nullopt;
}

std::vector<HetPlacement::Part> HetPlacement::parts() const
{
    std::vector<Part> out;
    if (!complete())
        return out;
    std::uint32_t rank = 0;
    for (const auto& [k, known] : components_) {
        out.push_back({rank, known.ntasks});
        rank += known.ntasks;
    }
    return out;
}

}  // namespace exitpolicy::spank_plugin
