// SPDX-License-Identifier: Apache-2.0
// wire_test.cpp - the frame codec, fence keys, the authentication proofs and
// the PMIx event a task's end raises.
#include "protocol/auth.hpp"
#include "protocol/events.hpp"
#include "protocol/fences.hpp"
#include "protocol/wire.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

namespace exitpolicy::protocol {
namespace {

std::span<const std::uint8_t, header_size> head(const Bytes& frame)
{
    return std::span<const std::uint8_t, header_size>(frame.data(), header_size);
}

std::span<const std::uint8_t> body(const Bytes& frame)
{
    return std::span<const std::uint8_t>(frame).subspan(header_size);
}

TEST(WireTest, HeaderLayout)
{
    const Bytes frame = Ack{7, 1}.encode();
    ASSERT_EQ(frame.size(), header_size + 8);
    EXPECT_EQ(frame[0], 'E');
    EXPECT_EQ(frame[1], 'P');
    EXPECT_EQ(frame[2], protocol_version);
    EXPECT_EQ(frame[3], static_cast<std::uint8_t>(Type::ack));
    EXPECT_EQ((Bytes{frame.begin() + 4, frame.begin() + 8}), (Bytes{0, 0, 0, 8}));
    EXPECT_EQ((Bytes{frame.begin() + 8, frame.end()}), (Bytes{0, 0, 0, 7, 0, 0, 0, 1}));
    const auto h = decode_header(head(frame));
    ASSERT_TRUE(h);
    EXPECT_EQ(h->type, Type::ack);
    EXPECT_EQ(h->length, 8u);
}

TEST(WireTest, EveryMessageRoundTrips)
{
    Challenge c{{}, 1234, 5};
    c.nonce[0] = 9;
    c.nonce[31] = 200;
    const auto c2 = Challenge::decode(body(c.encode()));
    ASSERT_TRUE(c2);
    EXPECT_EQ(c2->nonce, c.nonce);
    EXPECT_EQ(c2->job_id, 1234u);
    EXPECT_EQ(c2->step_id, 5u);

    Hello h;
    h.role = Role::stepd;
    h.node_id = 3;
    h.hostname = "node4";
    h.ranks = {6, 7, 4294967295u};
    h.component = {90, 2, 6, 3};
    h.nonce[5] = 1;
    h.mac[30] = 2;
    const auto h2 = Hello::decode(body(h.encode()));
    ASSERT_TRUE(h2) << h2.error();
    EXPECT_EQ(h2->role, Role::stepd);
    EXPECT_EQ(h2->node_id, 3u);
    EXPECT_EQ(h2->hostname, "node4");
    EXPECT_EQ(h2->ranks, h.ranks);
    EXPECT_EQ(h2->component, h.component);
    EXPECT_EQ(h2->nonce, h.nonce);
    EXPECT_EQ(h2->mac, h.mac);

    Outcome o;
    o.rank = 4000000000u;
    o.epoch = 2;
    o.pid = -1;
    o.wait_status = 139;
    o.end_time_us = 1795258800123456;
    o.flags = Outcome::flag_aborted | Outcome::flag_finalized_known;
    o.abort_status = -7;
    o.memory_limit = std::uint64_t{50} << 40;
    const auto o2 = Outcome::decode(body(o.encode()));
    ASSERT_TRUE(o2);
    EXPECT_EQ(o2->rank, o.rank);
    EXPECT_EQ(o2->epoch, 2u);
    EXPECT_EQ(o2->pid, -1);
    EXPECT_EQ(o2->wait_status, 139);
    EXPECT_EQ(o2->end_time_us, o.end_time_us);
    EXPECT_EQ(o2->flags, o.flags);
    EXPECT_EQ(o2->abort_status, -7);
    EXPECT_EQ(o2->memory_limit, std::uint64_t{50} << 40);

    Welcome w;
    w.mac[0] = 0xff;
    EXPECT_EQ(Welcome::decode(body(w.encode()))->mac, w.mac);
    EXPECT_EQ(Ack::decode(body(Ack{3, 4}.encode()))->epoch, 4u);
}

TEST(WireTest, OverlayMessagesRoundTrip)
{
    StepMap m;
    m.nspace = "exitpolicy.42.0";
    m.fanout = 2;
    m.hostnames = {"node1", "node2"};
    m.hosts = {"127.0.0.1", "127.0.0.1"};
    m.ports = {40001, 40002};
    m.rank_node = {0, 0, 1, 1};
    const auto m2 = StepMap::decode(body(m.encode()));
    ASSERT_TRUE(m2) << m2.error();
    EXPECT_EQ(m2->nspace, m.nspace);
    EXPECT_EQ(m2->fanout, 2u);
    EXPECT_EQ(m2->hostnames, m.hostnames);
    EXPECT_EQ(m2->ports, m.ports);
    EXPECT_EQ(m2->rank_node, m.rank_node);
    m.rank_node.push_back(2);  // a rank on a node that does not exist
    EXPECT_EQ(StepMap::decode(body(m.encode())).error(), "malformed step map frame: a rank on an unknown node");

    const Event e{3, 5, -402, 139, 11};
    const auto e2 = Event::decode(body(e.encode()));
    ASSERT_TRUE(e2);
    EXPECT_EQ(e2->origin, 3u);
    EXPECT_EQ(e2->rank, 5u);
    EXPECT_EQ(e2->code, -402);
    EXPECT_EQ(e2->exit_code, 139);

    const FenceUp f{"*#1", 0, 2, Bytes(100000, 7)};  // fence data beyond the pre-authentication bound
    const Bytes frame = f.encode();
    EXPECT_FALSE(decode_header(head(frame)));
    EXPECT_TRUE(decode_header(head(frame), max_body_trusted));
    const auto f2 = FenceUp::decode(body(frame));
    ASSERT_TRUE(f2) << f2.error();
    EXPECT_EQ(f2->key, "*#1");
    EXPECT_EQ(f2->status, 0);
    EXPECT_EQ(f2->contributors, 2u);
    EXPECT_EQ(f2->data, f.data);
    // A subtree's failure of an instance: its status, no data.
    const auto failed = FenceUp::decode(body(FenceUp{"0,3,#7", -24, 0, {}}.encode()));
    ASSERT_TRUE(failed) << failed.error();
    EXPECT_EQ(failed->key, "0,3,#7");
    EXPECT_EQ(failed->status, -24);
    EXPECT_EQ(failed->contributors, 0u);
    EXPECT_TRUE(failed->data.empty());
    const auto result = FenceDown::decode(body(FenceDown{"0-1,#2", -1, Bytes{5}}.encode()));
    ASSERT_TRUE(result) << result.error();
    EXPECT_EQ(result->key, "0-1,#2");
    EXPECT_EQ(result->status, -1);
    EXPECT_EQ(result->data, Bytes{5});

    const DmodexResp d{9, 1, 0, 0, Bytes{1, 2, 3}};
    EXPECT_EQ(DmodexResp::decode(body(d.encode()))->data, d.data);

    DataRequest p;
    p.op = DataRequest::Op::publish;
    p.keys = {"a", "b"};
    p.values = {Bytes{1}, Bytes{2, 3}};
    EXPECT_EQ(DataRequest::decode(body(p.encode()))->values, p.values);
    p.values.pop_back();
    EXPECT_EQ(DataRequest::decode(body(p.encode())).error(), "publish request with 2 keys and 1 values");
    const DataReply reply{1, 2, 0, {"a"}, {7}, {Bytes{9}}};
    EXPECT_EQ(DataReply::decode(body(reply.encode()))->ranks, reply.ranks);

    const EnvReply env{0, "", {"PMIX_RANK=3", "PMIX_NAMESPACE=x"}};
    EXPECT_EQ(EnvReply::decode(body(env.encode()))->env, env.env);
    EXPECT_EQ(Abort::decode(body(Abort{5, 7, "bye"}.encode()))->message, "bye");
    const auto started = TaskStarted::decode(body(TaskStarted{3, 4242, 0x1'0000'0002u}.encode()));
    ASSERT_TRUE(started) << started.error();
    EXPECT_EQ(started->rank, 3u);
    EXPECT_EQ(started->pid, 4242);
    EXPECT_EQ(started->start_time, 0x1'0000'0002u);
    EXPECT_EQ(Standby::decode(body(Standby{40123}.encode()))->port, 40123u);

    EXPECT_EQ(Gone::decode(body(Gone{3}.encode()))->node, 3u);
    const NodeDown down{2, "node3", {4, 5}, 1};
    const auto down2 = NodeDown::decode(body(down.encode()));
    ASSERT_TRUE(down2) << down2.error();
    EXPECT_EQ(down2->hostname, "node3");
    EXPECT_EQ(down2->ranks, down.ranks);
    EXPECT_EQ(down2->exit_code, 1);

    Hello orphan;
    orphan.role = Role::orphan;
    EXPECT_EQ(Hello::decode(body(orphan.encode()))->role, Role::orphan);
    Bytes bad = orphan.encode();
    bad[header_size] = 4;  // no such role
    EXPECT_EQ(Hello::decode(body(bad)).error(), "hello with unknown role 4");
    // Only slurmstepd serves a heterogeneous step's component.
    Hello daemon_component = orphan;
    daemon_component.role = Role::daemon;
    daemon_component.component = {42, 1, 2, 1};
    EXPECT_EQ(Hello::decode(body(daemon_component.encode())).error(),
              "hello of a heterogeneous step's component from a node daemon");
}

TEST(WireTest, FenceKeysNameTheParticipantsAndTheInstance)
{
    EXPECT_EQ(fence_set({}), "*");
    EXPECT_EQ(fence_set({0, 3, 7}), "0,3,7,");
    EXPECT_EQ(fence_key({}, 7), "*#7");
    EXPECT_EQ(fence_key({0, 3}, 7), "0,3,#7");
    EXPECT_EQ(fence_key({5}, 18446744073709551615u), "5,#18446744073709551615");

    const auto all = parse_fence_key("*#7");
    ASSERT_TRUE(all);
    EXPECT_EQ(all->ranks, std::vector<std::uint32_t>{});
    EXPECT_EQ(all->set, "*");
    EXPECT_EQ(all->instance, 7u);
    const auto some = parse_fence_key(fence_key({0, 3, 4294967295u}, 12));
    ASSERT_TRUE(some);
    EXPECT_EQ(some->ranks, (std::vector<std::uint32_t>{0, 3, 4294967295u}));
    EXPECT_EQ(some->set, "0,3,4294967295,");
    EXPECT_EQ(some->instance, 12u);

    for (const char* bad : {"", "*", "0,3,", "#1", "*#", "*#0", "*#01", "*#-1", "*#+1", "*#1x", "*#1#2", "**#1",
                            "*,#1", "0,3#1", "0,,3,#1", "a,#1", "-1,#1", "99999999999,#1", "03,#1", "3,0,#1",
                            "3,3,#1", "0,3,#18446744073709551616", " *#1", "*#1 ",
                            // runs: one spelling each, ascending, apart
                            "0,1,#1", "0-1-2,#1", "2-1,#1", "1-1,#1", "0-2,3,#1", "0-2,2-4,#1", "0-,#1", "-3,#1",
                            "0-03,#1", "0-4294967295,#1"})
        EXPECT_FALSE(parse_fence_key(bad)) << bad;

    // Consecutive ranks are one run: the key of a fence over all but one
    // node of a large step stays short.
    EXPECT_EQ(fence_set({0, 1, 2, 3, 7, 9, 10}), "0-3,7,9-10,");
    std::vector<std::uint32_t> most;
    for (std::uint32_t r = 0; r < 100000; ++r)
        if (r / 16 != 5)
            most.push_back(r);
    EXPECT_EQ(fence_key(most, 1), "0-79,96-99999,#1");
    const auto back = parse_fence_key("0-79,96-99999,#1");
    ASSERT_TRUE(back);
    EXPECT_EQ(back->ranks, most);
    // A set with no runs at all still fits a frame, beyond a plain string.
    std::vector<std::uint32_t> every_other;
    for (std::uint32_t r = 0; r < 20000; r += 2)
        every_other.push_back(r);
    const FenceUp sparse{fence_key(every_other, 1), 0, 1, {}};
    ASSERT_GT(sparse.key.size(), max_string);
    const auto decoded = FenceUp::decode(body(sparse.encode()));
    ASSERT_TRUE(decoded) << decoded.error();
    EXPECT_EQ(decoded->key, sparse.key);

    // Decoding checks the key of both directions.
    EXPECT_EQ(FenceUp::decode(body(FenceUp{"0,x,#1", 0, 1, {}}.encode())).error(),
              "fence up frame with a malformed fence key");
    EXPECT_EQ(FenceUp::decode(body(FenceUp{"0,1,", 0, 1, {}}.encode())).error(),  // no instance
              "fence up frame with a malformed fence key");
    EXPECT_EQ(FenceDown::decode(body(FenceDown{"*", 0, {}}.encode())).error(),
              "fence down frame with a malformed fence key");
    EXPECT_EQ(FenceDown::decode(body(FenceDown{"1,0,#3", 0, {}}.encode())).error(),
              "fence down frame with a malformed fence key");
}

TEST(WireTest, FinishedFencesAreKeptPerSetAndInstance)
{
    FinishedFences done;
    EXPECT_FALSE(done.contains("*", 1));
    done.add("*", 2);  // ahead of the first
    EXPECT_TRUE(done.contains("*", 2));
    EXPECT_FALSE(done.contains("*", 1));
    EXPECT_FALSE(done.contains("*", 3));
    EXPECT_FALSE(done.contains("0,1,", 2));  // another set
    done.add("*", 1);
    done.add("*", 1);  // twice: no harm
    for (std::uint64_t n : {1, 2})
        EXPECT_TRUE(done.contains("*", n)) << n;
    EXPECT_FALSE(done.contains("*", 3));
    done.add("*", 5);
    EXPECT_TRUE(done.contains("*", 5));
    EXPECT_FALSE(done.contains("*", 4));
    done.add("0,1,", 1);
    EXPECT_TRUE(done.contains("0,1,", 1));
    EXPECT_FALSE(done.contains("0,1,", 2));
}

TEST(WireTest, BadHeadersAreErrors)
{
    Bytes frame = Ack{1, 0}.encode();
    const std::pair<std::function<void(Bytes&)>, std::string> cases[] = {
        {[](Bytes& f) { f[0] = 'X'; }, "not an exitpolicy frame (bad magic)"},
        {[](Bytes& f) { f[2] = 9; },
         "unsupported protocol version 9 (this side speaks " + std::to_string(protocol_version) + ")"},
        {[](Bytes& f) { f[3] = 0; }, "unknown frame type 0"},
        {[](Bytes& f) { f[3] = 99; }, "unknown frame type 99"},
        {[](Bytes& f) { f[4] = 0x7f; }, "frame of 2130706440 bytes exceeds the bound of 65536"},
        {[](Bytes& f) { f[5] = 1; f[6] = 0; f[7] = 1; }, "frame of 65537 bytes exceeds the bound of 65536"},
    };
    for (const auto& [mutate, message] : cases) {
        Bytes f = frame;
        mutate(f);
        const auto h = decode_header(head(f));
        ASSERT_FALSE(h) << message;
        EXPECT_EQ(h.error(), message);
    }
}

TEST(WireTest, TruncatedOrPaddedBodiesAreErrors)
{
    Hello h;
    h.hostname = "node1";
    h.ranks = {0, 1};
    const Bytes frame = h.encode();
    const auto full = body(frame);
    for (std::size_t n = 0; n < full.size(); ++n)
        EXPECT_FALSE(Hello::decode(full.first(n))) << n;
    Bytes padded(full.begin(), full.end());
    padded.push_back(0);
    const auto r = Hello::decode(padded);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), "malformed hello frame");
    EXPECT_FALSE(Outcome::decode(body(Ack{1, 2}.encode())));
}

TEST(WireTest, HostileLengthsInsideBodiesAreBounded)
{
    // A string or rank list that claims more than the body holds, or more
    // than the bound, never allocates it.
    Bytes b = Writer(Type::hello).u8(1).u32(0).u32(0xffffffffu).finish();
    EXPECT_FALSE(Hello::decode(body(b)));
    b = Writer(Type::hello).u8(1).u32(0).str("n").u32(0x40000000u).finish();
    EXPECT_FALSE(Hello::decode(body(b)));
    // A value list that claims more blobs than the body could hold (found
    // by the fuzzer: it decoded as an empty list and encoded differently).
    b = Writer(Type::data_reply).u64(1).u32(0).i32(0).u32(0).u32(0).u32(0x3e000000u).finish();
    EXPECT_FALSE(DataReply::decode(body(b)));
    b = Writer(Type::hello).u8(7).u32(0).str("n").u32(0).u32(0).u32(0).u32(0).u32(0).bytes(Nonce{}).bytes(Mac{}).finish();
    const auto r = Hello::decode(body(b));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), "hello with unknown role 7");
}

// A rank list beyond the bound is written whole and refused by the
// reader: never cut short unseen (a truncated list would name the wrong
// ranks beside other lists of full length).
TEST(WireTest, RankListsBeyondTheBoundAreRefusedNotTruncated)
{
    NodeDown most{1, "node2", std::vector<std::uint32_t>(max_ranks, 7), 1};
    auto ok = NodeDown::decode(body(most.encode()));
    ASSERT_TRUE(ok) << ok.error();
    EXPECT_EQ(ok->ranks.size(), max_ranks);
    NodeDown over{1, "node2", std::vector<std::uint32_t>(max_ranks + 1, 7), 1};
    const Bytes frame = over.encode();
    EXPECT_GT(frame.size(), 4 * (max_ranks + 1));
    EXPECT_FALSE(NodeDown::decode(body(frame)));
}

// Nothing is cut to fit: a string over its limit or a body over the
// trusted bound makes no frame at all (the sender checks fits() and fails
// that request), and text a task chose is cut only visibly, by clipped().
TEST(WireTest, WhatDoesNotFitMakesNoFrameAndIsNeverCut)
{
    const std::string long_text(max_string + 1, 'x');
    Writer w(Type::notice);
    w.u32(0).u32(1).str(long_text);
    EXPECT_FALSE(w.fits());
    EXPECT_TRUE(w.finish().empty());
    EXPECT_TRUE((Notice{0, 1, long_text}.encode().empty()));
    EXPECT_FALSE((Notice{0, 1, std::string(max_string, 'x')}.encode().empty()));

    // A fence's data over the trusted bound: no frame, and never copied.
    const Bytes huge(std::size_t{max_body_trusted} + 1, 0);
    EXPECT_TRUE((FenceDown{"*#1", 0, huge}.encode().empty()));
    const Bytes fits_whole(std::size_t{max_body_trusted} - 64, 0);
    EXPECT_FALSE((FenceDown{"*#1", 0, fits_whole}.encode().empty()));
    // A fence key over its bound, too (a sparse set of 200 000 ranks).
    std::vector<std::uint32_t> sparse;
    for (std::uint32_t r = 0; r < 400000; r += 2)
        sparse.push_back(r);
    const std::string key = fence_key(sparse, 1);
    ASSERT_GT(key.size(), max_fence_key);
    EXPECT_TRUE((FenceUp{key, 0, 1, {}}.encode().empty()));

    // An environment entry longer than any other string goes whole.
    EnvReply env;
    env.env = {"PMIX_MCA_long=" + std::string(10000, 'v'), "A=b"};
    const auto back = EnvReply::decode(body(env.encode()));
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->env, env.env);

    EXPECT_EQ(clipped("short"), "short");
    const std::string cut = clipped(long_text);
    EXPECT_EQ(cut.size(), max_string);
    EXPECT_EQ(cut.substr(cut.size() - 6), " [cut]");
}

TEST(WireTest, OutcomesAndAcksInBulk)
{
    Outcomes batch;
    for (std::uint32_t r = 0; r < 3; ++r) {
        Outcome o;
        o.rank = 100 + r;
        o.epoch = r;
        o.pid = 4000 + r;
        o.wait_status = r == 1 ? 139 : 0;
        o.end_time_us = 1795258800000000 + r;
        o.flags = r == 2 ? Outcome::flag_aborted : 0;
        o.abort_status = r == 2 ? 7 : 0;
        batch.list.push_back(o);
    }
    const Bytes frame = batch.encode();
    EXPECT_EQ(decode_header(head(frame))->type, Type::outcomes);
    // Each outcome takes the bytes it takes alone.
    EXPECT_EQ(frame.size(), header_size + 4 + 3 * (Outcome{}.encode().size() - header_size));
    const auto back = Outcomes::decode(body(frame));
    ASSERT_TRUE(back);
    ASSERT_EQ(back->list.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_EQ(back->list[i].encode(), batch.list[i].encode());

    const Acks acks{{{100, 0}, {101, 1}, {4000000000u, 9}}};
    const auto acks2 = Acks::decode(body(acks.encode()));
    ASSERT_TRUE(acks2);
    ASSERT_EQ(acks2->list.size(), 3u);
    EXPECT_EQ(acks2->list[2].rank, 4000000000u);
    EXPECT_EQ(acks2->list[2].epoch, 9u);
    EXPECT_TRUE(Acks::decode(body(Acks{}.encode())));

    // A count the body does not hold, or beyond the bound, is malformed;
    // so is a body cut anywhere or with a byte too many.
    Bytes b = Acks{{{1, 2}}}.encode();
    b[header_size + 3] = 2;
    EXPECT_FALSE(Acks::decode(body(b)));
    Bytes four = Writer(Type::acks).u32(5).finish();
    EXPECT_FALSE(Acks::decode(body(four)));
    Acks too_many;
    too_many.list.resize(max_ranks + 1);
    EXPECT_FALSE(Acks::decode(body(too_many.encode())));
    for (std::size_t cut = 0; cut + header_size < frame.size(); ++cut)
        EXPECT_FALSE(Outcomes::decode(body(frame).first(cut))) << cut;
    Bytes longer = frame;
    longer.push_back(0);
    EXPECT_FALSE(Outcomes::decode(body(longer)));
}

TEST(WireTest, RandomBytesNeverCrashTheDecoders)
{
    // Whatever a decoder accepts encodes back to exactly the same bytes:
    // nothing is read past the body, nothing is silently skipped.
    std::mt19937 rng(42);
    int accepted = 0;
    auto check = [&](const Bytes& junk, auto decoded) {
        if (!decoded)
            return;
        ++accepted;
        const Bytes again = decoded->encode();
        EXPECT_EQ(Bytes(again.begin() + header_size, again.end()), junk);
    };
    for (int i = 0; i < 20000; ++i) {
        Bytes junk(rng() % 96);
        for (auto& b : junk)
            b = static_cast<std::uint8_t>(rng());
        check(junk, Challenge::decode(junk));
        check(junk, Hello::decode(junk));
        check(junk, Welcome::decode(junk));
        check(junk, Outcome::decode(junk));
        check(junk, Ack::decode(junk));
        check(junk, Outcomes::decode(junk));
        check(junk, Acks::decode(junk));
        if (junk.size() >= header_size)
            (void)decode_header(std::span<const std::uint8_t, header_size>(junk.data(), header_size));
    }
    EXPECT_GT(accepted, 0);  // fixed-size messages of the right length do decode
}

TEST(EventsTest, EachEndRaisesItsOwnCodeOnce)
{
    constexpr std::uint8_t known = Outcome::flag_finalized_known;
    constexpr std::uint8_t finalized = Outcome::flag_finalized_known | Outcome::flag_finalized;
    struct Case {
        const char* what;
        std::int32_t wait_status;
        std::uint8_t flags;
        std::int32_t abort_status;
        std::optional<int> code;  // none: no event
        int exit_code;
        bool client;
    };
    const Case cases[] = {
        {"a client killed by SIGSEGV", 11, known, 0, pmix::proc_aborted_by_sig, 139, true},
        {"a finalized client killed by SIGKILL", 9, finalized, 0, pmix::proc_aborted_by_sig, 137, true},
        {"a client that exits 3 unfinalized", 3 << 8, known, 0, pmix::proc_term_wo_sync, 3, true},
        {"a client that exits 0 unfinalized", 0, known, 0, pmix::proc_term_wo_sync, 0, true},
        {"a client that finalizes and exits 3", 3 << 8, finalized, 0, pmix::exit_nonzero_term, 3, true},
        {"a client that finalizes and exits 0", 0, finalized, 0, std::nullopt, 0, true},
        {"a client that aborts with 7", 7 << 8, known | Outcome::flag_aborted, 7, pmix::proc_requested_abort, 7,
         true},
        {"a task that is no client exits 3", 3 << 8, 0, 0, pmix::exit_nonzero_term, 3, false},
        {"a task that is no client exits 0", 0, 0, 0, std::nullopt, 0, false},
        {"a task that is no client is killed", 15, 0, 0, pmix::proc_aborted_by_sig, 143, false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Outcome o;
        o.rank = 5;
        o.wait_status = c.wait_status;
        o.flags = c.flags;
        o.abort_status = c.abort_status;
        const auto e = pmix::termination_event(o, 3);
        ASSERT_EQ(e.has_value(), c.code.has_value());
        if (!e)
            continue;
        EXPECT_EQ(e->code, *c.code);
        EXPECT_EQ(e->exit_code, c.exit_code);
        EXPECT_EQ(e->client, c.client);
        EXPECT_EQ(e->origin, 3u);
        EXPECT_EQ(e->rank, 5u);
        EXPECT_EQ(e->wait_status, c.wait_status);
    }
}

// exitpolicy(1) names, for each way a PMIx client can end, the code every
// survivor hears: the one termination_event gives.
TEST(EventsTest, TheUsersManualPageNamesTheCodeOfEachEnd)
{
    std::ifstream in(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "docs/exitpolicy.1");
    std::ostringstream text;
    text << in.rdbuf();
    const std::string page = text.str();
    ASSERT_FALSE(page.empty());
    constexpr std::uint8_t known = Outcome::flag_finalized_known;
    constexpr std::uint8_t finalized = Outcome::flag_finalized_known | Outcome::flag_finalized;
    struct Row {
        const char* condition;  // the .TP entry's first line, in roff
        const char* name;
        int code;
        std::int32_t wait_status;
        std::uint8_t flags;
    };
    const Row rows[] = {
        {".B PMIx_Abort(\\fIstatus\\fP)", "PMIX_ERR_PROC_REQUESTED_ABORT", pmix::proc_requested_abort, 7 << 8,
         known | Outcome::flag_aborted},
        {"killed by a signal", "PMIX_ERR_PROC_ABORTED_BY_SIG", pmix::proc_aborted_by_sig, 11, known},
        {"exited, with any code, without \\fBPMIx_Finalize\\fP", "PMIX_ERR_PROC_TERM_WO_SYNC",
         pmix::proc_term_wo_sync, 3 << 8, known},
        {"exited with a code other than 0 after \\fBPMIx_Finalize\\fP", "PMIX_ERR_EXIT_NONZERO_TERM",
         pmix::exit_nonzero_term, 3 << 8, finalized},
    };
    for (const Row& r : rows) {
        SCOPED_TRACE(r.condition);
        EXPECT_NE(page.find(std::string(".TP\n") + r.condition + "\n.BR " + r.name + " ;"), std::string::npos)
            << "docs/exitpolicy.1 does not give " << r.name << " for this end";
        Outcome o;
        o.rank = 1;
        o.wait_status = r.wait_status;
        o.flags = r.flags;
        o.abort_status = 7;
        const auto e = pmix::termination_event(o, 0);
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->code, r.code);
    }
}

TEST(AuthTest, ProofsBindTheSecretTheNoncesAndTheIdentity)
{
    const Secret secret = *random_secret();
    Secret other = secret;
    other[0] ^= 1;
    const Challenge challenge{*random_nonce(), 42, 0};
    Hello hello;
    hello.node_id = 2;
    hello.hostname = "node3";
    hello.ranks = {4, 5};
    hello.nonce = *random_nonce();

    const Mac proof = client_proof(secret, challenge, hello);
    EXPECT_TRUE(proofs_equal(proof, client_proof(secret, challenge, hello)));
    EXPECT_FALSE(proofs_equal(proof, client_proof(other, challenge, hello)));
    Hello changed = hello;
    changed.node_id = 3;
    EXPECT_FALSE(proofs_equal(proof, client_proof(secret, challenge, changed)));
    changed = hello;
    changed.ranks = {4};
    EXPECT_FALSE(proofs_equal(proof, client_proof(secret, challenge, changed)));
    // A heterogeneous step's component: which one a node serves is proven
    // too (its ranks are placed by it).
    changed = hello;
    changed.component = {42, 1, 2, 1};
    const Mac as_component = client_proof(secret, challenge, changed);
    EXPECT_FALSE(proofs_equal(proof, as_component));
    changed.component.index = 0;
    EXPECT_FALSE(proofs_equal(as_component, client_proof(secret, challenge, changed)));
    Challenge replay = challenge;
    replay.nonce[3] ^= 1;
    EXPECT_FALSE(proofs_equal(proof, client_proof(secret, replay, hello)));
    replay = challenge;
    replay.step_id = 1;
    EXPECT_FALSE(proofs_equal(proof, client_proof(secret, replay, hello)));

    const Mac server = server_proof(secret, challenge.nonce, hello.nonce);
    EXPECT_FALSE(proofs_equal(server, proof));
    EXPECT_FALSE(proofs_equal(server, server_proof(secret, hello.nonce, challenge.nonce)));
    EXPECT_FALSE(proofs_equal(server, server_proof(other, challenge.nonce, hello.nonce)));
}

TEST(AuthTest, SecretsInHex)
{
    const Secret s = *random_secret();
    const std::string hex = to_hex(s);
    EXPECT_EQ(hex.size(), 64u);
    EXPECT_EQ(*secret_from_hex(hex), s);
    EXPECT_EQ(to_hex(Bytes{0x00, 0xab, 0x0f}), "00ab0f");
    EXPECT_EQ(secret_from_hex("abc").error(), "secret must be 64 hex digits");
    EXPECT_EQ(secret_from_hex(std::string(63, '0') + "g").error(), "secret is not hexadecimal");
    EXPECT_NE(*random_secret(), *random_secret());
}

}  // namespace
}  // namespace exitpolicy::protocol
