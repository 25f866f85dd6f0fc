// SPDX-License-Identifier: Apache-2.0
// front_end_setup.hpp - what the step's front end (front_end.hpp) is
// started with and what it hands over at the end: the words it shares with
// the pieces it is made of (overlay_root.hpp, outcome_collector.hpp), which
// therefore need not include it.
#pragma once

#include "config.hpp"
#include "exitpolicy/policy.hpp"
#include "protocol/timeouts.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {

struct FrontEndSetup {
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    std::uint32_t ntasks = 0;
    std::uint32_t nnodes = 0;
    std::optional<PortRange> ports;  // none: an ephemeral port
    // The site's settings (config.hpp); their defaults: option_table.hpp.
    std::uint32_t fanout = site_default<std::uint32_t>(SiteArg::fanout);  // the node daemons' tree
    int lost_code = site_default<int>(SiteArg::lost_code);  // what a lost task counts as (for the PMIx events)
    // Failures in a PMIx step: when a PMIx client ends abnormally or a node
    // is lost, the FE tears the whole step down after teardown_grace
    // (SIGTERM, then SIGKILL after kill_after), unless the step is
    // recoverable (run-through). An abort tears it down at once.
    bool recoverable = false;
    std::chrono::milliseconds teardown_grace{site_default<std::int64_t>(SiteArg::teardown_grace_ms)};
    std::chrono::milliseconds kill_after{protocol::timeouts::teardown_kill_after};
    // A heterogeneous step (srun A : B): job_id is its first component's
    // (what every component's slurmstepd finds in SLURM_JOB_ID), ntasks and
    // nnodes the whole step's, and each node's Hello says its component
    // (het_placement.hpp). No PMIx service.
    bool heterogeneous = false;
};

// What FrontEnd::finish() hands over.
struct Collected {
    StepOutcomes step;                  // nodes indexed by node id; ranks never reported are lost
    std::uint32_t missing = 0;          // ranks with no outcome
    std::uint32_t nodes_reporting = 0;  // nodes that connected and authenticated
    std::uint32_t nnodes = 0;
    std::vector<std::string> problems;  // what went wrong on the way (rejected peers, ...)
};

}  // namespace exitpolicy::spank_plugin
