// SPDX-License-Identifier: Apache-2.0
// log_test.cpp - the daemon's log file in a directory others may share
// (pmix_server/log.hpp): no link is followed, no file of another's is taken.
#include "pmix_server/log.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
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

}  // namespace
}  // namespace exitpolicy::pmix_server
