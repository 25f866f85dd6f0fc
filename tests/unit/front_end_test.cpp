// front_end_test.cpp - srun's front end and the node link, over real TCP
// sockets on loopback: the same code srun and slurmstepd run, without Slurm.
#include "spank_plugin/front_end.hpp"
#include "spank_plugin/node_link.hpp"
#include "spank_plugin/outcome_sink.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

namespace exitpolicy::plugin {
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

LinkSetup node(const FrontEnd& fe, std::uint32_t id, std::vector<std::uint32_t> ranks)
{
    LinkSetup s;
    s.host = "127.0.0.1";
    s.port = fe.port();
    s.secret = fe.secret();
    s.job_id = job;
    s.step_id = step;
    s.node_id = id;
    s.hostname = "node" + std::to_string(id + 1);
    s.ranks = std::move(ranks);
    return s;
}

wire::Outcome outcome(std::uint32_t rank, int wait_status, std::int64_t end_us = 1000)
{
    wire::Outcome o;
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

TEST(FrontEndTest, CollectsEveryOutcomeFromEveryNode)
{
    auto fe = start(4, 2);
    ASSERT_TRUE(fe);
    EXPECT_GT(fe->port(), 0);
    NodeLink a = connect(node(*fe, 0, {0, 1}));
    NodeLink b = connect(node(*fe, 1, {2, 3}));
    EXPECT_TRUE(a.send_outcome(outcome(0, 0), 2s));
    EXPECT_TRUE(a.send_outcome(outcome(1, 3 << 8), 2s));
    EXPECT_TRUE(a.send_outcome(outcome(1, 3 << 8), 2s));  // a retry: acknowledged, kept once
    EXPECT_TRUE(b.send_outcome(outcome(2, SIGSEGV, 500), 2s));
    EXPECT_TRUE(b.send_outcome(outcome(3, 0), 2s));

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
        EXPECT_TRUE(a.send_outcome(outcome(0, 0), 2s));
        EXPECT_TRUE(a.send_outcome(outcome(1, 0), 2s));
        EXPECT_TRUE(b.send_outcome(outcome(2, 0), 2s));
    }  // both close; rank 3 never came
    const auto t0 = std::chrono::steady_clock::now();
    const Collected got = fe->finish(10s);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // every node is gone: no point waiting
    EXPECT_EQ(got.missing, 1u);
    EXPECT_EQ(got.nodes_reporting, 2u);
    EXPECT_TRUE(got.step.tasks[3].lost);
    EXPECT_EQ(got.step.tasks[3].node, 1u);
    EXPECT_EQ(got.step.nodes[got.step.tasks[3].node], "node2");
}

TEST(FrontEndTest, ANodeThatNeverCameIsCountedAndTheGraceBoundsTheWait)
{
    auto fe = start(2, 2);
    ASSERT_TRUE(fe);
    NodeLink a = connect(node(*fe, 0, {0}));
    EXPECT_TRUE(a.send_outcome(outcome(0, 0), 2s));
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
    EXPECT_EQ(total, static_cast<ssize_t>(wire::header_size + 40));
    ::close(fd);

    NodeLink a = connect(node(*fe, 0, {0}));  // the FE still serves others
    EXPECT_TRUE(a.send_outcome(outcome(0, 0), 2s));
    const Collected got = fe->finish(1s);
    EXPECT_EQ(got.missing, 0u);
    ASSERT_EQ(got.problems.size(), 1u);
    EXPECT_EQ(got.problems[0], "closed a connection: not an exitpolicy frame (bad magic)");
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
    EXPECT_TRUE(a.send_outcome(outcome(0, 0), 2s));
    fe->finish(0ms);
    fe.reset();
    const auto sent = a.send_outcome(outcome(1, 0), 1s);
    EXPECT_FALSE(sent);
    EXPECT_FALSE(a.connected());
}

TEST(FrontEndSinkTest, PipelinesOutcomesAndFlushesThemAtTheEnd)
{
    auto fe = start(3, 1);
    ASSERT_TRUE(fe);
    FrontEndSink sink(node(*fe, 0, {0, 1, 2}), 1s, 1s);
    // Not opened yet (the first connect failed, say): the first delivery connects.
    EXPECT_TRUE(sink.deliver(outcome(0, 0)));
    EXPECT_TRUE(sink.deliver(outcome(1, 3 << 8)));
    EXPECT_TRUE(sink.deliver(outcome(2, 0)));
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
    EXPECT_TRUE(sink.deliver(outcome(0, 0)));
    EXPECT_TRUE(sink.flush(2s));
    const std::uint16_t port = fe->port();
    fe->finish(0ms);
    fe.reset();

    // The write may still succeed (the peer's reset comes later); flush
    // finds the outcome unacknowledged and cannot reconnect.
    (void)sink.deliver(outcome(1, 0));
    const auto flushed = sink.flush(1s);
    ASSERT_FALSE(flushed);
    EXPECT_EQ(flushed.error(), "cannot connect to the front end at 127.0.0.1:" + std::to_string(port) +
                                   ": Connection refused");
    EXPECT_TRUE(sink.gave_up());
    // No further attempt: the error says so instead of a connect failure.
    EXPECT_EQ(sink.deliver(outcome(2, 0)).error(), "gave up on the front end earlier in this step");
}

}  // namespace
}  // namespace exitpolicy::plugin
