// SPDX-License-Identifier: Apache-2.0
// outcome.hpp - how one task ended.
//
// The one place that decodes a raw wait status (as slurmstepd hands it to
// slurm_spank_task_exit in S_TASK_EXIT_STATUS), and the task outcome every
// other part of exitpolicy reasons about. Pure: no I/O, never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exitpolicy {

// A raw wait status, decoded.
struct WaitStatus {
    enum class Kind : std::uint8_t { exited, signaled, other };
    Kind kind = Kind::exited;
    int exit_code = 0;       // valid when kind == exited
    int signal = 0;          // valid when kind == signaled
    bool core_dumped = false;

    static WaitStatus decode(int raw) noexcept;
    static WaitStatus exited(int code) noexcept;
    static WaitStatus signaled(int signal, bool core_dumped = false) noexcept;
    // Back to the raw form (the inverse of decode for exited/signaled).
    int raw() const noexcept;
};

// One task's end, as reported by its node (or not at all: lost).
struct TaskOutcome {
    std::uint32_t rank = 0;
    std::uint32_t epoch = 0;           // incarnation, 0 for a first run
    std::uint32_t node = 0;            // index into StepOutcomes::nodes
    std::int64_t pid = -1;
    bool lost = false;                 // no report by the deadline
    int wait_status = 0;               // raw; meaningless when lost
    std::optional<int> abort_status;   // set when the task called PMIx_Abort
    std::string abort_message;         // what it passed with it (MPI_Abort's banner), may be empty
    std::optional<bool> finalized;     // set for PMIx clients only
    std::int64_t end_time_us = 0;      // node wall clock, microseconds since 1970
    // Set by the node that reported the task when the task ended (or called
    // PMIx_Abort) after that node had learned of another task's abnormal
    // end, or when the node itself killed it in a step teardown. A fact the
    // node reports; the policy uses it to find the root cause.
    bool collateral = false;
    // The kernel's OOM killer ended it, or a process of it (its cgroup's
    // oom_kill count rose): its own end, never a teardown's, whatever its
    // SIGKILL or 137 looks like. A fact its node reports.
    bool oom_killed = false;
    // The memory limit, in bytes, of the cgroups of an OOM-killed task (the
    // lowest of its step's and job's, as Slurm set them); 0: none known.
    std::uint64_t memory_limit = 0;

    WaitStatus status() const noexcept { return WaitStatus::decode(wait_status); }
};

// A task's code: its abort status if it aborted (the abort wins over the
// SIGKILL that follows), as a process can exit with it (exit_code_of);
// lost_code if lost; its exit code; 128 + signal.
int task_code(const TaskOutcome& task, int lost_code) noexcept;

// A status as a process can exit with it: its low 8 bits, as exit() keeps
// them, except that a status that is not 0 never becomes success: one
// whose low 8 bits are 0 (PMIx_Abort(256), MPI_Abort(comm, -256)) is 1.
int exit_code_of(int status) noexcept;

// The code of the wait status alone, ignoring an abort (what Slurm's own
// rule sees): lost_code if lost; its exit code; 128 + signal.
int wait_code(const TaskOutcome& task, int lost_code) noexcept;

// Succeeded: exited with 0 and did not abort (a lost task did not succeed).
bool succeeded(const TaskOutcome& task) noexcept;

// Killed by SIGTERM or SIGKILL without aborting: what a launcher's tear-down
// (srun -K, an abort, scancel) does to the survivors of a failure.
bool killed_by_teardown(const TaskOutcome& task) noexcept;

// Ended by itself: an exit or a signal of its own (the OOM killer's SIGKILL
// included), neither an abort nor a tear-down's SIGTERM or SIGKILL (a lost
// task's end is unknown: not so).
// The policy's root cause and the node daemon's collateral judgement both
// start from it.
bool ended_by_itself(const TaskOutcome& task) noexcept;

// "SIGSEGV", or "signal 40" for a number without a name.
std::string signal_name(int signal);

// An amount of memory as Slurm's --mem gives it: "50M", "2G", "1536K", or
// bytes ("1000B") where no unit divides it.
std::string memory_size(std::uint64_t bytes);

// "exited with code 3", "killed by SIGSEGV (core dumped)", "aborted with
// status 7", "lost (no outcome reported; counted as code 1)", with
// " without finalizing" for a PMIx or PMI client that exited unfinalized,
// and "killed by the OOM killer (SIGKILL), memory limit 50M".
std::string describe(const TaskOutcome& task, int lost_code);

// The name of a PMIx event that ends a process, or "" for any other number.
// Open MPI's default event handler aborts its rank with the status of the
// event it heard: an abort status that is one of these is a reaction to
// another task's end, not the program's own. protocol/events.cpp checks the
// numbers against its own.
constexpr std::string_view pmix_termination_name(int status) noexcept
{
    switch (status) {
    case -7: return "PMIX_ERR_PROC_ABORTED";
    case -8: return "PMIX_ERR_PROC_REQUESTED_ABORT";
    case -200: return "PMIX_ERR_PROC_TERM_WO_SYNC";
    case -201: return "PMIX_EVENT_PROC_TERMINATED";
    case -231: return "PMIX_EVENT_NODE_DOWN";
    case -402: return "PMIX_ERR_PROC_ABORTED_BY_SIG";
    case -404: return "PMIX_ERR_EXIT_NONZERO_TERM";
    default: return "";
    }
}

}  // namespace exitpolicy
