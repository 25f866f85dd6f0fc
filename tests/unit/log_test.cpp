// SPDX-License-Identifier: Apache-2.0
// log_test.cpp - the daemon's log file in a directory others may share
// (pmix_server/log.hpp): no link is followed, no file of another's is taken.
#include "pmix_server/log.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {
namespace {

class LogFileTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ep-log-test.XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override { std::filesystem::remove_all(dir); }
    std::string path(const char* name) const { return dir + "/" + name; }
    std::string dir;
};

TEST_F(LogFileTest, ANewFileIsCreatedForThisUserOnly)
{
    const int fd = log::open_owned(path("new.log").c_str());
    ASSERT_GE(fd, 0);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ::close(fd);
    // Opened again: appended to.
    const int again = log::open_owned(path("new.log").c_str());
    EXPECT_GE(again, 0);
    ::close(again);
}

TEST_F(LogFileTest, ASymbolicLinkIsNotFollowed)
{
    const std::string target = path("victim");
    std::ofstream(target) << "keep\n";
    ASSERT_EQ(::symlink(target.c_str(), path("link.log").c_str()), 0);
    EXPECT_LT(log::open_owned(path("link.log").c_str()), 0);
    std::ifstream in(target);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(all, "keep\n");
}

TEST_F(LogFileTest, AHardLinkIsRefused)
{
    const std::string target = path("victim");
    std::ofstream(target) << "keep\n";
    ASSERT_EQ(::link(target.c_str(), path("hard.log").c_str()), 0);
    EXPECT_LT(log::open_owned(path("hard.log").c_str()), 0);
}

TEST_F(LogFileTest, AnotherUsersFileIsRefused)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a file to another user";
    const std::string planted = path("planted.log");
    std::ofstream(planted) << "";
    ASSERT_EQ(::chown(planted.c_str(), 65534, 65534), 0);
    EXPECT_LT(log::open_owned(planted.c_str()), 0);
}

TEST_F(LogFileTest, ADirectoryIsRefused)
{
    std::filesystem::create_directory(path("dir.log"));
    EXPECT_LT(log::open_owned(path("dir.log").c_str()), 0);
}

// Another user's FIFO under the log's name: a blocking open() of it waits
// for a reader for ever, and the daemon with it. Opened in a child, so a
// regression fails within its bound rather than hangs the suite.
TEST_F(LogFileTest, AFifoIsRefusedAtOnceWithOrWithoutAReader)
{
    const std::string fifo = path("fifo.log");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
    const auto open_in_child = [&]() -> int {
        const pid_t child = ::fork();
        if (child == 0)
            ::_exit(log::open_owned(fifo.c_str()) < 0 ? 0 : 1);
        for (int i = 0; i < 500; ++i) {  // 5 s
            int status = 0;
            if (::waitpid(child, &status, WNOHANG) == child)
                return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            ::usleep(10'000);
        }
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        return 2;
    };
    EXPECT_EQ(open_in_child(), 0) << "1: the FIFO was taken; 2: open() still blocked after 5 s";
    // With a reader the open succeeds; it is still no plain file.
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    EXPECT_EQ(open_in_child(), 0);
    ::close(reader);
}

TEST_F(LogFileTest, TheFileItTakesWritesBlocking)
{
    const int fd = log::open_owned(path("plain.log").c_str());
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ::close(fd);
}

}  // namespace
}  // namespace exitpolicy::pmix_server
