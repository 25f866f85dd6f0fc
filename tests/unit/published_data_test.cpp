// SPDX-License-Identifier: Apache-2.0
// published_data_test.cpp - what the root keeps of PMIx_Publish, alone: real
// requests in, the replies taken as they would be routed to their nodes.
#include "spank_plugin/published_data.hpp"

#include "protocol/events.hpp"
#include "protocol/wire.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

struct Replies {
    PublishedData data{[this](std::uint32_t node, const protocol::Bytes& frame) {
        auto reply = protocol::DataReply::decode(std::span<const std::uint8_t>(frame).subspan(protocol::header_size));
        ASSERT_TRUE(reply);
        to.emplace_back(node, std::move(*reply));
    }};
    std::vector<std::pair<std::uint32_t, protocol::DataReply>> to;
};

protocol::DataRequest request(protocol::DataRequest::Op op, std::uint32_t rank, std::vector<std::string> keys)
{
    protocol::DataRequest r;
    r.op = op;
    r.id = rank + 100;
    r.node = rank;  // one rank per node
    r.rank = rank;
    r.keys = std::move(keys);
    return r;
}

TEST(PublishedDataTest, ALookupThatDoesNotWaitIsAnsweredAtOnceWithWhatThereIs)
{
    using Op = protocol::DataRequest::Op;
    Replies r;
    auto publish = request(Op::publish, 0, {"a"});
    publish.values = {{1}};
    r.data.request(publish);
    r.data.request(request(Op::lookup, 1, {"a", "b"}));
    r.data.request(request(Op::lookup, 2, {"b"}));
    ASSERT_EQ(r.to.size(), 3u);
    EXPECT_EQ(r.to[1].first, 1u);
    EXPECT_EQ(r.to[1].second.keys, std::vector<std::string>{"a"});
    EXPECT_EQ(r.to[1].second.status, 0);
    EXPECT_EQ(r.to[2].first, 2u);
    EXPECT_EQ(r.to[2].second.status, protocol::pmix::not_found);
}

TEST(PublishedDataTest, AnUnpublishTakesBackTheAskingRanksKeysOnly)
{
    using Op = protocol::DataRequest::Op;
    Replies r;
    auto mine = request(Op::publish, 0, {"mine"});
    mine.values = {{1}};
    auto theirs = request(Op::publish, 1, {"theirs"});
    theirs.values = {{2}};
    r.data.request(mine);
    r.data.request(theirs);
    r.data.request(request(Op::unpublish, 0, {}));
    r.data.request(request(Op::lookup, 2, {"mine", "theirs"}));
    ASSERT_EQ(r.to.size(), 4u);
    EXPECT_EQ(r.to[3].second.keys, std::vector<std::string>{"theirs"});
    EXPECT_EQ(r.to[3].second.ranks, std::vector<std::uint32_t>{1});
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
