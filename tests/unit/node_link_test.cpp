// SPDX-License-Identifier: Apache-2.0
// node_link_test.cpp - slurmstepd's link to srun's front end against a front
// end that holds the step's secret (as the job's user's srun does) and
// breaks the protocol: what it sends can cost a task's exit no more than
// the link's bound, and an acknowledgement of what was never sent is an
// error, not progress. The real front end's side: front_end_test.cpp.
#include "spank_plugin/blocking_io.hpp"
#include "spank_plugin/node_link.hpp"
#include "spank_plugin/outcome_sink.hpp"

#include "protocol/auth.hpp"
#include "protocol/channel.hpp"
#include "protocol/wire.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/ioctl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;
using io::Clock;

constexpr std::uint32_t job = 7;
constexpr std::uint32_t step = 3;

// Listens on loopback, authenticates the first node that connects exactly
// as the real front end does, then hands the connection and its seal to
// `script`.
class ScriptedFrontEnd {
public:
    using Script = std::function<void(int fd, protocol::FrameSeal& seal)>;

    explicit ScriptedFrontEnd(Script script) : script_(std::move(script))
    {
        secret_.fill(0x5a);
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), len), 0);
        EXPECT_EQ(::listen(listener_, 4), 0);
        EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len), 0);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~ScriptedFrontEnd()
    {
        ::shutdown(listener_, SHUT_RDWR);
        thread_.join();
        ::close(listener_);
    }

    LinkSetup node(std::vector<std::uint32_t> ranks) const
    {
        LinkSetup s;
        s.host = "127.0.0.1";
        s.port = port_;
        s.secret = secret_;
        s.job_id = job;
        s.step_id = step;
        s.hostname = "node1";
        s.ranks = std::move(ranks);
        return s;
    }

private:
    void serve()
    {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        protocol::tune_socket(fd);  // as the real front end: no Nagle delay
        const auto deadline = Clock::now() + 5s;
        protocol::Challenge challenge;
        challenge.nonce = *protocol::random_nonce();
        challenge.job_id = job;
        challenge.step_id = step;
        auto hello = io::write_all(fd, challenge.encode(), deadline, "node")
                         ? io::read_frame(fd, protocol::Type::hello, deadline, "node")
                         : Result<protocol::Bytes>::fail("write");
        if (auto h = hello ? protocol::Hello::decode(*hello) : Result<protocol::Hello>::fail(hello.error())) {
            protocol::Welcome welcome;
            welcome.mac = protocol::server_proof(secret_, challenge.nonce, h->nonce);
            protocol::FrameSeal seal(protocol::session_key(secret_, challenge.nonce, h->nonce), true);
            if (io::write_all(fd, welcome.encode(), deadline, "node"))
                script_(fd, seal);
        }
        ::close(fd);
    }

    Script script_;
    protocol::Secret secret_{};
    int listener_ = -1;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

protocol::Bytes sealed_ack(protocol::FrameSeal& seal, std::uint32_t rank)
{
    const protocol::Bytes frame = protocol::Ack{rank, 0}.encode();
    const protocol::Tag tag = seal.seal(frame);
    protocol::Bytes out(frame);
    out.insert(out.end(), tag.begin(), tag.end());
    return out;
}

protocol::Outcome outcome(std::uint32_t rank)
{
    protocol::Outcome o;
    o.rank = rank;
    o.pid = 100 + rank;
    o.end_time_us = 1;
    return o;
}

std::chrono::milliseconds since(Clock::time_point start)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

TEST(NodeLinkBoundTest, AFrontEndThatDribblesAcknowledgementsCannotHoldATaskExitPastTheBound)
{
    // Ten acknowledgements, each finished 600 ms after it began, with the
    // next one begun in the same write: with a fresh deadline per frame, a
    // task exit that reads what is already there waited for all of them
    // (about 6 s).
    std::promise<void> begun;
    std::atomic<bool> done{false};
    ScriptedFrontEnd fe([&](int fd, protocol::FrameSeal& seal) {
        protocol::Bytes pending = sealed_ack(seal, 1000);
        if (::send(fd, pending.data(), 1, MSG_NOSIGNAL) != 1)
            return;
        begun.set_value();
        for (std::uint32_t i = 1; i <= 10 && !done; ++i) {
            std::this_thread::sleep_for(600ms);
            protocol::Bytes out(pending.begin() + 1, pending.end());
            pending = sealed_ack(seal, 1000 + i);
            out.push_back(pending.front());
            if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size()))
                return;
        }
    });
    auto link = NodeLink::connect(fe.node({0}), 2s);
    ASSERT_TRUE(link) << link.error();
    begun.get_future().wait();
    const auto start = Clock::now();
    const auto acks = link->read_acks(10, 0ms);
    const auto took = since(start);
    done = true;
    EXPECT_LT(took, NodeLink::frame_completion + 1500ms) << "read_acks(10, 0 ms) took " << took.count() << " ms";
    // What it got in time, then the frame it could not finish: an error.
    EXPECT_FALSE(acks) << (acks ? acks->size() : 0) << " acks";
    EXPECT_FALSE(link->connected());
}

TEST(FrontEndSinkProtocolTest, AnAcknowledgementOfWhatWasNeverSentIsAnErrorNotProgress)
{
    // Answers every outcome with an acknowledgement of rank 99.
    ScriptedFrontEnd fe([](int fd, protocol::FrameSeal& seal) {
        while (io::read_frame(fd, protocol::Type::outcome, Clock::now() + 5s, "node", &seal)) {
            const protocol::Bytes ack = sealed_ack(seal, 99);
            if (!io::write_all(fd, ack, Clock::now() + 5s, "node"))
                return;
        }
    });
    FrontEndSink sink(fe.node({0, 1}), 2s, 2s);
    ASSERT_TRUE(sink.open());
    // The bad acknowledgement may already come while the outcome is written.
    if (const auto first = sink.deliver(outcome(0), Send::now); !first) {
        EXPECT_NE(first.error().find("acknowledged rank 99"), std::string::npos) << first.error();
    }
    const auto start = Clock::now();
    const auto flushed = sink.flush(5s);
    ASSERT_FALSE(flushed);
    EXPECT_NE(flushed.error().find("acknowledged rank 99 epoch 0, which this node has not sent it"), std::string::npos)
        << flushed.error();
    // Given up at the bad acknowledgement, not after waiting out the flush.
    EXPECT_LT(since(start), 4s);
    // Given up for the rest of the step.
    const auto next = sink.deliver(outcome(1), Send::now);
    ASSERT_FALSE(next);
    EXPECT_NE(next.error().find("gave up on the front end earlier in this step"), std::string::npos) << next.error();
}

TEST(FrontEndSinkProtocolTest, AcknowledgementsOfWhatWasSentAreProgress)
{
    // The same front end, answering honestly: the sink flushes clean.
    ScriptedFrontEnd fe([](int fd, protocol::FrameSeal& seal) {
        while (auto body = io::read_frame(fd, protocol::Type::outcome, Clock::now() + 5s, "node", &seal)) {
            const auto o = protocol::Outcome::decode(*body);
            if (!o || !io::write_all(fd, sealed_ack(seal, o->rank), Clock::now() + 5s, "node"))
                return;
        }
    });
    FrontEndSink sink(fe.node({0, 1}), 2s, 2s);
    ASSERT_TRUE(sink.open());
    ASSERT_TRUE(sink.deliver(outcome(0), Send::now));
    ASSERT_TRUE(sink.deliver(outcome(1), Send::now));
    const auto flushed = sink.flush(5s);
    EXPECT_TRUE(flushed) << flushed.error();  // a sink that gave up flushes nothing
}

// Answers every outcome honestly, and counts them; after the first, notes
// how many bytes were already there behind it.
struct CountingFrontEnd {
    std::atomic<int> frames{0};
    std::atomic<int> behind_first{-1};
    ScriptedFrontEnd fe{[this](int fd, protocol::FrameSeal& seal) {
        while (auto body = io::read_frame(fd, protocol::Type::outcome, Clock::now() + 5s, "node", &seal)) {
            if (frames++ == 0) {
                int available = 0;
                ::ioctl(fd, FIONREAD, &available);
                behind_first = available;
            }
            const auto o = protocol::Outcome::decode(*body);
            if (!o || !io::write_all(fd, sealed_ack(seal, o->rank), Clock::now() + 5s, "node"))
                return;
        }
    }};
};

TEST(FrontEndSinkBatchTest, HeldOutcomesGoInOneWriteWithTheNextOneSentNow)
{
    CountingFrontEnd counting;
    FrontEndSink sink(counting.fe.node({0, 1, 2}), 2s, 2s);
    ASSERT_TRUE(sink.open());
    ASSERT_TRUE(sink.deliver(outcome(0), Send::with_next));
    ASSERT_TRUE(sink.deliver(outcome(1), Send::with_next));
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(counting.frames, 0) << "held outcomes went on their own";
    ASSERT_TRUE(sink.deliver(outcome(2), Send::now));
    const auto flushed = sink.flush(5s);
    EXPECT_TRUE(flushed) << flushed.error();
    EXPECT_EQ(counting.frames, 3);
    // The two behind the first came in the same write.
    const auto sealed = static_cast<int>(outcome(1).encode().size() + protocol::Tag{}.size());
    EXPECT_GE(counting.behind_first, 2 * sealed);
}

TEST(FrontEndSinkBatchTest, FlushSendsWhatIsHeld)
{
    CountingFrontEnd counting;
    FrontEndSink sink(counting.fe.node({0, 1}), 2s, 2s);
    ASSERT_TRUE(sink.open());
    ASSERT_TRUE(sink.deliver(outcome(0), Send::with_next));
    const auto flushed = sink.flush(5s);
    EXPECT_TRUE(flushed) << flushed.error();
    EXPECT_EQ(counting.frames, 1);
}

TEST(FrontEndSinkBatchTest, OnlyASuccessWithANodeMateWaitingIsHeld)
{
    EXPECT_EQ(send_for(0, true), Send::with_next);
    EXPECT_EQ(send_for(0, false), Send::now);
    EXPECT_EQ(send_for(1 << 8, true), Send::now);   // exit 1
    EXPECT_EQ(send_for(11, true), Send::now);       // SIGSEGV
    EXPECT_EQ(send_for(1 << 8, false), Send::now);
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
