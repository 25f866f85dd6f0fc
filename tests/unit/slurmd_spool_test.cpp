// SPDX-License-Identifier: Apache-2.0
// slurmd_spool_test.cpp - finding SlurmdSpoolDir from the step's own socket
// (spank_plugin/slurmd_spool.hpp) with real sockets: one this process
// holds, as slurmstepd holds its step's, and one of the same name that
// another process holds, as another user could bind.
#include "spank_plugin/slurmd_spool.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <iterator>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

// A listening unix socket bound at `path`; the fd, or -1.
int listen_at(const std::string& path)
{
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd < 0 || path.size() >= sizeof(addr.sun_path))
        return -1;
    path.copy(addr.sun_path, path.size());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

class SlurmdSpoolTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ep-spool.XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override
    {
        for (int fd : fds)
            ::close(fd);
        std::filesystem::remove_all(dir);
    }
    void hold(const std::string& name)
    {
        const int fd = listen_at(dir + "/" + name);
        ASSERT_GE(fd, 0) << name;
        fds.push_back(fd);
    }
    std::string dir;
    std::vector<int> fds;
};

TEST_F(SlurmdSpoolTest, TheStepsOwnSocketNamesTheSpoolDirectory)
{
    hold("node7_123.4");
    EXPECT_EQ(slurmd_spool_dir(123, 4), dir);
    EXPECT_EQ(slurmd_spool_dir(123, 5), std::nullopt);
    EXPECT_EQ(slurmd_spool_dir(23, 4), std::nullopt);   // "_23.4" is not "_123.4"
    EXPECT_EQ(slurmd_spool_dir(123, 40), std::nullopt);
}

TEST_F(SlurmdSpoolTest, AHeterogeneousComponentsSocketCountsAndANodeNameMayHoldUnderscores)
{
    hold("rack_2_node_9_77.3.1");
    EXPECT_EQ(slurmd_spool_dir(77, 3), dir);
}

// Which component of a heterogeneous step of one job this slurmstepd
// serves: its socket's last part; none for a step of its own (a
// heterogeneous job's components are jobs of their own, with sockets of
// the usual name).
TEST_F(SlurmdSpoolTest, TheComponentOfAStepIsItsSocketsLastPart)
{
    hold("node2_6.0.12");
    hold("node2_7.0");
    EXPECT_EQ(step_het_component(6, 0), 12u);
    EXPECT_EQ(step_het_component(7, 0), std::nullopt);
    EXPECT_EQ(step_het_component(6, 1), std::nullopt);
    EXPECT_EQ(step_het_component(8, 0), std::nullopt);
}

TEST_F(SlurmdSpoolTest, ASocketOfTheSameNameHeldByAnotherProcessDoesNotCount)
{
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        const int fd = listen_at(dir + "/node1_55.0");
        char byte = fd >= 0 ? 'y' : 'n';
        (void)!::write(ready[1], &byte, 1);
        ::pause();
        ::_exit(0);
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(byte, 'y');
    EXPECT_EQ(slurmd_spool_dir(55, 0), std::nullopt);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

TEST_F(SlurmdSpoolTest, TheTopologyIsSlurmdsXmlWhenItIsThere)
{
    hold("node2_9.0");
    EXPECT_EQ(slurmd_topology_xml(9, 0), std::nullopt);
    std::ofstream(dir + "/hwloc_topo_whole.xml") << "<topology/>\n";
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root: only root's file is served";
    EXPECT_EQ(slurmd_topology_xml(9, 0), dir + "/hwloc_topo_whole.xml");
}

// A file others may change, or in a directory others may write to, is
// never served to the step's clients.
TEST_F(SlurmdSpoolTest, ATopologyOthersCouldChangeIsNotServed)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give the file to another user";
    hold("node2_9.0");
    const std::string xml = dir + "/hwloc_topo_whole.xml";
    std::ofstream(xml) << "<topology/>\n";
    ASSERT_EQ(::chmod(xml.c_str(), 0666), 0);
    EXPECT_EQ(slurmd_topology_xml(9, 0), std::nullopt);
    ASSERT_EQ(::chmod(xml.c_str(), 0644), 0);
    ASSERT_EQ(::chown(xml.c_str(), 4242, 4242), 0);
    EXPECT_EQ(slurmd_topology_xml(9, 0), std::nullopt);
    ASSERT_EQ(::chown(xml.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
    EXPECT_EQ(slurmd_topology_xml(9, 0), std::nullopt);
    ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
    EXPECT_EQ(slurmd_topology_xml(9, 0), xml);
}

// Another user's sockets whose paths forge lines of /proc/net/unix that
// name the inode of the socket this process holds, in a directory of
// theirs: the kernel prints a path byte for byte, newlines included, so
// each such path reads there as a second line, "0 0 0 0 0 0 INODE
// THEIR_DIR/e/x_55.0". Many of them, each in a hash bucket of its own:
// read as text, one or another comes before the real line.
TEST_F(SlurmdSpoolTest, ASocketWhosePathForgesALineOfProcNetUnixDoesNotCount)
{
    hold("node1_55.0");
    // The inode /proc/net/unix shows is the socket's, not the file's.
    const std::string link = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fds.back()));
    ASSERT_EQ(link.rfind("socket:[", 0), 0u) << link;
    const std::string inode = link.substr(8, link.size() - 9);
    const std::string theirs = dir + "/e";
    std::filesystem::create_directories(theirs);
    std::ofstream(theirs + "/hwloc_topo_whole.xml") << "<topology/>\n";
    ::chmod(dir.c_str(), 01777);  // where the other user binds

    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Another user of the node, where the test may make one.
        if (::geteuid() == 0 && (::setgid(4242) != 0 || ::setuid(4242) != 0))
            ::_exit(1);
        int bound = 0;
        for (int i = 0; i < 200; ++i) {
            const std::string prefix = dir + "/z" + std::to_string(i) + "\n0 0 0 0 0 0 " + inode + " ";
            std::error_code ec;
            std::filesystem::create_directories(prefix + theirs, ec);
            if (listen_at(prefix + theirs + "/x_55.0") >= 0)
                ++bound;
        }
        char byte = bound == 200 ? 'y' : 'n';
        (void)!::write(ready[1], &byte, 1);
        ::pause();
        ::_exit(0);
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(byte, 'y') << "the forged sockets were not all bound";
    // /proc/net/unix does hold the forged lines.
    std::ifstream in("/proc/net/unix");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\n0 0 0 0 0 0 " + inode + " " + theirs + "/x_55.0"), std::string::npos);
    EXPECT_EQ(slurmd_spool_dir(55, 0), dir);
    EXPECT_EQ(slurmd_topology_xml(55, 0), std::nullopt);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
