// SPDX-License-Identifier: Apache-2.0
// daemon_start.hpp - this node's exitpolicy-pmixd, started by slurmstepd
// (as root) for a step that gets the PMIx service: the daemon's user and
// files, its command line, the sockets planned for it here, its step
// directory. What it starts, slurmstepd.cpp keeps for the step.
#pragma once

#include "daemon_link.hpp"
#include "node_link.hpp"
#include "outcome_sink.hpp"
#include "pmi_sockets.hpp"
#include "protocol/planned_environment.hpp"
#include "exitpolicy/result.hpp"
#include "spank.hpp"

#include <optional>
#include <string>
#include <sys/types.h>

namespace exitpolicy::spank_plugin {

struct StartedDaemon {
    std::string dir;  // the step's directory, owned by the job's user
    uid_t uid = 0;    // the job's user
    gid_t gid = 0;
    LaunchedDaemon daemon;
    // The tasks' PMIx environment, when it is planned here
    // (planned_environment.hpp) rather than written by the daemon.
    std::optional<protocol::PlannedServer> planned;
};

// Starts this node's daemon for the step `link` places it in, with the
// tasks' PMI sockets made in `pmi` (none on failure); the error says why
// it could not (for srun's user and the Slurm log). `fe` is the node's
// link to srun's front end, which wakes a standing-by daemon.
Result<StartedDaemon> start_daemon(spank_t sp, const LinkSetup& link, FrontEndSink& fe, PmiSockets& pmi);

}  // namespace exitpolicy::spank_plugin
