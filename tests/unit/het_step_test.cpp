// SPDX-License-Identifier: Apache-2.0
// het_step_test.cpp - a heterogeneous step (srun A : B): where each
// component is in the step (HetPlacement), and srun's front end placing
// what each component's nodes say over real TCP sockets on loopback, the
// same code srun and slurmstepd run, without Slurm.
#include "spank_plugin/front_end.hpp"
#include "spank_plugin/het_placement.hpp"
#include "spank_plugin/node_link.hpp"

#include "exitpolicy/report.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;
using protocol::Component;

// A heterogeneous job's component: a job of its own.
Component of_job(std::uint32_t job, std::uint32_t ntasks, std::uint32_t nnodes)
{
    return {job, Component::no_index, ntasks, nnodes};
}
// A component of one job's heterogeneous step (Slurm's step_het_comp).
Component of_step(std::uint32_t index, std::uint32_t ntasks, std::uint32_t nnodes)
{
    return {41, index, ntasks, nnodes};
}

TEST(HetPlacementTest, ComponentsAreInTheStepInTheirOrderWhateverOrderTheySpeakIn)
{
    struct Case {
        const char* name;
        std::vector<Component> said;  // in the order their nodes spoke
        std::vector<HetPlacement::Start> starts;  // of said[i]
    };
    const std::vector<Case> cases{
        {"jobs", {of_job(12, 2, 1), of_job(11, 1, 1)}, {{1, 1}, {0, 0}}},
        {"jobs, three", {of_job(7, 4, 2), of_job(9, 1, 1), of_job(8, 3, 3)}, {{0, 0}, {7, 5}, {4, 2}}},
        {"one job's step", {of_step(1, 2, 2), of_step(0, 1, 1)}, {{1, 1}, {0, 0}}},
    };
    for (const Case& c : cases) {
        std::uint32_t ntasks = 0, nnodes = 0;
        for (const Component& part : c.said) {
            ntasks += part.ntasks;
            nnodes += part.nnodes;
        }
        HetPlacement placement(ntasks, nnodes);
        for (std::size_t i = 0; i < c.said.size(); ++i) {
            EXPECT_FALSE(placement.complete()) << c.name;
            EXPECT_FALSE(placement.start(c.said[i])) << c.name << ": placed before every component spoke";
            ASSERT_TRUE(placement.add(c.said[i])) << c.name;
            ASSERT_TRUE(placement.add(c.said[i])) << c.name << ": another node of the same component";
        }
        ASSERT_TRUE(placement.complete()) << c.name;
        for (std::size_t i = 0; i < c.said.size(); ++i) {
            const auto at = placement.start(c.said[i]);
            ASSERT_TRUE(at) << c.name;
            EXPECT_EQ(at->rank, c.starts[i].rank) << c.name << " " << i;
            EXPECT_EQ(at->node, c.starts[i].node) << c.name << " " << i;
        }
        EXPECT_FALSE(placement.start(of_job(99, 1, 1))) << c.name << ": a component that never spoke";
    }
}

TEST(HetPlacementTest, WhatCannotBeIsRefusedAndWhatWasKnownStays)
{
    HetPlacement placement(3, 2);
    ASSERT_TRUE(placement.add(of_job(11, 1, 1)));
    const auto resized = placement.add(of_job(11, 2, 1));
    ASSERT_FALSE(resized);
    EXPECT_NE(resized.error().find("was said to have 1 tasks on 1 nodes, now 2 on 1"), std::string::npos)
        << resized.error();
    const auto too_big = placement.add(of_job(12, 3, 1));
    ASSERT_FALSE(too_big);
    EXPECT_NE(too_big.error().find("does not fit in the step's 3 tasks on 2 nodes"), std::string::npos)
        << too_big.error();
    EXPECT_FALSE(placement.add(of_job(12, 1, 2)));  // nodes past the step's
    EXPECT_FALSE(placement.add(of_job(12, 0, 1)));
    ASSERT_TRUE(placement.add(of_job(12, 2, 1)));
    ASSERT_TRUE(placement.complete());
    const auto parts = placement.parts();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[1].first_rank, 1u);
    EXPECT_EQ(parts[1].ntasks, 2u);
}

// ---- the front end ----

constexpr std::uint32_t first_job = 11;
constexpr std::uint32_t step = 0;

std::unique_ptr<FrontEnd> start_het(std::uint32_t ntasks, std::uint32_t nnodes)
{
    FrontEndSetup setup{first_job, step, ntasks, nnodes, std::nullopt};
    setup.heterogeneous = true;
    auto reserved = FrontEnd::reserve(std::nullopt);
    EXPECT_TRUE(reserved) << reserved.error();
    if (!reserved)
        return nullptr;
    const std::uint16_t port = reserved->port;
    auto fe = FrontEnd::start(setup, std::move(*reserved));
    EXPECT_TRUE(fe) << fe.error();
    if (!fe)
        return nullptr;
    EXPECT_EQ((*fe)->port(), port) << "the reserved port";
    return std::move(*fe);
}

// A component's node, as its slurmstepd sets its link up: node id and ranks
// its component's own, the step's first job in the challenge.
LinkSetup component_node(const FrontEnd& fe, const Component& part, std::uint32_t node_id,
                         std::vector<std::uint32_t> ranks, std::string hostname)
{
    LinkSetup s;
    s.host = "127.0.0.1";
    s.port = fe.port();
    s.secret = fe.secret();
    s.job_id = first_job;
    s.step_id = step;
    s.node_id = node_id;
    s.hostname = std::move(hostname);
    s.ranks = std::move(ranks);
    s.component = part;
    return s;
}

protocol::Outcome ended(std::uint32_t rank, int wait_status)
{
    protocol::Outcome o;
    o.rank = rank;
    o.pid = 500 + rank;
    o.wait_status = wait_status;
    o.end_time_us = 1000 + rank;
    return o;
}

// Posted and acknowledged, as slurmstepd's sink does.
void send(NodeLink& link, const protocol::Outcome& o)
{
    ASSERT_TRUE(link.post_outcome(o, 2s));
    const auto acks = link.read_acks(1, 2s);
    ASSERT_TRUE(acks) << acks.error();
    ASSERT_EQ(acks->size(), 1u);
    EXPECT_EQ((*acks)[0].rank, o.rank) << "the ack names the component's rank, as it was sent";
}

NodeLink open(const LinkSetup& s)
{
    auto link = NodeLink::connect(s, 2s);
    EXPECT_TRUE(link) << link.error();
    return link ? std::move(*link) : NodeLink{};
}

// srun -n1 true : -N2 -n3 sh -c 'exit 3' (component 1 on two nodes): the
// second component's nodes speak and end first, one of them closes before
// component 0 has spoken; every rank is the step's, and main-rank-check
// sees component 1's failure.
TEST(HetFrontEndTest, EveryComponentsRanksReachThePolicyAsTheSteps)
{
    auto fe = start_het(4, 3);
    ASSERT_TRUE(fe);
    const Component zero = of_job(first_job, 1, 1), one = of_job(first_job + 1, 3, 2);
    {
        NodeLink b = open(component_node(*fe, one, 1, {2}, "node3"));
        send(b, ended(2, 3 << 8));
    }  // closed while held
    NodeLink a = open(component_node(*fe, one, 0, {0, 1}, "node2"));
    send(a, ended(0, 3 << 8));
    send(a, ended(1, SIGSEGV));
    NodeLink c = open(component_node(*fe, zero, 0, {0}, "node1"));
    send(c, ended(0, 0));
    a.close();
    c.close();

    const Collected got = fe->finish(10s);
    EXPECT_EQ(got.missing, 0u);
    EXPECT_EQ(got.nodes_reporting, 3u);
    EXPECT_TRUE(got.problems.empty()) << got.problems.front();
    ASSERT_EQ(got.step.tasks.size(), 4u);
    ASSERT_EQ(got.step.components, (std::vector<std::uint32_t>{0, 1}));
    ASSERT_GE(got.step.nodes.size(), 3u);
    EXPECT_EQ(got.step.nodes[0], "node1");
    EXPECT_EQ(got.step.nodes[1], "node2");
    EXPECT_EQ(got.step.nodes[2], "node3");
    // Component 1's local ranks 0, 1 (node2) and 2 (node3) are the step's 1-3.
    const std::vector<int> status{0, 3 << 8, SIGSEGV, 3 << 8};
    const std::vector<std::uint32_t> nodes{0, 1, 1, 2};
    for (std::uint32_t r = 0; r < 4; ++r) {
        const TaskOutcome& t = got.step.tasks[r];
        EXPECT_EQ(t.rank, r);
        EXPECT_FALSE(t.lost) << r;
        EXPECT_EQ(t.wait_status, status[r]) << r;
        EXPECT_EQ(t.node, nodes[r]) << r;
    }
    const Settings settings{Policy::main_rank_check, 0, 1};
    const auto d = decide(got.step, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->code, 1);
    const std::string text = render_summary(got.step, settings, *d);
    EXPECT_NE(text.find("heterogeneous step: component 0 rank 0, component 1 ranks 1-3\n"), std::string::npos)
        << text;
    EXPECT_NE(text.find("rank 1 (component 1) on node2"), std::string::npos) << text;
}

// A component that never speaks: its ranks are missing, never decided as
// if the step were the others' alone.
TEST(HetFrontEndTest, AComponentThatNeverSpokeLeavesItsRanksMissing)
{
    auto fe = start_het(3, 2);
    ASSERT_TRUE(fe);
    NodeLink a = open(component_node(*fe, of_job(first_job, 1, 1), 0, {0}, "node1"));
    send(a, ended(0, 0));
    a.close();
    const Collected got = fe->finish(300ms);
    EXPECT_EQ(got.missing, 3u) << "component 0 is held: where its rank is in the step is unknown";
    EXPECT_EQ(got.nodes_reporting, 0u);
    EXPECT_TRUE(got.step.components.empty());
}

// Whether the front end refuses the node: closes its link at the
// handshake, or at least never takes an outcome of it.
bool refused(const LinkSetup& s)
{
    auto link = NodeLink::connect(s, 2s);
    if (!link)
        return true;
    return !(link->post_outcome(ended(0, 0), 2s) && link->read_acks(1, 2s));
}

// Each side refuses the other kind: a component's node at an ordinary
// step's front end, an ordinary node at a heterogeneous step's, a
// component's node whose ranks or node id are outside its component.
TEST(HetFrontEndTest, ANodeOfTheOtherKindOrOutsideItsComponentIsRefused)
{
    auto plain = FrontEnd::start({first_job, step, 2, 1, std::nullopt});
    ASSERT_TRUE(plain);
    EXPECT_TRUE(refused(component_node(**plain, of_job(first_job, 2, 1), 0, {0, 1}, "node1")));
    const Collected plain_got = (*plain)->finish(300ms);
    ASSERT_FALSE(plain_got.problems.empty());
    EXPECT_NE(plain_got.problems.front().find("a heterogeneous step's component, but this step is not one"),
              std::string::npos)
        << plain_got.problems.front();

    auto fe = start_het(2, 1);
    ASSERT_TRUE(fe);
    EXPECT_TRUE(refused(component_node(*fe, {}, 0, {0, 1}, "node1")));
    EXPECT_TRUE(refused(component_node(*fe, of_job(first_job, 2, 1), 0, {0, 2}, "node1")));
    EXPECT_TRUE(refused(component_node(*fe, of_job(first_job, 2, 1), 1, {0}, "node2")));
    const Collected got = fe->finish(300ms);
    EXPECT_EQ(got.nodes_reporting, 0u);
    std::string problems;
    for (const auto& p : got.problems)
        problems += p + "\n";
    EXPECT_NE(problems.find("not a component of this heterogeneous step"), std::string::npos) << problems;
    EXPECT_NE(problems.find("a rank outside its component's 2 tasks"), std::string::npos) << problems;
    EXPECT_NE(problems.find("node id 1 is outside its component's 1 nodes"), std::string::npos) << problems;
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
