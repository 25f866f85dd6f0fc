// SPDX-License-Identifier: Apache-2.0
// front_end_test.cpp - srun's front end and the node link, over real TCP
// sockets on loopback: the same code srun and slurmstepd run, without Slurm.
#include "event_loop.hpp"
#include "spank_plugin/front_end.hpp"
#include "spank_plugin/node_link.hpp"
#include "spank_plugin/outcome_sink.hpp"
#include "protocol/channel.hpp"

#include <event2/event.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t job = 77;
constexpr std::uint32_t step = 3;

std::unique_ptr<FrontEnd> start(std::uint32_t ntasks, std::uint32_t nnodes)
{
    auto fe = FrontEnd::start({job, step, ntasks, nnodes, std::nullopt});
    EXPECT_TRUE(fe) << fe.error();
    return fe ? std::move(*fe) : nullptr;
}

// One outcome and its acknowledgement within `timeout`, as slurmstepd's
// sink sends it; the link is closed when none comes.
Result<bool> send_outcome(NodeLink& link, const protocol::Outcome& outcome, std::chrono::milliseconds timeout)
{
    if (auto posted = link.post_outcome(outcome, timeout); !posted)
        return posted;
    auto acks = link.read_acks(1, timeout);
    if (!acks)
        return Result<bool>::fail(acks.error());
    for (const protocol::Ack& ack : *acks)
        if (ack.rank == outcome.rank && ack.epoch == outcome.epoch)
            return Result<bool>::ok(true);
    link.close();
    return Result<bool>::fail("no acknowledgement of rank " + std::to_string(outcome.rank));
}

LinkSetup node(std::uint16_t port, const protocol::Secret& secret, std::uint32_t id, std::vector<std::uint32_t> ranks)
{
    LinkSetup s;
    s.host = "127.0.0.1";
    s.port = port;
    s.secret = secret;
    s.job_id = job;
    s.step_id = step;
    s.node_id = id;
    s.hostname = "node" + std::to_string(id + 1);
    s.ranks = std::move(ranks);
    return s;
}

LinkSetup node(const FrontEnd& fe, std::uint32_t id, std::vector<std::uint32_t> ranks)
{
    return node(fe.port(), fe.secret(), id, std::move(ranks));
}

protocol::Outcome outcome(std::uint32_t rank, int wait_status, std::int64_t end_us = 1000)
{
    protocol::Outcome o;
    o.rank = rank;
    o.pid = 100 + rank;
    o.wait_status = wait_status;
    o.end_time_us = end_us;
    return o;
}

NodeLink connect(const LinkSetup& s)
{
    auto link = NodeLink::connect(s, 2s);
    EXPECT_TRUE(link) << link.error();
    return link ? std::move(*link) : NodeLink{};
}

// slurmstepd takes srun's host from the job's environment: an address, never
// a name to look up (a lookup has no bound, and the user could name any).
TEST(FrontEndTest, TheNodeLinkTakesAnAddressNeverAName)
{
    auto fe = start(1, 1);
    ASSERT_TRUE(fe);
    LinkSetup s = node(*fe, 0, {0});
    s.host = "localhost";
    auto named = NodeLink::connect(s, 2s);
    ASSERT_FALSE(named);
    EXPECT_NE(named.error().find("cannot resolve"), std::string::npos) << named.error();
    s.host = "127.0.0.1";
    EXPECT_TRUE(NodeLink::connect(s, 2s));
}

TEST(FrontEndTest, CollectsEveryOutcomeFromEveryNode)
{
    auto fe = start(4, 2);
    ASSERT_TRUE(fe);
    EXPECT_GT(fe->port(), 0);
    NodeLink a = connect(node(*fe, 0, {0, 1}));
    NodeLink b = connect(node(*fe, 1, {2, 3}));
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    EXPECT_TRUE(send_outcome(a, outcome(1, 3 << 8), 2s));
    EXPECT_TRUE(send_outcome(a, outcome(1, 3 << 8), 2s));  // a retry: acknowledged, kept once
    EXPECT_TRUE(send_outcome(b, outcome(2, SIGSEGV, 500), 2s));
    EXPECT_TRUE(send_outcome(b, outcome(3, 0), 2s));

    const auto start_wait = std::chrono::steady_clock::now();
    const Collected got = fe->finish(10s);
    EXPECT_LT(std::chrono::steady_clock::now() - start_wait, 5s);  // complete: no waiting out the grace
    EXPECT_EQ(got.missing, 0u);
    EXPECT_EQ(got.nodes_reporting, 2u);
    EXPECT_EQ(got.nnodes, 2u);
    EXPECT_TRUE(got.problems.empty());
    ASSERT_EQ(got.step.tasks.size(), 4u);
    EXPECT_EQ(got.step.nodes[0], "node1");
    EXPECT_EQ(got.step.nodes[1], "node2");
    EXPECT_EQ(got.step.tasks[1].wait_status, 3 << 8);
    EXPECT_EQ(got.step.tasks[1].node, 0u);
    EXPECT_EQ(got.step.tasks[2].node, 1u);
    EXPECT_EQ(got.step.tasks[2].pid, 102);
    EXPECT_EQ(got.step.tasks[2].end_time_us, 500);

    const auto d = decide(got.step, {Policy::first_failure, 0, 1});
    ASSERT_TRUE(d);
    EXPECT_EQ(d->code, 139);
}

TEST(FrontEndTest, RanksOfANodeThatClosedEarlyAreLostOnThatNode)
{
    auto fe = start(4, 2);
    ASSERT_TRUE(fe);
    {
        NodeLink a = connect(node(*fe, 0, {0, 1}));
        NodeLink b = connect(node(*fe, 1, {2, 3}));
        EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
        EXPECT_TRUE(send_outcome(a, outcome(1, 0), 2s));
        EXPECT_TRUE(send_outcome(b, outcome(2, 0), 2s));
    }  // both close; rank 3 never came
    const auto t0 = std::chrono::steady_clock::now();
    const Collected got = fe->finish(10s);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // every node is gone: no point waiting
    EXPECT_EQ(got.missing, 1u);
    EXPECT_EQ(got.nodes_reporting, 2u);
    EXPECT_TRUE(got.step.tasks[3].lost);
    EXPECT_EQ(got.step.tasks[3].node, 1u);
    EXPECT_EQ(got.step.nodes[got.step.tasks[3].node], "node2");
    EXPECT_TRUE(got.problems.empty());  // a peer's own close is no problem
}

TEST(FrontEndTest, ANodeThatNeverCameIsCountedAndTheGraceBoundsTheWait)
{
    auto fe = start(2, 2);
    ASSERT_TRUE(fe);
    NodeLink a = connect(node(*fe, 0, {0}));
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    const Collected got = fe->finish(200ms);
    EXPECT_EQ(got.missing, 1u);
    EXPECT_EQ(got.nodes_reporting, 1u);
    EXPECT_EQ(got.step.nodes[1], "?");
}

TEST(FrontEndTest, PeersWithoutTheSecretAreTurnedAway)
{
    auto fe = start(1, 1);
    ASSERT_TRUE(fe);
    LinkSetup bad = node(*fe, 0, {0});
    bad.secret[0] ^= 1;
    const auto link = NodeLink::connect(bad, 2s);
    ASSERT_FALSE(link);
    EXPECT_EQ(link.error(), "the front end closed the connection");

    LinkSetup other_step = node(*fe, 0, {0});
    other_step.step_id = step + 1;
    const auto refused = NodeLink::connect(other_step, 2s);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error(), "the front end serves step 77.3, not this one");

    LinkSetup outside = node(*fe, 5, {0});
    EXPECT_FALSE(NodeLink::connect(outside, 2s));

    const Collected got = fe->finish(100ms);
    EXPECT_EQ(got.nodes_reporting, 0u);
    ASSERT_EQ(got.problems.size(), 2u);
    EXPECT_EQ(got.problems[0], "closed a connection: a peer failed authentication");
    EXPECT_EQ(got.problems[1], "closed a connection: node id 5 is outside the step's 1 nodes");
}

TEST(FrontEndTest, GarbageClosesThatConnectionOnly)
{
    auto fe = start(1, 1);
    ASSERT_TRUE(fe);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(fe->port());
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_EQ(::send(fd, junk, sizeof(junk), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(junk)));
    char buf[256];
    ssize_t n = 0, total = 0;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0)
        total += n;
    EXPECT_EQ(n, 0);  // the FE hung up after its challenge
    EXPECT_EQ(total, static_cast<ssize_t>(protocol::header_size + 40));
    ::close(fd);

    NodeLink a = connect(node(*fe, 0, {0}));  // the FE still serves others
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    const Collected got = fe->finish(1s);
    EXPECT_EQ(got.missing, 0u);
    ASSERT_EQ(got.problems.size(), 1u);
    EXPECT_EQ(got.problems[0], "closed a connection: not an exitpolicy frame (bad magic)");
}

// A plain TCP connection to the FE that never says a word.
int idle_connection(std::uint16_t port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Whether the FE closed this connection (its challenge may come first).
bool closed_by_peer(int fd)
{
    char buf[256];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK;
    }
}

// 1 000 connections that never speak: at most 64 of them stay open (the
// oldest are closed as new ones come), and a node that authenticates at
// once still reports, and finish() does not wait for anyone's deadline.
TEST(FrontEndTest, IdleConnectionsBeyondTheCapAreClosedAndANodeStillReports)
{
    // Both ends of every connection live in this process.
    std::size_t wanted = 1000;
    rlimit lim{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
    const rlim_t need = 2 * wanted + 200;
    if (lim.rlim_cur < need) {
        rlimit raised = lim;
        raised.rlim_cur = std::min<rlim_t>(need, lim.rlim_max);
        ::setrlimit(RLIMIT_NOFILE, &raised);
        ::getrlimit(RLIMIT_NOFILE, &raised);
        if (raised.rlim_cur < need) {
            wanted = (raised.rlim_cur - 200) / 2;
            std::printf("RLIMIT_NOFILE is %llu: %zu idle connections instead of 1000\n",
                        static_cast<unsigned long long>(raised.rlim_cur), wanted);
        }
    }
    ASSERT_GT(wanted, 2 * protocol::max_unauthenticated_channels);

    auto fe = start(2, 1);
    ASSERT_TRUE(fe);
    std::vector<int> idle;
    for (std::size_t i = 0; i < wanted; ++i) {
        const int fd = idle_connection(fe->port());
        ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
        idle.push_back(fd);
    }
    // Those beyond the cap are closed at once, long before any deadline.
    std::size_t closed = 0;
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < deadline) {
        closed = 0;
        for (int fd : idle)
            closed += closed_by_peer(fd) ? 1 : 0;
        if (closed >= wanted - protocol::max_unauthenticated_channels)
            break;
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_GE(closed, wanted - protocol::max_unauthenticated_channels);

    const auto began = std::chrono::steady_clock::now();
    NodeLink a = connect(node(*fe, 0, {0, 1}));
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    EXPECT_TRUE(send_outcome(a, outcome(1, 0), 2s));
    const Collected got = fe->finish(10s);
    EXPECT_LT(std::chrono::steady_clock::now() - began, 2s);
    EXPECT_EQ(got.missing, 0u);
    EXPECT_EQ(got.nodes_reporting, 1u);
    for (int fd : idle)
        ::close(fd);
}

// A peer that connected, sent a byte and waits is nobody yet: it costs
// srun a small read buffer, not the 64 KiB one of an authenticated link.
// Before, each cost about 73 KiB (200 of them: 14 MiB).
TEST(FrontEndTest, APeerThatSentAByteAndWaitsCostsSrunLittleMemory)
{
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "the sanitizer keeps malloc's statistics to itself";
#else
    constexpr std::size_t peers = 200;
    auto heap = [] {
        const struct mallinfo2 m = ::mallinfo2();
        return static_cast<long long>(m.uordblks + m.hblkhd);
    };
    auto fe = start(300, 150);  // a cap of 300 unauthenticated connections
    ASSERT_TRUE(fe);
    std::this_thread::sleep_for(100ms);
    const long long before = heap();
    std::vector<int> waiting;
    for (std::size_t i = 0; i < peers; ++i) {
        const int fd = idle_connection(fe->port());
        ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
        ASSERT_EQ(::send(fd, "E", 1, MSG_NOSIGNAL), 1);  // a header's first byte
        waiting.push_back(fd);
    }
    std::this_thread::sleep_for(500ms);  // the front end reads them
    const long long per_peer = (heap() - before) / static_cast<long long>(peers);
    std::size_t open = 0;
    for (int fd : waiting) {
        open += closed_by_peer(fd) ? 0 : 1;
        ::close(fd);
    }
    EXPECT_EQ(open, peers);  // none is closed: each still has its handshake's time
    EXPECT_LT(per_peer, 8 * 1024) << "bytes of srun's heap per waiting peer";
    fe->finish(0ms);
#endif
}

// srun short of descriptors: a front end whose RLIMIT_NOFILE (300) is below
// its cap of unauthenticated connections (400 for 200 nodes) while 400 idle
// peers connect. It keeps descriptors free by closing the oldest of them, so
// a node that authenticates still gets in. Before, accept failed with
// EMFILE while the idle peers held every descriptor, and the node timed out.
TEST(FrontEndTest, IdlePeersCannotTakeTheDescriptorsANodeNeeds)
{
    constexpr std::size_t idle_peers = 400;
    rlimit mine{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &mine), 0);
    if (mine.rlim_cur < idle_peers + 200) {
        rlimit raised = mine;
        raised.rlim_cur = std::min<rlim_t>(idle_peers + 200, mine.rlim_max);
        ::setrlimit(RLIMIT_NOFILE, &raised);
        ::getrlimit(RLIMIT_NOFILE, &mine);
        if (mine.rlim_cur < idle_peers + 200)
            GTEST_SKIP() << "RLIMIT_NOFILE is " << mine.rlim_cur << ": the idle peers need " << idle_peers + 200;
    }
    int up[2], down[2];
    ASSERT_EQ(::pipe(up), 0);
    ASSERT_EQ(::pipe(down), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // the front end, in a process of its own with its own limit
        ::close(up[0]);
        ::close(down[1]);
        const rlimit low{300, 300};
        if (::setrlimit(RLIMIT_NOFILE, &low) != 0)
            ::_exit(10);
        auto fe = FrontEnd::start({job, step, 2, 200, std::nullopt});
        if (!fe)
            ::_exit(11);
        const std::uint16_t port = (*fe)->port();
        const protocol::Secret secret = (*fe)->secret();
        if (::write(up[1], &port, sizeof(port)) != sizeof(port) ||
            ::write(up[1], secret.data(), secret.size()) != static_cast<ssize_t>(secret.size()))
            ::_exit(12);
        char go = 0;
        if (::read(down[0], &go, 1) != 1)
            ::_exit(13);
        const Collected got = (*fe)->finish(3s);
        ::_exit(got.missing == 0 && got.nodes_reporting == 1 ? 0 : 1);
    }
    ::close(up[1]);
    ::close(down[0]);
    // However the test ends, the front end's process reads EOF and is reaped.
    struct Reaper {
        pid_t pid;
        int down, up;
        ~Reaper()
        {
            ::close(down);
            ::close(up);
            if (pid > 0)
                ::waitpid(pid, nullptr, 0);
        }
    } reaper{child, down[1], up[0]};
    std::uint16_t port = 0;
    protocol::Secret secret{};
    ASSERT_EQ(::read(up[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    ASSERT_EQ(::read(up[0], secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
    std::vector<int> idle;
    for (std::size_t i = 0; i < idle_peers; ++i) {
        const int fd = idle_connection(port);
        ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
        idle.push_back(fd);
    }
    std::this_thread::sleep_for(300ms);
    auto link = NodeLink::connect(node(port, secret, 0, {0, 1}), 3s);
    ASSERT_TRUE(link) << link.error();
    EXPECT_TRUE(send_outcome(*link, outcome(0, 0), 2s));
    EXPECT_TRUE(send_outcome(*link, outcome(1, 0), 2s));
    for (int fd : idle)
        ::close(fd);
    ASSERT_EQ(::write(down[1], "g", 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    reaper.pid = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the front end's process: wait status " << status;
}

// What this process writes to stderr (fd 2), from any thread, until said().
class CapturedStderr {
public:
    CapturedStderr() : file_(std::tmpfile())
    {
        std::fflush(stderr);
        saved_ = ::dup(2);
        if (file_ && saved_ >= 0)
            ::dup2(::fileno(file_), 2);
    }
    ~CapturedStderr() { said(); }
    bool ok() const { return file_ && saved_ >= 0; }
    // Restores stderr and returns what was written meanwhile.
    std::string said()
    {
        std::string text;
        std::fflush(stderr);
        if (saved_ >= 0) {
            ::dup2(saved_, 2);
            ::close(saved_);
            saved_ = -1;
        }
        if (file_) {
            std::rewind(file_);
            for (int ch; (ch = std::fgetc(file_)) != EOF;)
                text.push_back(static_cast<char>(ch));
            std::fclose(file_);
            file_ = nullptr;
        }
        return text;
    }

private:
    std::FILE* file_;
    int saved_ = -1;
};

// accept() fails with EMFILE: one line on stderr for the whole episode
// (libevent's own warning came once per attempt, thousands a second), and
// once descriptors are free again the FE accepts and a node reports.
TEST(FrontEndTest, AcceptFailuresAreLoggedOnceAndTheListenerRecovers)
{
    auto fe = start(1, 1);
    ASSERT_TRUE(fe);
    // Everything the test needs while descriptors are scarce, made first.
    constexpr int attempts = 20;
    std::vector<int> clients;
    for (int i = 0; i < attempts; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        clients.push_back(fd);
    }
    CapturedStderr capture;
    ASSERT_TRUE(capture.ok());

    // No descriptor below the limit is free: accept() fails with EMFILE.
    rlimit lim{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
    const int lowest_free = ::dup(0);
    ASSERT_GE(lowest_free, 0);
    ::close(lowest_free);
    rlimit lowered = lim;
    lowered.rlim_cur = static_cast<rlim_t>(lowest_free);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(fe->port());
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int connected = 0;
    for (int fd : clients) {
        connected += ::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0 ? 1 : 0;
        std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(300ms);
    const int failed_fd = ::dup(0);  // the limit held
    ::setrlimit(RLIMIT_NOFILE, &lim);
    std::this_thread::sleep_for(300ms);  // the listener is back within its pause

    const std::string said = capture.said();
    EXPECT_EQ(failed_fd, -1);
    EXPECT_EQ(connected, attempts);
    EXPECT_LE(std::count(said.begin(), said.end(), '\n'), 1) << said.substr(0, 1000);
    EXPECT_NE(said.find("cannot accept connections: Too many open files"), std::string::npos) << said;

    NodeLink a = connect(node(*fe, 0, {0}));
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    const Collected got = fe->finish(2s);
    EXPECT_EQ(got.missing, 0u);
    for (int fd : clients)
        ::close(fd);
}

TEST(FrontEndTest, PortRangeInUseIsAClearError)
{
    auto first = FrontEnd::start({job, step, 1, 1, std::nullopt});
    ASSERT_TRUE(first);
    const std::uint16_t taken = (*first)->port();
    auto second = FrontEnd::start({job, step, 1, 1, PortRange{taken, taken}});
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error(), "cannot listen on any port of port_range " + std::to_string(taken) + "-" +
                                  std::to_string(taken) + ": Address already in use");
}

TEST(NodeLinkTest, NobodyListeningFailsWithinItsBound)
{
    std::uint16_t port = 0;
    {
        auto fe = start(1, 1);
        ASSERT_TRUE(fe);
        port = fe->port();
        fe->finish(0ms);
    }
    LinkSetup s;
    s.host = "127.0.0.1";
    s.port = port;
    const auto link = NodeLink::connect(s, 1s);
    ASSERT_FALSE(link);
    EXPECT_EQ(link.error(), "cannot connect to the front end at 127.0.0.1:" + std::to_string(port) +
                                ": Connection refused");
    s.host = "no-such-host.invalid";
    EXPECT_FALSE(NodeLink::connect(s, 1s));
}

TEST(NodeLinkTest, AFrontEndThatGoesAwayFailsTheSend)
{
    auto fe = start(2, 1);
    ASSERT_TRUE(fe);
    NodeLink a = connect(node(*fe, 0, {0, 1}));
    EXPECT_TRUE(send_outcome(a, outcome(0, 0), 2s));
    fe->finish(0ms);
    fe.reset();
    const auto sent = send_outcome(a, outcome(1, 0), 1s);
    EXPECT_FALSE(sent);
    EXPECT_FALSE(a.connected());
}

TEST(FrontEndSinkTest, PipelinesOutcomesAndFlushesThemAtTheEnd)
{
    auto fe = start(3, 1);
    ASSERT_TRUE(fe);
    FrontEndSink sink(node(*fe, 0, {0, 1, 2}), 1s, 1s);
    // Not opened yet (the first connect failed, say): the first delivery connects.
    EXPECT_TRUE(sink.deliver(outcome(0, 0), Send::now));
    EXPECT_TRUE(sink.deliver(outcome(1, 3 << 8), Send::now));
    EXPECT_TRUE(sink.deliver(outcome(2, 0), Send::now));
    EXPECT_TRUE(sink.flush(2s));  // every one acknowledged
    const Collected got = fe->finish(2s);
    EXPECT_EQ(got.missing, 0u);
    EXPECT_EQ(got.step.tasks[1].wait_status, 3 << 8);
}

TEST(FrontEndSinkTest, GivesUpOnceTheFrontEndIsGone)
{
    auto fe = start(3, 1);
    ASSERT_TRUE(fe);
    FrontEndSink sink(node(*fe, 0, {0, 1, 2}), 1s, 1s);
    EXPECT_TRUE(sink.deliver(outcome(0, 0), Send::now));
    EXPECT_TRUE(sink.flush(2s));
    const std::uint16_t port = fe->port();
    fe->finish(0ms);
    fe.reset();

    // The write may still succeed (the peer's reset comes later); flush
    // finds the outcome unacknowledged and cannot reconnect.
    (void)sink.deliver(outcome(1, 0), Send::now);
    const auto flushed = sink.flush(1s);
    ASSERT_FALSE(flushed);
    EXPECT_EQ(flushed.error(), "cannot connect to the front end at 127.0.0.1:" + std::to_string(port) +
                                   ": Connection refused");
    // No further attempt: the error says so instead of a connect failure.
    EXPECT_EQ(sink.deliver(outcome(2, 0), Send::now).error(), "gave up on the front end earlier in this step: " + flushed.error());
}

// ---- the overlay root: daemons played by protocol channels on a loop of our own ----

// A node daemon as the FE sees one: an authenticated channel that enrolls
// and records every frame that comes down to it.
struct FakeDaemon {
    std::unique_ptr<protocol::Channel> channel;
    std::vector<std::pair<protocol::Type, protocol::Bytes>> got;
    bool closed = false;

    std::size_t count(protocol::Type type) const
    {
        return static_cast<std::size_t>(
            std::count_if(got.begin(), got.end(), [type](const auto& f) { return f.first == type; }));
    }
    template <typename M>
    M last(protocol::Type type) const
    {
        for (auto it = got.rbegin(); it != got.rend(); ++it)
            if (it->first == type)
                return *M::decode(it->second);
        ADD_FAILURE() << "no " << protocol::type_name(type) << " frame";
        return M{};
    }
};

using test::Loop;

std::unique_ptr<FakeDaemon> fake_daemon(Loop& loop, const FrontEnd& fe, std::uint32_t node,
                                        std::vector<std::uint32_t> ranks, protocol::Role role = protocol::Role::daemon)
{
    auto d = std::make_unique<FakeDaemon>();
    FakeDaemon* raw = d.get();
    protocol::Hello me;
    me.role = role;
    me.node_id = node;
    me.hostname = "node" + std::to_string(node + 1);
    me.ranks = std::move(ranks);
    protocol::Channel::Handlers h;
    h.ready = [role](protocol::Channel& c) {
        if (role == protocol::Role::daemon)
            c.send(protocol::Enroll{"127.0.0.1", 1}.encode());
    };
    h.frame = [raw](protocol::Channel&, protocol::Type type, std::span<const std::uint8_t> body) {
        raw->got.emplace_back(type, protocol::Bytes(body.begin(), body.end()));
        return Result<bool>::ok(true);
    };
    h.closed = [raw](protocol::Channel&, protocol::Channel::Reason, const std::string&) { raw->closed = true; };
    auto c = protocol::Channel::connect(loop.base(), "127.0.0.1", fe.port(), fe.secret(), job, step, me, std::move(h));
    EXPECT_TRUE(c) << c.error();
    if (c)
        d->channel = std::move(*c);
    return d;
}

TEST(FrontEndOverlayTest, ALostNodeIsAnnouncedAndTheDaemonBelowItAdoptedWithWhatItMissed)
{
    // fanout 2 over 3 nodes: FE -> node1, node2; node1 -> node3 (ids 0, 1, 2).
    auto started = FrontEnd::start({job, step, 3, 3, std::nullopt, 2, 9});
    ASSERT_TRUE(started) << started.error();
    auto fe = std::move(*started);
    Loop loop;
    NodeLink stepd0 = connect(node(*fe, 0, {0}));
    NodeLink stepd1 = connect(node(*fe, 1, {1}));
    NodeLink stepd2 = connect(node(*fe, 2, {2}));
    auto d0 = fake_daemon(loop, *fe, 0, {0});
    auto d1 = fake_daemon(loop, *fe, 1, {1});
    auto d2 = fake_daemon(loop, *fe, 2, {2});
    ASSERT_TRUE(loop.run_until([&] {
        return d0->count(protocol::Type::step_map) && d1->count(protocol::Type::step_map) && d2->count(protocol::Type::step_map);
    }));
    // node3's daemon links to node1's and drops its enrollment link: not a
    // departure, its way up is node1.
    d2->channel.reset();
    // node1 dies: its daemon and its slurmstepd vanish, rank 0 unreported.
    d0->channel.reset();
    stepd0.close();
    ASSERT_TRUE(loop.run_until([&] { return d1->count(protocol::Type::node_down) == 1; }));
    const auto down = d1->last<protocol::NodeDown>(protocol::Type::node_down);
    EXPECT_EQ(down.node, 0u);
    EXPECT_EQ(down.hostname, "node1");
    EXPECT_EQ(down.ranks, std::vector<std::uint32_t>{0});
    EXPECT_EQ(down.exit_code, 9);  // lost_code

    // node3's daemon lost its parent: the FE adopts it and replays the loss.
    auto orphan = fake_daemon(loop, *fe, 2, {2}, protocol::Role::orphan);
    ASSERT_TRUE(loop.run_until([&] { return orphan->count(protocol::Type::node_down) == 1; }));
    EXPECT_EQ(orphan->last<protocol::NodeDown>(protocol::Type::node_down).node, 0u);
    EXPECT_EQ(orphan->count(protocol::Type::step_map), 0u);

    // From now on it is the FE's child: events and fence results reach it,
    // and a fence of the survivors counts it.
    d1->channel->send(protocol::FenceUp{"1-2,#1", 0, 1, protocol::Bytes{1}}.encode());
    orphan->channel->send(protocol::FenceUp{"1-2,#1", 0, 1, protocol::Bytes{2}}.encode());
    ASSERT_TRUE(loop.run_until([&] {
        return orphan->count(protocol::Type::fence_down) == 1 && d1->count(protocol::Type::fence_down) == 1;
    }));
    const auto result = orphan->last<protocol::FenceDown>(protocol::Type::fence_down);
    EXPECT_EQ(result.status, 0);
    EXPECT_EQ(result.data.size(), 2u);
    d1->channel->send(protocol::Event{1, 1, -404, 3, 3 << 8}.encode());
    ASSERT_TRUE(loop.run_until([&] { return orphan->count(protocol::Type::event) == 1; }));
    EXPECT_EQ(d1->count(protocol::Type::node_down), 1u);  // once

    const Collected got = fe->finish(0ms);
    EXPECT_TRUE(got.step.tasks[0].lost);
}

TEST(FrontEndOverlayTest, ADaemonThatDiesAloneIsNoLostNode)
{
    // Its slurmstepd still runs: the tasks' ends come by the direct path,
    // and the FE tells the other daemons of an abnormal one.
    auto started = FrontEnd::start({job, step, 2, 2, std::nullopt, 2, 9});
    ASSERT_TRUE(started) << started.error();
    auto fe = std::move(*started);
    Loop loop;
    NodeLink stepd0 = connect(node(*fe, 0, {0}));
    NodeLink stepd1 = connect(node(*fe, 1, {1}));
    auto d0 = fake_daemon(loop, *fe, 0, {0});
    auto d1 = fake_daemon(loop, *fe, 1, {1});
    ASSERT_TRUE(loop.run_until([&] { return d0->count(protocol::Type::step_map) && d1->count(protocol::Type::step_map); }));
    d0->channel.reset();
    loop.run_until([] { return false; }, 200ms);  // the FE sees it go
    EXPECT_TRUE(send_outcome(stepd0, outcome(0, SIGSEGV), 2s));
    ASSERT_TRUE(loop.run_until([&] { return d1->count(protocol::Type::event) == 1; }));
    const auto e = d1->last<protocol::Event>(protocol::Type::event);
    EXPECT_EQ(e.rank, 0u);
    EXPECT_EQ(e.code, -402);  // PMIX_ERR_PROC_ABORTED_BY_SIG
    EXPECT_EQ(e.exit_code, 139);
    stepd0.close();
    loop.run_until([] { return false; }, 200ms);
    EXPECT_EQ(d1->count(protocol::Type::node_down), 0u);  // every rank of it reported
}


// Two nodes, one rank each, both daemons linked and given the step map.
struct TwoNodes {
    std::unique_ptr<FrontEnd> fe;
    Loop loop;
    NodeLink stepd0, stepd1;
    std::unique_ptr<FakeDaemon> d0, d1;
};

std::unique_ptr<TwoNodes> two_nodes(FrontEndSetup setup)
{
    auto t = std::make_unique<TwoNodes>();
    auto started = FrontEnd::start(setup);
    EXPECT_TRUE(started) << started.error();
    if (!started)
        return nullptr;
    t->fe = std::move(*started);
    t->stepd0 = connect(node(*t->fe, 0, {0}));
    t->stepd1 = connect(node(*t->fe, 1, {1}));
    t->d0 = fake_daemon(t->loop, *t->fe, 0, {0});
    t->d1 = fake_daemon(t->loop, *t->fe, 1, {1});
    EXPECT_TRUE(t->loop.run_until(
        [&] { return t->d0->count(protocol::Type::step_map) && t->d1->count(protocol::Type::step_map); }));
    return t;
}

FrontEndSetup teardown_setup(bool recoverable)
{
    FrontEndSetup setup{job, step, 2, 2, std::nullopt, 2, 9};
    setup.recoverable = recoverable;
    setup.teardown_grace = 20ms;
    setup.kill_after = 1500ms;
    return setup;
}

// Rank 0, a PMIx client (or not), was killed by SIGSEGV on node1.
protocol::Event segfault(bool client)
{
    return protocol::Event{0, 0, -402, 139, SIGSEGV, client};
}

TEST(FrontEndOverlayTest, AFailedPmixClientTearsTheStepDownAfterTheGrace)
{
    auto t = two_nodes(teardown_setup(false));
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->d1->last<protocol::StepMap>(protocol::Type::step_map).recoverable);
    t->d0->channel->send(segfault(true).encode());
    ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::terminate) == 1; }));
    // Told first, torn down after: the event comes before the terminate.
    ASSERT_EQ(t->d1->got.front().first, protocol::Type::step_map);
    EXPECT_EQ(t->d1->got[1].first, protocol::Type::event);
    EXPECT_EQ(t->d1->got[2].first, protocol::Type::terminate);
    const auto term = t->d1->last<protocol::Terminate>(protocol::Type::terminate);
    EXPECT_EQ(term.kill_after_ms, 1500u);
    EXPECT_EQ(term.reason, "rank 0 on node1 was killed by SIGSEGV");
    EXPECT_EQ(t->d0->count(protocol::Type::terminate), 1u);
    // Further failures (the collateral) tear down nothing more.
    t->d1->channel->send(protocol::Event{1, 1, -402, 143, SIGTERM, true}.encode());
    t->loop.run_until([] { return false; }, 200ms);
    EXPECT_EQ(t->d1->count(protocol::Type::terminate), 1u);
    t->fe->finish(0ms);
}

TEST(FrontEndOverlayTest, ARecoverableStepIsToldAndRunsOnUntilAnAbort)
{
    auto t = two_nodes(teardown_setup(true));
    ASSERT_TRUE(t);
    EXPECT_TRUE(t->d1->last<protocol::StepMap>(protocol::Type::step_map).recoverable);
    t->d0->channel->send(segfault(true).encode());
    ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::event) == 1; }));
    t->loop.run_until([] { return false; }, 300ms);  // 15 times the grace
    EXPECT_EQ(t->d1->count(protocol::Type::terminate), 0u);
    // An abort ends even a recoverable step, at once.
    t->d1->channel->send(protocol::Abort{1, 7, "MPI_Abort"}.encode());
    ASSERT_TRUE(t->loop.run_until([&] { return t->d0->count(protocol::Type::terminate) == 1; }));
    EXPECT_EQ(t->d0->last<protocol::Terminate>(protocol::Type::terminate).reason,
              "rank 1 on node2 called abort with status 7");
    t->fe->finish(0ms);
}

TEST(FrontEndOverlayTest, TasksThatNeverUsedPmixTearNothingDown)
{
    auto t = two_nodes(teardown_setup(false));
    ASSERT_TRUE(t);
    t->d0->channel->send(segfault(false).encode());
    ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::event) == 1; }));
    t->loop.run_until([] { return false; }, 300ms);
    EXPECT_EQ(t->d1->count(protocol::Type::terminate), 0u);
    t->fe->finish(0ms);
}

// What a task logs (PMIx_Log: Open MPI 5's help messages, MPI_Abort's
// banner) reaches srun's stderr as the task wrote it; the plugin's own words
// from a node carry the prefix and the node's name.
TEST(FrontEndOverlayTest, ATasksLogLineIsPrintedAsTheTaskWroteIt)
{
    auto t = two_nodes(teardown_setup(false));
    ASSERT_TRUE(t);
    CapturedStderr capture;
    ASSERT_TRUE(capture.ok());
    t->d1->channel->send(protocol::Notice{1, 1, "[node2:00000] *** An error occurred in Socket closed\n"}.encode());
    t->d1->channel->send(protocol::Notice{1, 1, "no newline of its own"}.encode());
    t->d1->channel->send(protocol::Notice{1, protocol::Notice::no_rank, "the daemon's own words"}.encode());
    t->loop.run_until([] { return false; }, 300ms);
    const std::string said = capture.said();
    EXPECT_EQ(said,
              "[node2:00000] *** An error occurred in Socket closed\n"
              "no newline of its own\n"
              "exitpolicy: node2: the daemon's own words\n");
    t->fe->finish(0ms);
}

TEST(FrontEndOverlayTest, ALostNodeTearsTheStepDownUnlessItIsRecoverable)
{
    for (const bool recoverable : {false, true}) {
        auto t = two_nodes(teardown_setup(recoverable));
        ASSERT_TRUE(t);
        t->d0->channel.reset();  // node1 dies with rank 0 unreported
        t->stepd0.close();
        ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::node_down) == 1; }));
        t->loop.run_until([] { return false; }, 300ms);
        EXPECT_EQ(t->d1->count(protocol::Type::terminate), recoverable ? 0u : 1u) << recoverable;
        t->fe->finish(0ms);
    }
}

// The daemons are told once every task of the step has ended (until then a
// node whose own tasks are done stays to serve their data), or is on a node
// declared lost, whose outcome may never come.
TEST(FrontEndOverlayTest, TheDaemonsHearWhenEveryTaskHasEndedOrIsLost)
{
    {
        auto t = two_nodes(teardown_setup(true));
        ASSERT_TRUE(t);
        EXPECT_TRUE(send_outcome(t->stepd1, outcome(1, 0), 2s));
        t->loop.run_until([] { return false; }, 200ms);
        EXPECT_EQ(t->d0->count(protocol::Type::step_done), 0u) << "rank 0 still runs";
        EXPECT_TRUE(send_outcome(t->stepd0, outcome(0, 0), 2s));
        ASSERT_TRUE(t->loop.run_until(
            [&] { return t->d0->count(protocol::Type::step_done) == 1 && t->d1->count(protocol::Type::step_done) == 1; }));
        t->fe->finish(0ms);
    }
    {
        auto t = two_nodes(teardown_setup(true));
        ASSERT_TRUE(t);
        t->d0->channel.reset();  // node1 dies with rank 0 unreported
        t->stepd0.close();
        ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::node_down) == 1; }));
        EXPECT_EQ(t->d1->count(protocol::Type::step_done), 0u) << "rank 1 still runs";
        EXPECT_TRUE(send_outcome(t->stepd1, outcome(1, 0), 2s));
        ASSERT_TRUE(t->loop.run_until([&] { return t->d1->count(protocol::Type::step_done) == 1; }));
        t->fe->finish(0ms);
    }
}

// Fence instances at the root: FE -> node1 (rank 0), node2 (rank 1).
class FrontEndFenceTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        auto started = FrontEnd::start({job, step, 2, 2, std::nullopt, 2, 9});
        ASSERT_TRUE(started) << started.error();
        fe = std::move(*started);
        d0 = fake_daemon(loop, *fe, 0, {0});
        d1 = fake_daemon(loop, *fe, 1, {1});
        ASSERT_TRUE(
            loop.run_until([&] { return d0->count(protocol::Type::step_map) && d1->count(protocol::Type::step_map); }));
    }

    void up(FakeDaemon& d, const std::string& key, protocol::Bytes data, std::int32_t status = 0)
    {
        d.channel->send(protocol::FenceUp{key, status, 1, std::move(data)}.encode());
    }

    // The results of `key` that reached d, in order.
    static std::vector<protocol::FenceDown> results(const FakeDaemon& d, const std::string& key)
    {
        std::vector<protocol::FenceDown> out;
        for (const auto& [type, body] : d.got)
            if (type == protocol::Type::fence_down)
                if (auto f = protocol::FenceDown::decode(body); f && f->key == key)
                    out.push_back(*f);
        return out;
    }

    // Everything d sent so far has been handled: a fence over its own rank
    // alone completes at once, after them.
    void settle(FakeDaemon& d, std::uint32_t rank)
    {
        const std::string key = protocol::fence_key({rank}, ++barriers);
        up(d, key, {});
        ASSERT_TRUE(loop.run_until([&] { return results(*d0, key).size() == 1 && results(*d1, key).size() == 1; }));
    }

    std::unique_ptr<FrontEnd> fe;
    Loop loop;
    std::unique_ptr<FakeDaemon> d0, d1;
    std::uint64_t barriers = 0;
};

TEST_F(FrontEndFenceTest, ALateContributionToAFinishedInstanceIsDropped)
{
    up(*d0, "*#1", {1});
    up(*d1, "*#1", {2});
    ASSERT_TRUE(loop.run_until([&] { return results(*d0, "*#1").size() == 1 && results(*d1, "*#1").size() == 1; }));
    EXPECT_EQ(results(*d1, "*#1")[0].status, 0);

    // The next instance over the same ranks starts; contributions to the
    // first one come again, from both nodes (a node that timed it out, a
    // retry): the first one neither restarts nor completes a second time.
    up(*d0, "*#2", {3});
    up(*d1, "*#1", {9});
    settle(*d1, 1);
    up(*d0, "*#1", {9});
    settle(*d0, 0);
    EXPECT_EQ(results(*d0, "*#1").size(), 1u);
    EXPECT_EQ(results(*d1, "*#1").size(), 1u);
    EXPECT_TRUE(results(*d1, "*#2").empty());

    // The second one completes with its own contributions only.
    up(*d1, "*#2", {4});
    ASSERT_TRUE(loop.run_until([&] { return results(*d0, "*#2").size() == 1 && results(*d1, "*#2").size() == 1; }));
    const auto second = results(*d0, "*#2")[0];
    EXPECT_EQ(second.status, 0);
    protocol::Bytes data = second.data;
    std::sort(data.begin(), data.end());
    EXPECT_EQ(data, (protocol::Bytes{3, 4}));
}

TEST_F(FrontEndFenceTest, AContributionNamingADeadRankFailsTheInstanceAtOnce)
{
    // Rank 0 ended abnormally before anyone fenced.
    d0->channel->send(protocol::Event{0, 0, -404, 3, 3 << 8}.encode());
    ASSERT_TRUE(loop.run_until([&] { return d1->count(protocol::Type::event) == 1; }));

    // node2 fences over everyone: node1 will never contribute, and need not.
    up(*d1, "*#1", {2});
    up(*d1, "0-1,#1", {2});
    ASSERT_TRUE(loop.run_until([&] {
        return results(*d0, "*#1").size() == 1 && results(*d1, "*#1").size() == 1 &&
               results(*d0, "0-1,#1").size() == 1 && results(*d1, "0-1,#1").size() == 1;
    }));
    for (const auto* d : {d0.get(), d1.get()})
        for (const char* key : {"*#1", "0-1,#1"}) {
            EXPECT_EQ(results(*d, key)[0].status, -200) << key;  // PMIX_ERR_PROC_TERM_WO_SYNC
            EXPECT_TRUE(results(*d, key)[0].data.empty()) << key;
        }
    // A fence of the survivors goes on.
    up(*d1, "1,#1", {5});
    ASSERT_TRUE(loop.run_until([&] { return results(*d1, "1,#1").size() == 1; }));
    EXPECT_EQ(results(*d1, "1,#1")[0].status, 0);
    EXPECT_EQ(results(*d1, "1,#1")[0].data, protocol::Bytes{5});
}

TEST_F(FrontEndFenceTest, AFailedContributionFailsTheInstanceForEveryone)
{
    // node2's caller's PMIX_TIMEOUT expired before node1 contributed.
    up(*d1, "*#1", {}, -24);
    ASSERT_TRUE(loop.run_until([&] { return results(*d0, "*#1").size() == 1 && results(*d1, "*#1").size() == 1; }));
    EXPECT_EQ(results(*d0, "*#1")[0].status, -24);  // PMIX_ERR_TIMEOUT
    EXPECT_EQ(results(*d1, "*#1")[0].status, -24);
    // node1's contribution comes after all: dropped, no second result.
    up(*d0, "*#1", {1});
    settle(*d0, 0);
    EXPECT_EQ(results(*d0, "*#1").size(), 1u);
    EXPECT_EQ(results(*d1, "*#1").size(), 1u);

    // After node1 contributed, too.
    up(*d0, "*#2", {1});
    settle(*d0, 0);
    up(*d1, "*#2", {}, -24);
    ASSERT_TRUE(loop.run_until([&] { return results(*d0, "*#2").size() == 1 && results(*d1, "*#2").size() == 1; }));
    EXPECT_EQ(results(*d0, "*#2")[0].status, -24);
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
