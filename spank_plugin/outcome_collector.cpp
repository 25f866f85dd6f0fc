// SPDX-License-Identifier: Apache-2.0
// outcome_collector.cpp - the step's outcomes and nodes under one mutex.
// See outcome_collector.hpp.
#include "outcome_collector.hpp"

#include "protocol/timeouts.hpp"

#include <algorithm>

namespace exitpolicy::spank_plugin {
namespace {

using protocol::timeouts::settle_after_close;

}  // namespace

OutcomeCollector::OutcomeCollector(std::uint32_t ntasks, std::uint32_t nodes)
    : nnodes(nodes),
      outcomes(ntasks),
      node_names(nodes, "?"),
      node_seen(nodes, false),
      node_of_rank(ntasks, nodes)  // unknown until a node says
{
}

void OutcomeCollector::node_ready(std::uint32_t node, const std::string& hostname,
                                  const std::vector<std::uint32_t>& ranks)
{
    std::lock_guard lock(mu);
    node_names[node] = hostname;
    node_seen[node] = true;
    ++open_links;
    for (std::uint32_t rank : ranks)
        if (rank < node_of_rank.size())
            node_of_rank[rank] = node;
}

void OutcomeCollector::link_closed()
{
    {
        std::lock_guard lock(mu);
        --open_links;
    }
    cv.notify_all();
}

void OutcomeCollector::problem(std::string text)
{
    std::lock_guard lock(mu);
    if (problems.size() < 20)
        problems.push_back(std::move(text));
}

Result<OutcomeCollector::Recorded> OutcomeCollector::record(std::uint32_t from, std::span<const std::uint8_t> body)
{
    auto o = protocol::Outcome::decode(body);
    if (!o)
        return Result<Recorded>::fail(o.error());
    return Result<Recorded>::ok(record(from, *o));
}

OutcomeCollector::Recorded OutcomeCollector::record(std::uint32_t from, const protocol::Outcome& o)
{
    TaskOutcome t;
    t.rank = o.rank;
    t.epoch = o.epoch;
    t.node = from;  // the sender: its own task, unless relayed up the tree
    {
        std::lock_guard lock(mu);
        if (o.rank < node_of_rank.size() && node_of_rank[o.rank] < nnodes)
            t.node = node_of_rank[o.rank];
    }
    t.pid = o.pid;
    t.wait_status = o.wait_status;
    t.end_time_us = o.end_time_us;
    if (o.flags & protocol::Outcome::flag_aborted)
        t.abort_status = o.abort_status;
    if (o.flags & protocol::Outcome::flag_finalized_known)
        t.finalized = (o.flags & protocol::Outcome::flag_finalized) != 0;
    t.collateral = (o.flags & protocol::Outcome::flag_collateral) != 0;
    t.oom_killed = (o.flags & protocol::Outcome::flag_oom_killed) != 0;
    if (t.oom_killed)
        t.memory_limit = o.memory_limit;
    OutcomeSet::Recorded recorded;
    {
        std::lock_guard lock(mu);
        recorded = outcomes.record(t);
    }
    if (recorded == OutcomeSet::Recorded::out_of_range)
        problem("node " + std::to_string(from) + " reported rank " + std::to_string(t.rank) +
                ", which is not a task of this step");
    cv.notify_all();
    return Recorded{o, t, recorded};
}

bool OutcomeCollector::record_abort(std::uint32_t rank, int status, std::string message)
{
    std::lock_guard lock(mu);
    const bool first = aborts.empty();
    aborts.emplace(rank, Abort{status, std::move(message)});
    return first;
}

void OutcomeCollector::step_map_sent()
{
    std::lock_guard lock(mu);
    map_sent = true;
}

bool OutcomeCollector::complete() const
{
    std::lock_guard lock(mu);
    return outcomes.complete();
}

bool OutcomeCollector::missing_only(const std::vector<std::uint32_t>& lost) const
{
    std::lock_guard lock(mu);
    if (outcomes.missing() > lost.size())
        return false;
    const auto absent = std::count_if(lost.begin(), lost.end(), [&](std::uint32_t r) { return !outcomes.has(r); });
    return static_cast<std::uint32_t>(absent) == outcomes.missing();
}

std::string OutcomeCollector::node_name(std::uint32_t node) const
{
    std::lock_guard lock(mu);
    return node < node_names.size() ? node_names[node] : "?";
}

std::string OutcomeCollector::where(std::uint32_t rank) const
{
    std::lock_guard lock(mu);
    const std::uint32_t node = rank < node_of_rank.size() ? node_of_rank[rank] : nnodes;
    return "rank " + std::to_string(rank) + " on " + (node < node_names.size() ? node_names[node] : "?");
}

std::vector<std::string> OutcomeCollector::hostnames() const
{
    std::lock_guard lock(mu);
    return node_names;
}

std::vector<std::uint32_t> OutcomeCollector::rank_nodes() const
{
    std::lock_guard lock(mu);
    return node_of_rank;
}

std::vector<std::uint32_t> OutcomeCollector::unreported(std::uint32_t node) const
{
    std::vector<std::uint32_t> ranks;
    std::lock_guard lock(mu);
    for (std::uint32_t r = 0; r < node_of_rank.size(); ++r)
        if (node_of_rank[r] == node && !outcomes.has(r))
            ranks.push_back(r);
    return ranks;
}

bool OutcomeCollector::done() const
{
    std::lock_guard lock(mu);
    return done_locked();
}

bool OutcomeCollector::done_locked() const
{
    if (outcomes.complete())
        return true;
    if (open_links != 0)
        return false;
    for (bool seen : node_seen)
        if (!seen)
            return false;
    return true;
}

void OutcomeCollector::wait(std::chrono::milliseconds grace)
{
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::unique_lock lock(mu);
    cv.wait_until(lock, deadline, [this] { return done_locked(); });
    // Every link closed with outcomes missing: a node daemon whose
    // parent in the tree has just stopped is on its way to us with
    // them. A moment more, within the grace.
    if (!outcomes.complete() && map_sent)
        cv.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + settle_after_close),
                      [this] { return outcomes.complete(); });
}

Collected OutcomeCollector::collected() const
{
    Collected out;
    std::lock_guard lock(mu);
    out.nnodes = nnodes;
    for (bool seen : node_seen)
        out.nodes_reporting += seen ? 1 : 0;
    out.missing = outcomes.missing();
    out.step.nodes = node_names;
    out.step.nodes.push_back("?");  // where ranks of unknown nodes are placed
    out.step.tasks = outcomes.finish(node_of_rank);
    // An abort the daemons reported stands even when the task's outcome
    // came by the direct path, which cannot know it.
    for (auto& t : out.step.tasks)
        if (auto a = aborts.find(t.rank); a != aborts.end()) {
            if (!t.abort_status)
                t.abort_status = a->second.status;
            t.abort_message = a->second.message;
        }
    out.problems = problems;
    return out;
}

}  // namespace exitpolicy::spank_plugin
