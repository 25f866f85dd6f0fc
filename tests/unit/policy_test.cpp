// SPDX-License-Identifier: Apache-2.0
// policy_test.cpp - the exit policies, table first.
#include "builders.hpp"
#include "exitpolicy/policy.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace exitpolicy {
namespace {

using namespace test;

// PMIx_Abort(status), then the task exited by itself with code before the
// launcher killed it.
T exited_after_abort(std::uint32_t rank, int status, int code)
{
    T t = aborts(rank, status);
    t.o.wait_status = WaitStatus::exited(code).raw();
    return t;
}

constexpr std::array<Policy, 6> all_policies{Policy::max,           Policy::main_rank,
                                             Policy::all_success,   Policy::main_rank_check,
                                             Policy::first_failure, Policy::lowest_rank};

int code_under(const StepOutcomes& s, Policy policy, std::uint32_t main_rank = 0, int lost_code = 1)
{
    const auto d = decide(s, Settings{policy, main_rank, lost_code});
    EXPECT_TRUE(d) << d.error();
    return d ? d->code : -1;
}

// The design's reference table, verbatim (main = rank 0; the README's
// "Choosing a policy" states the rules it follows).
struct ReferenceRow {
    const char* name;
    std::vector<TaskOutcome> tasks;  // main first, then the others
    int max, main_rank, all_success, main_rank_check;
};

TEST(ReferenceTableTest, EveryRowUnderEveryPolicyOfTheTable)
{
    const ReferenceRow rows[] = {
        {"all succeed", {ok(0), ok(1), ok(2), ok(3)}, 0, 0, 0, 0},
        {"main segfaults", {segv(0), ok(1), ok(2), ok(3)}, 139, 139, 1, 139},
        {"another fails", {ok(0), exits(1, 1), ok(2), ok(3)}, 1, 0, 1, 1},
        {"all fail", {exits(0, 1), exits(1, 1), exits(2, 1), exits(3, 1)}, 1, 1, 1, 1},
        {"main times out", {exits(0, 124), ok(1), ok(2), ok(3)}, 124, 124, 1, 124},
        {"main OOM-killed", {killed(0, SIGKILL), ok(1), ok(2), ok(3)}, 137, 137, 1, 137},
        {"main ok, other segfaults", {ok(0), segv(1), ok(2), ok(3)}, 139, 0, 1, 1},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(row.name);
        const StepOutcomes s = step(row.tasks, 4);
        EXPECT_EQ(code_under(s, Policy::max), row.max);
        EXPECT_EQ(code_under(s, Policy::main_rank), row.main_rank);
        EXPECT_EQ(code_under(s, Policy::all_success), row.all_success);
        EXPECT_EQ(code_under(s, Policy::main_rank_check), row.main_rank_check);
        // max is Slurm's own rule: it always equals the native code here.
        EXPECT_EQ(decide(s, {})->native_code, row.max);
    }
}

// first-failure and lowest-rank on the reference cases. End times follow
// rank order in these rows (builders.hpp), so the first failure is the
// lowest failing rank: the scenario table below pulls the two apart. In the
// last row the main rank is torn down after the SIGSEGV: collateral, so
// lowest-rank skips it.
TEST(ReferenceTableTest, FirstFailureAndLowestRankOnTheReferenceCases)
{
    struct Row {
        const char* name;
        std::vector<TaskOutcome> tasks;
        int first_failure, lowest_rank;
    };
    const Row rows[] = {
        {"all succeed", {ok(0), ok(1), ok(2), ok(3)}, 0, 0},
        {"main segfaults", {segv(0), ok(1), ok(2), ok(3)}, 139, 139},
        {"another fails", {ok(0), exits(1, 1), ok(2), ok(3)}, 1, 1},
        {"all fail", {exits(0, 1), exits(1, 1), exits(2, 1), exits(3, 1)}, 1, 1},
        {"main times out", {exits(0, 124), ok(1), ok(2), ok(3)}, 124, 124},
        {"main OOM-killed", {killed(0, SIGKILL), ok(1), ok(2), ok(3)}, 137, 137},
        {"main ok, other segfaults", {ok(0), segv(1), ok(2), ok(3)}, 139, 139},
        {"other segfaults, main killed after (collateral)",
         {killed(0, SIGTERM).at(500), segv(1).at(400), ok(2), ok(3)}, 139, 139},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(row.name);
        const StepOutcomes s = step(row.tasks, 4);
        EXPECT_EQ(code_under(s, Policy::first_failure), row.first_failure);
        EXPECT_EQ(code_under(s, Policy::lowest_rank), row.lowest_rank);
    }
}

// Every scenario under every policy. Columns: max, main-rank, all-success,
// main-rank-check, first-failure, lowest-rank.
struct Scenario {
    const char* name;
    std::vector<TaskOutcome> tasks;
    std::uint32_t main_rank;
    std::array<int, 6> codes;
};

std::vector<TaskOutcome> many_tasks()
{
    std::vector<TaskOutcome> tasks;
    for (std::uint32_t r = 0; r < 100'000; ++r)
        tasks.push_back(ok(r));
    tasks[77'777] = segv(77'777).at(2'000'000);
    tasks[99'999] = exits(99'999, 3).at(1'500'000);
    return tasks;
}

TEST(PolicyTest, EveryScenarioUnderEveryPolicy)
{
    const Scenario scenarios[] = {
        {"all succeed", {ok(0), ok(1), ok(2), ok(3)}, 0, {0, 0, 0, 0, 0, 0}},
        {"main fails", {exits(0, 2), ok(1), ok(2), ok(3)}, 0, {2, 2, 1, 2, 2, 2}},
        {"another fails", {ok(0), ok(1), exits(2, 5), ok(3)}, 0, {5, 0, 1, 1, 5, 5}},
        // Any signal beats any code under max, even a code above 128+signal.
        {"signals vs codes",
         {ok(0), exits(1, 200).at(300), killed(2, SIGHUP).at(200), exits(3, 3).at(100)},
         0,
         {129, 0, 1, 1, 3, 200}},
        {"highest signal wins",
         {killed(0, SIGTERM), segv(1), killed(2, SIGHUP), ok(3)}, 0, {143, 143, 1, 143, 143, 143}},
        {"abort with a status",
         {killed(0, SIGTERM).at(200), ok(1).at(50), aborts(2, 7).at(100), killed(3, SIGKILL).at(200)},
         0,
         {7, 7, 1, 7, 7, 7}},
        {"abort with 0",
         {killed(0, SIGKILL).at(200), aborts(1, 0).at(100), ok(2).at(10), ok(3).at(20)},
         0,
         {0, 0, 1, 0, 0, 0}},
        // What a process can exit with: never 0 for a status that is not.
        {"abort with 256",
         {killed(0, SIGTERM).at(200), ok(1).at(50), aborts(2, 256).at(100), killed(3, SIGKILL).at(200)},
         0,
         {1, 1, 1, 1, 1, 1}},
        {"abort with -256",
         {killed(0, SIGTERM).at(200), ok(1).at(50), aborts(2, -256).at(100), killed(3, SIGKILL).at(200)},
         0,
         {1, 1, 1, 1, 1, 1}},
        {"abort with 519 (512 + 7)",
         {killed(0, SIGTERM).at(200), ok(1).at(50), aborts(2, 519).at(100), killed(3, SIGKILL).at(200)},
         0,
         {7, 7, 1, 7, 7, 7}},
        {"abort with -1",
         {killed(0, SIGTERM).at(200), ok(1).at(50), aborts(2, -1).at(100), killed(3, SIGKILL).at(200)},
         0,
         {255, 255, 1, 255, 255, 255}},
        {"several aborts: the earliest wins",
         {ok(0), aborts(1, 9).at(200), killed(2, SIGKILL).at(300), aborts(3, 4).at(100)},
         0,
         {4, 4, 1, 4, 4, 4}},
        {"several aborts at the same time: the lowest rank wins",
         {ok(0), aborts(1, 9).at(100), ok(2), aborts(3, 4).at(100)}, 0, {9, 9, 1, 9, 9, 9}},
        {"lost main", {lost(0), ok(1), ok(2), ok(3)}, 0, {1, 1, 1, 1, 1, 1}},
        {"lost other", {ok(0), ok(1), lost(2), ok(3)}, 0, {1, 0, 1, 1, 1, 1}},
        {"a failure beats a lost task for first-failure",
         {ok(0), lost(1), exits(2, 6), ok(3)}, 0, {6, 0, 1, 1, 6, 1}},
        // The main rank is collateral: main-rank and main-rank-check give the
        // root cause's code, lowest-rank skips ranks 0 and 1.
        {"collateral SIGTERM after a SIGSEGV",
         {killed(0, SIGTERM).at(150), killed(1, SIGTERM).at(150), segv(2).at(100),
          killed(3, SIGKILL).at(160)},
         0,
         {143, 139, 1, 139, 139, 139}},
        {"equal end times: the lowest rank is first",
         {exits(0, 9).at(200), exits(1, 6).at(100), ok(2), exits(3, 4).at(100)},
         0,
         {9, 9, 1, 9, 6, 9}},
        {"main rank 2 fails, rank 0 segfaults",
         {segv(0).at(100), ok(1), exits(2, 3).at(200), ok(3)}, 2, {139, 3, 1, 3, 139, 139}},
        {"main rank 2 succeeds, rank 0 fails",
         {exits(0, 4), ok(1), ok(2), ok(3)}, 2, {4, 0, 1, 1, 4, 4}},
        {"main rank 3 segfaults", {ok(0), ok(1), ok(2), segv(3)}, 3, {139, 139, 1, 139, 139, 139}},
        {"a single task that fails", {exits(0, 42)}, 0, {42, 42, 1, 42, 42, 42}},
        {"a single task that succeeds", {ok(0)}, 0, {0, 0, 0, 0, 0, 0}},
        {"a single task killed", {killed(0, SIGKILL)}, 0, {137, 137, 1, 137, 137, 137}},
        // The OOM killer's SIGKILL is a task's own end, not a teardown's:
        // the SIGTERMs srun -K sends then are collateral to it. Before, the
        // SIGKILL first failure had no collateral, and main-rank gave the
        // teardown's 143.
        {"srun -K after an OOM kill",
         {killed(0, SIGTERM).at(150), killed(1, SIGKILL).oom().at(100), killed(2, SIGTERM).at(150), ok(3)},
         0,
         {143, 137, 1, 137, 137, 137}},
        {"the OOM-killed main rank under srun -K",
         {killed(0, SIGKILL).oom().at(100), killed(1, SIGTERM).at(150), killed(2, SIGTERM).at(150),
          killed(3, SIGTERM).at(160)},
         0,
         {143, 137, 1, 137, 137, 137}},
        {"a shell whose command the OOM killer ended",
         {killed(0, SIGTERM).at(150), exits(1, 137).oom().at(100), killed(2, SIGTERM).at(150), ok(3)},
         0,
         {143, 137, 1, 137, 137, 137}},
        {"100 000 tasks", many_tasks(), 0, {139, 0, 1, 1, 3, 139}},
    };
    for (const auto& sc : scenarios) {
        for (std::size_t p = 0; p < all_policies.size(); ++p) {
            SCOPED_TRACE(std::string(sc.name) + " / " + std::string(policy_name(all_policies[p])));
            EXPECT_EQ(code_under(step(sc.tasks, 4), all_policies[p], sc.main_rank), sc.codes[p]);
        }
    }
}

// The root cause under every policy: code and reason. Columns as above.
struct Verdict {
    int code;
    Reason reason;
};

struct RootCauseCase {
    const char* name;
    std::vector<TaskOutcome> tasks;
    std::uint32_t main_rank;
    std::uint32_t first_failure;  // its rank
    std::array<Verdict, 6> verdicts;
    bool aborts_unseen = false;   // the tasks' PMI server was Slurm's own
};

// Ranks 0-7: root as given, every other rank other(rank).
template <class Other>
std::vector<TaskOutcome> eight(const T& root, Other other)
{
    std::vector<TaskOutcome> tasks;
    for (std::uint32_t r = 0; r < 8; ++r)
        tasks.push_back(r == root.o.rank ? T(root) : T(other(r)));
    return tasks;
}

TEST(RootCauseTest, EveryCaseUnderEveryPolicy)
{
    using enum Reason;
    const RootCauseCase cases[] = {
        {"a: SIGSEGV, the others SIGTERMed by their nodes",
         eight(segv(5).at(100), [](std::uint32_t r) { return flagged(killed(r, SIGTERM).at(600)); }),
         0, 5,
         {{{143, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}}},
        // max: SIGSEGV (11) is a higher signal than SIGKILL (9).
        {"b: SIGSEGV, the others SIGKILLed by srun -K, no node flags",
         eight(segv(5).at(100), [](std::uint32_t r) { return killed(r, SIGKILL).at(600); }),
         0, 5,
         {{{139, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}}},
        {"c: rank 5 exits 3, rank 0 is told and aborts with 7",
         eight(exits(5, 3).at(100),
               [](std::uint32_t r) {
                   return r == 0 ? flagged(aborts(0, 7).at(200)) : flagged(killed(r, SIGKILL).at(600));
               }),
         0, 5,
         {{{137, highest_signal}, {3, root_cause}, {1, some_failed}, {3, root_cause},
           {3, first_failure}, {3, lowest_rank}}}},
        {"d: the root cause aborts with 7",
         eight(aborts(5, 7).at(100), [](std::uint32_t r) { return flagged(killed(r, SIGKILL).at(600)); }),
         0, 5,
         {{{7, aborted}, {7, aborted}, {1, some_failed}, {7, aborted}, {7, aborted}, {7, aborted}}}},
        {"e: an abort that is neither the first failure nor collateral",
         {aborts(0, 9).at(150), ok(1), ok(2), exits(3, 2).at(100)},
         0, 3,
         {{{137, highest_signal}, {9, main_rank}, {1, some_failed}, {9, main_rank_failed},
           {2, first_failure}, {9, lowest_rank}}}},
        {"f: every failure flagged: the earliest of them",
         {flagged(killed(0, SIGTERM).at(300)), flagged(exits(1, 4).at(200)),
          flagged(killed(2, SIGKILL).at(250)), ok(3)},
         0, 1,
         {{{143, highest_signal}, {4, root_cause}, {1, some_failed}, {4, root_cause},
           {4, first_failure}, {4, lowest_rank}}}},
        {"g: lowest-rank skips a flagged rank",
         {ok(0), flagged(killed(1, SIGTERM).at(200)), ok(2), ok(3), exits(4, 5).at(100)},
         0, 4,
         {{{143, highest_signal}, {0, main_rank}, {1, some_failed}, {1, other_failed},
           {5, first_failure}, {5, lowest_rank}}}},
        {"g': lowest-rank skips a SIGTERM after the first failure (no flag)",
         {ok(0), killed(1, SIGTERM).at(200), ok(2), ok(3), exits(4, 5).at(100)},
         0, 4,
         {{{143, highest_signal}, {0, main_rank}, {1, some_failed}, {1, other_failed},
           {5, first_failure}, {5, lowest_rank}}}},
        {"h: the main rank collateral, rank 2 exits 1, the others succeed",
         {flagged(killed(0, SIGTERM).at(200)), ok(1), exits(2, 1).at(100), ok(3)},
         0, 2,
         {{{143, highest_signal}, {1, root_cause}, {1, some_failed}, {1, root_cause},
           {1, first_failure}, {1, lowest_rank}}}},
        {"a flagged task that ended earlier by its node's clock is not the root cause",
         {flagged(killed(0, SIGTERM).at(50)), ok(1), segv(2).at(100), ok(3)},
         0, 2,
         {{{143, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}}},
        {"a flagged task is collateral even to a SIGKILLed root cause",
         {ok(0), flagged(killed(1, SIGTERM).at(200)), killed(2, SIGKILL).at(100)},
         1, 2,
         {{{143, highest_signal}, {137, root_cause}, {1, some_failed}, {137, root_cause},
           {137, first_failure}, {137, lowest_rank}}}},
        {"another main rank, collateral",
         {segv(0).at(100), ok(1), flagged(killed(2, SIGTERM).at(200)), ok(3)},
         2, 0,
         {{{143, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}}},
        {"max reads a late abort's wait status, the policies that pick it its abort status",
         {ok(0), exits(1, 3).at(100), exited_after_abort(2, 9, 0).at(200), ok(3)},
         2, 1,
         {{{3, highest_code}, {9, main_rank}, {1, some_failed}, {9, main_rank_failed},
           {3, first_failure}, {3, lowest_rank}}}},
        // Open MPI 5: ranks 0 and 7 see rank 5's sockets close and abort
        // before any node could tell them; the others are torn down.
        {"i: rank 5 exits 3, PMIx clients abort with 14 on their own before their nodes knew",
         eight(exits(5, 3).unfinalized().at(100),
               [](std::uint32_t r) {
                   if (r == 0 || r == 7)
                       return aborts(r, 14).unfinalized().at(100 + 10 * (8 - r));
                   return flagged(killed(r, SIGTERM).unfinalized().at(600));
               }),
         0, 5,
         {{{143, highest_signal}, {3, root_cause}, {1, some_failed}, {3, root_cause},
           {3, first_failure}, {3, lowest_rank}}}},
        // Open MPI 5 again: rank 5's sockets closed before its end was on
        // record, and rank 7's abort on them was on record 3 ms earlier.
        {"j: an abort on record just before the own end it reacted to",
         eight(segv(5).unfinalized().at(10'000),
               [](std::uint32_t r) {
                   if (r == 7)
                       return aborts(7, 14).unfinalized().at(7'000);
                   return flagged(killed(r, SIGTERM).unfinalized().at(20'000));
               }),
         0, 5,
         {{{143, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}}},
        {"k: an abort longer than the reaction window before an own end is the root cause",
         eight(aborts(7, 14).unfinalized().at(1'000),
               [](std::uint32_t r) {
                   if (r == 5)
                       return exits(5, 3).unfinalized().at(1'000 + reaction_window_us + 1);
                   return flagged(killed(r, SIGTERM).unfinalized().at(900'000));
               }),
         0, 7,
         {{{14, aborted}, {14, aborted}, {1, some_failed}, {14, aborted}, {14, aborted}, {14, aborted}}}},
        {"l: an abort gives way to no tear-down kill, no other abort and no task without PMIx",
         {flagged(killed(0, SIGTERM).unfinalized().at(2'000)), aborts(1, 7).unfinalized().at(1'000),
          aborts(2, 14).unfinalized().at(1'500), killed(3, SIGKILL).unfinalized().at(1'200), exits(4, 2).at(1'100)},
         0, 1,
         {{{7, aborted}, {7, aborted}, {1, some_failed}, {7, aborted}, {7, aborted}, {7, aborted}}}},
        // Slurm's own mpi/pmix with Open MPI 5 (Debian 13, measured): rank
        // 5 segfaults; the survivors see its sockets close, abort through
        // Slurm's PMIx server (unseen) and exit 14, on record from 107 ms
        // before the segfault to 163 ms after it; Slurm SIGKILLs the rest.
        {"m: aborts unseen: exits 14 just before and after a segfault are reactions to it",
         eight(segv(5).at(1'000'000),
               [](std::uint32_t r) {
                   constexpr std::int64_t dt[] = {16'801, 162'605, 114'405, -71'419, -107'443, 0, -4'015, -104'309};
                   return r == 2 ? killed(r, SIGKILL).at(1'000'000 + dt[r]) : exits(r, 14).at(1'000'000 + dt[r]);
               }),
         0, 5,
         {{{139, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}},
         true},
        {"m': the same ends where aborts are seen: the earliest exit is a failure of its own",
         eight(segv(5).at(1'000'000),
               [](std::uint32_t r) {
                   constexpr std::int64_t dt[] = {16'801, 162'605, 114'405, -71'419, -107'443, 0, -4'015, -104'309};
                   return r == 2 ? killed(r, SIGKILL).at(1'000'000 + dt[r]) : exits(r, 14).at(1'000'000 + dt[r]);
               }),
         0, 4,
         {{{139, highest_signal}, {14, main_rank}, {1, some_failed}, {14, main_rank_failed},
           {14, first_failure}, {14, lowest_rank}}}},
        {"n: aborts unseen: an exit longer than the reaction window after a segfault is its own",
         {exits(0, 2).at(1'000 + reaction_window_us + 1), ok(1), segv(2).at(1'000), ok(3)},
         0, 2,
         {{{139, highest_signal}, {2, main_rank}, {1, some_failed}, {2, main_rank_failed},
           {139, first_failure}, {2, lowest_rank}}},
         true},
        {"o: aborts unseen: an exit 14 after rank 5's exit 3 reacted to it",
         {exits(0, 14).at(1'200), ok(1), ok(2), ok(3), ok(4), exits(5, 3).at(1'000)},
         0, 5,
         {{{14, highest_code}, {3, root_cause}, {1, some_failed}, {3, root_cause},
           {3, first_failure}, {3, lowest_rank}}},
         true},
        {"o': aborts unseen: an exit gives way to no later exit (either can be an abort)",
         {exits(0, 14).at(1'000), ok(1), ok(2), ok(3), ok(4), exits(5, 3).at(1'200)},
         0, 0,
         {{{14, highest_code}, {14, main_rank}, {1, some_failed}, {14, main_rank_failed},
           {14, first_failure}, {14, lowest_rank}}},
         true},
        {"o'': aborts unseen: an exit on record before a segfault gives way to it only inside the window",
         {exits(0, 14).at(1'000), ok(1), segv(2).at(1'000 + reaction_window_us + 1), ok(3)},
         0, 0,
         {{{139, highest_signal}, {14, main_rank}, {1, some_failed}, {14, main_rank_failed},
           {14, first_failure}, {14, lowest_rank}}},
         true},
        // Measured too: Slurm ended the step on rank 1's unseen abort and
        // SIGKILLed rank 0 before rank 5's segfault was on record.
        {"q: aborts unseen: a tear-down kill on record first gives way to the segfault after it",
         {killed(0, SIGKILL).at(900'000), exits(1, 14).at(920'000), killed(2, SIGKILL).at(950'000), ok(3),
          ok(4), segv(5).at(1'000'000)},
         0, 5,
         {{{139, highest_signal}, {139, root_cause}, {1, some_failed}, {139, root_cause},
           {139, first_failure}, {139, lowest_rank}}},
         true},
        {"q': the same ends where aborts are seen: the kill on record first is the root cause",
         {killed(0, SIGKILL).at(900'000), exits(1, 14).at(920'000), killed(2, SIGKILL).at(950'000), ok(3),
          ok(4), segv(5).at(1'000'000)},
         0, 0,
         {{{139, highest_signal}, {137, main_rank}, {1, some_failed}, {137, main_rank_failed},
           {137, first_failure}, {137, lowest_rank}}}},
        {"q'': aborts unseen: a kill longer than the reaction window before a segfault is not its reaction",
         {ok(0), killed(1, SIGKILL).at(1'000), ok(2), segv(3).at(1'000 + reaction_window_us + 1)},
         1, 1,
         {{{139, highest_signal}, {137, main_rank}, {1, some_failed}, {137, main_rank_failed},
           {137, first_failure}, {137, lowest_rank}}},
         true},
        {"p: aborts unseen: nothing is collateral to a lost task or a tear-down kill",
         {exits(0, 14).at(1'200), killed(1, SIGKILL).at(1'000), exits(2, 5).at(1'300), ok(3)},
         0, 1,
         {{{137, highest_signal}, {14, main_rank}, {1, some_failed}, {14, main_rank_failed},
           {137, first_failure}, {14, lowest_rank}}},
         true},
        {"a lost main rank is never collateral",
         {lost(0), segv(1).at(100), flagged(killed(2, SIGTERM).at(200)), ok(3)},
         0, 1,
         {{{143, highest_signal}, {1, main_rank}, {1, some_failed}, {1, main_rank_failed},
           {139, first_failure}, {1, lowest_rank}}}},
    };
    for (const auto& c : cases) {
        StepOutcomes s = step(c.tasks, 4);
        s.aborts_unseen = c.aborts_unseen;
        for (std::size_t p = 0; p < all_policies.size(); ++p) {
            SCOPED_TRACE(std::string(c.name) + " / " + std::string(policy_name(all_policies[p])));
            const auto d = decide(s, {all_policies[p], c.main_rank, 1});
            ASSERT_TRUE(d) << d.error();
            EXPECT_EQ(d->code, c.verdicts[p].code);
            EXPECT_EQ(d->reason, c.verdicts[p].reason);
            ASSERT_TRUE(d->first_failure);
            EXPECT_EQ(s.tasks[*d->first_failure].rank, c.first_failure);
            // The root cause's code is taken from the root cause.
            if (d->reason == root_cause || d->reason == aborted || d->reason == first_failure) {
                ASSERT_TRUE(d->deciding);
                EXPECT_EQ(d->deciding, d->first_failure);
            }
        }
    }
}

TEST(RootCauseTest, FirstAbortIsTheEarliestAbortEvenWhenNotTheRootCause)
{
    // Rank 0 aborted after the root cause; the report still names the abort.
    const StepOutcomes s = step({flagged(aborts(0, 7).at(200)), exits(1, 3).at(100), ok(2)});
    const auto d = decide(s, {Policy::main_rank, 0, 1});
    ASSERT_TRUE(d);
    ASSERT_TRUE(d->first_abort);
    EXPECT_EQ(s.tasks[*d->first_abort].rank, 0u);
    EXPECT_EQ(s.tasks[*d->first_failure].rank, 1u);
    EXPECT_EQ(d->reason, Reason::root_cause);
    EXPECT_EQ(d->code, 3);
    EXPECT_EQ(d->native_code, 137);
}

// Slurm's own srun returns 1 for a step whose task/cgroup saw an OOM kill,
// whatever the tasks' statuses; every policy still gives the kill's 137.
TEST(PolicyTest, SlurmsNativeCodeForAnOomKillIsOne)
{
    const StepOutcomes s = step({killed(0, SIGTERM).at(150), killed(1, SIGKILL).oom().at(100), segv(2).at(160)});
    for (Policy p : all_policies) {
        SCOPED_TRACE(policy_name(p));
        const auto d = decide(s, {p, 1, 1});
        ASSERT_TRUE(d);
        EXPECT_EQ(d->native_code, 1);
    }
    EXPECT_EQ(decide(s, {Policy::main_rank, 1, 1})->code, 137);
    // Without the OOM kill, the highest signal's (SIGTERM's 15).
    EXPECT_EQ(decide(step({killed(0, SIGTERM).at(150), killed(1, SIGKILL).at(100), segv(2).at(160)}),
                     {Policy::main_rank, 1, 1})->native_code,
              143);
}

TEST(PolicyTest, TasksInAnyOrder)
{
    const StepOutcomes s = step({ok(3), segv(2).at(10), exits(0, 5).at(20), ok(1)}, 2);
    EXPECT_EQ(code_under(s, Policy::main_rank), 5);
    EXPECT_EQ(code_under(s, Policy::first_failure), 139);
    EXPECT_EQ(code_under(s, Policy::lowest_rank), 5);
    EXPECT_EQ(code_under(s, Policy::main_rank, 2), 139);
}

TEST(PolicyTest, LostCodeIsTheSitesChoice)
{
    const StepOutcomes s = step({lost(0), ok(1)});
    for (Policy p : all_policies)
        EXPECT_EQ(code_under(s, p, 0, 75), p == Policy::all_success ? 1 : 75) << policy_name(p);
    // Under max a lost task counts as lost_code, below a signal, above a lower code.
    EXPECT_EQ(code_under(step({lost(0), exits(1, 3)}), Policy::max, 0, 75), 75);
    EXPECT_EQ(code_under(step({lost(0), exits(1, 99)}), Policy::max, 0, 75), 99);
    EXPECT_EQ(code_under(step({lost(0), killed(1, SIGHUP)}), Policy::max, 0, 200), 129);
}

TEST(PolicyTest, DecisionNamesTheReasonAndTheDecidingTask)
{
    const StepOutcomes s = step({ok(0), exits(1, 3).at(50), segv(2).at(100), lost(3)});
    struct Row {
        Policy policy;
        Reason reason;
        std::optional<std::uint32_t> deciding_rank;
    };
    const Row rows[] = {
        {Policy::max, Reason::highest_signal, 2},
        {Policy::main_rank, Reason::main_rank, 0},
        {Policy::all_success, Reason::some_failed, std::nullopt},
        {Policy::main_rank_check, Reason::other_failed, std::nullopt},
        {Policy::first_failure, Reason::first_failure, 1},
        {Policy::lowest_rank, Reason::lowest_rank, 1},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(policy_name(row.policy));
        const auto d = decide(s, {row.policy, 0, 1});
        ASSERT_TRUE(d);
        EXPECT_EQ(d->reason, row.reason);
        ASSERT_EQ(d->deciding.has_value(), row.deciding_rank.has_value());
        if (row.deciding_rank) {
            EXPECT_EQ(s.tasks[*d->deciding].rank, *row.deciding_rank);
        }
        EXPECT_EQ(d->succeeded, 1u);
        EXPECT_EQ(d->failed, 2u);
        EXPECT_EQ(d->lost, 1u);
        EXPECT_EQ(s.tasks[*d->first_failure].rank, 1u);
        EXPECT_EQ(d->native_code, 139);
    }
}

TEST(PolicyTest, AbortVerdictAppliesToEveryPolicyButAllSuccess)
{
    const StepOutcomes s = step({ok(0), aborts(1, 7), killed(2, SIGKILL).at(2'000'000), ok(3)});
    for (Policy p : all_policies) {
        SCOPED_TRACE(policy_name(p));
        const auto d = decide(s, {p, 0, 1});
        ASSERT_TRUE(d);
        EXPECT_EQ(d->reason, p == Policy::all_success ? Reason::some_failed : Reason::aborted);
        EXPECT_EQ(d->code, p == Policy::all_success ? 1 : 7);
        ASSERT_TRUE(d->first_abort);
        EXPECT_EQ(s.tasks[*d->first_abort].rank, 1u);
        // Slurm itself sees only the SIGKILLs.
        EXPECT_EQ(d->native_code, 137);
    }
}

TEST(PolicyTest, CollateralMarking)
{
    // rank 2 segfaults first; SIGTERM/SIGKILL at or after it are collateral,
    // a SIGTERM before it and a different signal after it are not.
    const StepOutcomes s = step({killed(0, SIGTERM).at(150), killed(1, SIGTERM).at(50), segv(2).at(100),
                                 killed(3, SIGKILL).at(100), killed(4, SIGBUS).at(300), ok(5).at(400)});
    const auto d = decide(s, {Policy::main_rank, 0, 1});
    ASSERT_TRUE(d);
    ASSERT_EQ(s.tasks[*d->first_failure].rank, 1u);  // the early SIGTERM is first
    // A first failure that is itself a tear-down kill marks nothing.
    for (std::size_t i = 0; i < s.tasks.size(); ++i)
        EXPECT_FALSE(is_collateral(s, *d, i)) << i;

    const StepOutcomes s2 = step({killed(0, SIGTERM).at(150), ok(1).at(50), segv(2).at(100),
                                  killed(3, SIGKILL).at(100), killed(4, SIGBUS).at(300), ok(5).at(400)});
    const auto d2 = decide(s2, {Policy::main_rank, 0, 1});
    ASSERT_TRUE(d2);
    const bool expected[] = {true, false, false, true, false, false};
    for (std::size_t i = 0; i < s2.tasks.size(); ++i)
        EXPECT_EQ(is_collateral(s2, *d2, i), expected[i]) << i;
}

TEST(PolicyTest, CollateralByNodeFlagOrByTheTeardownHeuristic)
{
    struct Row {
        const char* name;
        std::vector<TaskOutcome> tasks;
        std::vector<bool> collateral;  // per index
    };
    const Row rows[] = {
        {"a SIGSEGV first",
         {segv(0).at(100),
          flagged(exits(1, 1).at(50)),      // flagged: even though its clock says earlier
          killed(2, SIGTERM).at(100),       // heuristic: at the first failure's end
          killed(3, SIGKILL).at(150),       // heuristic: after it
          flagged(ok(4)),                   // succeeded: never
          aborts(5, 3).at(200),             // an abort is no tear-down kill
          flagged(aborts(6, 3).at(200)),    // unless its node says so
          killed(7, SIGBUS).at(300),        // another signal
          flagged(lost(8)),                 // lost: never
          exits(9, 2).at(300),              // an independent failure
          exits(10, 143).at(300),           // a shell whose command the teardown's SIGTERM ended
          exits(11, 137).at(100),           // ... or its SIGKILL, at the first failure's end
          exits(12, 143).at(50),            // before it: its own failure
          aborts(13, 143).at(300)},         // an abort's status is no shell's code
         {false, true, true, true, false, false, true, false, false, false, true, true, false, false}},
        {"PMIx clients that failed after the first failure",
         {segv(0).unfinalized().at(100),
          aborts(1, 14).unfinalized().at(150),  // its runtime heard of it on its own
          exits(2, 1).unfinalized().at(150),    // its own failure: only its node can say
          exits(3, 1).at(150),                  // no PMIx client: its failure is its own
          exits(4, 1).unfinalized().at(100),    // at the same moment: not after it
          ok(5).unfinalized().at(200)},         // succeeded: never
         {false, true, false, false, false, false}},
        {"a SIGKILL first: only the flag counts",
         {killed(0, SIGKILL).at(100), killed(1, SIGTERM).at(200), flagged(killed(2, SIGTERM).at(200))},
         {false, false, true}},
        {"every failure flagged: the earliest is the first failure, not collateral",
         {flagged(exits(0, 1).at(100)), flagged(killed(1, SIGTERM).at(200)), ok(2)},
         {false, true, false}},
        {"a lost first failure: only lost tasks failed",
         {lost(0), ok(1), flagged(lost(2))},
         {false, false, false}},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(row.name);
        const StepOutcomes s = step(row.tasks);
        const auto d = decide(s, {Policy::main_rank, 0, 1});
        ASSERT_TRUE(d);
        ASSERT_EQ(row.collateral.size(), s.tasks.size());
        for (std::size_t i = 0; i < s.tasks.size(); ++i)
            EXPECT_EQ(is_collateral(s, *d, i), row.collateral[i]) << "rank " << s.tasks[i].rank;
        EXPECT_FALSE(is_collateral(s, *d, s.tasks.size()));
    }
}

TEST(PolicyTest, AbortedTaskIsTheFirstFailureAndItsVictimsAreCollateral)
{
    const StepOutcomes s = step({killed(0, SIGKILL).at(200), aborts(1, 3).at(100), ok(2).at(50)});
    const auto d = decide(s, {Policy::main_rank, 0, 1});
    ASSERT_TRUE(d);
    EXPECT_EQ(s.tasks[*d->first_failure].rank, 1u);
    EXPECT_TRUE(is_collateral(s, *d, 0));
    EXPECT_FALSE(is_collateral(s, *d, 1));
}

TEST(PolicyTest, BadInputIsAnErrorNotACode)
{
    const auto none = decide(StepOutcomes{}, {});
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error(), "no task outcomes to decide on");

    const auto missing = decide(step({ok(0), ok(1)}), {Policy::main_rank, 5, 1});
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error(), "main rank 5 is not a task of this step (ranks 0-1)");
}

TEST(ParseTest, PolicyNamesAndAliases)
{
    const std::pair<const char*, Policy> names[] = {
        {"max", Policy::max},
        {"native", Policy::max},
        {"main-rank", Policy::main_rank},
        {"rank0", Policy::main_rank},
        {"all-success", Policy::all_success},
        {"require-all-success", Policy::all_success},
        {"main-rank-check", Policy::main_rank_check},
        {"check-all-nodes", Policy::main_rank_check},
        {"first-failure", Policy::first_failure},
        {"lowest-rank", Policy::lowest_rank},
        {"Main-Rank", Policy::main_rank},
        {"MAX", Policy::max},
    };
    for (const auto& [text, policy] : names) {
        const auto p = parse_policy(text);
        ASSERT_TRUE(p) << text;
        EXPECT_EQ(*p, policy) << text;
    }
    for (Policy p : all_policies)
        EXPECT_EQ(*parse_policy(policy_name(p)), p);
}

TEST(ParseTest, BadPolicyListsTheValidOnes)
{
    for (const char* bad : {"", "mainrank", "main_rank", "rank1", " max", "max "}) {
        const auto p = parse_policy(bad);
        ASSERT_FALSE(p) << bad;
        EXPECT_EQ(p.error(), "invalid exit policy '" + std::string(bad) +
                                 "': valid policies are max (native), main-rank (rank0), "
                                 "all-success (require-all-success), main-rank-check "
                                 "(check-all-nodes), first-failure, lowest-rank");
    }
}

TEST(ParseTest, Ranks)
{
    EXPECT_EQ(*parse_rank("0"), 0u);
    EXPECT_EQ(*parse_rank("17"), 17u);
    EXPECT_EQ(*parse_rank("4294967295"), 4294967295u);
    for (const char* bad : {"", "-1", "+1", "x", "3x", " 3", "4294967296", "1.5"}) {
        const auto r = parse_rank(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_EQ(r.error(), "invalid main rank '" + std::string(bad) +
                                 "': expected a task rank, a whole number from 0");
    }
}

TEST(ParseTest, ReportModes)
{
    EXPECT_EQ(*parse_report_mode("auto"), ReportMode::automatic);
    EXPECT_EQ(*parse_report_mode("always"), ReportMode::always);
    EXPECT_EQ(*parse_report_mode("NEVER"), ReportMode::never);
    const auto bad = parse_report_mode("sometimes");
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error(), "invalid exit report mode 'sometimes': valid modes are auto, always, never");
}

TEST(ReportModeTest, AutoReportsWhenSomethingFailedOrTheCodeDiffers)
{
    const auto all_ok = *decide(step({ok(0), ok(1)}), {Policy::main_rank, 0, 1});
    const auto failed = *decide(step({ok(0), exits(1, 1)}), {Policy::max, 0, 1});
    EXPECT_FALSE(should_report(ReportMode::automatic, true, all_ok));
    EXPECT_TRUE(should_report(ReportMode::automatic, true, failed));
    EXPECT_FALSE(should_report(ReportMode::automatic, false, failed));
    EXPECT_TRUE(should_report(ReportMode::always, false, all_ok));
    EXPECT_FALSE(should_report(ReportMode::never, true, failed));
}

TEST(OutcomeSetTest, KeepsOneOutcomePerRankAndEpoch)
{
    OutcomeSet set(3);
    EXPECT_EQ(set.missing(), 3u);
    EXPECT_EQ(set.record(exits(1, 4)), OutcomeSet::Recorded::added);
    EXPECT_EQ(set.record(exits(1, 9)), OutcomeSet::Recorded::duplicate);  // a retry
    EXPECT_EQ(set.record(exits(3, 0)), OutcomeSet::Recorded::out_of_range);
    EXPECT_EQ(set.record(ok(1).epoch(1)), OutcomeSet::Recorded::replaced);  // a restart
    EXPECT_EQ(set.record(exits(1, 9)), OutcomeSet::Recorded::stale);
    EXPECT_EQ(set.record(ok(0)), OutcomeSet::Recorded::added);
    EXPECT_EQ(set.missing(), 1u);
    EXPECT_FALSE(set.complete());

    const auto tasks = set.finish({0, 0, 1});
    ASSERT_EQ(tasks.size(), 3u);
    EXPECT_EQ(tasks[1].epoch, 1u);
    EXPECT_TRUE(succeeded(tasks[1]));
    EXPECT_TRUE(tasks[2].lost);
    EXPECT_EQ(tasks[2].rank, 2u);
    EXPECT_EQ(tasks[2].node, 1u);

    EXPECT_EQ(set.record(segv(2)), OutcomeSet::Recorded::added);
    EXPECT_TRUE(set.complete());
    EXPECT_FALSE(set.finish()[2].lost);
}

TEST(OutcomeSetTest, GivesBackExactlyWhatWasRecorded)
{
    // Every field, including what is kept beside the compact slots: an
    // abort's message and a pid beyond 32 bits.
    TaskOutcome a;
    a.rank = 0;
    a.epoch = 3;
    a.node = 7;
    a.pid = 4194303;
    a.wait_status = WaitStatus::signaled(9).raw();
    a.abort_status = -2;
    a.abort_message = "MPI_ABORT was invoked on rank 0";
    a.finalized = false;
    a.end_time_us = 1'790'000'000'123'456;
    a.collateral = true;
    TaskOutcome b;
    b.rank = 1;
    b.pid = std::int64_t{1} << 40;
    b.finalized = true;
    b.wait_status = WaitStatus::exited(3).raw();
    TaskOutcome c;
    c.rank = 2;
    c.pid = -1;
    c.lost = true;
    OutcomeSet set(4);
    for (const auto& t : {a, b, c})
        ASSERT_EQ(set.record(t), OutcomeSet::Recorded::added);
    const auto same = [](const TaskOutcome& x, const TaskOutcome& y) {
        return x.rank == y.rank && x.epoch == y.epoch && x.node == y.node && x.pid == y.pid && x.lost == y.lost &&
               x.wait_status == y.wait_status && x.abort_status == y.abort_status &&
               x.abort_message == y.abort_message && x.finalized == y.finalized && x.end_time_us == y.end_time_us &&
               x.collateral == y.collateral;
    };
    const auto tasks = set.finish({0, 0, 0, 5});
    ASSERT_EQ(tasks.size(), 4u);
    EXPECT_TRUE(same(tasks[0], a));
    EXPECT_TRUE(same(tasks[1], b));
    EXPECT_TRUE(same(tasks[2], c));
    EXPECT_TRUE(tasks[3].lost);
    EXPECT_EQ(tasks[3].node, 5u);
    ASSERT_TRUE(set.get(0));
    EXPECT_TRUE(same(*set.get(0), a));
    EXPECT_FALSE(set.get(3));
    EXPECT_FALSE(set.get(9));

    // A restart replaces all of it, the message and the wide pid too.
    TaskOutcome again;
    again.rank = 0;
    again.epoch = 4;
    again.pid = 12;
    ASSERT_EQ(set.record(again), OutcomeSet::Recorded::replaced);
    EXPECT_TRUE(same(*set.get(0), again));
}

}  // namespace
}  // namespace exitpolicy
