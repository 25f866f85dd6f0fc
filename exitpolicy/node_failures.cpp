// SPDX-License-Identifier: Apache-2.0
// node_failures.cpp - see node_failures.hpp.
#include "exitpolicy/node_failures.hpp"

#include "exitpolicy/policy.hpp"

namespace exitpolicy {

void NodeFailures::known(std::uint32_t rank, std::int64_t at_us, bool by_itself)
{
    if (!first_)
        first_ = First{rank, at_us, by_itself, {}};
}

void NodeFailures::abort_called(std::uint32_t rank, std::int64_t at_us, bool application,
                                const std::function<std::set<std::uint32_t>()>& running)
{
    if (first_)
        return;
    known(rank, at_us, false);
    if (application && running) {
        first_->running_at_abort = running();
        first_->running_at_abort.erase(rank);
    }
}

bool NodeFailures::collateral(const End& end) const
{
    if (end.torn_down && !end.aborted)
        return true;
    if (!end.client || !first_ || first_->rank == end.rank)
        return false;
    if (first_->running_at_abort.count(end.rank))
        return true;
    const std::int64_t margin = end.by_itself && !first_->by_itself ? reaction_window_us : 0;
    return end.when_us > first_->at_us + margin;
}

}  // namespace exitpolicy
