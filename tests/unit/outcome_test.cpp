// SPDX-License-Identifier: Apache-2.0
// outcome_test.cpp - wait-status decoding and per-task facts.
#include "builders.hpp"
#include "exitpolicy/outcome.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>

namespace exitpolicy {
namespace {

using namespace test;

struct DecodeCase {
    int raw;
    WaitStatus::Kind kind;
    int exit_code;
    int signal;
    bool core;
};

TEST(WaitStatusTest, DecodesRawStatusesAsSlurmHandsThem)
{
    // S_TASK_EXIT_STATUS values measured on Slurm 22.05: 0, 768 = exit 3,
    // 11 = SIGSEGV; 139 = SIGSEGV with a core dump.
    const DecodeCase cases[] = {
        {0, WaitStatus::Kind::exited, 0, 0, false},
        {768, WaitStatus::Kind::exited, 3, 0, false},
        {255 << 8, WaitStatus::Kind::exited, 255, 0, false},
        {11, WaitStatus::Kind::signaled, 0, 11, false},
        {139, WaitStatus::Kind::signaled, 0, 11, true},
        {9, WaitStatus::Kind::signaled, 0, 9, false},
        {15, WaitStatus::Kind::signaled, 0, 15, false},
        {0x137f, WaitStatus::Kind::other, 0x137f, 0, false},  // stopped by SIGSTOP
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.raw);
        const WaitStatus s = WaitStatus::decode(c.raw);
        EXPECT_EQ(s.kind, c.kind);
        EXPECT_EQ(s.exit_code, c.exit_code);
        EXPECT_EQ(s.signal, c.signal);
        EXPECT_EQ(s.core_dumped, c.core);
    }
}

TEST(WaitStatusTest, RawIsTheInverseOfDecode)
{
    for (int raw : {0, 256, 768, 65280, 1, 9, 11, 15, 139, 134})
        EXPECT_EQ(WaitStatus::decode(raw).raw(), raw) << raw;
    EXPECT_EQ(WaitStatus::exited(3).raw(), 768);
    EXPECT_EQ(WaitStatus::signaled(SIGSEGV, true).raw(), 139);
}

TEST(TaskOutcomeTest, CodeOfEachKindOfEnd)
{
    EXPECT_EQ(task_code(ok(0), 1), 0);
    EXPECT_EQ(task_code(exits(0, 124), 1), 124);
    EXPECT_EQ(task_code(segv(0), 1), 139);
    EXPECT_EQ(task_code(killed(0, SIGKILL), 1), 137);
    EXPECT_EQ(task_code(killed(0, SIGTERM), 1), 143);
    EXPECT_EQ(task_code(aborts(0, 7), 1), 7);  // the abort wins over its SIGKILL
    EXPECT_EQ(task_code(aborts(0, 0), 1), 0);
    EXPECT_EQ(task_code(lost(0), 1), 1);
    EXPECT_EQ(task_code(lost(0), 75), 75);
}

TEST(TaskOutcomeTest, WaitCodeIgnoresTheAbort)
{
    EXPECT_EQ(wait_code(ok(0), 1), 0);
    EXPECT_EQ(wait_code(exits(0, 124), 1), 124);
    EXPECT_EQ(wait_code(segv(0), 1), 139);
    EXPECT_EQ(wait_code(aborts(0, 7), 1), 137);  // the SIGKILL that followed the abort
    EXPECT_EQ(wait_code(lost(0), 75), 75);
    TaskOutcome stopped = ok(0);
    stopped.wait_status = 0x137f;
    EXPECT_EQ(wait_code(stopped, 75), 75);
    EXPECT_EQ(task_code(stopped, 75), 75);
}

TEST(TaskOutcomeTest, CollateralIsUnsetUnlessTheNodeSaysSo)
{
    EXPECT_FALSE(TaskOutcome{}.collateral);
    EXPECT_FALSE(static_cast<TaskOutcome>(killed(0, SIGTERM)).collateral);
}

TEST(TaskOutcomeTest, OnlyAnExitWithZeroAndNoAbortSucceeds)
{
    EXPECT_TRUE(succeeded(ok(0)));
    EXPECT_TRUE(succeeded(ok(0).unfinalized()));
    EXPECT_FALSE(succeeded(exits(0, 1)));
    EXPECT_FALSE(succeeded(segv(0)));
    EXPECT_FALSE(succeeded(aborts(0, 0)));
    EXPECT_FALSE(succeeded(lost(0)));
}

TEST(TaskOutcomeTest, TeardownKillsAreSigtermAndSigkillOnly)
{
    EXPECT_TRUE(killed_by_teardown(killed(0, SIGTERM)));
    EXPECT_TRUE(killed_by_teardown(killed(0, SIGKILL)));
    EXPECT_FALSE(killed_by_teardown(segv(0)));
    EXPECT_FALSE(killed_by_teardown(aborts(0, 3)));
    EXPECT_FALSE(killed_by_teardown(exits(0, 143)));
    EXPECT_FALSE(killed_by_teardown(lost(0)));
}

TEST(TaskOutcomeTest, AnEndByItselfIsAnExitOrASignalOfItsOwn)
{
    EXPECT_TRUE(ended_by_itself(segv(0)));
    EXPECT_TRUE(ended_by_itself(exits(0, 3)));
    EXPECT_TRUE(ended_by_itself(exits(0, 0)));
    EXPECT_TRUE(ended_by_itself(exits(0, 143)));  // an exit, whatever its code
    EXPECT_FALSE(ended_by_itself(aborts(0, 3)));
    EXPECT_FALSE(ended_by_itself(killed(0, SIGTERM)));
    EXPECT_FALSE(ended_by_itself(killed(0, SIGKILL)));
    EXPECT_FALSE(ended_by_itself(lost(0)));
}

TEST(TaskOutcomeTest, Describe)
{
    EXPECT_EQ(describe(ok(0), 1), "exited with code 0");
    EXPECT_EQ(describe(exits(0, 3), 1), "exited with code 3");
    EXPECT_EQ(describe(ok(0).unfinalized(), 1), "exited with code 0 without finalizing");
    EXPECT_EQ(describe(segv(0), 1), "killed by SIGSEGV (core dumped)");
    EXPECT_EQ(describe(killed(0, SIGKILL), 1), "killed by SIGKILL");
    EXPECT_EQ(describe(killed(0, SIGKILL).oom(), 1), "killed by the OOM killer (SIGKILL)");
    EXPECT_EQ(describe(exits(0, 137).oom(), 1), "exited with code 137 after the OOM killer ended a process of it");
    EXPECT_EQ(task_code(killed(0, SIGKILL).oom(), 1), 137);
    // With the limit of its cgroups, where its node knew one.
    EXPECT_EQ(describe(killed(0, SIGKILL).oom(50 << 20), 1), "killed by the OOM killer (SIGKILL), memory limit 50M");
    EXPECT_EQ(describe(exits(0, 137).oom(std::uint64_t{3} << 30), 1),
              "exited with code 137 after the OOM killer ended a process of it, memory limit 3G");
    EXPECT_EQ(memory_size(1536 << 10), "1536K");
    EXPECT_EQ(memory_size(1000), "1000B");
    EXPECT_EQ(memory_size(std::uint64_t{2} << 40), "2T");
    EXPECT_FALSE(killed_by_teardown(killed(0, SIGKILL).oom()));
    EXPECT_TRUE(ended_by_itself(killed(0, SIGKILL).oom()));
    EXPECT_EQ(describe(killed(0, 40), 1), "killed by signal 40");
    EXPECT_EQ(describe(aborts(0, 7), 1), "aborted with status 7");
    // Open MPI's default handler aborts with the status of the event it heard.
    EXPECT_EQ(describe(aborts(0, -402), 1),
              "aborted with status -402 (PMIX_ERR_PROC_ABORTED_BY_SIG: on hearing of another task's end)");
    EXPECT_EQ(describe(aborts(0, -200), 1),
              "aborted with status -200 (PMIX_ERR_PROC_TERM_WO_SYNC: on hearing of another task's end)");
    EXPECT_EQ(describe(lost(0), 5), "lost (no outcome reported; counted as code 5)");
}

TEST(TaskOutcomeTest, SignalNames)
{
    EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
    EXPECT_EQ(signal_name(SIGBUS), "SIGBUS");
    EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
    EXPECT_EQ(signal_name(SIGXCPU), "SIGXCPU");
    EXPECT_EQ(signal_name(0), "signal 0");
    EXPECT_EQ(signal_name(64), "signal 64");
}

}  // namespace
}  // namespace exitpolicy
