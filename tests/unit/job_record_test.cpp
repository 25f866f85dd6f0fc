// SPDX-License-Identifier: Apache-2.0
// job_record_test.cpp - the verdict in the job's accounting record
// (spank_plugin/job_record.hpp): its comment, and how srun runs sacct and
// sacctmgr. The real ones, against a real slurmdbd, are
// tests/integration/test_accounting.py's; here the directory srun takes
// them from holds scripts that say what they were asked.
#include "spank_plugin/job_record.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(VerdictCommentTest, IsOneLineWithoutQuotes)
{
    EXPECT_EQ(verdict_comment("main-rank", 0, "main rank 0 on node1 exited with code 0"),
              "exitpolicy main-rank 0: main rank 0 on node1 exited with code 0");
    const std::string odd = verdict_comment("max", 1, "a 'quoted'\n\"word\"\tand `more`\\");
    EXPECT_EQ(odd, "exitpolicy max 1: a quoted word and more");
    const std::string longer = verdict_comment("max", 1, std::string(1000, 'x'));
    EXPECT_EQ(longer.size(), comment_limit);
    EXPECT_EQ(longer.substr(longer.size() - 3), "...");
}

TEST(VerdictCommentTest, KeepsTheJobsOwnCommentAndReplacesAnEarlierVerdict)
{
    EXPECT_EQ(merged_comment("", "exitpolicy max 1: x"), "exitpolicy max 1: x");
    EXPECT_EQ(merged_comment("run 42", "exitpolicy max 1: x"), "run 42; exitpolicy max 1: x");
    EXPECT_EQ(merged_comment("exitpolicy max 3: y", "exitpolicy max 1: x"), "exitpolicy max 1: x");
    EXPECT_EQ(merged_comment("run 42; exitpolicy max 3: y", "exitpolicy max 1: x"), "run 42; exitpolicy max 1: x");
    // Only a verdict of ours is replaced.
    EXPECT_EQ(merged_comment("the exitpolicy word", "exitpolicy max 1: x"), "the exitpolicy word; exitpolicy max 1: x");
}

TEST(RunProgramTest, GivesItsOutputAndStatus)
{
    auto run = run_program({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, Clock::now() + 10s);
    ASSERT_TRUE(run) << run.error();
    EXPECT_EQ(run->output, "out\nerr\n");
    ASSERT_TRUE(WIFEXITED(run->status));
    EXPECT_EQ(WEXITSTATUS(run->status), 3);
}

TEST(RunProgramTest, AProgramThatOutlivesItsDeadlineIsEndedAndReaped)
{
    const auto t0 = Clock::now();
    auto run = run_program({"/bin/sleep", "30"}, t0 + 300ms);
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().find("did not end in time"), std::string::npos) << run.error();
    EXPECT_LT(Clock::now() - t0, 20s);
    // No child of ours is left, not even a zombie.
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
    // One that closes its output and goes on, too.
    run = run_program({"/bin/sh", "-c", "exec >/dev/null 2>&1; sleep 30"}, Clock::now() + 300ms);
    ASSERT_FALSE(run);
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

TEST(RunProgramTest, AMissingProgramIsAnError)
{
    auto run = run_program({"/nonexistent/sacct"}, Clock::now() + 10s);
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().find("/nonexistent/sacct"), std::string::npos) << run.error();
}

TEST(RunProgramTest, TakesNoneOfSrunsDescriptors)
{
    const int fd = ::open("/dev/null", O_RDONLY);  // not close-on-exec
    ASSERT_GE(fd, 3);
    auto run = run_program({"/bin/sh", "-c", "ls /proc/self/fd"}, Clock::now() + 10s);
    ::close(fd);
    ASSERT_TRUE(run) << run.error();
    EXPECT_EQ(run->output.find("\n" + std::to_string(fd) + "\n"), std::string::npos) << run->output;
}

// A bin directory whose sacct answers END|COMMENT (END "Unknown" for its
// first `unknown_for` calls) and whose sacctmgr logs its arguments.
struct FakeBin {
    std::filesystem::path dir;
    explicit FakeBin(const std::string& end, const std::string& comment, int unknown_for = 0,
                     const std::string& sacctmgr_out = " Modified jobs...")
    {
        char tmpl[] = "/tmp/exitpolicy-job-record-XXXXXX";
        dir = ::mkdtemp(tmpl);
        write("sacct", "#!/bin/sh\nn=$(cat " + (dir / "calls").string() + " 2>/dev/null || echo 0)\n"
                       "echo $((n + 1)) > " + (dir / "calls").string() + "\n"
                       "if [ \"$n\" -lt " + std::to_string(unknown_for) + " ]; then echo 'Unknown|" + comment +
                       "'; else echo '" + end + "|" + comment + "'; fi\n");
        write("sacctmgr", "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > " + (dir / "args").string() +
                          "\necho '" + sacctmgr_out + "'\n");
    }
    ~FakeBin() { std::filesystem::remove_all(dir); }
    void write(const std::string& name, const std::string& text)
    {
        std::ofstream(dir / name) << text;
        std::filesystem::permissions(dir / name, std::filesystem::perms::owner_all);
    }
    std::string args() const
    {
        std::ifstream in(dir / "args");
        return {std::istreambuf_iterator<char>(in), {}};
    }
    int sacct_calls() const
    {
        std::ifstream in(dir / "calls");
        int n = 0;
        in >> n;
        return n;
    }
};

VerdictRecord verdict(const FakeBin& bin, bool job_ended)
{
    VerdictRecord r;
    r.job_id = 42;
    r.code = 139;
    r.comment = "exitpolicy main-rank 139: main rank 0 on node1 was killed by SIGSEGV";
    r.job_ended = job_ended;
    r.bin_dir = bin.dir;
    return r;
}

TEST(RecordVerdictTest, AJobSrunEndedGetsItsCodeOnceSlurmdbdHasItsEnd)
{
    FakeBin bin("2026-12-02T07:00:00", "run 7", 2);
    auto done = record_verdict(verdict(bin, true), 10s);
    ASSERT_TRUE(done) << done.error();
    EXPECT_EQ(bin.sacct_calls(), 3);
    EXPECT_EQ(bin.args(), "-i\nmodify\njob\nwhere\njobid=42\nset\nDerivedExitCode=35584\n"
                          "Comment=run 7; exitpolicy main-rank 139: main rank 0 on node1 was killed by SIGSEGV\n");
}

TEST(RecordVerdictTest, AJobThatGoesOnGetsTheCommentAtOnce)
{
    FakeBin bin("Unknown", "", 100);
    auto done = record_verdict(verdict(bin, false), 10s);
    ASSERT_TRUE(done) << done.error();
    EXPECT_EQ(bin.sacct_calls(), 1);
    EXPECT_EQ(bin.args(), "-i\nmodify\njob\nwhere\njobid=42\nset\n"
                          "Comment=exitpolicy main-rank 139: main rank 0 on node1 was killed by SIGSEGV\n");
}

TEST(RecordVerdictTest, AnEndSlurmdbdNeverRecordsEndsTheWaitAtItsBound)
{
    FakeBin bin("Unknown", "", 1000000);
    const auto t0 = Clock::now();
    auto done = record_verdict(verdict(bin, true), 1s);
    ASSERT_FALSE(done);
    EXPECT_NE(done.error().find("had not recorded the job's end"), std::string::npos) << done.error();
    EXPECT_LT(Clock::now() - t0, 20s);
    EXPECT_EQ(bin.args(), "");  // nothing modified
}

TEST(RecordVerdictTest, WhatSacctmgrRefusesIsTheError)
{
    FakeBin bin("2026-12-02T07:00:00", "", 0, " Nothing modified");
    auto done = record_verdict(verdict(bin, true), 10s);
    ASSERT_FALSE(done);
    EXPECT_EQ(done.error(), "sacctmgr: Nothing modified");
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
