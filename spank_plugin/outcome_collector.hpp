// SPDX-License-Identifier: Apache-2.0
// outcome_collector.hpp - what the front end collects for srun's main thread.
//
// The FE thread records here what the step's peers say: which node is which
// (its name, its ranks, its links still open), every task outcome (one per
// rank + epoch: a retry is a duplicate, a restarted task's higher epoch
// replaces the lower one), the aborts the node daemons report and the
// problems met on the way. srun's main thread waits on it in
// FrontEnd::finish() and takes what it holds as a Collected. Everything is
// under one mutex: every method is safe from either thread.
//
// No libevent and no sockets here: unit-tested alone with real
// protocol::Outcome frames.
#pragma once

#include "front_end_setup.hpp"

#include "exitpolicy/policy.hpp"
#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {

class OutcomeCollector {
public:
    OutcomeCollector(std::uint32_t ntasks, std::uint32_t nodes);
    OutcomeCollector(const OutcomeCollector&) = delete;
    OutcomeCollector& operator=(const OutcomeCollector&) = delete;

    // ---- the FE thread ----
    // A peer of node `node` (< nnodes) authenticated: the node is `hostname`
    // and runs `ranks` (those of the step), and it has one more open link.
    void node_ready(std::uint32_t node, const std::string& hostname, const std::vector<std::uint32_t>& ranks);
    // An authenticated link closed.
    void link_closed();
    // Something went wrong that srun's user is to hear of (the first 20).
    void problem(std::string text);

    // An outcome frame `body` from a link of node `from`: decoded, placed on
    // the node its rank runs on (the sender's, when no node named it), and
    // recorded; a rank outside the step is a problem. Fails only on a frame
    // that does not decode.
    struct Recorded {
        protocol::Outcome frame;
        TaskOutcome task;
        OutcomeSet::Recorded recorded;
    };
    Result<Recorded> record(std::uint32_t from, std::span<const std::uint8_t> body);
    // One of an outcomes frame's (already decoded).
    Recorded record(std::uint32_t from, const protocol::Outcome& o);

    // A PMIx client of `rank` called abort: kept for the report (the first
    // one of a rank stands). True when it is the step's first.
    bool record_abort(std::uint32_t rank, int status, std::string message);
    // The node daemons have the step map: finish() gives one of them a
    // moment to bring outcomes up the tree once every link closed.
    void step_map_sent();

    // ---- what the FE thread reads ----
    bool complete() const;
    // Every outcome still missing is of a rank in `lost` (sorted).
    bool missing_only(const std::vector<std::uint32_t>& lost) const;
    // A node's name ("?" while unknown, and for an id outside the step).
    std::string node_name(std::uint32_t node) const;
    // "rank 3 on node2", for srun's user.
    std::string where(std::uint32_t rank) const;
    std::vector<std::string> hostnames() const;
    std::vector<std::uint32_t> rank_nodes() const;  // each rank's node; nnodes while unknown
    // f(each rank's node) under the lock, for what is computed over the
    // whole step at once; f must not call the collector.
    template <typename F>
    decltype(auto) with_rank_nodes(F&& f) const
    {
        std::lock_guard lock(mu);
        return f(std::as_const(node_of_rank));
    }
    // The ranks of `node` that have not reported an end.
    std::vector<std::uint32_t> unreported(std::uint32_t node) const;

    // ---- srun's main thread ----
    // Every outcome arrived, or every node connected and all their links
    // closed.
    bool done() const;
    // Waits until done() or `grace` passed; in a step whose daemons have
    // the map, a moment more (within the grace) for outcomes still missing.
    void wait(std::chrono::milliseconds grace);
    // What arrived: ranks never reported are lost on the node they run on
    // (an extra node "?" when none said), with the aborts the daemons
    // reported.
    Collected collected() const;

private:
    bool done_locked() const;  // under mu

    const std::uint32_t nnodes;
    mutable std::mutex mu;
    std::condition_variable cv;
    OutcomeSet outcomes;
    std::vector<std::string> node_names;
    std::vector<bool> node_seen;   // a stepd link or a daemon of that node authenticated
    std::uint32_t open_links = 0;  // authenticated links still open
    std::vector<std::uint32_t> node_of_rank;
    std::vector<std::string> problems;
    struct Abort {
        int status = 0;
        std::string message;
    };
    std::map<std::uint32_t, Abort> aborts;  // rank -> its PMIx_Abort
    bool map_sent = false;
};

}  // namespace exitpolicy::spank_plugin
