// SPDX-License-Identifier: Apache-2.0
// policy.hpp - the exit policies: which code srun ends with.
//
// decide() applies one policy to every task's outcome, as the README's
// "Policies" says, and finds the first failure: the root cause the report
// leads with. The root cause is the verdict: if it called PMIx_Abort, its
// abort status is srun's code under every policy but all-success; main-rank
// and main-rank-check take its code when the main rank is collateral (ended
// because of another task's failure); lowest-rank skips collateral ranks.
// max stays Slurm's literal rule. Pure: no I/O, never throws.
#pragma once

#include "outcome.hpp"
#include "result.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy {

enum class Policy : std::uint8_t {
    max,              // alias native
    main_rank,        // alias rank0
    all_success,      // alias require-all-success
    main_rank_check,  // alias check-all-nodes
    first_failure,
    lowest_rank,
};

// Canonical name: "main-rank".
std::string_view policy_name(Policy policy) noexcept;
// Canonical names and aliases, case-insensitive. The error lists them all.
Result<Policy> parse_policy(std::string_view text);
// "max (native), main-rank (rank0), ..." for help texts and errors.
std::string valid_policies();

// A main rank: a non-negative integer (range checked against the task count
// by whoever knows it; decide() checks it too).
Result<std::uint32_t> parse_rank(std::string_view text);

struct Settings {
    Policy policy = Policy::max;
    std::uint32_t main_rank = 0;
    int lost_code = 1;
};

// Every task of a step. nodes holds the node names the tasks index.
// Precondition: at most one outcome per rank (OutcomeSet guarantees it).
struct StepOutcomes {
    std::vector<std::string> nodes;
    std::vector<TaskOutcome> tasks;
    // A heterogeneous step (srun A : B): each component's first rank, in
    // the step's order (component 0 starts at rank 0); empty otherwise.
    std::vector<std::uint32_t> components;
    // The tasks' PMI server was Slurm's own (srun --mpi=pmix, pmi2, ...):
    // their aborts are not on record. Slurm ends the step on an abort and
    // lets the aborting task return, so an abort shows only as the exit
    // code the runtime then ends its task with (Open MPI 5: 14).
    bool aborts_unseen = false;
};

enum class Reason : std::uint8_t {
    all_succeeded,     // nothing failed: 0
    aborted,           // the first failure aborted: its status (every policy but all-success)
    highest_signal,    // max: a task was signalled; 128 + the highest signal
    highest_code,      // max: no signal; the highest exit code
    main_rank,         // main-rank: the main rank's code
    some_failed,       // all-success: 1
    main_rank_failed,  // main-rank-check: the main rank's non-zero code
    other_failed,      // main-rank-check: the main rank succeeded, another did not: 1
    first_failure,     // first-failure: the earliest failure's code
    lowest_rank,       // lowest-rank: the lowest failing rank's code (collateral ranks skipped)
    root_cause,        // main-rank, main-rank-check: the main rank is collateral: the first failure's code
};

struct Decision {
    int code = 0;                  // srun's exit code under the policy
    int native_code = 0;           // what Slurm itself would return
    Reason reason = Reason::all_succeeded;
    // Indices into StepOutcomes::tasks.
    std::optional<std::size_t> deciding;       // the task whose code was taken
    std::optional<std::size_t> main;           // the main rank
    // The root cause: the earliest end (ties: lowest rank) among the failed
    // tasks their nodes did not report collateral, except that a PMIx
    // client's abort (where aborts are unseen: any non-zero exit, SIGTERM
    // or SIGKILL) gives way to an own end (there: a death by a signal of its
    // own) recorded up to reaction_window_us after it; if all are
    // collateral, the earliest of them; if none failed, the lowest lost
    // rank.
    std::optional<std::size_t> first_failure;
    std::optional<std::size_t> first_abort;    // earliest abort (ties: lowest rank)
    std::size_t succeeded = 0;
    std::size_t failed = 0;  // reported and did not succeed
    std::size_t lost = 0;
};

// How much earlier than a task's recorded end its peers can have seen it
// go: its sockets close before its node has reaped it and run the exit
// hook that records its end, and a runtime that aborts on a peer's closed
// socket (Open MPI 5) can be on record first: measured up to 107 ms
// earlier on an idle machine (Slurm 24.11, 8 ranks on 4 nodes). A PMIx
// client's abort up to this long before another PMIx client's own end (an
// exit or a signal of its own, not an abort or a tear-down kill) is taken
// as a reaction to that end.
//
// Where aborts are unseen (StepOutcomes::aborts_unseen), any task may have
// aborted, and a non-zero exit may be an abort's: one up to this long after
// the first failure, or up to this long before a death by a signal of its
// own (not SIGTERM or SIGKILL), is taken as a reaction to it (later, it is
// the task's own failure); so is a SIGTERM or SIGKILL up to this long
// before such a death, as Slurm ends the step on the unseen abort.
inline constexpr std::int64_t reaction_window_us = 500'000;

// Slurm's own rule over the reported wait statuses: any signal beats any
// code, highest signal, else highest code. Lost tasks have no status. A
// step with a task the OOM killer ended is 1: Slurm's task/cgroup labels
// the node's task ends of such a step "OOM", and srun returns 1 for it.
int native_code(const std::vector<TaskOutcome>& tasks) noexcept;

// Fails only on bad input: no tasks, or a main rank that is not among them.
Result<Decision> decide(const StepOutcomes& step, const Settings& settings) noexcept;

// A task that ended because of another's failure: it did not succeed, is
// not lost, is not the first failure, and either its node reported it
// collateral (TaskOutcome::collateral), or the first failure was not itself
// lost or a SIGTERM or SIGKILL and
// - the task was a PMIx client that aborted after it (or up to
//   reaction_window_us before it, when it is a PMIx client's own end), or
// - it was killed by SIGTERM or SIGKILL without aborting no earlier than it
//   (steps without node daemons: srun -K), or
// - it exited with code 143 or 137 (128 + SIGTERM or SIGKILL) without
//   aborting, no earlier than it: a shell whose command the teardown's
//   signal ended, which says so in its own code, or
// - aborts are unseen and the task exited with a non-zero code up to
//   reaction_window_us after it, or exited so or was killed by SIGTERM or
//   SIGKILL up to reaction_window_us before it, when it is a death by a
//   signal of its own.
// The report labels these so that a SIGTERM never hides the SIGSEGV that
// caused it, and the policies look past them to the root cause.
bool is_collateral(const StepOutcomes& step, const Decision& decision, std::size_t index) noexcept;

// The report modes of --exit-report.
enum class ReportMode : std::uint8_t { automatic, always, never };
std::string_view report_mode_name(ReportMode mode) noexcept;
Result<ReportMode> parse_report_mode(std::string_view text);
// auto: when a policy is active and something failed, or the policy's code
// differs from Slurm's.
bool should_report(ReportMode mode, bool policy_active, const Decision& decision) noexcept;

// Collects the outcomes of a step as they arrive (at least once, any order)
// and keeps exactly one per rank: a repeat of a rank + epoch is a duplicate,
// a higher epoch (a restarted task) replaces a lower one. What it gives back
// is exactly what was recorded.
//
// Sized for srun's front end at thousands of nodes: a rank costs one 32-byte
// slot; what few outcomes carry (an abort's message, a pid beyond 32 bits) is
// kept beside the slots.
class OutcomeSet {
public:
    explicit OutcomeSet(std::uint32_t ntasks);

    enum class Recorded : std::uint8_t { added, replaced, duplicate, stale, out_of_range };
    Recorded record(const TaskOutcome& outcome);

    std::uint32_t ntasks() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
    std::uint32_t missing() const noexcept { return missing_; }
    bool complete() const noexcept { return missing_ == 0; }
    bool has(std::uint32_t rank) const noexcept { return rank < slots_.size() && (slots_[rank].flags & Slot::present); }
    // The outcome recorded for a rank, if any.
    std::optional<TaskOutcome> get(std::uint32_t rank) const;

    // One outcome per rank in rank order; ranks never reported are lost,
    // placed on node_of_rank[rank] when given.
    std::vector<TaskOutcome> finish(const std::vector<std::uint32_t>& node_of_rank = {}) const;

private:
    struct Slot {
        static constexpr std::uint8_t present = 1, lost = 2, aborted = 4, finalized_known = 8, finalized = 16,
                                      collateral = 32, wide = 64,  // wide: pid and message beside the slot
                                      oom_killed = 128;
        std::int64_t end_time_us = 0;
        std::uint32_t epoch = 0;
        std::uint32_t node = 0;
        std::int32_t pid = -1;
        std::int32_t wait_status = 0;
        std::int32_t abort_status = 0;
        std::uint8_t flags = 0;
    };
    static_assert(sizeof(Slot) == 32);
    struct Wide {
        std::int64_t pid = -1;
        std::string abort_message;
        std::uint64_t memory_limit = 0;
    };

    void store(std::uint32_t rank, const TaskOutcome& outcome);
    TaskOutcome load(std::uint32_t rank) const;

    std::vector<Slot> slots_;
    std::map<std::uint32_t, Wide> wide_;
    std::uint32_t missing_;
};

}  // namespace exitpolicy
