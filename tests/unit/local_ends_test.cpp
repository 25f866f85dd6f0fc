// SPDX-License-Identifier: Apache-2.0
// local_ends_test.cpp - what the node daemon gathers of its tasks' ends:
// the flags each outcome gets, and the facts it hands the core's judgement
// (whose rules are node_failures_test.cpp's table).
#include "local_ends.hpp"

#include "protocol/process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <sys/wait.h>
#include <thread>

namespace exitpolicy::pmix_server {
namespace {

const LocalEnds::Running none = [] { return std::set<std::uint32_t>{}; };

protocol::Outcome ended(std::uint32_t rank, int wait_status)
{
    protocol::Outcome o;
    o.rank = rank;
    o.wait_status = wait_status;
    o.end_time_us = protocol::process::realtime_us();
    return o;
}

TEST(LocalEndsTest, TheFirstAbortCallIsTheFailuresMomentAndGivesTheOutcomeItsStatus)
{
    LocalEnds ends;
    const std::int64_t first = ends.abort_called(3, 7, "MPI_Abort: application called abort", none);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(ends.abort_called(3, 9, "the second call, after the teardown of the peers", none), first);
    protocol::Outcome o = ended(3, SIGKILL);
    ends.describe(o);
    EXPECT_TRUE(o.flags & protocol::Outcome::flag_aborted);
    EXPECT_EQ(o.abort_status, 7);
    EXPECT_EQ(o.end_time_us, first) << "the end is the abort's moment, not the kill's";
    EXPECT_FALSE(o.flags & protocol::Outcome::flag_finalized_known) << "never a client";
    EXPECT_FALSE(ends.judge(o, true).by_itself) << "an abort is never an end of its own";
}

TEST(LocalEndsTest, AClientsOutcomeSaysWhetherItFinalized)
{
    LocalEnds ends;
    ends.connected(1);
    ends.connected(2);
    ends.finalized(1);
    protocol::Outcome done = ended(1, 0), gone = ended(2, W_EXITCODE(1, 0)), other = ended(4, 0);
    ends.describe(done);
    ends.describe(gone);
    ends.describe(other);
    EXPECT_EQ(done.flags & (protocol::Outcome::flag_finalized_known | protocol::Outcome::flag_finalized),
              protocol::Outcome::flag_finalized_known | protocol::Outcome::flag_finalized);
    EXPECT_EQ(gone.flags & (protocol::Outcome::flag_finalized_known | protocol::Outcome::flag_finalized),
              protocol::Outcome::flag_finalized_known);
    EXPECT_EQ(other.flags, 0u);
}

TEST(LocalEndsTest, TheJudgementGetsWhoWasAClientAndWhomTheTeardownSignalled)
{
    LocalEnds ends;
    ends.failure_known(9, true);  // another node's task failed first
    ends.connected(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // A client our teardown ended: collateral.
    const auto torn = ends.judge(ended(1, SIGTERM), true);
    EXPECT_FALSE(torn.by_itself);
    EXPECT_TRUE(torn.collateral);
    // A task that never connected heard of nothing: its failure is its own.
    const auto deaf = ends.judge(ended(2, W_EXITCODE(1, 0)), false);
    EXPECT_TRUE(deaf.by_itself);
    EXPECT_FALSE(deaf.collateral);
}

}  // namespace
}  // namespace exitpolicy::pmix_server
