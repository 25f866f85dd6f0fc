// daemon_link.hpp - the plugin's side of the node daemon (exitpolicy-pmixd):
// starting it from slurmstepd, asking it for a task's PMIx environment,
// handing it task outcomes, and stopping it at the step's end. Blocking,
// bounded by timeouts, no threads: it runs in slurmstepd and in tasks.
//
// No Slurm headers here: unit-tested without Slurm (the sink against a fake
// daemon).
#pragma once

#include "exitpolicy/result.hpp"
#include "outcome_sink.hpp"
#include "protocol/wire.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace exitpolicy::plugin {

struct DaemonLaunch {
    std::string path;                  // exitpolicy-pmixd
    std::vector<std::string> args;     // bootstrap arguments, without --secret-fd/--ready-fd
    std::string secret_hex;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
    std::chrono::milliseconds ready_timeout{20000};
};

// Double fork + setsid (so that proctrack does not kill it with the step's
// processes), signals unblocked, descriptors closed, the job's uid/gids;
// waits (bounded) for "ready PID". Returns the daemon's pid.
Result<pid_t> launch_daemon(const DaemonLaunch& launch);
// The pid of a "ready PID\n" line; a malformed one is an error, never a throw.
Result<pid_t> parse_ready(std::string_view line);

// The daemon's local socket in its private directory.
std::string daemon_socket(const std::string& dir);

// A task's PMIx environment (KEY=VALUE), asked before exec.
Result<std::vector<std::string>> request_environment(const std::string& dir, std::uint32_t rank, pid_t pid,
                                                     std::chrono::milliseconds timeout);

// Asks the daemon to flush and exit; waits for it (bounded), then kills it.
void stop_daemon(const std::string& dir, pid_t pid, std::chrono::milliseconds timeout);

// Task outcomes to the daemon over its local socket (only root may send them),
// one at a time: each waits for its acknowledgement, which must name its
// rank and epoch. The first failure gives up for the step (the front end
// sink takes the outcomes then).
class DaemonSink final : public OutcomeSink {
public:
    DaemonSink(std::string dir, std::chrono::milliseconds timeout);
    ~DaemonSink() override;
    Result<bool> deliver(const wire::Outcome& outcome) override;

private:
    std::string dir_;
    std::chrono::milliseconds timeout_;
    int fd_ = -1;
    bool gave_up_ = false;
};

}  // namespace exitpolicy::plugin
