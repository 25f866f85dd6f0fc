// SPDX-License-Identifier: Apache-2.0
// node_failures_test.cpp - a node's judgement of its own tasks' ends
// (exitpolicy/node_failures.hpp), one row per case the integration tests
// and real runtimes taught: what the node knew before (failures, aborts),
// then one local end, and whether that end is collateral.
#include "exitpolicy/node_failures.hpp"
#include "exitpolicy/policy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace exitpolicy {
namespace {

constexpr std::int64_t ms = 1000;
constexpr std::int64_t t0 = 1'000'000'000;  // any moment on the node's clock

struct Fact {
    enum class Kind { known, abort } kind;
    std::uint32_t rank;
    std::int64_t at_us;
    bool by_itself = false;              // known: an end of its own
    bool application = false;            // abort: the application's own MPI_Abort
    std::set<std::uint32_t> running{};   // abort: the local tasks running then
};

Fact known(std::uint32_t rank, std::int64_t at_us, bool by_itself)
{
    return {Fact::Kind::known, rank, at_us, by_itself};
}

Fact aborted(std::uint32_t rank, std::int64_t at_us, bool application, std::set<std::uint32_t> running = {})
{
    return {Fact::Kind::abort, rank, at_us, false, application, std::move(running)};
}

struct Row {
    std::string name;
    std::vector<Fact> before;
    NodeFailures::End end;
    bool collateral;
};

// gtest names a row by its name, not its bytes.
void PrintTo(const Row& row, std::ostream* os)
{
    *os << row.name;
}

NodeFailures::End client_end(std::uint32_t rank, std::int64_t when_us, bool by_itself)
{
    NodeFailures::End e;
    e.rank = rank;
    e.when_us = when_us;
    e.by_itself = by_itself;
    e.client = true;
    return e;
}

NodeFailures::End with(NodeFailures::End e, bool client, bool torn_down, bool aborted)
{
    e.client = client;
    e.torn_down = torn_down;
    e.aborted = aborted;
    return e;
}

const std::vector<Row>& rows()
{
    static const std::vector<Row> table = {
        {"NothingKnownAClientsEndIsItsOwn", {}, client_end(1, t0, true), false},
        {"TheFirstFailureIsItsOwn", {known(1, t0, true)}, client_end(1, t0, true), false},
        {"AClientKilledAfterTheFirstFailureIsCollateral", {known(5, t0, true)}, client_end(2, t0 + 100 * ms, false),
         true},
        {"AnEndBeforeTheFirstFailureIsItsOwn", {known(5, t0, true)}, client_end(2, t0 - 50 * ms, false), false},
        {"OnlyTheFirstFailureCounts", {known(5, t0, true), known(6, t0 + 300 * ms, false)},
         client_end(2, t0 + 100 * ms, false), true},
        // It never used PMIx: nobody told it of anything.
        {"ATaskThatNeverConnectedHeardOfNothing", {known(5, t0, true)},
         with(client_end(2, t0 + 100 * ms, false), false, false, false), false},
        {"OurTeardownsSignalIsCollateralEvenForANonClient", {known(5, t0, true)},
         with(client_end(2, t0 + 100 * ms, false), false, true, false), true},
        // Its abort was the first failure; the teardown that abort started
        // still found it running.
        {"ATornDownTaskThatAbortedFirstFailedByItself", {aborted(3, t0, true, {3, 4})},
         with(client_end(3, t0, false), true, true, true), false},
        // An abort after the first failure, then torn down: collateral by
        // its abort's moment, not by the teardown.
        {"ATornDownTaskThatAbortedLaterIsJudgedByItsAbort", {known(5, t0, true)},
         with(client_end(3, t0 + 20 * ms, false), true, true, true), true},
        {"ATornDownTaskThatAbortedEarlierIsItsOwn", {known(5, t0, true)},
         with(client_end(3, t0 - 20 * ms, false), true, true, true), false},
        // Open MPI's MPI_Abort calls PMIx_Abort twice (its peers, then
        // everyone): the first call is the failure's moment.
        {"OpenMpisSecondAbortDoesNotMoveTheMoment", {aborted(2, t0, true, {2, 4}), aborted(2, t0 + 200 * ms, true, {2})},
         client_end(4, t0 + 100 * ms, false), true},
        // Open MPI 5 aborts as soon as a dead peer's socket closes, before
        // that peer's end is on record: an own end within the window is
        // what the abort reacted to.
        {"AnOwnEndWithinTheReactionWindowOfAnAbortIsItsOwn", {aborted(3, t0, false)},
         client_end(4, t0 + 100 * ms, true), false},
        {"AnOwnEndPastTheReactionWindowIsCollateral", {aborted(3, t0, false)},
         client_end(4, t0 + reaction_window_us + 1, true), true},
        {"AnOwnEndAtTheWindowsEdgeIsItsOwn", {aborted(3, t0, false)}, client_end(4, t0 + reaction_window_us, true),
         false},
        {"NoWindowWhenTheFirstFailureWasAnOwnEnd", {known(3, t0, true)}, client_end(4, t0 + 100 * ms, true), true},
        {"AKillAfterAnAbortGetsNoWindow", {aborted(3, t0, false)}, client_end(4, t0 + 100 * ms, false), true},
        // MPICH 4.2's abort returns: a node-mate running at that moment can
        // fail over the aborting rank a few milliseconds later, inside the
        // window; the application cannot have reacted to it.
        {"MpichsNodeMateRunningAtTheApplicationsAbortIsCollateral", {aborted(3, t0, true, {3, 4, 5})},
         client_end(4, t0 + 5 * ms, true), true},
        // The aborting rank itself ends later (MPICH 4.2's abort returns,
        // and the task exits after it): its end is the first failure's own.
        {"TheAbortingTasksOwnLaterEndIsItsOwn", {aborted(3, t0, true, {3, 4})}, client_end(3, t0 + 50 * ms, false),
         false},
        {"ANodeMateThatHadEndedAtTheAbortKeepsTheWindow", {aborted(3, t0, true, {3, 5})},
         client_end(4, t0 + 5 * ms, true), false},
        // An abort that answers an event (Open MPI's default handler) is no
        // application's own: the running tasks are not recorded.
        {"AnAbortAnsweringAnEventRecordsNoRunningTasks", {aborted(3, t0, false, {3, 4})},
         client_end(4, t0 + 5 * ms, true), false},
        // A lost node's ranks are failures of their own: nothing a
        // survivor here did afterwards is what they reacted to.
        {"AfterALostNodeASurvivorsEndIsCollateral", {known(7, t0, true)}, client_end(4, t0 + 100 * ms, true), true},
        // A failure on another node heard by an event: the same rules.
        {"APeersAbortElsewhereGivesAnOwnEndTheWindow", {known(7, t0, false)}, client_end(4, t0 + 100 * ms, true),
         false},
    };
    return table;
}

class NodeFailuresTable : public ::testing::TestWithParam<Row> {};

TEST_P(NodeFailuresTable, JudgesTheEnd)
{
    const Row& row = GetParam();
    NodeFailures failures;
    for (const Fact& f : row.before) {
        if (f.kind == Fact::Kind::known)
            failures.known(f.rank, f.at_us, f.by_itself);
        else
            failures.abort_called(f.rank, f.at_us, f.application, [&] { return f.running; });
    }
    EXPECT_EQ(failures.collateral(row.end), row.collateral);
}

INSTANTIATE_TEST_SUITE_P(Cases, NodeFailuresTable, ::testing::ValuesIn(rows()),
                         [](const auto& row_info) { return row_info.param.name; });

TEST(NodeFailures, TheRunningTasksAreAskedForOnlyAtTheFirstApplicationAbort)
{
    int asked = 0;
    const auto running = [&] {
        ++asked;
        return std::set<std::uint32_t>{1, 2, 3};
    };
    NodeFailures answered;
    answered.abort_called(1, t0, false, running);
    EXPECT_EQ(asked, 0);
    NodeFailures later;
    later.known(5, t0, true);
    later.abort_called(1, t0 + ms, true, running);
    EXPECT_EQ(asked, 0);
    NodeFailures first;
    first.abort_called(1, t0, true, running);
    EXPECT_EQ(asked, 1);
    ASSERT_TRUE(first.first());
    EXPECT_EQ(first.first()->rank, 1u);
    EXPECT_FALSE(first.first()->by_itself);
    EXPECT_EQ(first.first()->running_at_abort, (std::set<std::uint32_t>{2, 3}));  // not the aborting rank
}

}  // namespace
}  // namespace exitpolicy
