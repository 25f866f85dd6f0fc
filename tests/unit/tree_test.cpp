// SPDX-License-Identifier: Apache-2.0
// tree_test.cpp - routes in the overlay tree.
#include "protocol/tree.hpp"

#include <gtest/gtest.h>

namespace exitpolicy::protocol {
namespace {

using Nodes = std::vector<std::uint32_t>;

TEST(TreeTest, BinaryTreeOfSevenNodes)
{
    // FE -> 0, 1; 0 -> 2, 3; 1 -> 4, 5; 2 -> 6
    const Tree t(7, 2);
    EXPECT_EQ(t.children(std::nullopt), (Nodes{0, 1}));
    EXPECT_EQ(t.children(0), (Nodes{2, 3}));
    EXPECT_EQ(t.children(1), (Nodes{4, 5}));
    EXPECT_EQ(t.children(2), (Nodes{6}));
    EXPECT_EQ(t.children(3), Nodes{});
    EXPECT_EQ(t.parent(0), std::nullopt);
    EXPECT_EQ(t.parent(1), std::nullopt);
    EXPECT_EQ(t.parent(3), 0u);
    EXPECT_EQ(t.parent(5), 1u);
    EXPECT_EQ(t.parent(6), 2u);
    EXPECT_EQ(t.next_hop(std::nullopt, 6), 0u);
    EXPECT_EQ(t.next_hop(0, 6), 2u);
    EXPECT_EQ(t.next_hop(2, 6), 6u);
    EXPECT_EQ(t.next_hop(1, 6), std::nullopt);
    EXPECT_EQ(t.next_hop(6, 6), std::nullopt);
    EXPECT_EQ(t.next_hop(std::nullopt, 7), std::nullopt);
    EXPECT_TRUE(t.in_subtree(6, 0));
    EXPECT_TRUE(t.in_subtree(6, 6));
    EXPECT_FALSE(t.in_subtree(4, 0));
    EXPECT_TRUE(t.in_subtree(4, std::nullopt));
}

TEST(TreeTest, AFanOutOfAtLeastTheNodeCountIsAStar)
{
    const Tree t(4, 32);
    EXPECT_EQ(t.children(std::nullopt), (Nodes{0, 1, 2, 3}));
    for (std::uint32_t n = 0; n < 4; ++n) {
        EXPECT_EQ(t.parent(n), std::nullopt);
        EXPECT_TRUE(t.children(n).empty());
        EXPECT_EQ(t.next_hop(std::nullopt, n), n);
    }
}

TEST(TreeTest, EveryNodeIsReachedExactlyOnceForManyShapes)
{
    for (std::uint32_t nnodes : {1u, 2u, 5u, 33u, 1000u}) {
        for (std::uint32_t fanout : {2u, 3u, 32u}) {
            const Tree t(nnodes, fanout);
            std::vector<int> seen(nnodes);
            std::vector<std::optional<std::uint32_t>> todo{std::nullopt};
            while (!todo.empty()) {
                const auto at = todo.back();
                todo.pop_back();
                for (std::uint32_t c : t.children(at)) {
                    ++seen[c];
                    EXPECT_EQ(t.parent(c), at);
                    todo.push_back(c);
                }
            }
            for (std::uint32_t n = 0; n < nnodes; ++n) {
                EXPECT_EQ(seen[n], 1) << nnodes << "/" << fanout << " node " << n;
                // Routing from the root reaches the node, hop by hop.
                std::optional<std::uint32_t> at;
                int hops = 0;
                while (!at || *at != n) {
                    at = t.next_hop(at, n);
                    ASSERT_TRUE(at);
                    ASSERT_LT(++hops, 64);
                }
            }
        }
    }
}

TEST(TreeTest, ALeavingNodesChildrenAreAdoptedByTheNextLiveAncestor)
{
    // FE -> 0, 1; 0 -> 2, 3; 1 -> 4, 5; 2 -> 6
    Tree t(7, 2);
    EXPECT_TRUE(t.leave(0));
    EXPECT_FALSE(t.leave(0));  // once
    EXPECT_FALSE(t.leave(7));  // not a node
    EXPECT_TRUE(t.gone(0));
    EXPECT_FALSE(t.gone(2));
    EXPECT_EQ(t.children(std::nullopt), (Nodes{1, 2, 3}));
    EXPECT_EQ(t.parent(2), std::nullopt);
    EXPECT_EQ(t.static_parent(2), 0u);
    EXPECT_EQ(t.parent(6), 2u);
    EXPECT_EQ(t.next_hop(std::nullopt, 6), 2u);
    EXPECT_EQ(t.next_hop(std::nullopt, 3), 3u);
    EXPECT_FALSE(t.in_subtree(6, 0));
    EXPECT_TRUE(t.in_static_subtree(6, 0));
    EXPECT_FALSE(t.in_static_subtree(4, 0));
    EXPECT_TRUE(t.in_static_subtree(4, std::nullopt));

    // A chain: 2 leaves as well, so 6 goes straight to the FE.
    EXPECT_TRUE(t.leave(2));
    EXPECT_EQ(t.parent(6), std::nullopt);
    EXPECT_EQ(t.children(std::nullopt), (Nodes{1, 3, 6}));
    EXPECT_EQ(t.next_hop(std::nullopt, 6), 6u);

    // Below a live node: 1's child 4 leaves, nothing is below it.
    EXPECT_TRUE(t.leave(4));
    EXPECT_EQ(t.children(1), (Nodes{5}));
    EXPECT_TRUE(t.in_subtree(5, 1));
    EXPECT_EQ(t.next_hop(1, 5), 5u);
}

TEST(TreeTest, EveryLiveNodeIsReachedOnceWhateverLeaves)
{
    for (std::uint32_t fanout : {2u, 3u}) {
        Tree t(40, fanout);
        for (std::uint32_t gone : {0u, 1u, 5u, 6u, 13u, 39u})
            t.leave(gone);
        std::vector<int> seen(40);
        std::vector<std::optional<std::uint32_t>> todo{std::nullopt};
        while (!todo.empty()) {
            const auto at = todo.back();
            todo.pop_back();
            for (std::uint32_t c : t.children(at)) {
                ++seen[c];
                EXPECT_FALSE(t.gone(c));
                EXPECT_EQ(t.parent(c), at);
                EXPECT_TRUE(t.in_subtree(c, at));
                todo.push_back(c);
            }
        }
        for (std::uint32_t n = 0; n < 40; ++n) {
            EXPECT_EQ(seen[n], t.gone(n) ? 0 : 1) << fanout << " node " << n;
            if (t.gone(n))
                continue;
            std::optional<std::uint32_t> at;
            int hops = 0;
            while (!at || *at != n) {
                at = t.next_hop(at, n);
                ASSERT_TRUE(at);
                ASSERT_FALSE(t.gone(*at));
                ASSERT_LT(++hops, 64);
            }
        }
    }
}

}  // namespace
}  // namespace exitpolicy::protocol
