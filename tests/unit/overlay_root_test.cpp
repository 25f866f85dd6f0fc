// SPDX-License-Identifier: Apache-2.0
// overlay_root_test.cpp - the root of the daemons' tree, alone: real frames
// in, the frames it sends down taken at the links' boundary, the teardown's
// grace on a real loop, what it keeps in a real OutcomeCollector.
#include "event_loop.hpp"
#include "spank_plugin/outcome_collector.hpp"
#include "spank_plugin/overlay_root.hpp"

#include "protocol/events.hpp"
#include "protocol/sockets.hpp"
#include "protocol/wire.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <poll.h>
#include <unistd.h>
#include <map>
#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

using namespace std::chrono_literals;

// The FE's links as the root sees them: which node has its link up open,
// and what went down each.
struct RecordedLinks final : OverlayRoot::Links {
    explicit RecordedLinks(std::uint32_t nnodes) : linked(nnodes, true) {}
    bool tree_linked(std::uint32_t node) const override { return linked[node]; }
    void send_tree(const std::vector<std::uint32_t>& nodes, const protocol::Bytes& frame) override
    {
        for (std::uint32_t node : nodes)
            sent[node].push_back(frame);
    }
    void send_daemons(const protocol::Bytes& frame) override { to_daemons.push_back(frame); }

    std::vector<bool> linked;
    std::map<std::uint32_t, std::vector<protocol::Bytes>> sent;
    std::vector<protocol::Bytes> to_daemons;
};

protocol::Type type_of(const protocol::Bytes& frame)
{
    return protocol::decode_header(std::span<const std::uint8_t, protocol::header_size>(frame.data(), protocol::header_size))->type;
}

std::span<const std::uint8_t> body_of(const protocol::Bytes& frame)
{
    return std::span<const std::uint8_t>(frame).subspan(protocol::header_size);
}

std::vector<protocol::Type> types(const std::vector<protocol::Bytes>& frames)
{
    std::vector<protocol::Type> out;
    for (const auto& f : frames)
        out.push_back(type_of(f));
    return out;
}

// One rank per node, node i is "node<i+1>" at 10.0.0.<i+1>; fanout 2 over
// three nodes: the FE -> node1, node2; node1 -> node3 (ids 0, 1, 2).
struct Step {
    explicit Step(bool recoverable = false, std::uint32_t nnodes = 3)
        : setup{77, 3, nnodes, nnodes, std::nullopt, 2, 9}, collector(nnodes, nnodes), links(nnodes)
    {
        setup.recoverable = recoverable;
        setup.teardown_grace = 20ms;
        setup.kill_after = 1500ms;
        root = std::make_unique<OverlayRoot>(setup, loop.base(), links, collector);
        for (std::uint32_t n = 0; n < nnodes; ++n) {
            addresses.push_back("10.0.0." + std::to_string(n + 1));
            collector.node_ready(n, "node" + std::to_string(n + 1), {n});  // its daemon's hello
        }
    }

    Result<bool> from(std::uint32_t node, const protocol::Bytes& frame, protocol::Role role = protocol::Role::daemon)
    {
        return root->daemon_frame({node, role, addresses[node]}, type_of(frame), body_of(frame));
    }

    void enroll_all()
    {
        for (std::uint32_t n = 0; n < setup.nnodes; ++n)
            ASSERT_TRUE(from(n, protocol::Enroll{"not used", 5000 + n}.encode()));
        ASSERT_EQ(links.to_daemons.size(), 1u);
    }

    FrontEndSetup setup;
    test::Loop loop;
    OutcomeCollector collector;
    RecordedLinks links;
    std::vector<std::string> addresses;
    std::unique_ptr<OverlayRoot> root;
};

TEST(OverlayRootTest, TheStepMapGoesOutOnceEveryDaemonEnrolled)
{
    Step s;
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5010}.encode()));  // again: its latest port counts
    EXPECT_TRUE(s.links.to_daemons.empty());
    EXPECT_FALSE(s.root->adopt(2));  // no tree to adopt into yet
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 5001}.encode()));
    ASSERT_EQ(s.links.to_daemons.size(), 1u);

    const auto map = protocol::StepMap::decode(body_of(s.links.to_daemons[0]));
    ASSERT_TRUE(map) << map.error();
    EXPECT_EQ(map->nspace, "exitpolicy.77.3");
    EXPECT_EQ(map->fanout, 2u);
    EXPECT_EQ(map->hosts, (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.3"}));  // as they connected
    EXPECT_EQ(map->ports, (std::vector<std::uint32_t>{5010, 5001, 5002}));
    EXPECT_EQ(map->hostnames, (std::vector<std::string>{"node1", "node2", "node3"}));
    EXPECT_EQ(map->rank_node, (std::vector<std::uint32_t>{0, 1, 2}));
    EXPECT_FALSE(map->recoverable);

    // Sent once: a late enrollment changes nothing.
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 6001}.encode()));
    EXPECT_EQ(s.links.to_daemons.size(), 1u);
}

TEST(OverlayRootTest, AnEventBeforeTheStepMapGoesDownBehindIt)
{
    // Tasks start before the daemons have their map: rank 1 may end before
    // node3 enrolled. Its node's event is kept, and goes down the tree, to
    // the FE's children (node3 hears it from node1), right after the map.
    Step s;
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 5001}.encode()));
    protocol::Event e;
    e.rank = 1;
    e.code = protocol::pmix::exit_nonzero_term;
    e.exit_code = 3;
    ASSERT_TRUE(s.from(1, e.encode()));
    EXPECT_TRUE(s.links.sent.empty());  // no tree yet
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));
    ASSERT_EQ(s.links.to_daemons.size(), 1u);
    for (std::uint32_t node : {0u, 1u}) {
        ASSERT_EQ(types(s.links.sent[node]), (std::vector<protocol::Type>{protocol::Type::event}))
            << "node" << node + 1;
        const auto heard = protocol::Event::decode(body_of(s.links.sent[node][0]));
        ASSERT_TRUE(heard) << heard.error();
        EXPECT_EQ(heard->rank, 1u);
    }
    EXPECT_FALSE(s.links.sent.contains(2));  // node1 relays it to node3
    // Once: what comes after the map goes down once, as always.
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 6002}.encode()));
    EXPECT_EQ(s.links.sent[0].size(), 1u);
}

TEST(OverlayRootTest, WhatIsForOneNodeGoesToTheChildAboveItOnly)
{
    Step s;
    s.enroll_all();
    ASSERT_TRUE(s.from(1, protocol::DmodexReq{1, 1, 2, 2}.encode()));  // node3 is below node1
    ASSERT_EQ(s.links.sent[0].size(), 1u);
    EXPECT_EQ(protocol::DmodexReq::decode(body_of(s.links.sent[0][0]))->to, 2u);
    EXPECT_TRUE(s.links.sent[1].empty());
    EXPECT_TRUE(s.links.sent[2].empty());  // not the FE's child

    // node1's link is not open: nothing goes, and nothing else instead.
    s.links.linked[0] = false;
    ASSERT_TRUE(s.from(1, protocol::DmodexResp{1, 1, 2, 0, {7}}.encode()));
    EXPECT_EQ(s.links.sent[0].size(), 1u);
    EXPECT_TRUE(s.links.sent[1].empty());
}

TEST(OverlayRootTest, ALookupThatWaitsIsAnsweredOncePublished)
{
    Step s;
    s.enroll_all();
    protocol::DataRequest lookup;
    lookup.op = protocol::DataRequest::Op::lookup;
    lookup.id = 4;
    lookup.node = 1;
    lookup.rank = 1;
    lookup.wait = 1;
    lookup.keys = {"port"};
    ASSERT_TRUE(s.from(1, lookup.encode()));
    EXPECT_TRUE(s.links.sent[1].empty());

    protocol::DataRequest publish;
    publish.op = protocol::DataRequest::Op::publish;
    publish.id = 9;
    publish.node = 2;
    publish.rank = 2;
    publish.keys = {"port"};
    publish.values = {{4, 2}};
    ASSERT_TRUE(s.from(0, publish.encode()));  // node3's, relayed by node1
    ASSERT_EQ(s.links.sent[0].size(), 1u);     // node3's reply, by node1
    EXPECT_EQ(protocol::DataReply::decode(body_of(s.links.sent[0][0]))->status, 0);
    ASSERT_EQ(s.links.sent[1].size(), 1u);
    const auto found = protocol::DataReply::decode(body_of(s.links.sent[1][0]));
    ASSERT_TRUE(found);
    EXPECT_EQ(found->id, 4u);
    EXPECT_EQ(found->keys, std::vector<std::string>{"port"});
    EXPECT_EQ(found->ranks, std::vector<std::uint32_t>{2});
    EXPECT_EQ(found->values, std::vector<protocol::Bytes>{(protocol::Bytes{4, 2})});

    // A second publication of the key is refused; the first stands.
    publish.id = 10;
    publish.values = {{9}};
    ASSERT_TRUE(s.from(0, publish.encode()));
    EXPECT_EQ(protocol::DataReply::decode(body_of(s.links.sent[0].back()))->status, protocol::pmix::duplicate_key);
}

TEST(OverlayRootTest, ALostNodeIsToldTornDownAfterTheGraceAndReplayedToTheOrphanBelowIt)
{
    Step s;
    s.enroll_all();
    for (std::uint32_t n = 0; n < 3; ++n)
        s.root->stepd_opened(n);
    // node3 linked to node1 and dropped its enrollment link: it has not left.
    s.links.linked[2] = false;
    s.root->tree_link_closed(2, false);
    // node1's daemon goes: not lost while its slurmstepd's link is open.
    s.links.linked[0] = false;
    s.root->tree_link_closed(0, false);
    EXPECT_TRUE(s.links.sent[1].empty());
    s.root->stepd_closed(0);
    ASSERT_EQ(types(s.links.sent[1]), std::vector<protocol::Type>{protocol::Type::node_down});
    const auto down = protocol::NodeDown::decode(body_of(s.links.sent[1][0]));
    ASSERT_TRUE(down);
    EXPECT_EQ(down->node, 0u);
    EXPECT_EQ(down->hostname, "node1");
    EXPECT_EQ(down->ranks, std::vector<std::uint32_t>{0});
    EXPECT_EQ(down->exit_code, 9);  // lost_code

    // Not recoverable: after the grace, every node still there ends its tasks.
    ASSERT_TRUE(s.loop.run_until([&] { return s.links.sent[1].size() == 2; }));
    EXPECT_EQ(type_of(s.links.sent[1][1]), protocol::Type::terminate);
    const auto term = protocol::Terminate::decode(body_of(s.links.sent[1][1]));
    EXPECT_EQ(term->reason, "node1 was lost");
    EXPECT_EQ(term->kill_after_ms, 1500u);

    // node3 asks to be adopted: it is told what it missed, in order.
    ASSERT_TRUE(s.root->adopt(2));
    EXPECT_EQ(types(s.root->history()), (std::vector<protocol::Type>{protocol::Type::node_down, protocol::Type::terminate}));
    s.links.linked[2] = true;
    ASSERT_TRUE(s.from(1, protocol::Event{1, 1, -402, 143, SIGTERM, true}.encode()));
    EXPECT_EQ(type_of(s.links.sent[2].back()), protocol::Type::event);
    EXPECT_EQ(type_of(s.links.sent[1].back()), protocol::Type::event);
    EXPECT_TRUE(s.collector.collected().problems.empty());
}

TEST(OverlayRootTest, AnEnrollmentDroppedAfterTheParentLeftIsNotALoss)
{
    // node1 (node3's parent) goes first; node3's enrollment link, which it
    // dropped when it linked to node1, closes only then. node3 has not
    // left: it asks for adoption on a link of its own, and once adopted,
    // that link closing is its loss.
    Step s;
    s.enroll_all();
    s.links.linked[0] = false;
    s.root->tree_link_closed(0, false);
    ASSERT_EQ(types(s.links.sent[1]), std::vector<protocol::Type>{protocol::Type::node_down});
    s.links.linked[2] = false;
    s.root->tree_link_closed(2, false);
    EXPECT_EQ(s.links.sent[1].size(), 1u);  // no node_down for node3
    ASSERT_TRUE(s.root->adopt(2));
    s.links.linked[2] = true;
    ASSERT_TRUE(s.from(1, protocol::Event{1, 1, -402, 143, SIGTERM, true}.encode()));
    ASSERT_FALSE(s.links.sent[2].empty());
    EXPECT_EQ(type_of(s.links.sent[2].back()), protocol::Type::event);  // node3 is in the tree

    s.links.linked[2] = false;
    s.root->tree_link_closed(2, true);
    const auto down = protocol::NodeDown::decode(body_of(s.links.sent[1].back()));
    ASSERT_TRUE(down);
    EXPECT_EQ(down->node, 2u);
}

TEST(OverlayRootTest, ARecoverableStepRunsOnUntilAnAbort)
{
    Step s(true, 2);
    s.enroll_all();
    ASSERT_TRUE(s.from(0, protocol::Event{0, 0, -402, 139, SIGSEGV, true}.encode()));
    ASSERT_EQ(types(s.links.sent[1]), std::vector<protocol::Type>{protocol::Type::event});
    s.loop.run_until([] { return false; }, 200ms);  // ten times the grace
    EXPECT_EQ(s.links.sent[1].size(), 1u);

    ASSERT_TRUE(s.from(1, protocol::Abort{1, 7, "MPI_Abort"}.encode()));
    ASSERT_EQ(s.links.sent[0].size(), 2u);  // at once
    EXPECT_EQ(protocol::Terminate::decode(body_of(s.links.sent[0][1]))->reason,
              "rank 1 on node2 called abort with status 7");
    ASSERT_TRUE(s.from(0, protocol::Abort{0, 8, "later"}.encode()));
    EXPECT_EQ(s.links.sent[0].size(), 2u);  // once
    const Collected got = s.collector.collected();
    EXPECT_EQ(got.step.tasks[1].abort_status, 7);
    EXPECT_EQ(got.step.tasks[1].abort_message, "MPI_Abort");
    EXPECT_EQ(got.step.tasks[0].abort_status, 8);
}

TEST(OverlayRootTest, WhenADaemonIsGoneItsTasksEndsAreToldByTheRoot)
{
    Step s(true, 2);
    s.enroll_all();
    s.root->stepd_opened(0);  // node1's slurmstepd runs on
    protocol::Outcome o;
    o.rank = 0;
    o.wait_status = SIGSEGV;
    s.root->direct_outcome(o, 0);  // node1's daemon still tells its peers itself
    EXPECT_TRUE(s.links.sent[1].empty());

    s.links.linked[0] = false;
    s.root->tree_link_closed(0, false);
    s.root->direct_outcome(o, 0);
    ASSERT_EQ(types(s.links.sent[1]), std::vector<protocol::Type>{protocol::Type::event});
    const auto e = protocol::Event::decode(body_of(s.links.sent[1][0]));
    EXPECT_EQ(e->rank, 0u);
    EXPECT_EQ(e->origin, 0u);
    EXPECT_EQ(e->code, protocol::pmix::proc_aborted_by_sig);
    EXPECT_EQ(e->exit_code, 139);
}

// ---- daemons that stand by until the step uses PMIx (standbys.cpp) ----

// A node's wake socket, as its slurmstepd makes it (on loopback here).
struct WakeSocket {
    WakeSocket()
    {
        auto l = protocol::listen_loopback();
        EXPECT_TRUE(l) << l.error();
        if (l)
            listening = std::move(*l);
    }
    // Someone connected (not blocking).
    bool woken() const
    {
        pollfd p{listening.fd.get(), POLLIN, 0};
        return ::poll(&p, 1, 0) == 1;
    }
    protocol::Listening listening;
};

// node3's daemon stands by; its slurmstepd's link closes (its tasks ended).
void node3_done_standing_by(Step& s, const WakeSocket& wake)
{
    s.addresses[2] = "127.0.0.1";
    s.root->stepd_opened(2);
    ASSERT_TRUE(s.from(2, protocol::Standby{wake.listening.port}.encode(), protocol::Role::stepd));
    s.root->stepd_closed(2);
}

TEST(OverlayRootTest, TheFirstDaemonToEnrollWakesEveryStandbyButItsOwn)
{
    Step s;
    std::vector<WakeSocket> wake(3);
    for (std::uint32_t n = 0; n < 3; ++n) {
        s.addresses[n] = "127.0.0.1";
        ASSERT_TRUE(s.from(n, protocol::Standby{wake[n].listening.port}.encode(), protocol::Role::stepd));
    }
    s.loop.run_until([] { return false; }, 100ms);
    EXPECT_FALSE(wake[0].woken() || wake[1].woken() || wake[2].woken());  // nobody uses PMIx yet
    // A task on node2 connected to its daemon, which enrolls.
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 5001}.encode()));
    EXPECT_TRUE(s.loop.run_until([&] { return wake[0].woken() && wake[2].woken(); }));
    EXPECT_FALSE(wake[1].woken());
    EXPECT_TRUE(s.links.to_daemons.empty());  // the others have yet to enroll
    EXPECT_FALSE(s.from(1, protocol::Standby{wake[1].listening.port}.encode()));  // only slurmstepd says it
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));
    EXPECT_EQ(s.links.to_daemons.size(), 1u);
}

TEST(OverlayRootTest, AStandbyToldOfAfterTheFirstEnrollmentIsWokenAtOnce)
{
    Step s;
    WakeSocket late;
    s.addresses[2] = "127.0.0.1";
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    ASSERT_TRUE(s.from(2, protocol::Standby{late.listening.port}.encode(), protocol::Role::stepd));
    EXPECT_TRUE(s.loop.run_until([&] { return late.woken(); }));
}

// node3's tasks ended, and its slurmstepd with them, while its daemon
// stood by: it never enrolls. The map goes out without it (port 0, gone
// from the tree: node3 was below node1), and a daemon of it that comes
// after all is refused.
TEST(OverlayRootTest, ANodeDoneBeforeItsDaemonWasWokenIsLeftOutOfTheMap)
{
    Step s;
    WakeSocket gone;
    node3_done_standing_by(s, gone);
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    EXPECT_TRUE(s.links.to_daemons.empty());
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 5001}.encode()));
    ASSERT_EQ(s.links.to_daemons.size(), 1u);
    const auto map = protocol::StepMap::decode(body_of(s.links.to_daemons[0]));
    ASSERT_TRUE(map) << map.error();
    EXPECT_EQ(map->ports, (std::vector<std::uint32_t>{5000, 5001, 0}));
    EXPECT_FALSE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));
}

// node2's daemon could not start (its slurmstepd told srun's user so):
// the map goes out without it rather than never.
TEST(OverlayRootTest, ANodeWhoseDaemonCannotStartIsLeftOutOfTheMap)
{
    Step s;
    ASSERT_TRUE(s.from(1, protocol::Standby{0}.encode(), protocol::Role::stepd));
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    EXPECT_TRUE(s.links.to_daemons.empty());
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));
    ASSERT_EQ(s.links.to_daemons.size(), 1u);
    EXPECT_EQ(protocol::StepMap::decode(body_of(s.links.to_daemons[0]))->ports,
              (std::vector<std::uint32_t>{5000, 0, 5002}));
}

TEST(OverlayRootTest, ADaemonThatEnrollsAfterItsSlurmstepdLeftStillCounts)
{
    Step s;
    WakeSocket w;
    node3_done_standing_by(s, w);
    ASSERT_TRUE(s.from(2, protocol::Enroll{"not used", 5002}.encode()));  // it was starting
    ASSERT_TRUE(s.from(0, protocol::Enroll{"not used", 5000}.encode()));
    EXPECT_TRUE(s.links.to_daemons.empty());
    ASSERT_TRUE(s.from(1, protocol::Enroll{"not used", 5001}.encode()));
    ASSERT_EQ(s.links.to_daemons.size(), 1u);
    EXPECT_EQ(protocol::StepMap::decode(body_of(s.links.to_daemons[0]))->ports,
              (std::vector<std::uint32_t>{5000, 5001, 5002}));
}

// A task on a standby's node failed before any daemon ran: no daemon took
// its outcome, which came the direct way; the root tells every node's
// clients, after the map.
TEST(OverlayRootTest, ADirectOutcomeFromAStandbysNodeIsToldAfterTheMap)
{
    Step s;
    WakeSocket w;
    s.addresses[1] = "127.0.0.1";
    ASSERT_TRUE(s.from(1, protocol::Standby{w.listening.port}.encode(), protocol::Role::stepd));
    protocol::Outcome o;
    o.rank = 1;
    o.wait_status = 3 << 8;
    s.root->direct_outcome(o, 1);
    s.root->direct_outcome(o, 1);  // once
    EXPECT_TRUE(s.links.sent.empty());
    s.enroll_all();
    for (std::uint32_t child : {0u, 1u}) {
        ASSERT_EQ(types(s.links.sent[child]), std::vector<protocol::Type>{protocol::Type::event}) << child;
        const auto e = protocol::Event::decode(body_of(s.links.sent[child][0]));
        EXPECT_EQ(e->rank, 1u);
        EXPECT_EQ(e->exit_code, 3);
        EXPECT_FALSE(e->client);  // no teardown for it: no daemon saw it use PMIx
    }
}

TEST(OverlayRootTest, FramesTheRootDoesNotTakeAreRefused)
{
    Step s;
    EXPECT_EQ(s.from(0, protocol::FenceUp{"*#1", 0, 1, {1}}.encode()).error(), "a fence before the step map");
    EXPECT_EQ(s.from(0, protocol::Ack{0, 0}.encode()).error(), "unexpected ack frame");
    const protocol::Bytes frame = protocol::Enroll{"x", 1}.encode();
    EXPECT_FALSE(s.root->daemon_frame({0, protocol::Role::daemon, s.addresses[0]}, protocol::Type::enroll,
                                      body_of(frame).first(2)));
    EXPECT_TRUE(s.links.to_daemons.empty());
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
