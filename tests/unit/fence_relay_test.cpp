// SPDX-License-Identifier: Apache-2.0
// fence_relay_test.cpp - one node's fences alone: node 1 with ranks 2 and 3
// and one child below, its links to the tree the frames it sends, kept
// here (the whole tree's fences: agent_test.cpp).
#include "fence_relay.hpp"
#include "event_loop.hpp"

#include "protocol/events.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <vector>

namespace exitpolicy::pmix_server {
namespace {

using namespace std::chrono_literals;

struct Ended {
    int status = 0;
    protocol::Bytes data;
};

class FenceRelayTest : public ::testing::Test {
protected:
    template <typename Message>
    static std::vector<Message> decoded(const std::vector<protocol::Bytes>& frames)
    {
        std::vector<Message> out;
        for (const auto& frame : frames) {
            auto m = Message::decode(std::span<const std::uint8_t>(frame).subspan(protocol::header_size));
            EXPECT_TRUE(m) << (m ? "" : m.error());
            if (m)
                out.push_back(*m);
        }
        return out;
    }
    std::vector<protocol::FenceUp> up() const { return decoded<protocol::FenceUp>(up_); }
    std::vector<protocol::FenceDown> down() const { return decoded<protocol::FenceDown>(down_); }
    FenceRelay::Done record() { return [this](int status, protocol::Bytes data) { ended.push_back({status, std::move(data)}); }; }

    test::Loop loop;
    std::vector<protocol::Bytes> up_, down_;
    std::vector<Ended> ended;
    // Every instance awaits this node's share and its child's.
    FenceRelay relay{loop.base(), {2, 3},
                     {[this](const protocol::Bytes& f) { up_.push_back(f); },
                      [this](const protocol::Bytes& f) { down_.push_back(f); },
                      [](const std::vector<std::uint32_t>&) { return std::uint32_t{2}; }, [] { return true; }}};
};

TEST_F(FenceRelayTest, AnInstanceGoesUpWhenItsSubtreeIsInAndEndsWithTheResultFromAbove)
{
    const std::string key = protocol::fence_key({}, 1);
    relay.call({}, {1}, 0, record());
    EXPECT_TRUE(up_.empty()) << "went up before the child's share";
    relay.from_below(protocol::FenceUp{key, protocol::pmix::success, 1, {7}});
    ASSERT_EQ(up().size(), 1u);
    EXPECT_EQ(up()[0].key, key);
    EXPECT_EQ(up()[0].status, protocol::pmix::success);
    EXPECT_EQ(up()[0].contributors, 2u);
    EXPECT_EQ(up()[0].data, (protocol::Bytes{1, 7}));
    EXPECT_TRUE(ended.empty());

    relay.from_above(protocol::FenceDown{key, protocol::pmix::success, {1, 7, 9}});
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].status, protocol::pmix::success);
    EXPECT_EQ(ended[0].data, (protocol::Bytes{1, 7, 9}));
    ASSERT_EQ(down().size(), 1u) << "the result goes on down to the child";
    // Over here: a late share or result of it is dropped.
    relay.from_below(protocol::FenceUp{key, protocol::pmix::success, 1, {7}});
    relay.from_above(protocol::FenceDown{key, protocol::pmix::success, {}});
    EXPECT_EQ(up_.size(), 1u);
    EXPECT_EQ(ended.size(), 1u);
    // The next call is the next instance.
    relay.call({}, {1}, 0, record());
    relay.from_below(protocol::FenceUp{protocol::fence_key({}, 2), protocol::pmix::success, 1, {}});
    ASSERT_EQ(up().size(), 2u);
    EXPECT_EQ(up()[1].key, protocol::fence_key({}, 2));
}

TEST_F(FenceRelayTest, AFenceOverARankKnownDeadFailsAtOnceHereAndBelow)
{
    relay.rank_dead(5);
    relay.call({5, 2}, {1}, 0, record());
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].status, protocol::pmix::proc_term_wo_sync);
    ASSERT_EQ(down().size(), 1u);
    EXPECT_EQ(down()[0].key, protocol::fence_key({2, 5}, 1));
    EXPECT_EQ(down()[0].status, protocol::pmix::proc_term_wo_sync);
    EXPECT_TRUE(up_.empty());
    // A fence over others goes on.
    relay.call({2, 3}, {1}, 0, record());
    EXPECT_EQ(ended.size(), 1u);
}

TEST_F(FenceRelayTest, ADeathFailsTheLocalCallerOfAnInstanceOverIt)
{
    relay.call({}, {1}, 0, record());
    relay.rank_dead(8);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].status, protocol::pmix::proc_term_wo_sync);
}

TEST_F(FenceRelayTest, AnInstanceThatFailedBeforeTheLocalCallFailsThatCallAtOnce)
{
    relay.from_above(protocol::FenceDown{protocol::fence_key({}, 1), protocol::pmix::timeout, {}});
    EXPECT_TRUE(ended.empty());
    relay.call({}, {1}, 0, record());
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].status, protocol::pmix::timeout);
    EXPECT_TRUE(up_.empty()) << "nothing goes up for an instance over";
}

TEST_F(FenceRelayTest, TheCallersTimeoutFailsTheInstanceHereBelowAndAbove)
{
    relay.call({}, {1}, 1, record());
    ASSERT_TRUE(loop.run_until([&] { return !ended.empty(); }, 5s));
    EXPECT_EQ(ended[0].status, protocol::pmix::timeout);
    ASSERT_EQ(up().size(), 1u);
    EXPECT_EQ(up()[0].status, protocol::pmix::timeout);
    ASSERT_EQ(down().size(), 1u);
    EXPECT_EQ(down()[0].status, protocol::pmix::timeout);
}

TEST_F(FenceRelayTest, ALinkGoneFailsTheInstancesThatWentThroughIt)
{
    relay.call({2}, {1}, 0, record());
    relay.call({3}, {1}, 0, record());
    relay.fail_where([](const std::vector<std::uint32_t>& ranks) { return ranks == std::vector<std::uint32_t>{3}; },
                     protocol::pmix::unreach);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].status, protocol::pmix::unreach);
    ASSERT_EQ(down().size(), 1u);
    EXPECT_EQ(down()[0].key, protocol::fence_key({3}, 1));
}

}  // namespace
}  // namespace exitpolicy::pmix_server
