// SPDX-License-Identifier: Apache-2.0
// policy.cpp - the exit policies and the root cause. See policy.hpp.
#include "policy.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <csignal>
#include <limits>

namespace exitpolicy {
namespace {

struct PolicyName {
    Policy policy;
    std::string_view name;
    std::string_view alias;
};

constexpr std::array<PolicyName, 6> policy_names{{
    {Policy::max, "max", "native"},
    {Policy::main_rank, "main-rank", "rank0"},
    {Policy::all_success, "all-success", "require-all-success"},
    {Policy::main_rank_check, "main-rank-check", "check-all-nodes"},
    {Policy::first_failure, "first-failure", ""},
    {Policy::lowest_rank, "lowest-rank", ""},
}};

bool iequals(std::string_view a, std::string_view b) noexcept
{
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

// Earlier end first; equal ends: lower rank first.
bool ends_before(const TaskOutcome& a, const TaskOutcome& b) noexcept
{
    if (a.end_time_us != b.end_time_us)
        return a.end_time_us < b.end_time_us;
    return a.rank < b.rank;
}

bool pmix_client(const TaskOutcome& t) noexcept
{
    return t.finalized.has_value();
}

// An end that can be a reaction to another task's failure rather than a
// failure of its own: a PMIx client's abort on record; where aborts are
// unseen, also a non-zero exit (the runtime's, once Slurm's PMI server has
// taken its abort) and a tear-down kill (Slurm ends the step on that
// abort, possibly before the failure it reacted to is on record).
bool may_be_reaction(const TaskOutcome& t, bool unseen) noexcept
{
    if (t.abort_status)
        return pmix_client(t);
    if (!unseen || t.lost)
        return false;
    const WaitStatus s = t.status();
    return (s.kind == WaitStatus::Kind::exited && s.exit_code != 0) || killed_by_teardown(t);
}

// A failure of the task's own that its peers' runtimes can react to: a
// PMIx client's exit or signal without aborting, not a tear-down kill;
// where aborts are unseen, only a death by a signal of its own (an exit
// can be an unseen abort itself).
bool own_end(const TaskOutcome& t, bool unseen) noexcept
{
    if (!ended_by_itself(t) || succeeded(t))
        return false;
    return unseen ? t.status().kind == WaitStatus::Kind::signaled : pmix_client(t);
}

// A possible reaction on record at most reaction_window_us before the own
// end it can be a reaction to.
bool may_react_to(const TaskOutcome& task, const TaskOutcome& cause, bool unseen) noexcept
{
    return may_be_reaction(task, unseen) && own_end(cause, unseen) && cause.end_time_us >= task.end_time_us &&
           cause.end_time_us - task.end_time_us <= reaction_window_us;
}

// task (not first itself) is collateral to the first failure first: see
// is_collateral.
bool collateral_to(const TaskOutcome& task, const TaskOutcome& first, bool unseen) noexcept
{
    if (task.lost || succeeded(task))
        return false;
    if (task.collateral)
        return true;
    // Nothing is collateral to a lost task or to a tear-down kill.
    if (first.lost || killed_by_teardown(first))
        return false;
    const std::int64_t after = task.end_time_us - first.end_time_us;
    // A tear-down kill at or after the first failure (no node said so:
    // srun -K, no daemons), or just before it was on record.
    if (killed_by_teardown(task))
        return after >= 0 || may_react_to(task, first, unseen);
    // A shell whose command the teardown's signal ended exits 128 + it.
    if (const WaitStatus s = task.status(); !task.abort_status && s.kind == WaitStatus::Kind::exited &&
                                            (s.exit_code == 128 + SIGTERM || s.exit_code == 128 + SIGKILL) && after >= 0)
        return true;
    // A PMIx client that aborted after the first failure ended, or just
    // before it was on record: its runtime can learn of a dead peer on its
    // own connections before any node tells it (Open MPI 5 aborts as soon as
    // the peer's socket closes). Where aborts are unseen, a non-zero exit up
    // to reaction_window_us after the first failure, or just before it was
    // on record. Any other failure of its own (an exit, a signal) is
    // collateral only when its node says so.
    if (!may_be_reaction(task, unseen))
        return false;
    if (may_react_to(task, first, unseen))
        return true;
    return after > 0 && (task.abort_status || after <= reaction_window_us);
}

}  // namespace

std::string_view policy_name(Policy policy) noexcept
{
    for (const auto& p : policy_names)
        if (p.policy == policy)
            return p.name;
    return "unknown";
}

std::string valid_policies()
{
    std::string list;
    for (const auto& p : policy_names) {
        if (!list.empty())
            list += ", ";
        list += p.name;
        if (!p.alias.empty()) {
            list += " (";
            list += p.alias;
            list += ")";
        }
    }
    return list;
}

Result<Policy> parse_policy(std::string_view text)
{
    for (const auto& p : policy_names)
        if (iequals(text, p.name) || (!p.alias.empty() && iequals(text, p.alias)))
            return Result<Policy>::ok(p.policy);
    return Result<Policy>::fail("invalid exit policy '" + std::string(text) +
                                "': valid policies are " + valid_policies());
}

Result<std::uint32_t> parse_rank(std::string_view text)
{
    std::uint32_t rank = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, rank);
    if (text.empty() || ec != std::errc() || ptr != end)
        return Result<std::uint32_t>::fail("invalid main rank '" + std::string(text) +
                                           "': expected a task rank, a whole number from 0");
    return Result<std::uint32_t>::ok(rank);
}

int native_code(const std::vector<TaskOutcome>& tasks) noexcept
{
    int highest_signal = 0;
    int highest_code = 0;
    for (const auto& t : tasks) {
        if (t.lost)
            continue;
        if (t.oom_killed)
            return 1;
        const WaitStatus s = t.status();
        if (s.kind == WaitStatus::Kind::signaled)
            highest_signal = std::max(highest_signal, s.signal);
        else if (s.kind == WaitStatus::Kind::exited)
            highest_code = std::max(highest_code, s.exit_code);
    }
    return highest_signal ? 128 + highest_signal : highest_code;
}

namespace {

// What one pass over the outcomes finds beside the Decision's own counts.
struct Scan {
    std::optional<std::size_t> first_lost;     // lowest lost rank
    std::optional<std::size_t> first_flagged;  // earliest failure its node called collateral
    std::optional<std::size_t> highest_signal;
    std::optional<std::size_t> highest_code;
};

// One pass: counts, main rank, first failure, first abort, and max's
// highest signal and highest code over the wait statuses (lost tasks
// count as lost_code there).
Scan scan(const std::vector<TaskOutcome>& tasks, const Settings& settings, Decision& d) noexcept
{
    Scan found;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const TaskOutcome& t = tasks[i];
        if (t.rank == settings.main_rank)
            d.main = i;
        if (succeeded(t)) {
            ++d.succeeded;
            continue;
        }
        const WaitStatus s = t.status();
        if (!t.lost && s.kind == WaitStatus::Kind::signaled) {
            if (!found.highest_signal || s.signal > tasks[*found.highest_signal].status().signal)
                found.highest_signal = i;
        } else if (!found.highest_code || wait_code(t, settings.lost_code) >
                                              wait_code(tasks[*found.highest_code], settings.lost_code)) {
            found.highest_code = i;
        }
        if (t.lost) {
            ++d.lost;
            if (!found.first_lost || t.rank < tasks[*found.first_lost].rank)
                found.first_lost = i;
            continue;
        }
        ++d.failed;
        auto& first = t.collateral ? found.first_flagged : d.first_failure;
        if (!first || ends_before(t, tasks[*first]))
            first = i;
        if (t.abort_status && (!d.first_abort || ends_before(t, tasks[*d.first_abort])))
            d.first_abort = i;
    }
    return found;
}

// The root cause among the failures the scan found.
void settle_first_failure(const StepOutcomes& step, const Scan& found, Decision& d) noexcept
{
    const auto& tasks = step.tasks;
    // A failure its node called collateral is the root cause only when every
    // failure is; lost tasks have no end time: they are the first failure
    // only when nothing else failed.
    if (!d.first_failure) {
        d.first_failure = found.first_flagged ? found.first_flagged : found.first_lost;
        return;
    }
    // A possible reaction on record first (an abort; where aborts are
    // unseen, a non-zero exit or a tear-down kill too) gives way to the own
    // end it can be a reaction to.
    if (!may_be_reaction(tasks[*d.first_failure], step.aborts_unseen))
        return;
    std::optional<std::size_t> cause;
    for (std::size_t i = 0; i < tasks.size(); ++i)
        if (!tasks[i].collateral && may_react_to(tasks[*d.first_failure], tasks[i], step.aborts_unseen) &&
            (!cause || ends_before(tasks[i], tasks[*cause])))
            cause = i;
    if (cause)
        d.first_failure = cause;
}

// The code a policy gives once something failed (and its root cause did
// not abort: an abort decides under every policy but all-success).
void apply_policy(const StepOutcomes& step, const Settings& settings, const Scan& found, Decision& d) noexcept
{
    const auto& tasks = step.tasks;
    auto take = [&](Reason reason, std::size_t index) {
        d.reason = reason;
        d.deciding = index;
        d.code = task_code(tasks[index], settings.lost_code);
    };
    const std::size_t root = *d.first_failure;
    auto collateral = [&](std::size_t index) {
        return index != root && collateral_to(tasks[index], tasks[root], step.aborts_unseen);
    };
    const TaskOutcome& main = tasks[*d.main];
    switch (settings.policy) {
    case Policy::max:
        // Slurm's rule over the wait statuses, with lost tasks counted as
        // lost_code: an abort that is not the root cause counts as its kill.
        take(found.highest_signal ? Reason::highest_signal : Reason::highest_code,
             found.highest_signal ? *found.highest_signal : *found.highest_code);
        d.code = wait_code(tasks[*d.deciding], settings.lost_code);
        break;
    case Policy::main_rank:
        if (collateral(*d.main))
            take(Reason::root_cause, root);
        else
            take(Reason::main_rank, *d.main);
        break;
    case Policy::main_rank_check:
        if (succeeded(main)) {
            d.reason = Reason::other_failed;
            d.code = 1;
        } else if (collateral(*d.main)) {
            take(Reason::root_cause, root);
        } else {
            take(Reason::main_rank_failed, *d.main);
        }
        break;
    case Policy::first_failure:
        take(Reason::first_failure, root);
        break;
    case Policy::lowest_rank: {
        // Lost ranks fail and are never collateral; the root cause is never
        // collateral: there is always one.
        std::optional<std::size_t> lowest;
        for (std::size_t i = 0; i < tasks.size(); ++i)
            if (!succeeded(tasks[i]) && (!lowest || tasks[i].rank < tasks[*lowest].rank) && !collateral(i))
                lowest = i;
        take(Reason::lowest_rank, lowest ? *lowest : root);
        break;
    }
    case Policy::all_success:
        break;  // decided before
    }
}

}  // namespace

Result<Decision> decide(const StepOutcomes& step, const Settings& settings) noexcept
{
    const auto& tasks = step.tasks;
    if (tasks.empty())
        return Result<Decision>::fail("no task outcomes to decide on");
    Decision d;
    d.native_code = native_code(tasks);
    const Scan found = scan(tasks, settings, d);
    if (!d.main)
        return Result<Decision>::fail("main rank " + std::to_string(settings.main_rank) +
                                      " is not a task of this step (ranks 0-" +
                                      std::to_string(tasks.size() - 1) + ")");
    settle_first_failure(step, found, d);
    const bool all_ok = d.succeeded == tasks.size();
    if (settings.policy == Policy::all_success) {
        d.reason = all_ok ? Reason::all_succeeded : Reason::some_failed;
        d.code = all_ok ? 0 : 1;
    } else if (all_ok) {
        d.reason = Reason::all_succeeded;
        d.code = 0;
    } else if (const std::size_t root = *d.first_failure; tasks[root].abort_status) {
        // Something failed, so there is a first failure.
        d.reason = Reason::aborted;
        d.deciding = root;
        d.code = task_code(tasks[root], settings.lost_code);
    } else {
        apply_policy(step, settings, found, d);
    }
    return Result<Decision>::ok(d);
}

bool is_collateral(const StepOutcomes& step, const Decision& decision, std::size_t index) noexcept
{
    if (!decision.first_failure || index == *decision.first_failure || index >= step.tasks.size() ||
        *decision.first_failure >= step.tasks.size())
        return false;
    return collateral_to(step.tasks[index], step.tasks[*decision.first_failure], step.aborts_unseen);
}

std::string_view report_mode_name(ReportMode mode) noexcept
{
    switch (mode) {
    case ReportMode::automatic: return "auto";
    case ReportMode::always: return "always";
    case ReportMode::never: return "never";
    }
    return "unknown";
}

Result<ReportMode> parse_report_mode(std::string_view text)
{
    for (ReportMode m : {ReportMode::automatic, ReportMode::always, ReportMode::never})
        if (iequals(text, report_mode_name(m)))
            return Result<ReportMode>::ok(m);
    return Result<ReportMode>::fail("invalid exit report mode '" + std::string(text) +
                                    "': valid modes are auto, always, never");
}

bool should_report(ReportMode mode, bool policy_active, const Decision& decision) noexcept
{
    switch (mode) {
    case ReportMode::always: return true;
    case ReportMode::never: return false;
    case ReportMode::automatic: break;
    }
    return policy_active && (decision.reason != Reason::all_succeeded ||
                             decision.code != decision.native_code);
}

OutcomeSet::OutcomeSet(std::uint32_t ntasks) : slots_(ntasks), missing_(ntasks) {}

void OutcomeSet::store(std::uint32_t rank, const TaskOutcome& o)
{
    Slot& s = slots_[rank];
    s.end_time_us = o.end_time_us;
    s.epoch = o.epoch;
    s.node = o.node;
    s.wait_status = o.wait_status;
    s.abort_status = o.abort_status.value_or(0);
    s.flags = Slot::present;
    if (o.lost)
        s.flags |= Slot::lost;
    if (o.abort_status)
        s.flags |= Slot::aborted;
    if (o.finalized)
        s.flags |= Slot::finalized_known;
    if (o.finalized.value_or(false))
        s.flags |= Slot::finalized;
    if (o.collateral)
        s.flags |= Slot::collateral;
    if (o.oom_killed)
        s.flags |= Slot::oom_killed;
    const bool narrow = o.pid >= std::numeric_limits<std::int32_t>::min() &&
                        o.pid <= std::numeric_limits<std::int32_t>::max();
    s.pid = narrow ? static_cast<std::int32_t>(o.pid) : -1;
    if (narrow && o.abort_message.empty() && o.memory_limit == 0) {
        wide_.erase(rank);
        return;
    }
    s.flags |= Slot::wide;
    wide_[rank] = Wide{o.pid, o.abort_message, o.memory_limit};
}

TaskOutcome OutcomeSet::load(std::uint32_t rank) const
{
    const Slot& s = slots_[rank];
    TaskOutcome o;
    o.rank = rank;
    o.epoch = s.epoch;
    o.node = s.node;
    o.pid = s.pid;
    o.lost = (s.flags & Slot::lost) != 0;
    o.wait_status = s.wait_status;
    if (s.flags & Slot::aborted)
        o.abort_status = s.abort_status;
    if (s.flags & Slot::finalized_known)
        o.finalized = (s.flags & Slot::finalized) != 0;
    o.end_time_us = s.end_time_us;
    o.collateral = (s.flags & Slot::collateral) != 0;
    o.oom_killed = (s.flags & Slot::oom_killed) != 0;
    if (s.flags & Slot::wide)
        if (auto it = wide_.find(rank); it != wide_.end()) {
            o.pid = it->second.pid;
            o.abort_message = it->second.abort_message;
            o.memory_limit = it->second.memory_limit;
        }
    return o;
}

OutcomeSet::Recorded OutcomeSet::record(const TaskOutcome& outcome)
{
    if (outcome.rank >= slots_.size())
        return Recorded::out_of_range;
    const Slot& slot = slots_[outcome.rank];
    if (!(slot.flags & Slot::present)) {
        store(outcome.rank, outcome);
        --missing_;
        return Recorded::added;
    }
    if (outcome.epoch == slot.epoch)
        return Recorded::duplicate;
    if (outcome.epoch < slot.epoch)
        return Recorded::stale;
    store(outcome.rank, outcome);
    return Recorded::replaced;
}

std::optional<TaskOutcome> OutcomeSet::get(std::uint32_t rank) const
{
    if (!has(rank))
        return std::nullopt;
    return load(rank);
}

std::vector<TaskOutcome> OutcomeSet::finish(const std::vector<std::uint32_t>& node_of_rank) const
{
    std::vector<TaskOutcome> tasks;
    tasks.reserve(slots_.size());
    for (std::uint32_t rank = 0; rank < slots_.size(); ++rank) {
        if (has(rank)) {
            tasks.push_back(load(rank));
            continue;
        }
        TaskOutcome lost;
        lost.rank = rank;
        lost.lost = true;
        if (rank < node_of_rank.size())
            lost.node = node_of_rank[rank];
        tasks.push_back(lost);
    }
    return tasks;
}

}  // namespace exitpolicy
