// SPDX-License-Identifier: Apache-2.0
// outcome_collector_test.cpp - what the front end collects, alone: real
// outcome frames as the wire carries them, recorded as the FE thread
// records them, and what srun's main thread then waits for and takes.
#include "spank_plugin/outcome_collector.hpp"

#include "protocol/wire.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;

protocol::Outcome outcome(std::uint32_t rank, int wait_status, std::uint32_t epoch = 0)
{
    protocol::Outcome o;
    o.rank = rank;
    o.epoch = epoch;
    o.pid = 100 + rank;
    o.wait_status = wait_status;
    o.end_time_us = 1000 + rank;
    return o;
}

// The outcome as a link of node `from` delivers it: the body of its frame.
Result<OutcomeCollector::Recorded> deliver(OutcomeCollector& c, std::uint32_t from, const protocol::Outcome& o)
{
    const protocol::Bytes frame = o.encode();
    const auto header =
        protocol::decode_header(std::span<const std::uint8_t, protocol::header_size>(frame.data(), protocol::header_size));
    EXPECT_TRUE(header && header->type == protocol::Type::outcome);
    return c.record(from, std::span<const std::uint8_t>(frame).subspan(protocol::header_size));
}

OutcomeSet::Recorded recorded(OutcomeCollector& c, std::uint32_t from, const protocol::Outcome& o)
{
    auto r = deliver(c, from, o);
    EXPECT_TRUE(r) << r.error();
    return r ? r->recorded : OutcomeSet::Recorded::out_of_range;
}

TEST(OutcomeCollectorTest, ARetryIsADuplicateAHigherEpochReplacesALowerOneIsStale)
{
    OutcomeCollector c(2, 1);
    c.node_ready(0, "node1", {0, 1});
    EXPECT_EQ(recorded(c, 0, outcome(0, 3 << 8, 1)), OutcomeSet::Recorded::added);
    EXPECT_EQ(recorded(c, 0, outcome(0, 3 << 8, 1)), OutcomeSet::Recorded::duplicate);
    EXPECT_EQ(recorded(c, 0, outcome(0, SIGSEGV, 2)), OutcomeSet::Recorded::replaced);
    EXPECT_EQ(recorded(c, 0, outcome(0, 0, 0)), OutcomeSet::Recorded::stale);
    EXPECT_FALSE(c.complete());
    EXPECT_EQ(recorded(c, 0, outcome(1, 0)), OutcomeSet::Recorded::added);
    EXPECT_TRUE(c.complete());

    const Collected got = c.collected();
    EXPECT_EQ(got.missing, 0u);
    ASSERT_EQ(got.step.tasks.size(), 2u);
    EXPECT_EQ(got.step.tasks[0].epoch, 2u);  // the restarted task's end stands
    EXPECT_EQ(got.step.tasks[0].wait_status, SIGSEGV);
    EXPECT_EQ(got.step.tasks[0].pid, 100);
    EXPECT_EQ(got.step.tasks[0].end_time_us, 1000);
    EXPECT_TRUE(got.problems.empty());
}

TEST(OutcomeCollectorTest, ARankOutsideTheStepIsAProblemAndCountsForNothing)
{
    OutcomeCollector c(2, 2);
    c.node_ready(1, "node2", {1});
    auto r = deliver(c, 1, outcome(7, 0));
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->recorded, OutcomeSet::Recorded::out_of_range);
    const Collected got = c.collected();
    EXPECT_EQ(got.missing, 2u);
    ASSERT_EQ(got.problems.size(), 1u);
    EXPECT_EQ(got.problems[0], "node 1 reported rank 7, which is not a task of this step");
}

TEST(OutcomeCollectorTest, AFrameThatDoesNotDecodeFailsAndRecordsNothing)
{
    OutcomeCollector c(1, 1);
    const protocol::Bytes frame = outcome(0, 0).encode();
    const std::span<const std::uint8_t> body = std::span<const std::uint8_t>(frame).subspan(protocol::header_size);
    const auto r = c.record(0, body.first(body.size() - 1));
    ASSERT_FALSE(r);
    EXPECT_FALSE(r.error().empty());
    EXPECT_EQ(c.collected().missing, 1u);
}

TEST(OutcomeCollectorTest, AnOutcomeIsPlacedOnItsRanksNodeNotTheSenders)
{
    OutcomeCollector c(3, 2);
    c.node_ready(0, "node1", {0, 1});
    c.node_ready(1, "node2", {});  // rank 2's node never said
    // Relayed up the tree: node2's link brings node1's rank 1.
    auto relayed = deliver(c, 1, outcome(1, 0));
    ASSERT_TRUE(relayed);
    EXPECT_EQ(relayed->task.node, 0u);
    auto unknown = deliver(c, 1, outcome(2, 0));
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->task.node, 1u);  // the sender's own, as far as anyone knows
    EXPECT_EQ(unknown->frame.pid, 102);

    const Collected got = c.collected();
    ASSERT_EQ(got.step.nodes.size(), 3u);  // node1, node2, and "?" for ranks of no known node
    EXPECT_EQ(got.step.nodes[1], "node2");
    EXPECT_EQ(got.step.tasks[1].node, 0u);
    EXPECT_TRUE(got.step.tasks[0].lost);
    EXPECT_EQ(got.step.tasks[0].node, 0u);
    EXPECT_EQ(c.where(1), "rank 1 on node1");
    EXPECT_EQ(c.where(9), "rank 9 on ?");
    EXPECT_EQ(c.unreported(0), std::vector<std::uint32_t>{0});
    EXPECT_TRUE(c.unreported(1).empty());
}

TEST(OutcomeCollectorTest, TheOutcomeFlagsReachTheTask)
{
    OutcomeCollector c(2, 1);
    protocol::Outcome aborted = outcome(0, SIGKILL);
    aborted.flags = protocol::Outcome::flag_aborted | protocol::Outcome::flag_finalized_known | protocol::Outcome::flag_collateral;
    aborted.abort_status = 5;
    protocol::Outcome finalized = outcome(1, 0);
    finalized.flags = protocol::Outcome::flag_finalized_known | protocol::Outcome::flag_finalized;
    ASSERT_TRUE(deliver(c, 0, aborted));
    ASSERT_TRUE(deliver(c, 0, finalized));
    // The OOM killer's: kept through the set's compact slots.
    OutcomeCollector oom(1, 1);
    protocol::Outcome killed = outcome(0, SIGKILL);
    killed.flags = protocol::Outcome::flag_oom_killed;
    ASSERT_TRUE(deliver(oom, 0, killed));
    EXPECT_TRUE(oom.collected().step.tasks[0].oom_killed);
    EXPECT_FALSE(c.collected().step.tasks[0].oom_killed);
    const Collected got = c.collected();
    EXPECT_EQ(got.step.tasks[0].abort_status, 5);
    EXPECT_EQ(got.step.tasks[0].finalized, false);
    EXPECT_TRUE(got.step.tasks[0].collateral);
    EXPECT_FALSE(got.step.tasks[1].abort_status);
    EXPECT_EQ(got.step.tasks[1].finalized, true);
    EXPECT_FALSE(got.step.tasks[1].collateral);
}

TEST(OutcomeCollectorTest, DoneOnceEveryOutcomeCameOrEveryNodeCameAndWent)
{
    OutcomeCollector all(2, 2);
    EXPECT_FALSE(all.done());  // nobody came yet
    all.node_ready(0, "node1", {0});
    all.node_ready(1, "node2", {1});
    recorded(all, 0, outcome(0, 0));
    EXPECT_FALSE(all.done());  // links open, rank 1 to come
    recorded(all, 1, outcome(1, 0));
    EXPECT_TRUE(all.done());  // complete, links still open

    OutcomeCollector gone(2, 2);
    gone.node_ready(0, "node1", {0});
    gone.node_ready(1, "node2", {1});
    gone.link_closed();
    EXPECT_FALSE(gone.done());  // one link still open
    gone.link_closed();
    EXPECT_TRUE(gone.done());  // every node came and went: nothing more will come

    OutcomeCollector absent(2, 2);
    absent.node_ready(0, "node1", {0});
    absent.link_closed();
    EXPECT_FALSE(absent.done());  // node2 never came
    EXPECT_EQ(absent.collected().nodes_reporting, 1u);
    EXPECT_EQ(absent.collected().nnodes, 2u);
}

TEST(OutcomeCollectorTest, TheDaemonsAbortsAreMergedIntoWhatIsHandedOver)
{
    OutcomeCollector c(3, 1);
    c.node_ready(0, "node1", {0, 1, 2});
    EXPECT_TRUE(c.record_abort(0, 7, "MPI_Abort: rank 0"));
    EXPECT_FALSE(c.record_abort(0, 9, "again"));  // the rank's first stands
    EXPECT_FALSE(c.record_abort(1, 4, ""));
    EXPECT_FALSE(c.record_abort(2, 3, "never reported"));
    // Rank 0's end came by the direct path, which knows nothing of aborts;
    // rank 1's node knew (its own status stands); rank 2 is lost.
    recorded(c, 0, outcome(0, SIGKILL));
    protocol::Outcome own = outcome(1, SIGKILL);
    own.flags = protocol::Outcome::flag_aborted;
    own.abort_status = 6;
    recorded(c, 0, own);

    const Collected got = c.collected();
    ASSERT_EQ(got.step.tasks.size(), 3u);
    EXPECT_EQ(got.step.tasks[0].abort_status, 7);
    EXPECT_EQ(got.step.tasks[0].abort_message, "MPI_Abort: rank 0");
    EXPECT_EQ(got.step.tasks[1].abort_status, 6);
    EXPECT_EQ(got.step.tasks[1].abort_message, "");
    EXPECT_TRUE(got.step.tasks[2].lost);
    EXPECT_EQ(got.step.tasks[2].abort_status, 3);
    EXPECT_EQ(got.step.tasks[2].abort_message, "never reported");
}

TEST(OutcomeCollectorTest, ProblemsAreKeptUpToTwenty)
{
    OutcomeCollector c(1, 1);
    for (int i = 0; i < 25; ++i)
        c.problem("problem " + std::to_string(i));
    const Collected got = c.collected();
    ASSERT_EQ(got.problems.size(), 20u);
    EXPECT_EQ(got.problems.back(), "problem 19");
}

TEST(OutcomeCollectorTest, TheWaitEndsWithTheLastOutcomeAndIsBoundedByTheGrace)
{
    OutcomeCollector c(2, 1);
    c.node_ready(0, "node1", {0, 1});
    recorded(c, 0, outcome(0, 0));
    auto t0 = std::chrono::steady_clock::now();
    c.wait(100ms);  // rank 1 never comes
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);

    // The FE thread records it while srun's main thread waits.
    t0 = std::chrono::steady_clock::now();
    std::thread fe([&] {
        std::this_thread::sleep_for(50ms);
        recorded(c, 0, outcome(1, 0));
    });
    c.wait(20s);
    fe.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_TRUE(c.complete());
}

TEST(OutcomeCollectorTest, OnceTheDaemonsHaveTheMapEveryLinkClosedStillWaitsAMoment)
{
    // Every link closed with rank 1 missing: without node daemons nothing
    // more can come; with them, one may be bringing it up the tree.
    for (const bool mapped : {false, true}) {
        OutcomeCollector c(2, 1);
        c.node_ready(0, "node1", {0, 1});
        recorded(c, 0, outcome(0, 0));
        c.link_closed();
        if (mapped)
            c.step_map_sent();
        const auto t0 = std::chrono::steady_clock::now();
        c.wait(20s);
        const auto waited = std::chrono::steady_clock::now() - t0;
        if (mapped) {
            EXPECT_GE(waited, 400ms);
            EXPECT_LT(waited, 10s);
        } else {
            EXPECT_LT(waited, 400ms);
        }
    }
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
