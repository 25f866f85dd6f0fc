// SPDX-License-Identifier: Apache-2.0
// slurmstepd.cpp - the remote context: slurmstepd, once per node per step,
// as root.
//
// init_post_opt: in a step that srun's front end serves (the bootstrap
// variable is set), connect to the FE once and authenticate, and start the
// node daemon (daemon_start.hpp) when the step gets the PMIx service; in a
// batch step, pass sbatch's --exit-* options on to the job script's srun as
// SLURM_EXIT_* variables. task_exit: hand the task's outcome to the first
// sink that takes it (outcome_sink.hpp: the node daemon's, then the FE's);
// after the node's last task, stop the daemon and wait (bounded) for what
// is unacknowledged; exit: the same if no task_exit did it, and remove the
// step's directory. No threads; any trouble is logged once and the step
// goes on as without us.
//
// Why the daemon stops at the last task_exit, not at exit: Slurm runs every
// task_exit before it signals and waits for the step's processes
// (proctrack_g_signal, proctrack_g_wait in slurmstepd's mgr.c), and exit
// (spank_fini) only after that wait. Under proctrack/cgroup on cgroup v2 the
// daemon lives in the step's cgroup (job_N/step_N/slurm, beside
// slurmstepd), which the wait counts but the step's SIGKILL
// (step_N/user's cgroup.kill) never reaches: a daemon still alive then
// holds the step until UnkillableStepTimeout, and Slurm drains the node.
#include "spank_plugin/log.hpp"
#include "spank.hpp"
#include "daemon_link.hpp"
#include "daemon_start.hpp"
#include "protocol/planned_environment.hpp"
#include "protocol/process.hpp"
#include "protocol/timeouts.hpp"
#include "options.hpp"
#include "outcome_sink.hpp"
#include "pmi_sockets.hpp"
#include "slurmd_spool.hpp"
#include "step_cgroups.hpp"
#include "plugin.hpp"

#include <slurm/slurm.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <utility>
#include <cstring>
#include <sys/wait.h>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>
#include <cstdlib>
#include <ctime>
#include <string>
#include <unistd.h>

namespace exitpolicy::spank_plugin::slurmstepd {
namespace {

// What slurmstepd waits for (protocol/timeouts.hpp).
constexpr auto connect_timeout = protocol::timeouts::stepd_connect;
constexpr auto ack_timeout = protocol::timeouts::stepd_ack;
constexpr auto remove_timeout = protocol::timeouts::step_dir_removal;
constexpr auto environment_timeout = protocol::timeouts::task_environment;

struct Remote {
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    // The node daemon, when this step gets exitpolicy's PMIx service. When
    // the tasks' PMIx environment is planned here, the daemon need not be
    // up before the tasks start: it hears of each on its control link.
    StartedDaemon service;
    // The tasks' PMI sockets (PMI_FD for MPICH's built-in client).
    PmiSockets pmi;
    // Tried in order for each outcome; empty when no front end serves this step.
    std::vector<std::unique_ptr<OutcomeSink>> sinks;
    FrontEndSink* fe_sink = nullptr;  // among sinks
    DaemonSink* daemon_sink = nullptr;
    bool failure_logged = false;  // one error line per step, not one per task
    // This node's tasks: the most outcomes its daemon can say srun has.
    std::size_t local_tasks = 0;
    std::size_t tasks_forked = 0;  // task_post_fork calls so far
    std::size_t tasks_ended = 0;   // task_exit calls so far
    // The node daemon was moved into the step's cgroups, or tried to be.
    bool cgroups_joined = false;
    // Each local task's OOM kill counter (step_cgroups.hpp), by its local
    // id; none where the first task has no memory cgroup of its own, and
    // then none is looked for again.
    std::vector<std::optional<OomCounter>> oom_counters;
    bool oom_counted = true;
    std::string mountinfo;  // read at the first task
    // The node daemon is stopped and the sinks flushed (finish_node): at
    // the last task's exit, or at the step's exit if that never came.
    bool finished = false;
    // The pids of this node's tasks that have not ended (task_post_fork
    // to task_exit).
    std::unordered_set<pid_t> running;
    // The step runs through a PMIx client's failure (--exit-recoverable),
    // as srun resolved it from the same options.
    bool recoverable = false;
    std::uint32_t ntasks = 0;
};
Remote remote;


void set_environment(spank_t sp, const std::vector<std::string>& env)
{
    for (const std::string& kv : env) {
        const auto eq = kv.find('=');
        if (eq != std::string::npos)
            spank_setenv(sp, kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
    }
}

// What every task of the step is told alike goes into the job's
// environment once, here, not into each task's: Slurm's spank_setenv
// clears a buffer of 256 KiB per call, which a node of 1 024 tasks paid
// about 20 times per task. MPICH's built-in PMI client (MPICH, MVAPICH,
// Intel MPI) finds its server through PMI_FD, the task's own.
void set_step_environment(spank_t sp)
{
    if (remote.pmi.made()) {
        for (const auto& [name, value] : pmi_step_environment(remote.ntasks, remote.job_id, remote.step_id))
            spank_setenv(sp, name.c_str(), value.c_str(), 1);
        spank_setenv(sp, mpich_pmi_variable, mpich_pmi_choice, 0);  // the job's own choice stays
    }
    if (remote.service.planned)
        set_environment(sp, protocol::planned_step_environment(*remote.service.planned,
                                                               protocol::step_nspace(remote.job_id, remote.step_id)));
    if (remote.recoverable)
        for (const auto& [name, value] : run_through_environment(remote.ntasks))
            spank_setenv(sp, name.c_str(), value.c_str(), 0);  // the job's own settings stay
}

// Batch step: sbatch's options become the job script's environment, where
// every srun of the job finds them as its defaults.
void forward_batch_options(spank_t sp)
{
    const RawOptions& cli = state().cli;
    for (const auto& spec : option_table)
        if (const auto& value = cli.*spec.value;
            value && spank_setenv(sp, spec.env, value->c_str(), 1) != ESPANK_SUCCESS)
            log::error("cannot set %s for the job script", spec.env);
}

// The step's bootstrap variable, taken out of the tasks' environment (they
// need not see the step's secret); none when srun's front end serves no
// step here, or when it is malformed (logged). The site's settings hold
// here too, not only in srun: the variable comes from the job's
// environment, which its user can set.
std::optional<Bootstrap> take_bootstrap(spank_t sp, std::uint32_t job_id, std::uint32_t step_id)
{
    auto bootstrap = job_env(sp, bootstrap_env);
    if (!bootstrap)
        return std::nullopt;
    spank_unsetenv(sp, bootstrap_env);
    auto parsed = parse_bootstrap(*bootstrap);
    if (!parsed) {
        log::error("step %u.%u: malformed %s (%s); this node's exit codes are left to Slurm", job_id, step_id,
                   bootstrap_env, parsed.error().c_str());
        return std::nullopt;
    }
    if (parsed->pmix) {
        const auto mpi = job_env(sp, "SLURM_MPI_TYPE");
        const char* refused = nullptr;
        if (state().config.pmix == PmixMode::never)
            refused = "this node's plugstack.conf says pmix=never";
        else if (mpi && !mpi->empty() && *mpi != "none")
            refused = "the step has Slurm's own MPI plugin";
        if (refused) {
            log::error("step %u.%u: %s asks for exitpolicy's PMIx service, but %s: no node daemon", job_id, step_id,
                       bootstrap_env, refused);
            parsed->pmix = false;
        }
    }
    return *parsed;
}

// This node's place in the step and the way to srun's front end; none
// (logged) when Slurm does not say it. `ranks_known`: Slurm gave a rank for
// every local task.
std::optional<LinkSetup> node_place(spank_t sp, std::uint32_t job_id, std::uint32_t step_id,
                                    const Bootstrap& bootstrap, std::uint32_t& local_tasks, bool& ranks_known)
{
    LinkSetup setup;
    setup.job_id = job_id;
    setup.step_id = step_id;
    setup.port = bootstrap.port;
    setup.secret = bootstrap.secret;
    auto host = job_env(sp, "SLURM_SRUN_COMM_HOST");
    if (!host || !item(sp, S_JOB_NODEID, setup.node_id) || !item(sp, S_JOB_LOCAL_TASK_COUNT, local_tasks)) {
        log::error("step %u.%u: srun's address or this node's place in the step is unknown; this node's exit "
                   "codes are left to Slurm",
                   job_id, step_id);
        return std::nullopt;
    }
    setup.host = *host;
    ranks_known = true;
    for (std::uint32_t local_id = 0; local_id < local_tasks; ++local_id) {
        std::uint32_t global_id = 0;
        if (spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, local_id, &global_id) == ESPANK_SUCCESS)
            setup.ranks.push_back(global_id);
        else
            ranks_known = false;
    }
    // slurmstepd's own environment names its node (the job's may carry a
    // stale SLURMD_NODENAME, e.g. from a batch script).
    if (const char* name = ::getenv("SLURMD_NODENAME"); name && *name) {
        setup.hostname = name;
    } else {
        char buf[256] = {};
        ::gethostname(buf, sizeof(buf) - 1);
        setup.hostname = buf;
    }
    return setup;
}

// A heterogeneous step's component (srun A : B): its link says which
// component this node serves and the component's size, and expects the
// step's first component's job from the front end (SLURM_JOB_ID in the
// job's environment: srun sets it alike for every component). False
// (logged) when Slurm does not say it.
bool place_component(spank_t sp, std::uint32_t job_id, std::uint32_t step_id, LinkSetup& setup)
{
    const auto first = job_env(sp, "SLURM_JOB_ID");
    std::uint32_t first_job = 0;
    if (first) {
        const auto [end, ec] = std::from_chars(first->data(), first->data() + first->size(), first_job);
        if (ec != std::errc() || end != first->data() + first->size())
            first_job = 0;
    }
    setup.component.job_id = job_id;
    setup.component.index = step_het_component(job_id, step_id).value_or(protocol::Component::no_index);
    if (first_job == 0 || !item(sp, S_JOB_TOTAL_TASK_COUNT, setup.component.ntasks) ||
        !item(sp, S_JOB_NNODES, setup.component.nnodes)) {
        log::error("step %u.%u: this node's component of the heterogeneous step is unknown; this node's exit codes "
                   "are left to Slurm",
                   job_id, step_id);
        return false;
    }
    setup.job_id = first_job;
    return true;
}

// The link to srun's front end, registered first among the sinks: nothing
// after it can skip it. Opened now, also when a node daemon will carry the
// outcomes: the link is the fallback path, and while it is open the FE
// knows that this node's slurmstepd lives (a node whose daemon and
// slurmstepd are both gone is lost).
FrontEndSink& open_front_end_link(const LinkSetup& setup)
{
    auto owned = std::make_unique<FrontEndSink>(setup, connect_timeout, ack_timeout);
    FrontEndSink& sink = *owned;
    remote.fe_sink = &sink;
    remote.sinks.push_back(std::move(owned));
    const std::string fe = setup.host + ":" + std::to_string(setup.port);
    if (auto opened = sink.open(); !opened)
        log::error("step %u.%u: cannot reach srun at %s: %s; will retry at the first task exit", setup.job_id,
                   setup.step_id, fe.c_str(), opened.error().c_str());
    else
        log::debug("step %u.%u: connected to srun's front end at %s", setup.job_id, setup.step_id, fe.c_str());
    return sink;
}

// The step's PMIx service on this node: the node daemon started, its sink
// first among the sinks, the tasks' environment set. When it cannot be,
// srun's user hears why (a task that uses PMIx cannot run without it), and
// the other nodes' step map need not wait for this node (a standby's port 0).
void start_pmix_service(spank_t sp, const LinkSetup& setup, const Bootstrap& bootstrap, FrontEndSink& sink,
                        std::uint32_t local_tasks, bool ranks_known)
{
    std::string failure;
    if (!ranks_known)
        // A rank left out would shift every later task onto another's
        // rank and PMI socket: without all of them, no service here.
        failure = "PMIx service failed: Slurm gives no rank for some of this node's " + std::to_string(local_tasks) +
                  " tasks";
    else if (!bootstrap.fanout)
        // The fan-out itself reaches the daemons with the FE's step map;
        // here it is only checked.
        failure = std::string("PMIx service failed: the PMIx part of ") + bootstrap_env + " is malformed";
    else if (auto started = start_daemon(sp, setup, sink, remote.pmi); !started)
        failure = started.error();
    else {
        remote.service = std::move(*started);
        auto& daemon = remote.service.daemon;
        auto daemon_sink = std::make_unique<DaemonSink>(daemon.control.get(), ack_timeout, &daemon.backlog);
        remote.daemon_sink = daemon_sink.get();
        remote.sinks.insert(remote.sinks.begin(), std::move(daemon_sink));
        set_step_environment(sp);
        return;
    }
    log::error("step %u.%u: %s", setup.job_id, setup.step_id, failure.c_str());
    if (auto told = sink.notice(failure + "; tasks on " + setup.hostname + " that use PMIx will fail"); !told)
        log::error("step %u.%u: cannot tell srun: %s", setup.job_id, setup.step_id, told.error().c_str());
    else
        sink.standby(0);
}

}  // namespace

int init_post_opt(spank_t sp)
{
    if (state().disabled)
        return 0;
    std::uint32_t job_id = 0, step_id = 0;
    if (!item(sp, S_JOB_ID, job_id) || !item(sp, S_JOB_STEPID, step_id))
        return 0;
    if (step_id == SLURM_BATCH_SCRIPT) {
        forward_batch_options(sp);
        return 0;
    }
    const auto bootstrap = take_bootstrap(sp, job_id, step_id);
    if (!bootstrap)
        return 0;
    std::uint32_t local_tasks = 0;
    bool ranks_known = false;
    auto setup = node_place(sp, job_id, step_id, *bootstrap, local_tasks, ranks_known);
    if (!setup || (bootstrap->heterogeneous && !place_component(sp, job_id, step_id, *setup)))
        return 0;
    remote.job_id = job_id;
    remote.step_id = step_id;
    remote.local_tasks = local_tasks;
    // srun forwards its options here, the job's environment has the rest.
    if (auto options = resolve_options(
            state().cli, options_from_env([sp](const char* name) { return job_env(sp, name); }), state().config))
        remote.recoverable = options->recoverable;
    item(sp, S_JOB_TOTAL_TASK_COUNT, remote.ntasks);
    FrontEndSink& sink = open_front_end_link(*setup);
    if (bootstrap->pmix)
        start_pmix_service(sp, *setup, *bootstrap, sink, local_tasks, ranks_known);
    return 0;
}

int task_init(spank_t sp)
{
    if (remote.service.daemon.pid < 0)
        return 0;
    std::uint32_t rank = 0;
    if (!item(sp, S_TASK_GLOBAL_ID, rank))
        return 0;
    if (int local = 0; item(sp, S_TASK_ID, local) && local >= 0)  // S_TASK_ID is an int
        if (const int fd = remote.pmi.keep_for_task(static_cast<std::size_t>(local)); fd >= 0)
            for (const auto& [name, value] : pmi_task_environment(fd, rank))
                spank_setenv(sp, name.c_str(), value.c_str(), 1);
    if (remote.service.planned) {
        spank_setenv(sp, protocol::rank_variable, std::to_string(rank).c_str(), 1);
        return 0;
    }
    auto env = request_environment(remote.service.dir, rank, ::getpid(), environment_timeout);
    if (!env) {
        log::error("step %u.%u: rank %u gets no PMIx environment: %s", remote.job_id, remote.step_id, rank,
                   env.error().c_str());
        return 0;
    }
    set_environment(sp, *env);
    return 0;
}

int task_post_fork(spank_t sp)
{
    // The task holds its PMI socket now; slurmstepd's copy would keep the
    // daemon from seeing it close.
    if (int local = 0; item(sp, S_TASK_ID, local) && local >= 0)
        remote.pmi.forked(static_cast<std::size_t>(local));
    std::uint32_t rank = 0;
    pid_t pid = 0;
    const bool known = item(sp, S_TASK_GLOBAL_ID, rank) && item(sp, S_TASK_PID, pid);
    // Every task whose outcome goes to srun, with or without a node
    // daemon: a success is batched while a node-mate's end waits
    // (node_mate_waiting).
    if (known && !remote.sinks.empty())
        remote.running.insert(pid);
    // Its OOM kill counter, while it is in its cgroups (Slurm put it there
    // before this call) and its count is the one it started with.
    int local = -1;
    if (known && remote.oom_counted && !remote.sinks.empty() && item(sp, S_TASK_ID, local) && local >= 0) {
        if (remote.mountinfo.empty())
            remote.mountinfo = own_mountinfo();
        auto counter = oom_counter_of(pid, remote.mountinfo);
        if (!counter && remote.oom_counters.empty())
            remote.oom_counted = false;  // the first task has none: no task has
        else {
            if (remote.oom_counters.size() <= static_cast<std::size_t>(local))
                remote.oom_counters.resize(std::max<std::size_t>(remote.local_tasks, local + 1));
            remote.oom_counters[local] = std::move(counter);
        }
    }
    // The first task is in its cgroups now: the daemon joins the step's
    // (cgroup/v1; step_cgroups.hpp).
    if (known && !remote.cgroups_joined && remote.service.daemon.pid > 0 && remote.service.daemon.pidfd) {
        remote.cgroups_joined = true;
        if (auto joined = join_step_cgroups(pid, remote.service.daemon.pid, remote.service.daemon.pidfd.get());
            !joined)
            log::error("step %u.%u: %s", remote.job_id, remote.step_id, joined.error().c_str());
        else if (!joined->empty()) {
            std::string which;
            for (const std::string& controllers : *joined)
                which += (which.empty() ? "" : " ") + controllers;
            log::debug("step %u.%u: the node daemon joined the step's cgroups (%s)", remote.job_id, remote.step_id,
                       which.c_str());
        }
    }
    // A task whose environment was planned here never asks the daemon: the
    // daemon learns which process it is from us, with its start time, so
    // that a pid its task left behind is never taken for it.
    if (!remote.service.planned || !remote.service.daemon.control)
        return 0;
    // Slurm forks every task, then calls this for each, then lets them all
    // exec: the daemon hears of them in one write after the last, not
    // woken once per task (what is left goes with the next word, a task's
    // exit).
    const bool last = ++remote.tasks_forked >= remote.local_tasks;
    std::optional<std::uint64_t> started;
    if (known)
        started = protocol::process::start_time(pid);  // none: gone already, its outcome says the rest
    Result<bool> told = Result<bool>::ok(true);
    if (started)
        told = tell_daemon(remote.service.daemon, protocol::TaskStarted{rank, pid, *started}, last);
    else if (last && !remote.service.daemon.backlog.empty())
        told = send_backlog(remote.service.daemon.control.get(), remote.service.daemon.backlog, std::nullopt);
    // Never waits: what the link has no room for goes with a later word.
    if (!told)
        log::error("step %u.%u: cannot tell the node daemon of rank %u: %s", remote.job_id, remote.step_id, rank,
                   told.error().c_str());
    return 0;
}

namespace {

// Whether another of this node's tasks has ended and waits to be reaped:
// Slurm reaps it, and calls task_exit for it, before it tells srun of this
// turn's ends. Looked at, not reaped (WNOWAIT). Where task_exit runs in a
// child of slurmstepd's (Slurm's CONTAIN_SPANK), that child has no
// children: nothing waits, and every outcome goes at once.
bool node_mate_waiting()
{
    siginfo_t info{};
    return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0 &&
           remote.running.contains(info.si_pid);
}

// The outcome to the first sink that takes it.
void deliver(const protocol::Outcome& o, Send send)
{
    // What the daemon has not yet been told of its tasks' starts, as far as
    // its link takes it now.
    if (remote.service.daemon.control && !remote.service.daemon.backlog.empty())
        send_backlog(remote.service.daemon.control.get(), remote.service.daemon.backlog, std::nullopt);
    std::string errors;
    for (auto& sink : remote.sinks) {
        // A daemon that still stands by, or is starting, reads nothing yet:
        // the FE has the outcome directly, and tells the clients if need be.
        if (sink.get() == remote.daemon_sink && !daemon_serving(remote.service.daemon))
            continue;
        auto delivered = sink->deliver(o, send);
        if (delivered) {
            // What the FE sink holds goes with the turn's last outcome,
            // whichever sink took that.
            if (send == Send::now && remote.fe_sink && sink.get() != remote.fe_sink)
                (void)remote.fe_sink->release();
            return;
        }
        errors += (errors.empty() ? "" : "; ") + delivered.error();
    }
    if (!remote.failure_logged)
        log::error("step %u.%u: cannot deliver rank %u's exit to srun (%s); srun will keep Slurm's exit code",
                   remote.job_id, remote.step_id, o.rank, errors.c_str());
    else
        log::debug("step %u.%u: rank %u's exit not delivered: %s", remote.job_id, remote.step_id, o.rank,
                   errors.c_str());
    remote.failure_logged = true;
}

// This node's part of the step is over: the daemon stopped (nothing of
// ours is left in the step's processes for Slurm to wait on), what it
// took and srun never confirmed sent the direct way, every sink flushed
// (bounded). Once per step.
void finish_node()
{
    if (remote.finished)
        return;
    remote.finished = true;
    // The daemon drains first (it waits for srun to acknowledge what it
    // holds) and says which of this node's outcomes srun has; the others
    // go the direct way now, as it may have died with them on their way.
    // One that has already failed to answer in time (hung, or stopped by
    // its user) is not waited for again: it is killed at once.
    const bool had_daemon = remote.service.daemon.pid > 0;
    const auto wait = remote.daemon_sink && remote.daemon_sink->gave_up() ? std::chrono::milliseconds{0}
                                                                          : protocol::timeouts::daemon_stop_wait;
    std::vector<protocol::Ack> confirmed;
    if (had_daemon)
        confirmed = stop_daemon(remote.service.daemon, wait, remote.local_tasks);
    if (remote.daemon_sink && remote.fe_sink) {
        const auto resend = remote.daemon_sink->unconfirmed(confirmed);
        if (!resend.empty())
            log::verbose("step %u.%u: %zu outcomes the node daemon took and srun never confirmed go the direct way",
                         remote.job_id, remote.step_id, resend.size());
        std::size_t failed = 0;
        std::string why;
        // One at a time: each failure counts.
        for (const auto& o : resend)
            if (auto sent = remote.fe_sink->deliver(o, Send::now); !sent && failed++ == 0)
                why = sent.error();
        // One line: srun may have had them all the same (the daemon died
        // after it passed them on), and then it has ended.
        if (failed)
            log::error("step %u.%u: cannot send %zu outcomes the direct way (%s); srun may keep Slurm's exit code",
                       remote.job_id, remote.step_id, failed, why.c_str());
    }
    for (auto& sink : remote.sinks)
        if (auto flushed = sink->flush(ack_timeout); !flushed)
            log::error("step %u.%u: %s; srun may keep Slurm's exit code", remote.job_id, remote.step_id,
                       flushed.error().c_str());
    remote.sinks.clear();
    remote.fe_sink = nullptr;
    remote.daemon_sink = nullptr;
}

}  // namespace

int task_exit(spank_t sp)
{
    if (remote.sinks.empty())
        return 0;
    protocol::Outcome o;
    int status = 0;
    pid_t pid = 0;
    if (item(sp, S_TASK_GLOBAL_ID, o.rank) && item(sp, S_TASK_EXIT_STATUS, status)) {
        if (item(sp, S_TASK_PID, pid)) {
            o.pid = pid;
            remote.running.erase(pid);
        }
        o.wait_status = status;
        // The OOM killer ended it (or a process of it), not Slurm.
        if (int local = -1; item(sp, S_TASK_ID, local) && local >= 0 &&
                            static_cast<std::size_t>(local) < remote.oom_counters.size() &&
                            remote.oom_counters[local] && oom_killed_since(*remote.oom_counters[local])) {
            o.flags |= protocol::Outcome::flag_oom_killed;
            o.memory_limit = memory_limit_of(*remote.oom_counters[local]).value_or(0);
        }
        const Send send = send_for(status, node_mate_waiting());
        timespec now{};
        ::clock_gettime(CLOCK_REALTIME, &now);
        o.end_time_us = std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
        deliver(o, send);
    }
    // Counted whether or not Slurm told us of it: the node's last task
    // ends the node's part all the same.
    if (++remote.tasks_ended >= remote.local_tasks)
        finish_node();
    return 0;
}

int exit(spank_t)
{
    const bool had_daemon = !remote.service.dir.empty();
    finish_node();
    if (had_daemon) {
        if (auto removed = remove_step_dir(remote.service.dir, remote.service.uid, remote.service.gid, remove_timeout);
            !removed)
            log::error("step %u.%u: %s", remote.job_id, remote.step_id, removed.error().c_str());
        else
            log::debug("step %u.%u: removed %s", remote.job_id, remote.step_id, remote.service.dir.c_str());
    }
    return 0;
}

}  // namespace exitpolicy::spank_plugin::slurmstepd
