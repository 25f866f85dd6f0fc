// SPDX-License-Identifier: Apache-2.0
// report_file_test.cpp - the JSON report's file in a directory others
// share (spank_plugin/report_file.hpp): what another user planted under its
// name is neither written through, nor waited on, nor written into.
#include "spank_plugin/report_file.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace exitpolicy::spank_plugin {
namespace {

class ReportFileTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ep-report-test.XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir = tmpl;
        ::chmod(dir.c_str(), 01777);
    }
    void TearDown() override { std::filesystem::remove_all(dir); }
    std::string path(const char* name) const { return dir + "/" + name; }
    static std::string read(const std::string& p)
    {
        std::ifstream in(p);
        return {std::istreambuf_iterator<char>(in), {}};
    }
    // write_report_file in a child, bounded: 0 written, 1 refused, 2 still
    // blocked after 5 s (the child is killed).
    static int write_in_child(const std::string& p, std::string* why = nullptr)
    {
        int pipefd[2];
        if (::pipe(pipefd) != 0)
            return -1;
        const pid_t child = ::fork();
        if (child == 0) {
            const auto written = write_report_file(p, "{}\n");
            (void)!::write(pipefd[1], written.error().data(), written.error().size());
            ::_exit(written ? 0 : 1);
        }
        ::close(pipefd[1]);
        int result = 2;
        for (int i = 0; i < 500; ++i, ::usleep(10'000)) {
            int status = 0;
            if (::waitpid(child, &status, WNOHANG) == child) {
                result = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                break;
            }
        }
        if (result == 2) {
            ::kill(child, SIGKILL);
            ::waitpid(child, nullptr, 0);
        }
        char buf[256] = {};
        const ssize_t n = ::read(pipefd[0], buf, sizeof(buf) - 1);
        if (why && n > 0)
            *why = std::string(buf, static_cast<std::size_t>(n));
        ::close(pipefd[0]);
        return result;
    }
    std::string dir;
};

TEST_F(ReportFileTest, ANewFileIsWrittenWholeAndAnOldOneOfTheUsersReplaced)
{
    ASSERT_TRUE(write_report_file(path("r.json"), "{\"a\": 1}\n"));
    EXPECT_EQ(read(path("r.json")), "{\"a\": 1}\n");
    struct stat st{};
    ASSERT_EQ(::stat(path("r.json").c_str(), &st), 0);
    const mode_t mask = ::umask(0);
    ::umask(mask);
    EXPECT_EQ(st.st_mode & 0777, 0644u & ~mask);
    EXPECT_TRUE(write_report_file(path("r.json"), "{}\n"));
    EXPECT_EQ(read(path("r.json")), "{}\n");  // truncated, not appended to
    const int fd = ::open(path("r.json").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ::close(fd);
}

TEST_F(ReportFileTest, AFifoNeverHoldsItWithOrWithoutAReader)
{
    ASSERT_EQ(::mkfifo(path("fifo.json").c_str(), 0666), 0);
    std::string why;
    EXPECT_EQ(write_in_child(path("fifo.json"), &why), 1) << "2: still blocked after 5 s";
    EXPECT_NE(why.find("FIFO"), std::string::npos) << why;
    const int reader = ::open(path("fifo.json").c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(reader, 0);
    EXPECT_EQ(write_in_child(path("fifo.json"), &why), 1);
    EXPECT_NE(why.find("FIFO"), std::string::npos) << why;
    char byte = 0;
    EXPECT_LE(::read(reader, &byte, 1), 0) << "the report went into another user's FIFO";
    ::close(reader);
}

TEST_F(ReportFileTest, ASymbolicLinkIsNotFollowed)
{
    const std::string target = path("theirs");
    std::ofstream(target) << "";
    ASSERT_EQ(::symlink(target.c_str(), path("link.json").c_str()), 0);
    const auto written = write_report_file(path("link.json"), "{}\n");
    ASSERT_FALSE(written);
    EXPECT_NE(written.error().find("symbolic link"), std::string::npos) << written.error();
    EXPECT_EQ(read(target), "");
}

TEST_F(ReportFileTest, ADirectoryOrAHardLinkIsRefused)
{
    std::filesystem::create_directory(path("d.json"));
    EXPECT_FALSE(write_report_file(path("d.json"), "{}\n"));
    std::ofstream(path("mine")) << "keep\n";
    ASSERT_EQ(::link(path("mine").c_str(), path("hard.json").c_str()), 0);
    EXPECT_FALSE(write_report_file(path("hard.json"), "{}\n"));
    EXPECT_EQ(read(path("mine")), "keep\n");
}

TEST_F(ReportFileTest, AnotherUsersFileIsNeverWrittenInto)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to act as two users";
    // uid 4242's file, writable by all, where uid 65534 wants its report.
    const std::string planted = path("r.json");
    std::ofstream(planted) << "";
    ASSERT_EQ(::chown(planted.c_str(), 4242, 4242), 0);
    ASSERT_EQ(::chmod(planted.c_str(), 0666), 0);
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0)
            ::_exit(3);
        const auto written = write_report_file(planted, "{\"secret\": 1}\n");
        (void)!::write(pipefd[1], written.error().data(), written.error().size());
        ::_exit(written ? 0 : 1);
    }
    ::close(pipefd[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    char buf[128] = {};
    (void)!::read(pipefd[0], buf, sizeof(buf) - 1);
    ::close(pipefd[0]);
    EXPECT_EQ(WEXITSTATUS(status), 1);
    EXPECT_NE(std::string(buf).find("uid 4242"), std::string::npos) << buf;
    EXPECT_EQ(read(planted), "");
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
