// SPDX-License-Identifier: Apache-2.0
// daemon_link.hpp - the plugin's side of the node daemon (exitpolicy-pmixd):
// starting it from slurmstepd, asking it for a task's PMIx environment,
// handing it task outcomes, and stopping it at the step's end. Blocking,
// bounded by timeouts, no threads: it runs in slurmstepd and in tasks.
//
// No Slurm headers here: unit-tested without Slurm (tests/unit/
// daemon_link_test.cpp: the launch with a shell in the daemon's place;
// outcome_sink_test.cpp: the sink against a fake daemon), and end to end
// with the real daemon by tests/integration/test_pmix.py.
#pragma once

#include "exitpolicy/result.hpp"
#include "outcome_sink.hpp"
#include "step_dir.hpp"
#include "protocol/fd.hpp"
#include "protocol/timeouts.hpp"
#include "protocol/wire.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace exitpolicy::spank_plugin {

// A soft resource limit for the daemon: it runs as the job's user, so it
// gets what srun propagates to the step's tasks (SLURM_RLIMIT_NAME=[U]N),
// never more than slurmstepd's own (root's, often raised for the site's
// daemons).
struct SoftLimit {
    int resource = 0;  // RLIMIT_*
    rlim_t value = 0;
};
// The limits named in a job's SLURM_RLIMIT_* variables, read through
// `get(name)`; a malformed value is skipped.
template <typename Get>
std::vector<SoftLimit> propagated_limits(Get get);

struct DaemonLaunch {
    std::string path;                  // exitpolicy-pmixd
    std::string helper;                // exitpolicy-detach (pmix_server/detach.c)
    std::vector<std::string> args;     // bootstrap arguments, without --secret-fd/--ready-fd
    std::string secret_hex;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
    std::chrono::milliseconds ready_timeout{protocol::timeouts::daemon_ready};
    std::vector<SoftLimit> limits;     // applied in the child, each lowered only
    // The PMIx server's socket, reserved by slurmstepd (protocol::listen_loopback), which
    // the tasks' planned environment names: the daemon gets it as fd 6
    // (--reserved-fd 6), and the launch does not wait for its "ready": the
    // tasks need nothing of it to start. -1: the daemon writes the tasks'
    // environment, and the launch waits until it can.
    int reserved_fd = -1;
    // With a reserved socket: a listening socket (protocol::listen_on) whose
    // port srun's FE was told. The daemon is not run at once: its process
    // stands by (pmix_server/detach.c) until a task connects to the
    // reserved socket or someone to this one (the FE, once another node's
    // daemon has started), and ends unstarted when the control link closes.
    int wake_fd = -1;
    // The daemon's ends of the local tasks' PMI sockets, in local task
    // order: the daemon gets them from fd 10 up (--pmi-fd 10), and a
    // standby wakes when a task writes to its own.
    std::vector<int> pmi_fds;
};

template <typename Get>
std::vector<SoftLimit> propagated_limits(Get get)
{
    struct Name {
        const char* variable;
        int resource;
    };
    static constexpr Name names[] = {
        {"SLURM_RLIMIT_CPU", RLIMIT_CPU},       {"SLURM_RLIMIT_FSIZE", RLIMIT_FSIZE},
        {"SLURM_RLIMIT_DATA", RLIMIT_DATA},     {"SLURM_RLIMIT_STACK", RLIMIT_STACK},
        {"SLURM_RLIMIT_CORE", RLIMIT_CORE},     {"SLURM_RLIMIT_RSS", RLIMIT_RSS},
        {"SLURM_RLIMIT_NPROC", RLIMIT_NPROC},   {"SLURM_RLIMIT_NOFILE", RLIMIT_NOFILE},
        {"SLURM_RLIMIT_MEMLOCK", RLIMIT_MEMLOCK}, {"SLURM_RLIMIT_AS", RLIMIT_AS},
    };
    std::vector<SoftLimit> out;
    for (const auto& n : names) {
        const std::optional<std::string> value = get(n.variable);
        if (!value)
            continue;
        std::string_view digits = *value;
        if (!digits.empty() && digits.front() == 'U')  // srun --propagate
            digits.remove_prefix(1);
        unsigned long long v = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
            continue;
        out.push_back({n.resource, static_cast<rlim_t>(v)});
    }
    return out;
}

// Why root must not run `path` (empty: it may): root runs the daemon's
// helper (exitpolicy-detach) from the daemon's directory, so the file and
// every directory above it must be root's and writable by no one else; a
// directory writable by all with the sticky bit (/tmp) only where the next
// part of the path is root's. A part that is not there (yet) only in a
// directory no one else may write to, sticky or not: the spawn comes
// later, and anyone could make it in /tmp meanwhile. A site's daemon=
// under a user's tree would give that user root.
std::string unsafe_for_root(const std::string& path);

// The started daemon: its pid as fork() gave it (never as the daemon, which
// runs as the job's user, says it), and a pidfd on it (-1 where the kernel
// has none), through which alone it is signalled.
// `control` is root's end of a socketpair made before the fork, whose other
// end the daemon inherits: the only channel that carries outcomes and Stop,
// which no path in a directory of the user's can redirect.
struct LaunchedDaemon {
    pid_t pid = -1;
    protocol::Fd pidfd;
    protocol::Fd control;
    // A daemon that stands by (DaemonLaunch::wake_fd): the read end of its
    // ready pipe (non-blocking) until it has said "ready" (serving) or
    // closed it.
    bool standby = false;
    bool serving = false;
    protocol::Fd ready;
    // Frames for the control link that it had no room for yet (a daemon
    // that reads nothing: stopped, or one whose standby could not keep
    // what it read): sent before anything else, as room comes. At most one
    // TaskStarted per local task.
    protocol::Bytes backlog;
};

// Whether the daemon reads its control link: a standby only once it has
// become the daemon and said so (never blocks); any other one always.
bool daemon_serving(LaunchedDaemon& daemon);

// What of slurmstepd's (root's) environment the daemon, the job's user's
// process, gets: PATH (a default one if none), LD_LIBRARY_PATH, TZ and
// OpenPMIx's PMIX_MCA_* settings; nothing else.
std::vector<std::string> daemon_environment(char* const* env);

// Through exitpolicy-detach, spawned without a copy of slurmstepd: a fork
// of it + setsid (so that proctrack does not kill it with the step's
// processes), signals unblocked, descriptors closed, the job's uid/gids;
// without a reserved socket, waits (bounded) for its "ready" line (at most
// 64 bytes read; anything else is a failure, never an exception). The
// helper hands the daemon's pid up a pipe before it exits; the daemon goes
// on only once root
// holds a pidfd of it (no pidfds on this kernel: no daemon, an error).
Result<LaunchedDaemon> launch_daemon(const DaemonLaunch& launch);

// A task slurmstepd has forked, told to the daemon over its control link
// (no answer: the frame waits in the link, or in the backlog, until the
// daemon reads it). Never waits: root's task_post_fork holds the task
// until it returns. Fails only when the link is gone. With send_now
// false the frame only joins the backlog, for the next word to take.
Result<bool> tell_daemon(LaunchedDaemon& daemon, const protocol::TaskStarted& started, bool send_now = true);

// `backlog` to the link, what went erased from it: all of it by
// `deadline`, else a failure; without a deadline, what the link takes
// without waiting. Fails when the link is gone.
Result<bool> send_backlog(int control, protocol::Bytes& backlog,
                          std::optional<std::chrono::steady_clock::time_point> deadline);

// A task's PMIx environment (KEY=VALUE), asked before exec.
Result<std::vector<std::string>> request_environment(const std::string& dir, std::uint32_t rank, pid_t pid,
                                                     std::chrono::milliseconds timeout);

// Asks the daemon, over its control link, to flush and exit; waits for it
// (bounded), then kills it through its pidfd (never by a pid that may have
// been reused), and closes what it held. Returns the outcomes the daemon
// said, on its way out, that srun has (none when it said nothing): at most
// `max_acks` of them (the node's task count), each once; a daemon, the
// job's user's process, that says more is not believed for the rest, and
// what it sends is read within the bound and a byte budget, never kept. A standby that is not serving is not asked:
// its control link is closed, which ends it (or the daemon it has just
// become).
std::vector<protocol::Ack> stop_daemon(LaunchedDaemon& daemon, std::chrono::milliseconds timeout,
                                       std::size_t max_acks = 0);

// Task outcomes to the daemon over its control link (LaunchedDaemon::control,
// not owned), one at a time: each waits for its acknowledgement, which must
// name its rank and epoch. The first failure gives up for the step (the
// front end sink takes the outcomes then).
class DaemonSink final : public OutcomeSink {
public:
    // `backlog` (LaunchedDaemon::backlog, not owned; may be null) goes
    // before each outcome.
    DaemonSink(int control, std::chrono::milliseconds timeout, protocol::Bytes* backlog = nullptr);
    // Each outcome at once (the daemon acknowledges each before the next).
    Result<bool> deliver(const protocol::Outcome& outcome, Send send) override;
    // What the daemon took and srun never confirmed (stop_daemon's list):
    // it goes the direct way. The daemon's ack says only that it has an
    // outcome; every holder keeps it until srun has it.
    std::vector<protocol::Outcome> unconfirmed(const std::vector<protocol::Ack>& confirmed) const;
    // How many outcomes the daemon took: the most it can confirm.
    std::size_t taken() const noexcept { return taken_.size(); }
    // The daemon did not answer an outcome in time, or its link is gone:
    // every later outcome goes elsewhere.
    bool gave_up() const noexcept { return gave_up_; }

private:
    std::vector<protocol::Outcome> taken_;
    int fd_;
    protocol::Bytes* backlog_;
    std::chrono::milliseconds timeout_;
    bool gave_up_ = false;
};

}  // namespace exitpolicy::spank_plugin
