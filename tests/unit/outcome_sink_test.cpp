// SPDX-License-Identifier: Apache-2.0
// outcome_sink_test.cpp - what the slurmstepd side reads before it registers
// its sinks (the bootstrap variable), and the node daemon's sink against a
// fake daemon on a real Unix socket. (The daemon's ready line: in
// daemon_link_test.cpp.)
#include "spank_plugin/daemon_link.hpp"
#include "spank_plugin/outcome_sink.hpp"

#include "protocol/auth.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <utility>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;

const std::string secret_hex(64, 'a');

TEST(BootstrapTest, ReadsThePortTheSecretAndThePmixFanout)
{
    auto b = parse_bootstrap("1:4242:" + secret_hex);
    ASSERT_TRUE(b) << b.error();
    EXPECT_EQ(b->port, 4242);
    EXPECT_EQ(b->secret, *protocol::secret_from_hex(secret_hex));
    EXPECT_FALSE(b->pmix);

    b = parse_bootstrap("1:4242:" + secret_hex + ":pmix:32");
    ASSERT_TRUE(b) << b.error();
    EXPECT_TRUE(b->pmix);
    EXPECT_EQ(b->fanout, 32u);
}

// A heterogeneous step's: the front end, its components placed by what
// each node says, and no PMIx service.
TEST(BootstrapTest, AHeterogeneousStepsAsksForNoPmixService)
{
    auto b = parse_bootstrap("1:4242:" + secret_hex + ":het");
    ASSERT_TRUE(b) << b.error();
    EXPECT_TRUE(b->heterogeneous);
    EXPECT_FALSE(b->pmix);
    EXPECT_FALSE(parse_bootstrap("1:4242:" + secret_hex)->heterogeneous);
    EXPECT_FALSE(parse_bootstrap("1:4242:" + secret_hex + ":pmix:32")->heterogeneous);
}

TEST(BootstrapTest, WithoutAFrontEndToReachItFailsAndNeverThrowsNorShowsTheSecret)
{
    for (const std::string& bad : std::vector<std::string>{"", "1", "1:4242", "2:4242:" + secret_hex, "1::" + secret_hex,
                                  "1:0:" + secret_hex, "1:65536:" + secret_hex, "1:-1:" + secret_hex,
                                  "1:42x:" + secret_hex, "1: 42:" + secret_hex, "1:99999999999999999999:" + secret_hex,
                                  "1:4242:" + secret_hex.substr(1), "1:4242:" + std::string(64, 'z')}) {
        const auto b = parse_bootstrap(bad);
        ASSERT_FALSE(b) << bad;
        EXPECT_EQ(b.error().find(secret_hex.substr(0, 16)), std::string::npos) << b.error();
    }
    EXPECT_EQ(parse_bootstrap("1:42x:" + secret_hex).error(), "its port is not a port number");
}

TEST(BootstrapTest, AMalformedPmixPartStillGivesTheFrontEnd)
{
    for (const std::string tail : {":pmix:", ":pmix:x", ":pmix:1", ":pmix:-4", ":pmix:4x", ":pmix:99999999999",
                                   ":other:4", ":pmix", ":pmix:4:more"}) {
        const auto b = parse_bootstrap("1:4242:" + secret_hex + tail);
        ASSERT_TRUE(b) << tail << ": " << b.error();
        EXPECT_EQ(b->port, 4242) << tail;
        EXPECT_TRUE(b->pmix) << tail;
        EXPECT_FALSE(b->fanout) << tail;
    }
}

// A node daemon's end of its control link: reads outcomes and answers each
// with what `answer` says. Told to stop, it acknowledges that, says which
// outcomes srun has (`on_stop`; none: it says nothing) and closes.
class FakeDaemon {
public:
    explicit FakeDaemon(std::function<protocol::Ack(const protocol::Outcome&)> answer,
                        std::optional<std::vector<protocol::Ack>> on_stop = std::nullopt)
        : answer_(std::move(answer)), on_stop_(std::move(on_stop))
    {
        int pair[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
        control_ = pair[0];
        ::fcntl(control_, F_SETFL, ::fcntl(control_, F_GETFL) | O_NONBLOCK);
        served_ = pair[1];
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeDaemon()
    {
        stop_ = true;
        thread_.join();
        if (control_ >= 0)
            ::close(control_);
    }
    // Root's end, which the sink borrows.
    int control() const { return control_; }
    // Root's end, for stop_daemon to close.
    LaunchedDaemon launched()
    {
        LaunchedDaemon d;
        d.control.reset(std::exchange(control_, -1));
        return d;
    }
    std::atomic<int> outcomes{0};

private:
    bool read_exact(int fd, std::uint8_t* out, std::size_t size)
    {
        while (size > 0) {
            pollfd p{fd, POLLIN, 0};
            if (stop_ || ::poll(&p, 1, 20) < 0)
                return false;
            if (!(p.revents & (POLLIN | POLLHUP)))
                continue;
            const ssize_t n = ::recv(fd, out, size, 0);
            if (n <= 0)
                return false;
            out += n;
            size -= static_cast<std::size_t>(n);
        }
        return true;
    }

    void serve()
    {
        const int fd = served_;
        std::uint8_t head[protocol::header_size];
        while (read_exact(fd, head, sizeof(head))) {
            const auto h = protocol::decode_header(std::span<const std::uint8_t, protocol::header_size>(head, sizeof(head)));
            if (!h)
                break;
            protocol::Bytes body(h->length);
            if (!read_exact(fd, body.data(), body.size()))
                break;
            if (h->type == protocol::Type::stop) {
                protocol::Bytes said = protocol::Ack{}.encode();
                if (on_stop_) {
                    const protocol::Bytes acks = protocol::Acks{*on_stop_}.encode();
                    said.insert(said.end(), acks.begin(), acks.end());
                }
                (void)::send(fd, said.data(), said.size(), MSG_NOSIGNAL);
                break;
            }
            const auto o = protocol::Outcome::decode(body);
            if (!o)
                break;
            ++outcomes;
            const protocol::Bytes ack = answer_(*o).encode();
            if (::send(fd, ack.data(), ack.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(ack.size()))
                break;
        }
        ::close(fd);
    }

    std::function<protocol::Ack(const protocol::Outcome&)> answer_;
    std::optional<std::vector<protocol::Ack>> on_stop_;
    int control_ = -1;
    int served_ = -1;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

protocol::Outcome outcome(std::uint32_t rank, std::uint32_t epoch)
{
    protocol::Outcome o;
    o.rank = rank;
    o.epoch = epoch;
    o.pid = 100 + std::int64_t{rank};
    return o;
}

TEST(DaemonSinkTest, AnAckThatNamesTheOutcomeSentIsADelivery)
{
    FakeDaemon daemon([](const protocol::Outcome& o) { return protocol::Ack{o.rank, o.epoch}; });
    DaemonSink sink(daemon.control(), 2s);
    EXPECT_TRUE(sink.deliver(outcome(0, 0), Send::now));
    EXPECT_TRUE(sink.deliver(outcome(1, 3), Send::now));
    EXPECT_EQ(daemon.outcomes, 2);
}

TEST(DaemonSinkTest, AnAckOfAnotherRankIsNoAck)
{
    FakeDaemon daemon([](const protocol::Outcome& o) { return protocol::Ack{o.rank + 1, o.epoch}; });
    DaemonSink sink(daemon.control(), 2s);
    const auto delivered = sink.deliver(outcome(4, 1), Send::now);
    ASSERT_FALSE(delivered);
    EXPECT_EQ(delivered.error(), "the node daemon acknowledged rank 5 epoch 1, not rank 4 epoch 1");
    // It gave up: the next outcome goes to the next sink at once.
    EXPECT_EQ(sink.deliver(outcome(5, 1), Send::now).error(), "the node daemon failed earlier in this step");
    EXPECT_EQ(daemon.outcomes, 1);
}

TEST(DaemonSinkTest, AnAckOfAnotherEpochIsNoAck)
{
    FakeDaemon daemon([](const protocol::Outcome& o) { return protocol::Ack{o.rank, o.epoch + 1}; });
    DaemonSink sink(daemon.control(), 2s);
    const auto delivered = sink.deliver(outcome(4, 1), Send::now);
    ASSERT_FALSE(delivered);
    EXPECT_EQ(delivered.error(), "the node daemon acknowledged rank 4 epoch 2, not rank 4 epoch 1");
}

// The daemon's ack says only that it has an outcome: what it took and never
// said, on its way out, that srun has goes the direct way (slurmstepd.cpp's
// exit). Before, slurmstepd forgot an outcome once its daemon had it.
TEST(DaemonSinkTest, WhatTheDaemonTookAndSrunNeverConfirmedIsForTheDirectWay)
{
    FakeDaemon daemon([](const protocol::Outcome& o) { return protocol::Ack{o.rank, o.epoch}; },
                      std::vector<protocol::Ack>{{1, 0}, {7, 0}});
    DaemonSink sink(daemon.control(), 2s);
    for (std::uint32_t r : {0u, 1u, 2u})
        ASSERT_TRUE(sink.deliver(outcome(r, 0), Send::now));
    LaunchedDaemon launched = daemon.launched();
    const auto confirmed = stop_daemon(launched, 2s, 3);
    ASSERT_EQ(confirmed.size(), 2u);
    EXPECT_EQ(confirmed[0].rank, 1u);
    const auto resend = sink.unconfirmed(confirmed);
    ASSERT_EQ(resend.size(), 2u);
    EXPECT_EQ(resend[0].rank, 0u);
    EXPECT_EQ(resend[1].rank, 2u);
    EXPECT_EQ(launched.control.get(), -1);
}

TEST(DaemonSinkTest, ADaemonThatSaysNothingOnItsWayOutConfirmsNothing)
{
    FakeDaemon daemon([](const protocol::Outcome& o) { return protocol::Ack{o.rank, o.epoch}; });
    DaemonSink sink(daemon.control(), 2s);
    for (std::uint32_t r : {3u, 4u})
        ASSERT_TRUE(sink.deliver(outcome(r, 1), Send::now));
    LaunchedDaemon launched = daemon.launched();
    EXPECT_TRUE(stop_daemon(launched, 2s, 2).empty());
    EXPECT_EQ(sink.unconfirmed({}).size(), 2u);
}

// A daemon (the job's user's process) that answers Stop with a flood of
// Acks frames: root keeps no more than the node's tasks could have, each
// once, and reads the rest within its bound. Before, it kept every one
// (426 MiB in a second in a probe).
TEST(DaemonSinkTest, AFloodOfAcksOnTheWayOutIsNeverKept)
{
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    std::atomic<std::size_t> sent{0};
    std::thread flood([fd = pair[1], &sent] {
        std::vector<protocol::Ack> list;
        for (std::uint32_t r = 0; r < 8000; ++r)
            list.push_back({r, 0});
        const protocol::Bytes frame = protocol::Acks{list}.encode();
        const auto until = std::chrono::steady_clock::now() + 3s;
        while (std::chrono::steady_clock::now() < until) {
            const ssize_t n = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
            if (n <= 0)
                break;
            sent += static_cast<std::size_t>(n);
        }
        ::close(fd);
    });
    LaunchedDaemon launched;
    launched.control.reset(pair[0]);
    const auto confirmed = stop_daemon(launched, 1s, 4);
    flood.join();
    EXPECT_EQ(confirmed.size(), 4u);
    std::set<std::uint32_t> ranks;
    for (const auto& a : confirmed)
        ranks.insert(a.rank);
    EXPECT_EQ(ranks.size(), confirmed.size());
    EXPECT_GT(sent.load(), std::size_t{1} << 20) << "the flood was too small to tell";
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
