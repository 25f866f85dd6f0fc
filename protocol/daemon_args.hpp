// SPDX-License-Identifier: Apache-2.0
// daemon_args.hpp - the node daemon's bootstrap arguments, as slurmstepd
// (spank_plugin/) passes them on exitpolicy-pmixd's command line and the
// daemon (pmix_server/) reads them: the contract between the two, here so
// that neither includes the other. The secret never travels on argv: it is
// read from an inherited file descriptor.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/place.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exitpolicy::protocol {

// The node's place in the step (place.hpp), then the rest.
struct DaemonArgs : NodePlace {
    std::uint32_t nnodes = 0;
    std::uint32_t ntasks = 0;
    std::string fe_host;
    std::uint16_t fe_port = 0;
    int secret_fd = -1;
    int ready_fd = -1;                 // "ready PID\n" is written here once serving
    // slurmstepd's link, inherited (a socketpair made before the fork): the
    // only way outcomes and Stop come in. No path leads to it, so no one
    // can put another daemon's socket in its place.
    int control_fd = -1;
    // What a standby (pmix_server/detach.c) read of the control link before
    // it became this daemon, so that slurmstepd never waits on a full link:
    // a file read first, then the link. -1: nothing was read.
    int control_backlog_fd = -1;
    // The PMIx server's listening socket, which slurmstepd made and named in
    // the tasks' environment, planned for the OpenPMIx version
    // `planned_version` (protocol/planned_environment.hpp); -1 and "": the
    // daemon's library writes the tasks' environment.
    int reserved_fd = -1;
    std::string planned_version;
    // The daemon's ends of the local tasks' PMI sockets (PMI_FD), one per
    // rank of `ranks` in that order, from this descriptor up; -1: none.
    int pmi_fd = -1;
    std::string dir;                   // private directory: local socket, PMIx rendezvous
    std::uint32_t uid = 0;             // the job's user (accepted on the local socket)
    std::string log_dir;               // empty: syslog
    std::string topology = "discover"; // discover, none, or an hwloc XML file
    int debug = 0;

    bool operator==(const DaemonArgs&) const = default;
};

// --job J --step S --node N --nnodes M --ntasks T --ranks 0,1 --hostname H
// --fe HOST:PORT --secret-fd FD --ready-fd FD --control-fd FD --dir DIR --uid U
// [--log-dir DIR] [--topology discover|none|/PATH] [--debug L]
// [--reserved-fd FD --planned-version V] [--pmi-fd FD] [--control-backlog-fd FD]
Result<DaemonArgs> parse_daemon_args(const std::vector<std::string>& argv);

// The command line parse_daemon_args reads back as `args` (slurmstepd writes it):
// without the descriptors that are -1, which the launcher adds once it
// knows them.
std::vector<std::string> daemon_command_line(const DaemonArgs& args);

}  // namespace exitpolicy::protocol
