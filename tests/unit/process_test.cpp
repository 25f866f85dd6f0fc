// SPDX-License-Identifier: Apache-2.0
// process_test.cpp - protocol/process.hpp on real child processes: a pidfd
// sees its process end, signals through it reach only that process, and
// /proc says when a process has begun to exit.
#include "protocol/process.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace exitpolicy::protocol {
namespace {

// A child that waits until its pipe closes or a signal ends it.
pid_t waiting_child(int& write_end)
{
    int p[2];
    if (::pipe(p) != 0)
        return -1;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(p[1]);
        char c;
        (void)!::read(p[0], &c, 1);
        ::_exit(0);
    }
    ::close(p[0]);
    write_end = p[1];
    return pid;
}

bool wait_readable(int fd)
{
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 10'000) == 1;
}

TEST(Process, ASignalThroughThePidfdEndsItsProcessAndThePidfdSaysSo)
{
    int pipe_end = -1;
    const pid_t pid = waiting_child(pipe_end);
    ASSERT_GT(pid, 0);
    const int pidfd = process::open_pidfd(pid);
    ASSERT_GE(pidfd, 0) << "pidfd_open: " << errno;
    EXPECT_FALSE(process::ended(pidfd));
    EXPECT_FALSE(process::exiting(pid));
    ASSERT_TRUE(process::signal(pidfd, SIGTERM));
    ASSERT_TRUE(wait_readable(pidfd));
    EXPECT_TRUE(process::ended(pidfd));
    // Gone but not reaped: it began to exit, and stays so until reaped.
    EXPECT_TRUE(process::exiting(pid));
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    // Reaped: its pid may be anyone's now, the pidfd still names it alone.
    EXPECT_FALSE(process::signal(pidfd, SIGKILL));
    EXPECT_EQ(errno, ESRCH);
    EXPECT_FALSE(process::exiting(pid));
    ::close(pidfd);
    ::close(pipe_end);
}

TEST(Process, AnExitOfItsOwnIsSeenToo)
{
    int pipe_end = -1;
    const pid_t pid = waiting_child(pipe_end);
    ASSERT_GT(pid, 0);
    const int pidfd = process::open_pidfd(pid);
    ASSERT_GE(pidfd, 0);
    ::close(pipe_end);  // the child reads end of file and exits 0
    ASSERT_TRUE(wait_readable(pidfd));
    EXPECT_TRUE(process::ended(pidfd));
    int status = -1;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ::close(pidfd);
}

TEST(Process, NoProcessNoPidfd)
{
    EXPECT_EQ(process::open_pidfd(-1), -1);
    EXPECT_FALSE(process::exiting(-1));
    EXPECT_FALSE(process::exiting(::getpid()));  // this one runs
}

// A pid names a process together with its start time: a pidfd is opened
// only for the one that started then, not for one that got the pid later.
TEST(Process, APidfdOnlyForTheProcessThatStartedThen)
{
    int hold = -1;
    const pid_t pid = waiting_child(hold);
    ASSERT_GT(pid, 0);
    const auto started = process::start_time(pid);
    ASSERT_TRUE(started);
    EXPECT_GE(*started, *process::start_time(::getpid()));  // the child started after us
    const int other = process::open_pidfd_of(pid, *started + 1);
    EXPECT_EQ(other, -1);
    EXPECT_EQ(errno, ESRCH);
    const int fd = process::open_pidfd_of(pid, *started);
    ASSERT_GE(fd, 0);
    ::close(hold);
    EXPECT_TRUE(wait_readable(fd));
    ::waitpid(pid, nullptr, 0);
    EXPECT_FALSE(process::start_time(pid));  // reaped: no such process
    EXPECT_EQ(process::open_pidfd_of(pid, *started), -1);
    ::close(fd);
}

}  // namespace
}  // namespace exitpolicy::protocol
