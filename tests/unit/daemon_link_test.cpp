// SPDX-License-Identifier: Apache-2.0
// daemon_link_test.cpp - how slurmstepd starts and ends the node daemon
// (spank_plugin/daemon_link.hpp), with a shell script in the daemon's place:
// the pid root keeps is the one fork() gave, whatever the daemon (the job's
// user) writes; the secret reaches fd 3 even when fd 3 was free before;
// a malformed or endless ready line is a clean failure.
#include "spank_plugin/daemon_link.hpp"
#include "spank_plugin/pmi_sockets.hpp"
#include "protocol/sockets.hpp"

#include <gtest/gtest.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <grp.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <cstring>
#include <sstream>
#include <string>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <thread>
#include <utility>
#include <unistd.h>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;

const std::string secret(64, 'a');

class DaemonLinkTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ep-daemon-link.XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override
    {
        std::filesystem::remove_all(dir);
        // What make_step_dir recorded for this test's directories (named
        // for nodes "ep-<what>-<pid>"), which the tests remove themselves.
        std::error_code ec;
        const std::string mine = "-" + std::to_string(::getpid());
        for (const auto& e : std::filesystem::directory_iterator(step_dir_registry, ec)) {
            const std::string name = e.path().filename().string();
            if (name.find(".ep-") != std::string::npos && name.find(mine) != std::string::npos)
                std::filesystem::remove(e.path(), ec);
        }
    }

    // A node's name for step directories, whose records TearDown removes.
    static std::string unit_node() { return "ep-unit-" + std::to_string(::getpid()); }

    // The script runs as /bin/sh -c SCRIPT sh --secret-fd 3 --ready-fd 4.
    DaemonLaunch launch(const std::string& script) const
    {
        DaemonLaunch l;
        l.path = "/bin/sh";
        l.helper = EXITPOLICY_TEST_DETACH;
        l.args = {"-c", script, "sh"};
        l.secret_hex = secret;
        l.uid = ::getuid();
        l.gid = ::getgid();
        l.ready_timeout = 5000ms;
        return l;
    }
    std::string read(const std::string& name) const
    {
        std::ifstream in(dir + "/" + name);
        std::string s;
        std::getline(in, s);
        return s;
    }
    static bool gone(pid_t pid)
    {
        for (int i = 0; i < 200; ++i) {
            if (::kill(pid, 0) != 0)
                return true;
            std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
            std::string all;
            std::getline(stat, all);
            const auto paren = all.rfind(')');
            if (paren != std::string::npos && paren + 2 < all.size() && all[paren + 2] == 'Z')
                return true;
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }

    // The descriptors process `pid` holds once it runs `sleep` (the
    // scripts end in exec sleep): what the shell had, read from outside,
    // where no pipe of the shell's own is in the way.
    static std::string held_by_sleep(pid_t pid)
    {
        const std::string proc = "/proc/" + std::to_string(pid);
        // sleep, and asleep: the kernel names the new program before it
        // closes the old one's close-on-exec descriptors, so a look at
        // the first sight of "sleep" may still see one of the shell's.
        for (int i = 0; i < 500; ++i) {
            std::error_code ec;
            const auto exe = std::filesystem::read_symlink(proc + "/exe", ec);
            std::ifstream stat(proc + "/stat");
            std::string line;
            std::getline(stat, line);
            const auto state = line.rfind(") ");
            if (!ec && exe.filename() == "sleep" && state != std::string::npos && line.substr(state + 2, 1) == "S")
                break;
            std::this_thread::sleep_for(10ms);
        }
        std::vector<int> fds;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(proc + "/fd", ec))
            fds.push_back(std::stoi(e.path().filename()));
        std::sort(fds.begin(), fds.end());
        std::string out;
        for (int fd : fds)
            out += std::to_string(fd) + " ";
        return out;
    }

    std::string dir;
};

// Descriptors 3 and 4 free in the launcher, as in a slurmstepd: the pipes
// take them, and each must still reach its place without close-on-exec.
class FreeLowFds {
public:
    FreeLowFds()
    {
        for (int fd : {3, 4}) {
            saved_[fd - 3] = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
            ::close(fd);
        }
    }
    ~FreeLowFds()
    {
        for (int fd : {3, 4}) {
            if (saved_[fd - 3] >= 0) {
                ::dup2(saved_[fd - 3], fd);
                ::close(saved_[fd - 3]);
            }
        }
    }

private:
    int saved_[2] = {-1, -1};
};

TEST_F(DaemonLinkTest, RootKeepsTheForkedPidAndTheSecretReachesFdThree)
{
    // The "daemon" claims to be pid 1; it records its real pid and secret.
    const std::string script = "read -r s <&3; echo \"$$ $s\" > " + dir + "/seen; echo 'ready 1' >&4; exec sleep 30";
    FreeLowFds low;  // until the end: the pidfd may take one of them
    auto launched = launch_daemon(launch(script));
    ASSERT_TRUE(launched) << launched.error();
    EXPECT_EQ(read("seen"), std::to_string(launched->pid) + " " + secret);
    EXPECT_NE(launched->pid, 1);
    EXPECT_GE(launched->pidfd.get(), 0);
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 100ms);  // a shell does not stop when asked: killed at the bound
    EXPECT_TRUE(gone(pid));
    EXPECT_EQ(launched->pid, -1);
    EXPECT_EQ(launched->pidfd.get(), -1);
    EXPECT_EQ(launched->control.get(), -1);
}

// slurmstepd of a step with many tasks holds many descriptors: the
// launcher's own pipes then come high, where the copies that put each in
// its place must not overwrite one not yet placed.
TEST_F(DaemonLinkTest, DescriptorsReachTheirPlacesFromAnywhere)
{
    std::vector<int> taken;
    for (int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC); fd >= 0 && fd < 98;
         fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC))
        taken.push_back(fd);
    const std::string script = "read -r s <&3; echo \"$s\" > " + dir + "/seen; echo 'ready 1' >&4; exec sleep 30";
    auto launched = launch_daemon(launch(script));
    for (int fd : taken)
        ::close(fd);
    ASSERT_TRUE(launched) << launched.error();
    EXPECT_EQ(read("seen"), secret);
    EXPECT_EQ(held_by_sleep(launched->pid), "0 1 2 3 4 5 ");
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 100ms);
    EXPECT_TRUE(gone(pid));
}

// Descriptors 6 and 7 are the reserved and wake sockets' places: a daemon
// that gets neither must not get what slurmstepd itself holds there (its
// descriptors are root's, and not all close on exec).
TEST_F(DaemonLinkTest, SlurmstepdsOwnDescriptorsAtUnusedPlacesStayRoots)
{
    std::vector<int> moved;
    for (int fd : {6, 7}) {
        if (::fcntl(fd, F_GETFD) >= 0)
            moved.push_back(fd);  // the test runner's: kept aside and put back
    }
    std::vector<std::pair<int, int>> saved;
    for (int fd : moved) {
        saved.emplace_back(fd, ::fcntl(fd, F_DUPFD_CLOEXEC, 100));
        ::close(fd);
    }
    const int root_file = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC, as slurmstepd's are not all
    ASSERT_GE(root_file, 0);
    ASSERT_EQ(::dup2(root_file, 6), 6);
    ASSERT_EQ(::dup2(root_file, 7), 7);
    const std::string script = "read -r s <&3; echo 'ready 1' >&4; exec sleep 30";
    auto launched = launch_daemon(launch(script));
    for (int fd : {root_file, 6, 7})
        ::close(fd);
    for (const auto& [fd, copy] : saved) {
        ::dup2(copy, fd);
        ::close(copy);
    }
    ASSERT_TRUE(launched) << launched.error();
    EXPECT_EQ(held_by_sleep(launched->pid), "0 1 2 3 4 5 ");
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 100ms);
    EXPECT_TRUE(gone(pid));
}

// A standby (slurmstepd had a wake socket for it): the helper's child runs
// nothing until someone connects to the wake socket or a task to the
// reserved one, and ends unstarted when slurmstepd closes its control link.
class StandbyTest : public DaemonLinkTest {
protected:
    void SetUp() override
    {
        DaemonLinkTest::SetUp();
        // The standby is the helper's child, which exits: it becomes ours,
        // and how it ended can be read (waitpid).
        ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
        auto r = protocol::listen_loopback();
        auto w = protocol::listen_loopback();
        ASSERT_TRUE(r && w);
        reserved = std::move(*r);
        wake = std::move(*w);
        auto l = launch("echo \" $* \" > " + dir + "/args; echo started > " + dir + "/started.tmp; mv " + dir +
                        "/started.tmp " + dir + "/started; echo 'ready 1' >&4; exec sleep 30");
        l.reserved_fd = reserved.fd.get();
        l.wake_fd = wake.fd.get();
        for (std::size_t i = 0; i < pmi_tasks(); ++i) {
            int pair[2];
            ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
            l.pmi_fds.push_back(pair[0]);
            pmi_task_ends.push_back(pair[1]);
        }
        auto launched = launch_daemon(l);
        reserved.fd.reset();
        wake.fd.reset();
        for (int fd : l.pmi_fds)
            ::close(fd);
        ASSERT_TRUE(launched) << launched.error();
        daemon = std::move(*launched);
    }
    void TearDown() override
    {
        if (daemon.pid > 0)
            stop_daemon(daemon, 100ms);
        for (int fd : pmi_task_ends)
            if (fd >= 0)
                ::close(fd);
        DaemonLinkTest::TearDown();
    }
    // What the file at descriptor `fd` of `pid` holds, from its start.
    static protocol::Bytes held_at(pid_t pid, int fd)
    {
        std::ifstream in("/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd), std::ios::binary);
        return protocol::Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    // The local tasks' PMI sockets (their ends in pmi_task_ends).
    virtual std::size_t pmi_tasks() const { return 0; }
    bool started() const { return std::filesystem::exists(dir + "/started"); }
    std::string program() const
    {
        std::error_code ec;
        return std::filesystem::read_symlink("/proc/" + std::to_string(daemon.pid) + "/exe", ec).filename();
    }
    static void connect_to(std::uint16_t port)
    {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0) << std::strerror(errno);
        ::close(fd);
    }
    // Serving, as slurmstepd's task_exit asks it: it never blocks.
    bool becomes_serving()
    {
        for (int i = 0; i < 500; ++i) {
            if (daemon_serving(daemon))
                return true;
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }
    protocol::Listening reserved, wake;
    LaunchedDaemon daemon;
    std::vector<int> pmi_task_ends;
};

// With the tasks' PMI sockets (MPICH's PMI_FD): a task's first request
// wakes the standby; a task that ends without one (it never used PMI) does
// not.
class PmiStandbyTest : public StandbyTest {
protected:
    std::size_t pmi_tasks() const override { return 2; }
};

TEST_F(StandbyTest, NothingRunsUntilItsWakePortIsConnectedTo)
{
    EXPECT_TRUE(daemon.standby);
    // What slurmstepd tells it of a task waits on the link meanwhile.
    auto told = tell_daemon(daemon, protocol::TaskStarted{0, 4242, 99});
    EXPECT_TRUE(told) << told.error();
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(started());
    EXPECT_FALSE(daemon_serving(daemon));
    EXPECT_EQ(program(), "exitpolicy-detach");
    connect_to(wake.port);
    EXPECT_TRUE(becomes_serving());
    EXPECT_TRUE(started());
    // The wake socket is closed before the exec; the reserved one is the
    // daemon's; what the standby read of the link is the daemon's at 7.
    EXPECT_EQ(held_by_sleep(daemon.pid), "0 1 2 3 4 5 6 7 ");
    EXPECT_NE(read("args").find(" --control-backlog-fd 7 "), std::string::npos) << read("args");
    const protocol::Bytes told_frame = protocol::TaskStarted{0, 4242, 99}.encode();
    EXPECT_EQ(held_at(daemon.pid, 7), told_frame);
    const pid_t pid = daemon.pid;
    stop_daemon(daemon, 100ms);
    EXPECT_TRUE(gone(pid));
}

// A node of many tasks: slurmstepd tells the standby of each start, and
// its task_post_fork waits on none of them (a link nobody read filled
// after 278 frames, and each later task waited out a 2 s bound). The
// standby keeps them all, in order, for the daemon it becomes.
TEST_F(StandbyTest, ItReadsEveryTaskStartAsItComesAndTheDaemonGetsThemAll)
{
    constexpr std::uint32_t tasks = 4096;
    protocol::Bytes all;
    for (std::uint32_t rank = 0; rank < tasks; ++rank) {
        const protocol::TaskStarted started{rank, 10000 + static_cast<std::int64_t>(rank), 99};
        auto told = tell_daemon(daemon, started);
        ASSERT_TRUE(told) << "rank " << rank << ": " << told.error();
        const auto frame = started.encode();
        all.insert(all.end(), frame.begin(), frame.end());
    }
    // What the link had no room for when told goes as room comes: the
    // standby reads it all, the daemon is never started for it.
    for (int i = 0; i < 500 && !daemon.backlog.empty(); ++i) {
        std::this_thread::sleep_for(10ms);
        ASSERT_TRUE(send_backlog(daemon.control.get(), daemon.backlog, std::nullopt));
    }
    EXPECT_TRUE(daemon.backlog.empty()) << daemon.backlog.size() << " bytes never went";
    // Sent is not yet read: the standby keeps what it has read when it
    // wakes, and the daemon reads the rest from the link after it. Woken
    // once it has read all (the kernel's count of what the link still
    // holds), it has kept all.
    int unread = -1;
    for (int i = 0; i < 500 && (::ioctl(daemon.control.get(), SIOCOUTQ, &unread) != 0 || unread > 0); ++i)
        std::this_thread::sleep_for(10ms);
    EXPECT_EQ(unread, 0) << "the standby did not read the link";
    EXPECT_FALSE(started());
    connect_to(wake.port);
    ASSERT_TRUE(becomes_serving());
    EXPECT_EQ(held_by_sleep(daemon.pid), "0 1 2 3 4 5 6 7 ");
    const protocol::Bytes kept = held_at(daemon.pid, 7);
    EXPECT_EQ(kept.size(), all.size());
    EXPECT_TRUE(kept == all) << "the standby's copy differs from what slurmstepd said";
}

// A standby its user has stopped reads nothing: slurmstepd still never
// waits, and keeps what the link has no room for until it has.
TEST_F(StandbyTest, AStoppedStandbyNeverHoldsSlurmstepd)
{
    ASSERT_EQ(::kill(daemon.pid, SIGSTOP), 0);
    constexpr std::uint32_t tasks = 4096;
    for (std::uint32_t rank = 0; rank < tasks; ++rank) {
        auto told = tell_daemon(daemon, protocol::TaskStarted{rank, 10000 + static_cast<std::int64_t>(rank), 99});
        ASSERT_TRUE(told) << "rank " << rank << ": " << told.error();
    }
    EXPECT_FALSE(daemon.backlog.empty());  // the link is full: the rest is root's to keep
    ASSERT_EQ(::kill(daemon.pid, SIGCONT), 0);
    for (int i = 0; i < 500 && !daemon.backlog.empty(); ++i) {
        std::this_thread::sleep_for(10ms);
        ASSERT_TRUE(send_backlog(daemon.control.get(), daemon.backlog, std::nullopt));
    }
    EXPECT_TRUE(daemon.backlog.empty()) << daemon.backlog.size() << " bytes never went";
}

TEST_F(StandbyTest, ATaskThatConnectsToItsPmixSocketStartsIt)
{
    connect_to(reserved.port);
    EXPECT_TRUE(becomes_serving());
    EXPECT_TRUE(started());
}

TEST_F(PmiStandbyTest, ATaskThatEndsWithoutAWordStartsNothingOneThatWritesStartsIt)
{
    ::close(std::exchange(pmi_task_ends[0], -1));  // task 0 ends, its socket closes
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(started());
    EXPECT_FALSE(daemon_serving(daemon));
    const std::string init = "cmd=init pmi_version=1 pmi_subversion=1\n";
    ASSERT_EQ(::write(pmi_task_ends[1], init.data(), init.size()), static_cast<ssize_t>(init.size()));
    EXPECT_TRUE(becomes_serving());
    EXPECT_TRUE(started());
    // The daemon has both tasks' sockets from 10 up (task 0's closed by
    // its task, still open here), the wake socket is gone.
    EXPECT_EQ(held_by_sleep(daemon.pid), "0 1 2 3 4 5 6 10 11 ");
}

TEST_F(PmiStandbyTest, ItEndsUnstartedWhenEveryTaskAndSlurmstepdAreGone)
{
    const pid_t pid = daemon.pid;
    for (int& fd : pmi_task_ends)
        ::close(std::exchange(fd, -1));
    stop_daemon(daemon, 30s);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid) << std::strerror(errno);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
    EXPECT_FALSE(started());
}

// slurmstepd's part: a pair per task, every end close-on-exec but the one a
// task keeps for itself, slurmstepd's copy closed once the task is forked.
TEST(PmiSocketsTest, EachTaskKeepsItsOwnEndAndSlurmstepdLetsGo)
{
    PmiSockets sockets;
    auto daemon_ends = sockets.make(2);
    ASSERT_TRUE(daemon_ends) << daemon_ends.error();
    ASSERT_EQ(daemon_ends->size(), 2u);
    for (const auto& fd : *daemon_ends)
        EXPECT_EQ(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    const int kept = sockets.keep_for_task(1);
    ASSERT_GE(kept, 0);
    EXPECT_EQ(::fcntl(kept, F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_EQ(sockets.keep_for_task(2), -1);  // no such task
    // What task 1 writes reaches the daemon's end 1.
    ASSERT_EQ(::write(kept, "x", 1), 1);
    char c = 0;
    EXPECT_EQ(::read((*daemon_ends)[1].get(), &c, 1), 1);
    // Once both are forked, only the tasks hold their ends: the daemon's
    // see them close when the tasks end (here: nobody holds them).
    sockets.forked(0);
    sockets.forked(1);
    sockets.forked(1);  // twice: nothing more
    EXPECT_EQ(sockets.keep_for_task(0), -1);
    for (const auto& fd : *daemon_ends)
        EXPECT_EQ(::read(fd.get(), &c, 1), 0);
    EXPECT_FALSE(sockets.make(PmiSockets::max_tasks + 1));
    EXPECT_EQ(pmi_task_environment(11, 5), (Environment{{"PMI_FD", "11"}, {"PMI_RANK", "5"}}));
    EXPECT_EQ(pmi_step_environment(8, 42, 3), (Environment{{"PMI_SIZE", "8"}, {"PMI_JOBID", "42.3"}}));
}

TEST_F(StandbyTest, ItEndsUnstartedWhenSlurmstepdClosesItsLink)
{
    const pid_t pid = daemon.pid;
    // Not asked to stop (it reads nothing): its link closes, and it exits
    // by itself, not killed once the bound is over.
    stop_daemon(daemon, 30s);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid) << std::strerror(errno);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
    EXPECT_FALSE(started());
}

TEST_F(DaemonLinkTest, AnythingAfterReadyIsNeverParsed)
{
    auto launched = launch_daemon(launch("echo 'ready zzz-not-a-pid' >&4; exec sleep 30"));
    ASSERT_TRUE(launched) << launched.error();
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 0ms);
    EXPECT_TRUE(gone(pid));
}

TEST_F(DaemonLinkTest, AMalformedReadyLineFailsAndTheProcessIsKilled)
{
    auto launched = launch_daemon(launch("echo $$ > " + dir + "/pid; echo 'not ready' >&4; exec sleep 30"));
    ASSERT_FALSE(launched);
    EXPECT_NE(launched.error().find("exited before it was ready"), std::string::npos) << launched.error();
    const pid_t pid = static_cast<pid_t>(std::stol(read("pid")));
    EXPECT_TRUE(gone(pid));
}

TEST_F(DaemonLinkTest, AnEndlessReadyLineIsReadWithinItsBound)
{
    auto launched =
        launch_daemon(launch("echo $$ > " + dir + "/pid; while :; do printf readyyyyyyyyyyyyyy >&4; done"));
    ASSERT_FALSE(launched);
    const pid_t pid = static_cast<pid_t>(std::stol(read("pid")));
    EXPECT_TRUE(gone(pid));
}

TEST_F(DaemonLinkTest, ADaemonThatNeverAnswersIsBoundedByTheTimeout)
{
    auto l = launch("echo $$ > " + dir + "/pid; exec sleep 30");
    l.ready_timeout = 300ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto launched = launch_daemon(l);
    ASSERT_FALSE(launched);
    EXPECT_NE(launched.error().find("in time"), std::string::npos) << launched.error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    const pid_t pid = static_cast<pid_t>(std::stol(read("pid")));
    EXPECT_TRUE(gone(pid));
}

// With the tasks' environment planned in slurmstepd, the launch waits for
// nothing the daemon says (this one never says ready); the daemon gets the
// reserved socket as fd 6, and what slurmstepd tells it of a task on its
// control link (fd 5) waits there until it reads.
TEST_F(DaemonLinkTest, WithAReservedSocketTheLaunchWaitsForNothing)
{
    auto reserved = protocol::listen_loopback();
    ASSERT_TRUE(reserved) << reserved.error();
    EXPECT_GT(reserved->port, 0);
    struct stat st{};
    ASSERT_EQ(::fstat(reserved->fd.get(), &st), 0);
    const protocol::TaskStarted started{3, 4242, 99};
    const auto frame = started.encode();
    auto l = launch("readlink /proc/$$/fd/6 > " + dir + "/fd6.tmp; mv " + dir + "/fd6.tmp " + dir +
                    "/fd6; head -c " + std::to_string(frame.size()) + " <&5 > " + dir +
                    "/started.tmp; mv " + dir + "/started.tmp " + dir + "/started; exec sleep 30");
    l.reserved_fd = reserved->fd.get();
    auto launched = launch_daemon(l);
    reserved->fd.reset();
    ASSERT_TRUE(launched) << launched.error();
    auto told = tell_daemon(*launched, started);
    ASSERT_TRUE(told) << told.error();
    for (int i = 0; i < 500 && !std::filesystem::exists(dir + "/started"); ++i)
        std::this_thread::sleep_for(10ms);
    EXPECT_EQ(read("fd6"), "socket:[" + std::to_string(st.st_ino) + "]");
    // Nothing of root's but what it was given (0-2 /dev/null, 3 secret,
    // 4 ready, 5 control, 6 the socket).
    EXPECT_EQ(held_by_sleep(launched->pid), "0 1 2 3 4 5 6 ");
    std::ifstream in(dir + "/started", std::ios::binary);
    const protocol::Bytes got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(got.size(), frame.size());
    const auto back = protocol::TaskStarted::decode(std::span(got).subspan(protocol::header_size));
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->rank, 3u);
    EXPECT_EQ(back->pid, 4242);
    EXPECT_EQ(back->start_time, 99u);
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 100ms);
    EXPECT_TRUE(gone(pid));
}

// A daemon that stopped (SIGSTOP) with a full backlog must not hold a task's
// environment request past its bound.
TEST_F(DaemonLinkTest, AnEnvironmentRequestToASilentSocketIsBounded)
{
    const std::string path = daemon_socket(dir);
    const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::strcpy(sun.sun_path, path.c_str());
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
    ASSERT_EQ(::listen(listener, 0), 0);
    // Fill the backlog: nobody accepts.
    std::vector<int> fillers;
    for (int i = 0; i < 4; ++i) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        ::connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
        fillers.push_back(fd);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto env = request_environment(dir, 0, ::getpid(), 300ms);
    EXPECT_FALSE(env);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
    for (int fd : fillers)
        ::close(fd);
    ::close(listener);
}

// The step's directory: a name no other user can predict or take first,
// the job's user's alone; removed as that user, so that a link inside never
// leads root anywhere.
TEST_F(DaemonLinkTest, TheStepDirectoryIsUnpredictableAndRemovedAsItsUser)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to make a directory for another user";
    const uid_t nobody = 65534;
    auto a = make_step_dir(7, 1, unit_node(), nobody, nobody);
    auto b = make_step_dir(7, 1, unit_node(), nobody, nobody);
    ASSERT_TRUE(a) << a.error();
    ASSERT_TRUE(b) << b.error();
    EXPECT_NE(*a, *b);
    EXPECT_EQ(a->rfind("/tmp/exitpolicy.7.1." + unit_node() + ".", 0), 0u) << *a;
    struct stat st {};
    ASSERT_EQ(::lstat(a->c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    EXPECT_EQ(st.st_uid, nobody);

    // What the user put inside: a link to a file of root's elsewhere, and
    // a directory of root's (as if the user could have had one moved in).
    const std::string outside = dir + "/roots-file";
    std::ofstream(outside) << "keep\n";
    ASSERT_EQ(::symlink(outside.c_str(), (*a + "/link").c_str()), 0);
    ASSERT_EQ(::lchown((*a + "/link").c_str(), nobody, nobody), 0);
    ASSERT_EQ(::mkdir((*a + "/roots").c_str(), 0755), 0);
    std::ofstream(*a + "/roots/file") << "x\n";
    remove_step_dir(*a, nobody, nobody, 2000ms);
    EXPECT_TRUE(std::filesystem::exists(outside));  // the link went, not its target
    EXPECT_FALSE(std::filesystem::exists(*a + "/link"));
    EXPECT_TRUE(std::filesystem::exists(*a + "/roots/file"));  // not the user's to remove
    std::filesystem::remove_all(*a);

    remove_step_dir(*b, nobody, nobody, 2000ms);
    EXPECT_FALSE(std::filesystem::exists(*b));
}

// Another user plants what the step's directory used to be called (a
// directory of theirs, and a link to a directory of root's): the step gets a
// private directory of its own all the same, and nothing planted is used,
// followed or removed.
TEST_F(DaemonLinkTest, WhatAnotherUserPlantsIsNeverTheStepsDirectory)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to plant as another user";
    const uid_t other = 65534, owner = 4242;
    const std::string planted_dir = "/tmp/exitpolicy.9.2." + unit_node();
    const std::string planted_link = "/tmp/exitpolicy.9.2." + unit_node() + ".XXXXXX";
    std::filesystem::remove_all(planted_dir);
    std::filesystem::remove(planted_link);
    ASSERT_EQ(::mkdir(planted_dir.c_str(), 0777), 0);
    ASSERT_EQ(::chown(planted_dir.c_str(), other, other), 0);
    ASSERT_EQ(::symlink(dir.c_str(), planted_link.c_str()), 0);
    ASSERT_EQ(::lchown(planted_link.c_str(), other, other), 0);

    auto made = make_step_dir(9, 2, unit_node(), owner, owner);
    ASSERT_TRUE(made) << made.error();
    EXPECT_NE(*made, planted_dir);
    EXPECT_NE(*made, planted_link);
    struct stat st {};
    ASSERT_EQ(::lstat(made->c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_uid, owner);
    remove_step_dir(*made, owner, owner, 2000ms);
    EXPECT_FALSE(std::filesystem::exists(*made));
    // The planted ones are as they were, and root's directory behind the link too.
    ASSERT_EQ(::lstat(planted_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, other);
    ASSERT_EQ(::lstat(planted_link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_TRUE(std::filesystem::is_directory(dir));
    std::filesystem::remove_all(planted_dir);
    std::filesystem::remove(planted_link);
}

TEST_F(DaemonLinkTest, OnlyAStepDirectoryIsEverRemoved)
{
    remove_step_dir(dir, ::getuid(), ::getgid(), 2000ms);  // /tmp/ep-daemon-link.*: not a step's
    EXPECT_TRUE(std::filesystem::exists(dir));
    remove_step_dir("/tmp/exitpolicy.1/../" + dir.substr(5), ::getuid(), ::getgid(), 2000ms);
    EXPECT_TRUE(std::filesystem::exists(dir));
}

// A kernel without system call `nr`, as seccomp makes one: it fails with
// ENOSYS (pidfd_open before Linux 5.3, close_range before 5.9).
bool without_syscall(long nr)
{
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

// Where pidfds are missing no daemon is started at all: root would have
// had to signal a bare pid, which may have been reused. Before, the daemon
// ran and stop_daemon signalled its pid.
TEST_F(DaemonLinkTest, WithoutPidfdsNoDaemonIsStartedAndTheErrorSaysWhy)
{
    const std::string ran = dir + "/ran";
    const DaemonLaunch l = launch("touch " + ran + "; echo 'ready 1' >&4; exec sleep 30");
    // In a child of its own: the filter stays with the process.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (!without_syscall(SYS_pidfd_open))
            ::_exit(2);
        auto launched = launch_daemon(l);
        if (launched)
            ::_exit(3);
        if (launched.error().find("no node daemon without pidfds (pidfd_open: Function not implemented") != 0)
            ::_exit(4);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no seccomp filter, 3: a daemon was started, 4: another error";
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(std::filesystem::exists(ran)) << "the daemon's program ran";
}

// The pids of this process's children named `comm`.
std::vector<pid_t> children_named(const std::string& comm)
{
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream stat(e.path() / "stat");
        std::string all;
        std::getline(stat, all);
        const auto open = all.find('(');
        const auto close = all.rfind(')');
        if (open == std::string::npos || close == std::string::npos || close + 4 > all.size())
            continue;
        int ppid = 0;
        char state = 0;
        if (std::sscanf(all.c_str() + close + 2, "%c %d", &state, &ppid) == 2 && ppid == ::getpid() &&
            all.substr(open + 1, close - open - 1) == comm)
            out.push_back(std::stoi(name));
    }
    return out;
}

// What the rm that removes a step's directory holds open, caught at work
// (none: never seen), while this process holds `secret_file` open without
// close-on-exec, as slurmstepd holds many of root's.
std::optional<std::vector<std::string>> rm_descriptors(const std::string& step_dir, const std::string& secret_file,
                                                       bool& removed)
{
    for (int i = 0; i < 20000; ++i)  // long enough to catch rm at work
        std::ofstream(step_dir + "/f" + std::to_string(i));
    const int held = ::open(secret_file.c_str(), O_CREAT | O_RDWR, 0600);
    if (held < 0)
        return std::nullopt;
    std::thread remover([&] { removed = static_cast<bool>(remove_step_dir(step_dir, ::getuid(), ::getgid(), 20000ms)); });
    std::vector<std::string> rm_fds;
    bool caught = false;
    for (int i = 0; i < 5000 && !caught; ++i) {
        for (pid_t rm : children_named("rm")) {
            if (::kill(rm, SIGSTOP) != 0)
                continue;
            caught = true;
            for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(rm) + "/fd")) {
                std::error_code ec;
                rm_fds.push_back(std::filesystem::read_symlink(fd.path(), ec).string());
            }
            ::kill(rm, SIGCONT);
        }
        std::this_thread::sleep_for(1ms);
    }
    remover.join();
    ::close(held);
    if (!caught)
        return std::nullopt;
    return rm_fds;
}

// rm, the job's user's, gets none of root's descriptors: before, it held
// every one slurmstepd had open without close-on-exec, for a process of the
// user's to take with pidfd_getfd while rm ran.
TEST_F(DaemonLinkTest, TheRemovingRmHoldsNoneOfRootsDescriptors)
{
    auto step_dir = make_step_dir(7, 2, unit_node(), ::getuid(), ::getgid());
    ASSERT_TRUE(step_dir) << step_dir.error();
    const std::string secret_file = dir + "/roots-secret";
    bool removed = false;
    const auto rm_fds = rm_descriptors(*step_dir, secret_file, removed);
    ASSERT_TRUE(rm_fds) << "rm was never seen at work";
    for (const auto& target : *rm_fds)
        EXPECT_NE(target, secret_file) << "rm holds root's descriptor of " << secret_file;
    EXPECT_TRUE(removed);
    EXPECT_FALSE(std::filesystem::exists(*step_dir));
}

// The same on a kernel without close_range (before Linux 5.9), which
// docs/install.md allows: before, the unchecked close_range failed there and
// rm kept every descriptor.
TEST_F(DaemonLinkTest, TheRemovingRmHoldsNoneOfRootsDescriptorsWithoutCloseRange)
{
    auto step_dir = make_step_dir(7, 3, unit_node(), ::getuid(), ::getgid());
    ASSERT_TRUE(step_dir) << step_dir.error();
    const std::string secret_file = dir + "/roots-secret";
    // In a child of its own: the filter stays with the process.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (!without_syscall(SYS_close_range))
            ::_exit(2);
        bool removed = false;
        const auto rm_fds = rm_descriptors(*step_dir, secret_file, removed);
        if (!rm_fds)
            ::_exit(3);
        for (const auto& target : *rm_fds)
            if (target == secret_file)
                ::_exit(4);
        ::_exit(removed ? 0 : 5);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no seccomp filter, 3: rm never seen at work, 4: rm holds root's "
                                         "descriptor, 5: not removed";
    EXPECT_FALSE(std::filesystem::exists(*step_dir));
}

// Backdates a path's modification time by `ago`.
void age(const std::string& path, std::chrono::seconds ago)
{
    timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= ago.count();
    times[1] = times[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// A node that crashed left its step's directory; the next step on the node
// removes it, and nothing that may still be in use: a live daemon's (its
// socket listens), one just made, another node's, a link. Before, such
// directories stayed until reboot, and /tmp is on disk on Debian 12.
TEST_F(DaemonLinkTest, TheNextStepRemovesWhatADeadStepLeftAndNothingElse)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to make directories for another user";
    const uid_t nobody = 65534;
    const std::string node = "ep-stale-" + std::to_string(::getpid());
    auto dead = make_step_dir(7, 1, node, nobody, nobody);
    auto fresh = make_step_dir(7, 2, node, nobody, nobody);
    auto live = make_step_dir(7, 3, node, nobody, nobody);
    auto other = make_step_dir(7, 1, node + "x", nobody, nobody);
    auto standing_by = make_step_dir(7, 5, node, nobody, nobody);
    ASSERT_TRUE(dead && fresh && live && other && standing_by);
    std::ofstream(*dead + "/rank.0") << "left\n";
    ASSERT_EQ(::lchown((*dead + "/rank.0").c_str(), nobody, nobody), 0);
    // The live step's daemon listens on its socket.
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::strcpy(sun.sun_path, daemon_socket(*live).c_str());
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
    ASSERT_EQ(::listen(listener, 4), 0);
    // A step whose daemon stands by (no socket of its own) runs on: its
    // slurmstepd listens on its step socket in slurmd's spool directory.
    const int stepd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    std::strcpy(sun.sun_path, (dir + "/" + node + "_7.5").c_str());
    ASSERT_EQ(::bind(stepd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
    ASSERT_EQ(::listen(stepd, 4), 0);
    // A link named as a step directory of this node, to a directory of root's.
    const std::string link = "/tmp/exitpolicy.7.4." + node + ".AbCdEf";
    ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
    for (const auto& p : {*dead, *live, *other, *standing_by, link})
        age(p, std::chrono::hours(1));

    const auto removed = remove_stale_step_dirs(node, nobody, std::chrono::seconds(300), 2000ms);
    EXPECT_EQ(removed, std::vector<std::string>{*dead});
    EXPECT_FALSE(std::filesystem::exists(*dead));
    EXPECT_TRUE(std::filesystem::exists(*fresh));
    EXPECT_TRUE(std::filesystem::exists(*live));
    EXPECT_TRUE(std::filesystem::exists(*other));
    EXPECT_TRUE(std::filesystem::exists(*standing_by));
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    EXPECT_TRUE(std::filesystem::exists(dir));
    ::close(listener);
    ::close(stepd);
    ::unlink(link.c_str());
    for (const auto& p : {*fresh, *live, *other, *standing_by})
        std::filesystem::remove_all(p);
}

// Another user of the node plants a hundred directories named as this
// node's dead steps' (mode 0700, old): root never forks anything for
// them, and the dead step's own directory is still removed. Before, root
// ran rm as the planter for each one, every step, none counted.
TEST_F(DaemonLinkTest, WhatAnotherUserPlantsAsADeadStepsDirectoryIsNeverTouched)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to make directories for another user";
    const uid_t nobody = 65534, planter = 4242;
    const std::string node = "ep-planted-" + std::to_string(::getpid());
    auto dead = make_step_dir(8, 1, node, nobody, nobody);
    ASSERT_TRUE(dead) << dead.error();
    age(*dead, std::chrono::hours(1));
    std::vector<std::string> planted;
    for (int i = 0; i < 100; ++i) {
        std::string path = "/tmp/exitpolicy.9." + std::to_string(i) + "." + node + ".XXXXXX";
        ASSERT_NE(::mkdtemp(path.data()), nullptr);
        ASSERT_EQ(::chown(path.c_str(), planter, planter), 0);
        age(path, std::chrono::hours(1));
        planted.push_back(path);
    }
    const auto removed = remove_stale_step_dirs(node, nobody, std::chrono::seconds(300), 2000ms);
    EXPECT_EQ(removed, std::vector<std::string>{*dead});
    std::size_t left = 0;
    for (const auto& p : planted)
        left += std::filesystem::exists(p);
    EXPECT_EQ(left, planted.size()) << "root removed what another user planted";
    for (const auto& p : planted)
        std::filesystem::remove_all(p);
}

// A dead step of another user's (4242) on the node: a step of user 65534
// never sweeps it, so its owner, who could stop that rm, can hold only
// their own steps; their own next step removes it. Before, every step of
// every user on the node ran an rm as 4242 for it, as a child of root.
TEST_F(DaemonLinkTest, OnlyTheStepsOwnUsersDeadDirectoriesAreSwept)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to make directories for other users";
    const uid_t nobody = 65534, other_user = 4242;
    const std::string node = "ep-owner-" + std::to_string(::getpid());
    auto mine = make_step_dir(10, 1, node, nobody, nobody);
    auto theirs = make_step_dir(10, 2, node, other_user, other_user);
    ASSERT_TRUE(mine && theirs);
    age(*mine, std::chrono::hours(1));
    age(*theirs, std::chrono::hours(1));
    EXPECT_EQ(remove_stale_step_dirs(node, nobody, std::chrono::seconds(300), 2000ms),
              std::vector<std::string>{*mine});
    EXPECT_TRUE(std::filesystem::exists(*theirs));
    EXPECT_EQ(remove_stale_step_dirs(node, other_user, std::chrono::seconds(300), 2000ms),
              std::vector<std::string>{*theirs});
    EXPECT_FALSE(std::filesystem::exists(*theirs));
}

// The records outlive a reboot, as the directories in a /tmp on disk do:
// they are not in a file system the boot clears (tmpfs, ramfs). They were
// in /run before, and what a crashed and rebooted node left was never
// removed.
TEST_F(DaemonLinkTest, TheRecordsOfStepDirectoriesAreKeptOnDisk)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to record a step directory";
    auto made = make_step_dir(10, 3, unit_node(), 65534, 65534);
    ASSERT_TRUE(made) << made.error();
    const std::string record = std::string(step_dir_registry) + "/" + made->substr(5);
    struct stat st {};
    ASSERT_EQ(::lstat(record.c_str(), &st), 0) << record;
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 077, 0u);
    struct statfs fs {};
    ASSERT_EQ(::statfs(step_dir_registry, &fs), 0);
    struct statfs var {};
    ASSERT_EQ(::statfs("/var", &var), 0);
    if (var.f_type == TMPFS_MAGIC || var.f_type == RAMFS_MAGIC)
        GTEST_SKIP() << "/var itself is in memory on this machine";
    EXPECT_NE(fs.f_type, static_cast<decltype(fs.f_type)>(TMPFS_MAGIC));
    EXPECT_NE(fs.f_type, static_cast<decltype(fs.f_type)>(RAMFS_MAGIC));
    std::filesystem::remove_all(*made);
}

// The job's user traces (ptrace) the rm that removes their step's
// directory at the step's end, and holds it: root gives up at its bound
// and does not wait for the tracer. Before, root's waitpid after the
// SIGKILL waited for as long as the tracer held the dead rm.
TEST_F(DaemonLinkTest, ARemovalItsUserTracesNeverHoldsRootPastItsBound)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to remove as another user";
    const uid_t user = 4242;
    auto made = make_step_dir(8, 2, "ep-traced-" + std::to_string(::getpid()), user, user);
    ASSERT_TRUE(made) << made.error();
    const std::string step = *made;
    // Enough for rm to take a while, so that the tracer catches it.
    for (int i = 0; i < 3000; ++i) {
        const std::string f = step + "/f" + std::to_string(i);
        std::ofstream(f) << "x";
        ASSERT_EQ(::chown(f.c_str(), user, user), 0);
    }
    int caught_pipe[2];
    ASSERT_EQ(::pipe(caught_pipe), 0);
    const pid_t tracer = ::fork();
    if (tracer == 0) {
        ::close(caught_pipe[0]);
        if (::setgroups(0, nullptr) != 0 || ::setgid(user) != 0 || ::setuid(user) != 0)
            std::_Exit(1);
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < until) {
            for (const auto& e : std::filesystem::directory_iterator("/proc")) {
                const std::string pid = e.path().filename();
                if (pid.find_first_not_of("0123456789") != std::string::npos)
                    continue;
                std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
                const std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                if (cmd.rfind("/bin/rm", 0) != 0 || cmd.find(step) == std::string::npos)
                    continue;
                const pid_t rm = std::stoi(pid);
                if (::ptrace(PTRACE_SEIZE, rm, nullptr, nullptr) == 0 &&
                    ::ptrace(PTRACE_INTERRUPT, rm, nullptr, nullptr) == 0) {
                    [[maybe_unused]] auto w = ::write(caught_pipe[1], "c", 1);
                    ::sleep(10);  // holds it, never waits for it
                    std::_Exit(0);
                }
            }
        }
        std::_Exit(2);
    }
    ::close(caught_pipe[1]);
    auto removed = remove_step_dir(step, user, user, 500ms);
    // Root is back while the tracer still holds the dead rm: it never
    // waited for the tracer (before, it came back only once the tracer
    // had let go, 10 s later).
    const bool tracer_still_holds = ::waitpid(tracer, nullptr, WNOHANG) == 0;
    char c = 0;
    ::fcntl(caught_pipe[0], F_SETFL, O_NONBLOCK);
    const bool caught = ::read(caught_pipe[0], &c, 1) == 1;
    ::close(caught_pipe[0]);
    ::kill(tracer, SIGKILL);
    ::waitpid(tracer, nullptr, 0);
    std::filesystem::remove_all(step);
    if (!caught)
        GTEST_SKIP() << "rm ended before the tracer caught it (removed: " << (removed ? "yes" : removed.error()) << ")";
    EXPECT_FALSE(removed);
    EXPECT_TRUE(tracer_still_holds) << "root came back only after the tracer let go";
}

// A job's user in many groups (sites with nested directory groups have
// thousands): the daemon gets them all. Before, more than 1 024 made the
// helper refuse, and the error said "fork failed".
TEST_F(DaemonLinkTest, TheDaemonGetsEveryOneOfManyGroups)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to set groups";
    auto l = launch("echo 'ready 1' >&4; exec sleep 30");
    for (gid_t g = 100000; g < 102000; ++g)
        l.groups.push_back(g);
    auto launched = launch_daemon(l);
    ASSERT_TRUE(launched) << launched.error();
    std::ifstream status("/proc/" + std::to_string(launched->pid) + "/status");
    std::string line;
    std::size_t groups = 0;
    while (std::getline(status, line))
        if (line.rfind("Groups:", 0) == 0) {
            std::istringstream in(line.substr(7));
            for (std::string g; in >> g;)
                ++groups;
        }
    EXPECT_EQ(groups, 2000u);
    const pid_t pid = launched->pid;
    stop_daemon(*launched, 100ms);
    EXPECT_TRUE(gone(pid));
}

// Root runs exitpolicy-detach from the daemon's directory: a daemon= in a
// tree another user can write would give them root. Refused, saying why;
// root's own trees, and root's own directory in a sticky /tmp, are fine.
TEST_F(DaemonLinkTest, RootRunsNothingFromWhereAnotherUserCouldWrite)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to own the trees";
    char base[] = "/tmp/ep-unsafe.XXXXXX";
    ASSERT_NE(::mkdtemp(base), nullptr);
    const std::string root_dir = std::string(base) + "/root";
    const std::string users_dir = std::string(base) + "/users";
    const std::string open_dir = std::string(base) + "/open";
    for (const auto& d : {root_dir, users_dir, open_dir})
        ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
    ASSERT_EQ(::chown(users_dir.c_str(), 4242, 4242), 0);
    ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
    for (const auto& d : {root_dir, users_dir, open_dir})
        std::ofstream(d + "/exitpolicy-pmixd") << "#!/bin/sh\n";
    const std::string writable_file = root_dir + "/writable";
    std::ofstream(writable_file) << "x";
    ASSERT_EQ(::chmod(writable_file.c_str(), 0666), 0);
    const std::string link = root_dir + "/link";
    ASSERT_EQ(::symlink((users_dir + "/exitpolicy-pmixd").c_str(), link.c_str()), 0);

    EXPECT_EQ(unsafe_for_root(root_dir + "/exitpolicy-pmixd"), "");  // under a sticky /tmp, root's all the way
    EXPECT_EQ(unsafe_for_root("/bin/sh"), "");
    EXPECT_NE(unsafe_for_root(users_dir + "/exitpolicy-pmixd").find("belongs to uid 4242"), std::string::npos)
        << unsafe_for_root(users_dir + "/exitpolicy-pmixd");
    EXPECT_NE(unsafe_for_root(open_dir + "/exitpolicy-pmixd").find("writable by others than root (mode 0777)"),
              std::string::npos)
        << unsafe_for_root(open_dir + "/exitpolicy-pmixd");
    EXPECT_NE(unsafe_for_root(writable_file).find("mode 0666"), std::string::npos);
    EXPECT_NE(unsafe_for_root(link).find("uid 4242"), std::string::npos) << unsafe_for_root(link);
    EXPECT_NE(unsafe_for_root("relative/exitpolicy-pmixd"), "");
    // Not there yet: fine where only root could make it; refused where
    // anyone could, before the spawn, even in a sticky directory. Before,
    // root skipped the check of a daemon= that was not there.
    EXPECT_EQ(unsafe_for_root(root_dir + "/later/exitpolicy-pmixd"), "");
    const std::string in_tmp = "/tmp/ep-not-there-" + std::to_string(::getpid()) + "/exitpolicy-pmixd";
    EXPECT_NE(unsafe_for_root(in_tmp).find("others than root may make it in /tmp (mode 1777)"), std::string::npos)
        << unsafe_for_root(in_tmp);
    const std::string sticky = std::string(base) + "/sticky";
    ASSERT_EQ(::mkdir(sticky.c_str(), 0755), 0);
    ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
    EXPECT_NE(unsafe_for_root(sticky + "/later/x").find("may make it in " + sticky + " (mode 1777)"),
              std::string::npos)
        << unsafe_for_root(sticky + "/later/x");
    std::filesystem::remove_all(base);
}

// The daemon is the job's user's process: it gets the limits srun gives the
// step's tasks, never more than slurmstepd's own. Before, it kept root's.
TEST_F(DaemonLinkTest, TheDaemonGetsTheTasksLimitsNeverMoreThanRoots)
{
    const std::map<std::string, std::string> job{{"SLURM_RLIMIT_NOFILE", "U100"},  // srun --propagate
                                                 {"SLURM_RLIMIT_CORE", "0"},
                                                 {"SLURM_RLIMIT_STACK", "99999999999999999999999"},
                                                 {"SLURM_RLIMIT_AS", "12x"},
                                                 {"SLURM_RLIMIT_CPU", ""}};
    const auto limits = propagated_limits([&](const char* name) -> std::optional<std::string> {
        const auto it = job.find(name);
        return it == job.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
    ASSERT_EQ(limits.size(), 2u);  // the malformed ones are skipped
    EXPECT_EQ(limits[0].resource, RLIMIT_CORE);
    EXPECT_EQ(limits[0].value, 0u);
    EXPECT_EQ(limits[1].resource, RLIMIT_NOFILE);
    EXPECT_EQ(limits[1].value, 100u);

    rlimit nproc{};
    ASSERT_EQ(::getrlimit(RLIMIT_NPROC, &nproc), 0);
    DaemonLaunch l = launch("ulimit -S -n > " + dir + "/nofile; ulimit -S -c > " + dir + "/core; ulimit -S -p > " +
                            dir + "/nproc; echo 'ready 1' >&4; exec sleep 30");
    l.limits = limits;
    if (nproc.rlim_cur != RLIM_INFINITY && nproc.rlim_cur < nproc.rlim_max)
        l.limits.push_back({RLIMIT_NPROC, nproc.rlim_cur + 1});  // more than root's: not raised
    auto launched = launch_daemon(l);
    ASSERT_TRUE(launched) << launched.error();
    stop_daemon(*launched, 0ms);
    EXPECT_EQ(read("nofile"), "100");
    EXPECT_EQ(read("core"), "0");
    EXPECT_EQ(read("nproc"), nproc.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(nproc.rlim_cur));
}

// The daemon runs as the job's user: of slurmstepd's (root's) environment it
// gets only what it needs. Before, it got all of it.
TEST_F(DaemonLinkTest, TheDaemonGetsOnlyTheEnvironmentItNeeds)
{
    ::setenv("EP_ROOTS_OWN", "not for the user", 1);
    ::setenv("PMIX_MCA_gds", "hash", 1);
    auto launched = launch_daemon(launch("env > " + dir + "/env; echo 'ready 1' >&4; exec sleep 30"));
    ::unsetenv("EP_ROOTS_OWN");
    ::unsetenv("PMIX_MCA_gds");
    ASSERT_TRUE(launched) << launched.error();
    std::ifstream in(dir + "/env");
    std::vector<std::string> names;
    for (std::string line; std::getline(in, line);)
        names.push_back(line.substr(0, line.find('=')));
    stop_daemon(*launched, 0ms);
    EXPECT_EQ(std::count(names.begin(), names.end(), "EP_ROOTS_OWN"), 0);
    EXPECT_EQ(std::count(names.begin(), names.end(), "PMIX_MCA_gds"), 1);
    EXPECT_EQ(std::count(names.begin(), names.end(), "PATH"), 1);
    for (const auto& n : names)  // sh adds PWD, SHLVL and _ of its own
        EXPECT_TRUE(n == "PATH" || n == "TZ" || n == "LD_LIBRARY_PATH" || n.rfind("PMIX_MCA_", 0) == 0 || n == "PWD" ||
                    n == "SHLVL" || n == "_" || n == "OLDPWD")
            << n;
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
