// SPDX-License-Identifier: Apache-2.0
// fences_test.cpp - the fence bookkeeping shared by srun's front end and the
// node daemons (protocol/fences.hpp).
#include "protocol/fences.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace exitpolicy::protocol {
namespace {

FenceKey key_of(const std::string& key)
{
    return *parse_fence_key(key);
}

// 7 nodes, fan-out 2: FE -> {0, 1}; 0 -> {2, 3}; 1 -> {4, 5}; 2 -> {6}.
// Two ranks per node: rank r on node r / 2.
std::vector<std::uint32_t> two_per_node(std::uint32_t nnodes)
{
    std::vector<std::uint32_t> rank_node;
    for (std::uint32_t n = 0; n < nnodes; ++n)
        rank_node.insert(rank_node.end(), {n, n});
    return rank_node;
}

TEST(FencesTest, ExpectedCountsOwnTasksAndChildrenWithParticipants)
{
    Tree tree(7, 2);
    const auto rank_node = two_per_node(7);
    // Everyone: the FE awaits its two children; node 0 itself and its two.
    EXPECT_EQ(fence_expected(tree, rank_node, std::nullopt, {}), 2u);
    EXPECT_EQ(fence_expected(tree, rank_node, 0u, {}), 3u);
    EXPECT_EQ(fence_expected(tree, rank_node, 2u, {}), 2u);
    EXPECT_EQ(fence_expected(tree, rank_node, 6u, {}), 1u);
    // Ranks 1 (node 0) and 12 (node 6, below 2, below 0): the FE awaits 0
    // only; node 0 its own and 2's; node 1 nothing.
    const std::vector<std::uint32_t> some{1, 12};
    EXPECT_EQ(fence_expected(tree, rank_node, std::nullopt, some), 1u);
    EXPECT_EQ(fence_expected(tree, rank_node, 0u, some), 2u);
    EXPECT_EQ(fence_expected(tree, rank_node, 2u, some), 1u);
    EXPECT_EQ(fence_expected(tree, rank_node, 1u, some), 0u);
    // Node 2 leaves: 0 adopts 6, and awaits it directly.
    tree.leave(2);
    EXPECT_EQ(fence_expected(tree, rank_node, 0u, some), 2u);
    EXPECT_EQ(fence_expected(tree, rank_node, 0u, {0}), 1u);
    // Ranks beyond the map are nobody's.
    EXPECT_EQ(fence_expected(tree, rank_node, std::nullopt, {99}), 0u);
}

// What fence_expected must count, said with the tree's routing: one for
// `at`'s own participants, one per distinct next hop from `at` towards a
// node holding one.
std::uint32_t expected_by_routing(const Tree& tree, const std::vector<std::uint32_t>& rank_node,
                                  std::optional<std::uint32_t> at, const std::vector<std::uint32_t>& ranks)
{
    std::set<std::uint32_t> holders, hops;
    for (std::uint32_t r = 0; r < rank_node.size(); ++r)
        if (takes_part(ranks, r))
            holders.insert(rank_node[r]);
    for (std::uint32_t node : holders)
        if (node != at)
            if (auto hop = tree.next_hop(at, node))
                hops.insert(*hop);
    return static_cast<std::uint32_t>(hops.size()) + (at && holders.count(*at) ? 1 : 0);
}

TEST(FencesTest, ExpectedAgreesWithRoutingOnTreesWithDepartures)
{
    std::mt19937 engine(20261124);
    auto random = [&] { return static_cast<std::uint32_t>(engine()); };
    for (int round = 0; round < 300; ++round) {
        const std::uint32_t nnodes = 1 + random() % 80;
        Tree tree(nnodes, 1 + random() % 6);
        std::vector<std::uint32_t> rank_node;
        for (std::uint32_t n = 0; n < nnodes; ++n)
            rank_node.insert(rank_node.end(), random() % 3, n);  // some nodes hold none
        for (std::uint32_t i = random() % (nnodes / 3 + 1); i > 0; --i)
            tree.leave(random() % nnodes);
        std::vector<std::uint32_t> ranks;
        if (random() % 2)
            for (std::uint32_t r = 0; r < rank_node.size(); ++r)
                if (random() % 4 == 0)
                    ranks.push_back(r);
        std::vector<std::optional<std::uint32_t>> places{std::nullopt};
        for (std::uint32_t n = 0; n < nnodes; ++n)
            places.push_back(n);
        for (const auto& at : places)
            ASSERT_EQ(fence_expected(tree, rank_node, at, ranks), expected_by_routing(tree, rank_node, at, ranks))
                << "round " << round << ", at " << (at ? std::to_string(*at) : "FE");
    }
}

TEST(FencesTest, NamesDeadAndTakesPart)
{
    EXPECT_FALSE(names_dead({}, {}));
    EXPECT_TRUE(names_dead({}, {3}));  // everyone includes 3
    EXPECT_TRUE(names_dead({1, 3}, {3}));
    EXPECT_FALSE(names_dead({1, 4}, {3}));
    EXPECT_TRUE(takes_part({}, 9));
    EXPECT_TRUE(takes_part({2, 9}, 9));
    EXPECT_FALSE(takes_part({2, 8}, 9));
}

struct Caller {
    int calls = 0;
};

TEST(FencesTest, AnInstanceGathersUntilItsLastContribution)
{
    FenceTable<Caller> t;
    const std::string key = fence_key({}, 1);
    const auto id = key_of(key);
    int opened = 0;
    auto& f = t.open(key, id, [&] {
        ++opened;
        return 2u;
    });
    EXPECT_FALSE(FenceTable<Caller>::add(f, std::vector<std::uint8_t>{'a'}));
    auto& same = t.open(key, id, [&] {
        ++opened;
        return 9u;
    });
    EXPECT_EQ(&same, &f);
    EXPECT_EQ(opened, 1);  // expected() only on the first contribution
    EXPECT_TRUE(FenceTable<Caller>::add(same, std::vector<std::uint8_t>{'b'}));
    EXPECT_EQ(f.data, (Bytes{'a', 'b'}));
    EXPECT_TRUE(t.in_progress(key));

    auto over = t.finish(key, id);
    ASSERT_TRUE(over);
    EXPECT_EQ(over->data, (Bytes{'a', 'b'}));
    EXPECT_FALSE(t.in_progress(key));
    EXPECT_TRUE(t.finished(id));
    EXPECT_EQ(t.find(key), nullptr);
    // Finishing again (a late result) finds nothing in progress.
    EXPECT_FALSE(t.finish(key, id));
}

TEST(FencesTest, AnInstanceFinishedBeforeItStartedHereStaysFinished)
{
    FenceTable<> t;
    const std::string key = fence_key({0, 3}, 2);
    const auto id = key_of(key);
    EXPECT_FALSE(t.finish(key, id));  // failed everywhere before any contribution here
    EXPECT_TRUE(t.finished(id));
    EXPECT_FALSE(t.finished(key_of(fence_key({0, 3}, 1))));
    EXPECT_FALSE(t.finished(key_of(fence_key({0, 3}, 3))));
}

TEST(FencesTest, AffectedPicksInstancesByTheirParticipants)
{
    FenceTable<> t;
    for (const auto& key : {fence_key({}, 1), fence_key({1, 2}, 1), fence_key({4, 5}, 1)})
        t.open(key, key_of(key), [] { return 1u; });
    auto over_2 = t.affected([](const std::vector<std::uint32_t>& ranks) { return takes_part(ranks, 2); });
    std::sort(over_2.begin(), over_2.end());
    auto want = std::vector<std::string>{fence_key({}, 1), fence_key({1, 2}, 1)};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(over_2, want);
    EXPECT_EQ(t.affected([](const auto&) { return true; }).size(), 3u);
}

}  // namespace
}  // namespace exitpolicy::protocol
