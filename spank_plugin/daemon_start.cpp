// SPDX-License-Identifier: Apache-2.0
// daemon_start.cpp - see daemon_start.hpp.
#include "daemon_start.hpp"

#include "spank_plugin/log.hpp"
#include "plugin.hpp"
#include "slurmd_spool.hpp"
#include "step_dir.hpp"
#include "protocol/daemon_args.hpp"
#include "protocol/sockets.hpp"
#include "protocol/timeouts.hpp"

#include <slurm/slurm.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <utility>

extern char** environ;

namespace exitpolicy::spank_plugin {
namespace {

constexpr auto remove_timeout = protocol::timeouts::step_dir_removal;
// A step directory unchanged this long whose daemon does not listen is a
// dead step's.
constexpr std::chrono::seconds stale_step_dir_age{300};

// The socket through which srun's FE wakes this node's standing-by daemon,
// on the address this node's link to the FE has (the FE connects to that
// address, as it sees it, and the port it is told: node addresses route
// to srun's host and back). None without an open link: then the daemon
// starts at once.
std::optional<protocol::Listening> wake_socket(FrontEndSink& fe, const LinkSetup& link)
{
    const auto address = fe.local_address();
    if (!address)
        return std::nullopt;
    auto listening = protocol::listen_on(*address, 4);
    if (!listening) {
        log::debug("step %u.%u: the node daemon starts at once (%s)", link.job_id, link.step_id,
                   listening.error().c_str());
        return std::nullopt;
    }
    if (auto told = fe.standby(listening->port); !told) {
        log::debug("step %u.%u: the node daemon starts at once (cannot tell srun where to wake it: %s)",
                   link.job_id, link.step_id, told.error().c_str());
        return std::nullopt;
    }
    return std::move(*listening);
}

// The daemon's launch as the step's size and user and the installed files
// say (the step's directory comes later); false, with `failure`, if it
// cannot start.
bool launch_for_user(spank_t sp, DaemonLaunch& launch, std::uint32_t& nnodes, std::uint32_t& ntasks,
                     std::string& failure)
{
    gid_t* groups = nullptr;
    int ngroups = 0;
    if (!item(sp, S_JOB_NNODES, nnodes) || !item(sp, S_JOB_TOTAL_TASK_COUNT, ntasks) ||
        !item(sp, S_JOB_UID, launch.uid) || !item(sp, S_JOB_GID, launch.gid)) {
        failure = "PMIx service failed: the step's size or user is unknown";
        return false;
    }
    if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups) == ESPANK_SUCCESS && groups)
        launch.groups.assign(groups, groups + ngroups);
    launch.path = daemon_path(state().config);
    launch.helper = std::filesystem::path(launch.path).replace_filename("exitpolicy-detach").string();
    // Root runs the helper: from nowhere another user could change it, or
    // make it in before the spawn. (One that is not there, where only root
    // could make it, is launch_daemon's to report.)
    for (const std::string* exe : {&launch.path, &launch.helper})
        if (const std::string unsafe = unsafe_for_root(*exe); !unsafe.empty()) {
            failure = "PMIx service failed: root will not run " + *exe + " (" + unsafe +
                      "); install exitpolicy where only root can write, or point daemon= there";
            return false;
        }
    launch.limits = propagated_limits([sp](const char* name) { return job_env(sp, name); });
    return true;
}

// The daemon's command line (protocol/daemon_args.hpp) for this node, with
// the site's settings and the clients' topology.
protocol::DaemonArgs daemon_args_for(const LinkSetup& link, std::uint32_t nnodes, std::uint32_t ntasks,
                                     const std::string& dir, uid_t uid)
{
    const Config& config = state().config;
    protocol::DaemonArgs args;
    args.place() = link.place();
    args.nnodes = nnodes;
    args.ntasks = ntasks;
    args.fe_host = link.host;
    args.fe_port = link.port;
    args.dir = dir;
    args.uid = uid;
    args.debug = config.debug;
    args.log_dir = config.log_dir;
    args.topology = config.topology;
    if (args.topology == "slurmd") {
        const auto xml = slurmd_topology_xml(link.job_id, link.step_id);
        args.topology = xml ? *xml : "discover";
        log::debug("step %u.%u: the clients' topology: %s", link.job_id, link.step_id, args.topology.c_str());
    }
    for (auto at = args.topology.find("%n"); at != std::string::npos;
         at = args.topology.find("%n", at + link.hostname.size()))
        args.topology.replace(at, 2, link.hostname);
    return args;
}

// The sockets made here for the daemon, each closed here once it has it.
struct DaemonSockets {
    std::optional<protocol::Listening> reserved;  // its PMIx server's, when planned here
    std::optional<protocol::Listening> wake;      // srun's wake of a standing-by daemon
};

// The tasks' environment planned here, for the library the project was
// built with, unless a site's PMIX_MCA_* may change it (the daemon gets
// slurmstepd's); else the daemon writes it once its server runs. Until a
// task connects, or another node's daemon starts, a planned daemon's
// process only stands by: a step that never uses PMIx never runs it.
DaemonSockets plan_sockets(FrontEndSink& fe, const LinkSetup& link, DaemonLaunch& launch,
                           protocol::DaemonArgs& args)
{
    DaemonSockets sockets;
    const auto built = protocol::built_library_version();
    std::string unplanned = !built                              ? "the PMIx library's version is unknown"
                            : !protocol::activation_errno(*built) ? "OpenPMIx " + built->text + " is not one planned for"
                                                                  : protocol::unplannable_because(environ);
    if (unplanned.empty()) {
        if (auto r = protocol::listen_loopback()) {
            sockets.reserved = std::move(*r);
            // OpenPMIx leaves Nagle on for its clients (an event then waits
            // up to 40 ms for a delayed ACK). Linux gives every connection
            // its listener's TCP_NODELAY when it is made: those that wait in
            // the backlog while the server starts too.
            protocol::set_no_delay(sockets.reserved->fd.get());
        } else {
            unplanned = r.error();
        }
    }
    if (!sockets.reserved) {
        log::debug("step %u.%u: the node daemon writes the tasks' PMIx environment (%s)", link.job_id,
                   link.step_id, unplanned.c_str());
        return sockets;
    }
    launch.reserved_fd = sockets.reserved->fd.get();
    args.planned_version = built->text;
    if ((sockets.wake = wake_socket(fe, link)))
        launch.wake_fd = sockets.wake->fd.get();
    return sockets;
}

}  // namespace

Result<StartedDaemon> start_daemon(spank_t sp, const LinkSetup& link, FrontEndSink& fe, PmiSockets& pmi)
{
    std::string failure;
    DaemonLaunch launch;
    std::uint32_t nnodes = 0, ntasks = 0;
    if (!launch_for_user(sp, launch, nnodes, ntasks, failure))
        return Result<StartedDaemon>::fail(failure);
    for (const auto& gone : remove_stale_step_dirs(link.hostname, launch.uid, stale_step_dir_age, remove_timeout))
        log::info("step %u.%u: removed %s, which a step that is gone left behind", link.job_id, link.step_id,
                  gone.c_str());
    auto made = make_step_dir(link.job_id, link.step_id, link.hostname, launch.uid, launch.gid);
    if (!made)
        return Result<StartedDaemon>::fail("PMIx service failed: " + made.error());
    const std::string dir = *made;
    launch.secret_hex = protocol::to_hex(link.secret);
    auto args = daemon_args_for(link, nnodes, ntasks, dir, launch.uid);
    auto sockets = plan_sockets(fe, link, launch, args);
    launch.args = protocol::daemon_command_line(args);
    // The daemon's ends, closed here once it has them: a task's PMI_Init
    // fails at once if the daemon is gone.
    std::vector<protocol::Fd> pmi_ends;
    if (auto made_pmi = pmi.make(link.ranks.size()))
        pmi_ends = std::move(*made_pmi);
    else
        log::error("step %u.%u: no PMI-1/PMI-2 service: %s", link.job_id, link.step_id, made_pmi.error().c_str());
    for (const auto& end : pmi_ends)
        launch.pmi_fds.push_back(end.get());
    auto launched = launch_daemon(launch);
    pmi_ends.clear();
    if (!launched)
        pmi.close_all();
    // The daemon's now: if it goes, the tasks' connections are refused;
    // the standby's: srun's wake is refused once it is gone.
    if (sockets.reserved)
        sockets.reserved->fd.reset();
    if (sockets.wake)
        sockets.wake->fd.reset();
    if (!launched) {
        if (auto removed = remove_step_dir(dir, launch.uid, launch.gid, remove_timeout); !removed)
            log::error("step %u.%u: %s", link.job_id, link.step_id, removed.error().c_str());
        return Result<StartedDaemon>::fail("PMIx service failed: " + launched.error());
    }
    StartedDaemon started{dir, launch.uid, launch.gid, std::move(*launched), std::nullopt};
    if (sockets.reserved)
        started.planned = protocol::PlannedServer{sockets.reserved->port, link.node_id, dir, link.hostname,
                                                  args.planned_version};
    log::debug("step %u.%u: node daemon %d %s PMIx in %s%s", link.job_id, link.step_id, launched->pid,
               sockets.wake ? "stands by to serve" : "serves", dir.c_str(),
               sockets.reserved ? (" on 127.0.0.1:" + std::to_string(sockets.reserved->port)).c_str() : "");
    return Result<StartedDaemon>::ok(std::move(started));
}


}  // namespace exitpolicy::spank_plugin
