// SPDX-License-Identifier: Apache-2.0
// step_cgroups_test.cpp - the node daemon joins its step's cgroup/v1
// cgroups (spank_plugin/step_cgroups.hpp): which ones, from the texts the
// kernel gives, and the move itself in real v1 cgroups made for the test
// under this process's own memory cgroup.
#include "spank_plugin/step_cgroups.hpp"

#include "protocol/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

// A task of step 3.0 under Debian 12's Slurm (task/cgroup, proctrack/cgroup,
// ConstrainCores, ConstrainRAMSpace), and its slurmstepd's cgroups, which
// the daemon starts in.
constexpr std::string_view v1_task =
    "9:name=systemd:/system.slice/slurmd.service\n"
    "8:pids:/system.slice/slurmd.service\n"
    "7:blkio:/\n"
    "6:freezer:/slurm/uid_65534/job_3/step_0\n"
    "5:devices:/slurm/uid_65534/job_3/step_0/task_0\n"
    "4:memory:/slurm/uid_65534/job_3/step_0/task_0\n"
    "3:cpuset:/slurm/uid_65534/job_3/step_0\n"
    "2:cpu,cpuacct:/slurm/uid_65534/job_3/step_0/task_0\n"
    "0::/system.slice/slurmd.service\n";
constexpr std::string_view v1_slurmstepd =
    "9:name=systemd:/system.slice/slurmd.service\n"
    "8:pids:/system.slice/slurmd.service\n"
    "7:blkio:/\n"
    "6:freezer:/slurm/uid_65534/job_3\n"
    "5:devices:/\n"
    "4:memory:/\n"
    "3:cpuset:/\n"
    "2:cpu,cpuacct:/\n"
    "0::/system.slice/slurmd.service\n";

TEST(StepCgroupsTest, OnV1TheDaemonJoinsEveryStepCgroupButTheFreezers)
{
    const std::vector<V1Cgroup> want = {
        {"devices", "/slurm/uid_65534/job_3/step_0"},
        {"memory", "/slurm/uid_65534/job_3/step_0"},
        {"cpuset", "/slurm/uid_65534/job_3/step_0"},
        {"cpu,cpuacct", "/slurm/uid_65534/job_3/step_0"},
    };
    EXPECT_EQ(step_cgroups_to_join(v1_task, v1_slurmstepd), want);
}

TEST(StepCgroupsTest, WhatTheDaemonIsInAlreadyIsNotJoinedAgain)
{
    const std::string daemon =
        "6:freezer:/slurm/uid_65534/job_3\n"
        "5:devices:/slurm/uid_65534/job_3/step_0\n"
        "4:memory:/slurm/uid_65534/job_3/step_0\n"
        "3:cpuset:/slurm/uid_65534/job_3/step_0\n"
        "2:cpu,cpuacct:/slurm/uid_65534/job_3/step_0\n";
    EXPECT_TRUE(step_cgroups_to_join(v1_task, daemon).empty());
}

TEST(StepCgroupsTest, OnV2AndWithoutTaskCgroupThereIsNothingToJoin)
{
    // cgroup/v2: slurmstepd's part of the step (step_0/slurm) is the step's.
    EXPECT_TRUE(step_cgroups_to_join("0::/system.slice/slurmstepd.scope/job_3/step_0/user/task_0\n",
                                     "0::/system.slice/slurmstepd.scope/job_3/step_0/slurm\n")
                    .empty());
    // proctrack/linuxproc, task/none: the task has slurmstepd's cgroups.
    EXPECT_TRUE(step_cgroups_to_join(v1_slurmstepd, v1_slurmstepd).empty());
    // A path that is not plain is never used.
    EXPECT_TRUE(step_cgroups_to_join("4:memory:/slurm/../job_3/step_0/task_0\n", "4:memory:/\n").empty());
    EXPECT_TRUE(step_cgroups_to_join("", "").empty());
}

constexpr std::string_view mountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 /slurm /srv/mem\\040cg rw,relatime - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(StepCgroupsTest, TheDirectoryIsWhereItsHierarchyIsMounted)
{
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"cpuset", "/slurm/job_3/step_0"}),
              "/sys/fs/cgroup/cpuset/slurm/job_3/step_0");
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"cpu,cpuacct", "/slurm/job_3/step_0"}),
              "/sys/fs/cgroup/cpu,cpuacct/slurm/job_3/step_0");
    // A mount of a directory of the hierarchy, at an escaped path.
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"memory", "/slurm/job_3/step_0"}), "/srv/mem cg/job_3/step_0");
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"memory", "/slurmish/step_0"}), std::nullopt);
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"devices", "/slurm/job_3/step_0"}), std::nullopt);  // not mounted
    EXPECT_EQ(v1_cgroup_dir(mountinfo, {"cpu,cpuacct,blkio", "/x"}), std::nullopt);
}

TEST(OomCounterTest, TheTasksOwnMemoryCgroupsCounter)
{
    const std::string v1_mounts =
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    EXPECT_EQ(oom_counter_file(v1_task, v1_mounts),
              "/sys/fs/cgroup/memory/slurm/uid_65534/job_3/step_0/task_0/memory.oom_control");
    // v2: the "0::" line, where no v1 hierarchy has memory.
    const std::string v2_mounts = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
    EXPECT_EQ(oom_counter_file("0::/system.slice/slurmstepd.scope/job_3/step_0/user/task_1\n", v2_mounts),
              "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_3/step_0/user/task_1/memory.events");
    // A cgroup shared with other tasks (or slurmstepd's) says nothing of this one.
    EXPECT_EQ(oom_counter_file("4:memory:/slurm/uid_65534/job_3/step_0\n", v1_mounts), std::nullopt);
    EXPECT_EQ(oom_counter_file("0::/system.slice/slurmstepd.scope/job_3/step_0/user\n", v2_mounts), std::nullopt);
    EXPECT_EQ(oom_counter_file(v1_slurmstepd, v1_mounts), std::nullopt);
    EXPECT_EQ(oom_counter_file(v1_task, ""), std::nullopt);  // not mounted here

    EXPECT_EQ(oom_kills_in("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 2u);
    EXPECT_EQ(oom_kills_in("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n"), 1u);
    EXPECT_EQ(oom_kills_in("oom_kill_disable 0\nunder_oom 0\n"), std::nullopt);  // a kernel before 4.13
    EXPECT_EQ(oom_kills_in("oom_kill x\n"), std::nullopt);
}

TEST(OomCounterTest, AMemoryLimitAsTheKernelSaysIt)
{
    EXPECT_EQ(memory_limit_in("52428800\n"), 52428800u);
    EXPECT_EQ(memory_limit_in("max\n"), std::nullopt);                  // v2: none
    EXPECT_EQ(memory_limit_in("9223372036854771712\n"), std::nullopt);  // v1: none
    EXPECT_EQ(memory_limit_in(""), std::nullopt);
    EXPECT_EQ(memory_limit_in("12k\n"), std::nullopt);
}

std::string read_all(const std::string& path)
{
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// This process's cgroup of the v1 memory hierarchy, or none.
std::optional<std::string> own_memory_cgroup()
{
    std::istringstream lines(read_all("/proc/self/cgroup"));
    for (std::string line; std::getline(lines, line);)
        if (const auto at = line.find(":memory:"); at != std::string::npos)
            return line.substr(at + 8);
    return std::nullopt;
}

// A child that waits for SIGKILL; with `grandchild`, it forks one first
// (the daemon's event anchor).
pid_t sleeper(bool grandchild)
{
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (grandchild && ::fork() == 0)
            for (;;)
                ::pause();
        for (;;)
            ::pause();
    }
    return pid;
}

bool holds(const std::string& dir, pid_t pid)
{
    std::istringstream pids(read_all(dir + "/cgroup.procs"));
    for (pid_t p = 0; pids >> p;)
        if (p == pid)
            return true;
    return false;
}

// Step 0's memory cgroup and its task_0, made under this process's own.
class StepMemoryCgroupTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        const auto own = own_memory_cgroup();
        const std::filesystem::path hierarchy = "/sys/fs/cgroup/memory";
        if (::geteuid() != 0 || !own || !std::filesystem::exists(hierarchy / "cgroup.procs"))
            GTEST_SKIP() << "needs root and a cgroup v1 memory hierarchy at " << hierarchy;
        job = hierarchy / own->substr(1) / ("ep-step-cgroups-" + std::to_string(::getpid()));
        step = job / "step_0";
        task_cg = step / "task_0";
        std::error_code ec;
        std::filesystem::create_directories(task_cg, ec);
        if (ec)
            GTEST_SKIP() << "cannot make " << task_cg << ": " << ec.message();
        task = sleeper(false);
        ASSERT_GT(task, 0);
        std::ofstream(task_cg / "cgroup.procs") << task << "\n";
        ASSERT_TRUE(holds(task_cg, task));
    }
    void TearDown() override
    {
        for (const pid_t p : {task, daemon})
            if (p > 0) {
                ::kill(p, SIGKILL);
                ::waitpid(p, nullptr, 0);
            }
        if (pidfd >= 0)
            ::close(pidfd);
        if (job.empty())
            return;
        std::error_code ec;
        for (int i = 0; i < 100; ++i, ::usleep(10'000)) {  // an orphaned anchor, reaped by init
            std::filesystem::remove(task_cg, ec);
            std::filesystem::remove(step, ec);
            std::filesystem::remove(job, ec);
            if (!std::filesystem::exists(job))
                break;
        }
        EXPECT_FALSE(std::filesystem::exists(job)) << "left " << job;
    }
    std::filesystem::path job, step, task_cg;
    pid_t task = -1, daemon = -1;
    int pidfd = -1;
};

TEST_F(StepMemoryCgroupTest, TheDaemonAndItsChildrenMoveIntoTheStepsCgroup)
{
    daemon = sleeper(true);
    ASSERT_GT(daemon, 0);
    pid_t anchor = -1;  // its event anchor, once forked
    for (int i = 0; i < 200 && anchor < 0; ++i, ::usleep(10'000))
        std::istringstream(read_all("/proc/" + std::to_string(daemon) + "/task/" + std::to_string(daemon) +
                                    "/children")) >> anchor;
    ASSERT_GT(anchor, 0);
    pidfd = protocol::process::open_pidfd(daemon);
    ASSERT_GE(pidfd, 0);

    const auto joined = join_step_cgroups(task, daemon, pidfd);
    ASSERT_TRUE(joined) << joined.error();
    EXPECT_NE(std::find(joined->begin(), joined->end(), "memory"), joined->end());
    EXPECT_TRUE(holds(step, daemon));
    EXPECT_TRUE(holds(step, anchor));
    EXPECT_TRUE(holds(task_cg, task));  // the task stays where Slurm put it
    ::kill(anchor, SIGKILL);
}

// The kernel's OOM killer in a task's own memory cgroup (20 MiB, the task
// wants 200): its counter rose, and a task's neighbour's did not.
TEST_F(StepMemoryCgroupTest, ATaskTheOomKillerEndsIsToldFromOneThatWasNot)
{
    const auto neighbour_cg = step / "task_1";
    std::error_code ec;
    std::filesystem::create_directory(neighbour_cg, ec);
    ASSERT_FALSE(ec) << ec.message();
    for (const auto& cg : {task_cg, neighbour_cg}) {
        std::ofstream(cg / "memory.limit_in_bytes") << (20 << 20) << "\n";
        std::ofstream(cg / "memory.memsw.limit_in_bytes") << (20 << 20) << "\n";  // no swap to flee to, if any
    }
    std::ofstream(step / "memory.limit_in_bytes") << (64 << 20) << "\n";
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    const pid_t hungry = ::fork();
    if (hungry == 0) {
        char byte = 0;
        (void)!::read(go[0], &byte, 1);
        std::vector<char*> chunks;
        for (int i = 0; i < 200; ++i) {  // 200 MiB, each page touched
            char* p = static_cast<char*>(std::malloc(1 << 20));
            if (!p)
                ::_exit(3);
            std::memset(p, 1, 1 << 20);
            chunks.push_back(p);
        }
        ::_exit(0);
    }
    ASSERT_GT(hungry, 0);
    const pid_t modest = sleeper(false);
    std::ofstream(task_cg / "cgroup.procs") << hungry << "\n";
    std::ofstream(neighbour_cg / "cgroup.procs") << modest << "\n";
    const std::string mounts = own_mountinfo();
    const auto hungry_counter = oom_counter_of(hungry, mounts);
    const auto modest_counter = oom_counter_of(modest, mounts);
    ASSERT_TRUE(hungry_counter && modest_counter);
    EXPECT_EQ(hungry_counter->at_start, 0u);
    ASSERT_EQ(::write(go[1], "x", 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(hungry, &status, 0), hungry);
    ::close(go[0]);
    ::close(go[1]);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "wait status " << status;
    EXPECT_TRUE(oom_killed_since(*hungry_counter));
    EXPECT_FALSE(oom_killed_since(*modest_counter));
    // The lowest limit of its cgroup and those above it: the task's own.
    EXPECT_EQ(memory_limit_of(*hungry_counter), std::uint64_t{20} << 20);
    // None of its own (the swap limit first: it may not be below the other).
    std::ofstream(neighbour_cg / "memory.memsw.limit_in_bytes") << "-1\n";
    std::ofstream(neighbour_cg / "memory.limit_in_bytes") << "-1\n";
    EXPECT_EQ(memory_limit_of(*modest_counter), std::uint64_t{64} << 20);
    ::kill(modest, SIGKILL);
    ::waitpid(modest, nullptr, 0);
    std::filesystem::remove(neighbour_cg, ec);
}

TEST_F(StepMemoryCgroupTest, ADaemonThatHasEndedIsNeverMoved)
{
    const pid_t gone = sleeper(false);
    ASSERT_GT(gone, 0);
    pidfd = protocol::process::open_pidfd(gone);
    ASSERT_GE(pidfd, 0);
    ::kill(gone, SIGKILL);
    ::waitpid(gone, nullptr, 0);
    const auto joined = join_step_cgroups(task, gone, pidfd);
    ASSERT_TRUE(joined) << joined.error();
    EXPECT_TRUE(joined->empty());
    EXPECT_EQ(read_all(step / "cgroup.procs"), "");
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
