// SPDX-License-Identifier: Apache-2.0
// pmi_server_test.cpp - the PMI-1 and PMI-2 service as MPICH's clients see
// it: each simulated task speaks on a real socketpair (slurmstepd's, the
// daemon's end adopted), writes what MPICH writes and reads back what MPICH
// expects; the step behind the server is the test's own, which keeps each
// fence for the test to complete as the overlay would. Also the unhappy
// tasks (hang-ups, garbage, oversized input) and MPICH's process mapping.
#include "pmi_encoding.hpp"
#include "pmi_server.hpp"
#include "protocol/events.hpp"

#include "event_loop.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exitpolicy::pmix_server {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;
// A PMI-2 reply's pairs, "cmd" included: MPICH looks them up by key.
using Fields = std::map<std::string, std::string>;

// Fence data as the server's barriers carry it: each key and each value a
// 4-byte big-endian length, then its bytes.
protocol::Bytes encode(const Pairs& pairs)
{
    protocol::Bytes out;
    auto add = [&](const std::string& s) {
        const auto n = static_cast<std::uint32_t>(s.size());
        for (int shift = 24; shift >= 0; shift -= 8)
            out.push_back(static_cast<std::uint8_t>(n >> shift));
        out.insert(out.end(), s.begin(), s.end());
    };
    for (const auto& [key, value] : pairs) {
        add(key);
        add(value);
    }
    return out;
}

protocol::Bytes joined(protocol::Bytes a, const protocol::Bytes& b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A PMI-2 request as MPICH frames it: its length in 6 characters ("%6u"),
// then the body.
std::string v2(std::string_view body)
{
    const std::string length = std::to_string(body.size());
    return std::string(6 - length.size(), ' ') + length + std::string(body);
}

// "cmd=NAME;k=v;...;" as pairs.
Fields fields(std::string_view body)
{
    Fields out;
    while (!body.empty()) {
        const auto end = std::min(body.find(';'), body.size());
        const std::string_view pair = body.substr(0, end);
        const auto eq = pair.find('=');
        if (!pair.empty())
            out[std::string(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1));
        body.remove_prefix(std::min(end + 1, body.size()));
    }
    return out;
}

// A reply's value of `key`; "(none)" when it has none.
std::string field(const Fields& f, const std::string& key)
{
    const auto it = f.find(key);
    return it == f.end() ? "(none)" : it->second;
}

// The step behind the server: what it is asked is recorded; a fence is
// kept for the test to complete (the overlay's part).
class TestStep final : public StepServices {
public:
    struct Fence {
        std::vector<std::uint32_t> ranks;
        protocol::Bytes data;
        int timeout_s = -1;
        Done done;
    };
    struct Abort {
        std::uint32_t rank = 0;
        int status = 0;
        std::string message;
    };

    ServedStep arguments;
    std::vector<Fence> fences;
    std::vector<Abort> aborts;
    std::vector<std::uint32_t> connected;
    std::vector<std::uint32_t> finalized;
    int unexpected = 0;  // calls the PMI service has no reason to make
    // Set: fence() completes with this status before it returns, as a fence
    // that fails at once (a participant known dead) does.
    std::optional<int> fail_at_once;

    void post(std::function<void()> fn) override { fn(); }
    void fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done) override
    {
        fences.push_back({std::move(ranks), std::move(data), timeout_s, std::move(done)});
        if (fail_at_once)
            complete(fences.size() - 1, *fail_at_once, {});
    }
    void direct_modex(std::uint32_t, int, Done) override { ++unexpected; }
    void abort(std::uint32_t rank, int status, std::string message) override
    {
        aborts.push_back({rank, status, std::move(message)});
    }
    // The front end's name store, as it answers: a key published once,
    // found until unpublished.
    std::map<std::string, protocol::Bytes> names;
    std::vector<protocol::DataRequest> data_requests;
    void data_request(protocol::DataRequest r, int, DataDone done) override
    {
        data_requests.push_back(r);
        protocol::DataReply reply;
        const std::string key = r.keys.empty() ? std::string{} : r.keys.front();
        using Op = protocol::DataRequest::Op;
        if (r.op == Op::publish) {
            if (!names.emplace(key, r.values.at(0)).second)
                reply.status = protocol::pmix::duplicate_key;
        } else if (auto it = names.find(key); it == names.end()) {
            reply.status = protocol::pmix::not_found;
        } else if (r.op == Op::lookup) {
            reply.keys.push_back(key);
            reply.ranks.push_back(0);
            reply.values.push_back(it->second);
        } else {
            names.erase(it);
        }
        done(reply);
    }
    void relay(int, std::uint32_t, protocol::Bytes) override { ++unexpected; }
    void terminate_step(const std::string&) override { ++unexpected; }
    void task_log(std::uint32_t, const std::string&) override { ++unexpected; }
    void client_connected(std::uint32_t rank) override { connected.push_back(rank); }
    void client_finalized(std::uint32_t rank) override { finalized.push_back(rank); }
    const ServedStep& served() const noexcept override { return arguments; }

    // Completes fence i as the overlay would, once.
    void complete(std::size_t i, int status, const protocol::Bytes& data)
    {
        ASSERT_LT(i, fences.size());
        ASSERT_TRUE(fences[i].done) << "fence " << i << " completed twice";
        auto done = std::exchange(fences[i].done, nullptr);
        done(status, data);
    }
};

// A simulated task's end of its PMI socket.
struct Task {
    int fd = -1;
    std::string inbox;   // bytes read and not yet taken
    bool ended = false;  // its read saw the end (or an error): the server closed
};

class PmiServerTest : public ::testing::Test {
protected:
    PmiServerTest()
    {
        std::signal(SIGPIPE, SIG_IGN);  // as exitpolicy-pmixd's main does
        step.arguments.job_id = 42;
        step.arguments.step_id = 3;
        step.arguments.ntasks = 4;
        server = std::make_unique<PmiServer>(loop.base(), step);
    }
    ~PmiServerTest() override
    {
        server.reset();
        for (const Task& t : tasks)
            if (t.fd >= 0)
                ::close(t.fd);
    }
    void TearDown() override { EXPECT_EQ(step.unexpected, 0) << "the PMI service called what it has no use for"; }

    // This node's tasks are `ranks`: a socketpair each, made as slurmstepd
    // makes it (blocking), the daemon's ends handed to the server.
    void adopt(const std::vector<std::uint32_t>& ranks = {0, 1})
    {
        std::vector<int> ends;
        for (std::size_t i = 0; i < ranks.size(); ++i) {
            int pair[2] = {-1, -1};
            ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
            ASSERT_EQ(::fcntl(pair[1], F_SETFL, ::fcntl(pair[1], F_GETFL) | O_NONBLOCK), 0);
            ends.push_back(pair[0]);
            tasks.push_back({pair[1], {}, false});
        }
        server->adopt(ranks, ends);
    }
    // The step map: 4 ranks, 2 on each of 2 nodes, unless told.
    void serve(const std::vector<std::uint32_t>& rank_node = {0, 0, 1, 1})
    {
        protocol::StepMap map;
        map.nspace = "slurm.pmix.42.3";
        map.rank_node = rank_node;
        server->serve(map);
    }
    void start(const std::vector<std::uint32_t>& ranks = {0, 1},
               const std::vector<std::uint32_t>& rank_node = {0, 0, 1, 1})
    {
        adopt(ranks);
        serve(rank_node);
    }

    // Writes `bytes` on task t's end; false once the server closed it.
    bool send(std::size_t t, std::string_view bytes)
    {
        Task& task = tasks.at(t);
        while (!bytes.empty()) {
            const ssize_t n = ::send(task.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n > 0) {
                bytes.remove_prefix(static_cast<std::size_t>(n));
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                // Full: the server reads some as the loop turns.
                if (!loop.run_until([&] { return writable(task.fd); }))
                    return false;
            } else if (n < 0 && errno != EINTR) {
                return false;
            }
        }
        return true;
    }
    static bool writable(int fd)
    {
        pollfd p{fd, POLLOUT, 0};
        return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP));
    }

    // Reads what task t's end has now.
    void pull(std::size_t t)
    {
        Task& task = tasks.at(t);
        if (task.fd < 0)
            return;
        char buf[4096];
        for (;;) {
            const ssize_t n = ::read(task.fd, buf, sizeof buf);
            if (n > 0) {
                task.inbox.append(buf, static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                task.ended = true;
            return;
        }
    }

    // Task t's next PMI-1 reply line, without its '\n'; "" (a failure) when
    // none comes.
    std::string line(std::size_t t)
    {
        Task& task = tasks.at(t);
        loop.run_until([&] {
            pull(t);
            return task.inbox.find('\n') != std::string::npos || task.ended;
        });
        const auto nl = task.inbox.find('\n');
        if (nl == std::string::npos) {
            ADD_FAILURE() << "task " << t << " got no reply line (has \"" << task.inbox << "\")";
            return {};
        }
        std::string out = task.inbox.substr(0, nl);
        task.inbox.erase(0, nl + 1);
        return out;
    }
    std::string ask(std::size_t t, std::string_view request)
    {
        EXPECT_TRUE(send(t, request)) << request;
        return line(t);
    }

    // The size of the whole PMI-2 frame `in` starts with; 0 while it has
    // not come whole, or when it is no frame.
    static std::size_t whole_frame(const std::string& in)
    {
        if (in.size() < 6)
            return 0;
        const std::string_view head = std::string_view(in).substr(0, 6);
        const std::string_view digits = head.substr(std::min(head.find_first_not_of(' '), head.size()));
        std::size_t length = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
        if (ec != std::errc{} || end != digits.data() + digits.size())
            return 0;
        return in.size() >= 6 + length ? 6 + length : 0;
    }
    // Task t's next PMI-2 reply; empty (a failure) when none comes.
    Fields frame(std::size_t t)
    {
        Task& task = tasks.at(t);
        loop.run_until([&] {
            pull(t);
            return whole_frame(task.inbox) != 0 || task.ended;
        });
        const std::size_t size = whole_frame(task.inbox);
        if (size == 0) {
            ADD_FAILURE() << "task " << t << " got no reply frame (has \"" << task.inbox << "\")";
            return {};
        }
        const std::string body = task.inbox.substr(6, size - 6);
        task.inbox.erase(0, size);
        EXPECT_TRUE(body.starts_with("cmd=")) << body;
        return fields(body);
    }
    Fields ask2(std::size_t t, std::string_view body)
    {
        EXPECT_TRUE(send(t, v2(body))) << body;
        return frame(t);
    }

    // Turns the loop as often as any answer would need (a read, a write);
    // no waiting.
    void settle()
    {
        for (int i = 0; i < 50; ++i)
            event_base_loop(loop.base(), EVLOOP_NONBLOCK);
    }
    // True when task t has been answered nothing (after settling).
    bool quiet(std::size_t t)
    {
        settle();
        pull(t);
        return tasks.at(t).inbox.empty() && !tasks.at(t).ended;
    }
    // True once the server has closed task t's connection.
    bool closed_by_server(std::size_t t)
    {
        return loop.run_until([&] {
            pull(t);
            return tasks.at(t).ended;
        });
    }
    // The task exits (or closes PMI_FD).
    void hang_up(std::size_t t)
    {
        Task& task = tasks.at(t);
        ::close(task.fd);
        task.fd = -1;
    }

    void init1(std::size_t t)
    {
        EXPECT_EQ(ask(t, "cmd=init pmi_version=1 pmi_subversion=1\n"),
                  "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
    }
    void init2(std::size_t t)
    {
        EXPECT_EQ(ask(t, "cmd=init pmi_version=2 pmi_subversion=0\n"),
                  "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0");
    }
    bool fences_come(std::size_t n)
    {
        return loop.run_until([&] { return step.fences.size() >= n; });
    }

    test::Loop loop;
    TestStep step;
    std::unique_ptr<PmiServer> server;  // after loop and step: gone first
    std::vector<Task> tasks;
};

// ---- process_mapping ----------------------------------------------------------------------

// `ranks` ranks dealt round-robin over `nodes` nodes.
std::vector<std::uint32_t> cyclic(std::uint32_t ranks, std::uint32_t nodes)
{
    std::vector<std::uint32_t> out;
    for (std::uint32_t r = 0; r < ranks; ++r)
        out.push_back(r % nodes);
    return out;
}

// `nodes` nodes holding 1, 2, 1, 2, ... ranks in a row: a layout no
// mapping writes shorter than one triple per node.
std::vector<std::uint32_t> uneven(std::uint32_t nodes)
{
    std::vector<std::uint32_t> out;
    for (std::uint32_t n = 0; n < nodes; ++n)
        out.insert(out.end(), 1 + n % 2, n);
    return out;
}
std::string uneven_mapping(std::uint32_t nodes)
{
    std::string out = "(vector";
    for (std::uint32_t n = 0; n < nodes; ++n)
        out += ",(" + std::to_string(n) + ",1," + std::to_string(1 + n % 2) + ")";
    return out + ")";
}
// The most nodes whose uneven() mapping fits in `limit` characters.
std::uint32_t uneven_nodes_within(std::size_t limit)
{
    std::uint32_t nodes = 1;
    while (uneven_mapping(nodes + 1).size() <= limit)
        ++nodes;
    return nodes;
}

bool take(std::string_view& s, std::string_view what)
{
    if (!s.starts_with(what))
        return false;
    s.remove_prefix(what.size());
    return true;
}
bool take(std::string_view& s, std::uint32_t& v)
{
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{})
        return false;
    s.remove_prefix(static_cast<std::size_t>(end - s.data()));
    return true;
}

// The node of each of `size` ranks as MPICH 4 reads `mapping`
// (MPIR_NODEMAP_parse_mapping, MPIR_NODEMAP_populate_ids_from_mapping):
// the triples in order, then again from the first triple that starts at
// node 0 (from the first, when none does) until every rank has its node.
// Empty where MPICH fails: no mapping, or one that gives no more ranks a
// node (MPICH loops forever there).
std::vector<std::uint32_t> as_mpich_reads(const std::string& mapping, std::size_t size)
{
    struct Triple {
        std::uint32_t first_node, nodes, ranks_per_node;
    };
    std::vector<Triple> triples;
    std::string_view s = mapping;
    if (!take(s, "(vector"))
        return {};
    while (take(s, ",(")) {
        Triple t{};
        if (!take(s, t.first_node) || !take(s, ",") || !take(s, t.nodes) || !take(s, ",") ||
            !take(s, t.ranks_per_node) || !take(s, ")"))
            return {};
        triples.push_back(t);
    }
    if (s != ")")
        return {};
    std::vector<std::uint32_t> out;
    bool wrapped = false;
    while (out.size() < size) {
        const std::size_t before = out.size();
        std::size_t i = 0;
        while (wrapped && triples[i].first_node != 0)
            ++i;
        for (; i < triples.size() && out.size() < size; ++i) {
            wrapped = wrapped || triples[i].first_node == 0;
            for (std::uint32_t n = 0; n < triples[i].nodes; ++n)
                for (std::uint32_t r = 0; r < triples[i].ranks_per_node && out.size() < size; ++r)
                    out.push_back(triples[i].first_node + n);
        }
        if (out.size() == before)
            return {};
    }
    return out;
}

TEST(ProcessMappingTest, DescribesEachLayoutAsMpichParsesIt)
{
    struct Case {
        const char* what;
        std::vector<std::uint32_t> rank_node;
        std::size_t limit;
        std::string expected;
    };
    const std::uint32_t fit = uneven_nodes_within(1024);
    const std::vector<Case> cases = {
        {"block: 8 ranks on 4 nodes, 2 each", {0, 0, 1, 1, 2, 2, 3, 3}, 1024, "(vector,(0,4,2))"},
        {"cyclic: 8 ranks on 4 nodes", cyclic(8, 4), 1024, "(vector,(0,4,1))"},
        {"uneven: 3 ranks on node 0, 1 on node 1", {0, 0, 0, 1}, 1024, "(vector,(0,1,3),(1,1,1))"},
        {"one node", {0, 0, 0, 0}, 1024, "(vector,(0,1,4))"},
        {"one rank", {0}, 1024, "(vector,(0,1,1))"},
        {"blocks on nodes out of order", {1, 1, 0, 0}, 1024, "(vector,(1,1,2),(0,1,2))"},
        {"blocks of different sizes break a triple", {0, 0, 1, 2, 2}, 1024, "(vector,(0,1,2),(1,1,1),(2,1,2))"},
        {"a mapping exactly as long as the limit", {0, 0, 1, 1, 2, 2, 3, 3}, 16, "(vector,(0,4,2))"},
        {"a mapping one character over the limit", {0, 0, 1, 1, 2, 2, 3, 3}, 15, ""},
        {"the most uneven nodes within 1024 characters", uneven(fit), 1024, uneven_mapping(fit)},
        {"one uneven node more", uneven(fit + 1), 1024, ""},
        {"far over the limit", uneven(5000), 1024, ""},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string got = process_mapping(c.rank_node, c.limit);
        EXPECT_EQ(got, c.expected);
        EXPECT_LE(got.size(), c.limit);
    }
    EXPECT_GT(uneven_mapping(fit).size(), 1000u);  // the boundary is near 1024 indeed
}

TEST(ProcessMappingTest, DefaultLimitIsMpichsValueLength)
{
    const std::uint32_t fit = uneven_nodes_within(1024);
    EXPECT_EQ(process_mapping(uneven(fit)), uneven_mapping(fit));
    EXPECT_EQ(process_mapping(uneven(fit + 1)), "");
}

TEST(ProcessMappingTest, MpichReadsBackEveryRanksNode)
{
    const std::vector<std::vector<std::uint32_t>> layouts = {
        {0, 0, 1, 1, 2, 2, 3, 3}, cyclic(8, 4),     {0, 0, 0, 1},         {0, 0, 0, 0},  {0},
        {1, 1, 0, 0},             {0, 0, 1, 2, 2},  {0, 0, 1, 1, 0, 0, 1, 1}, cyclic(200, 2), cyclic(30, 7),
        {2, 0, 1, 2, 0, 1},       uneven(40),
    };
    for (const auto& layout : layouts) {
        const std::string mapping = process_mapping(layout);
        SCOPED_TRACE(mapping);
        ASSERT_FALSE(mapping.empty());
        EXPECT_EQ(as_mpich_reads(mapping, layout.size()), layout);
    }
}

// A mapping longer than the limit is left out, and only MPICH's PMI-1
// client then asks each rank's host (build_nodemap_pmi1's fallback); its
// PMI-2 client fails MPI_Init ("PMI_process_mapping attribute not found").
// MPICH repeats the triples until every rank has a node (as_mpich_reads),
// so a cyclic step of any size is one cycle's triples: "(vector,(0,4,1))"
// for srun -m cyclic with 128 tasks on each of 4 nodes, not one triple per
// cycle (over 1024 characters).
TEST(ProcessMappingTest, ACyclicStepOfAnySizeHasAMappingMpichReads)
{
    for (const auto& layout : {cyclic(512, 4), cyclic(256, 2), cyclic(4096, 16)}) {
        const std::string mapping = process_mapping(layout);
        SCOPED_TRACE(std::to_string(layout.size()) + " ranks cyclic: \"" + mapping + "\"");
        EXPECT_FALSE(mapping.empty());
        EXPECT_EQ(as_mpich_reads(mapping, layout.size()), layout);
    }
}

// "(vector)", no triples, would have MPICH's
// MPIR_NODEMAP_populate_ids_from_mapping loop forever; no mapping at all
// makes it fall back or fail. Reached only by a StepMap whose rank_node is
// empty.
TEST(ProcessMappingTest, NoRanksGiveNoMapping)
{
    EXPECT_EQ(process_mapping({}), "");
}

// ---- abort messages -----------------------------------------------------------------------

TEST(AbortMessageTest, TheCodeOfMpichsPmi2AbortIsReadFromItsMessage)
{
    EXPECT_EQ(abort_code(-1, "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5"), 7);
    EXPECT_EQ(abort_code(3, "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5"), 3);
    EXPECT_EQ(abort_code(-1, "application called MPI_Abort(comm=0x84000000, 7x) - process 5"), -1);
    EXPECT_EQ(abort_code(std::nullopt, "no code"), 1);
}

// MPICH's own words (src/mpi/init/abort.c and its fatal error handler):
// only an application's MPI_Abort is one.
TEST(AbortMessageTest, OnlyTheApplicationsOwnMpiAbortIsTakenForOne)
{
    EXPECT_TRUE(application_abort("application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5"));
    EXPECT_TRUE(application_abort("application called MPI_Abort(comm=0x84000002, 1) - process 0"));
    EXPECT_FALSE(application_abort("Fatal error in internal_Barrier: Other MPI error, error stack:\n"
                                   "internal_Barrier(84): MPI_Barrier(comm=0x84000000) failed"));
    EXPECT_FALSE(application_abort("MPI_Abort through PMI-1 (MPICH 4.0 sends no message)"));
    EXPECT_FALSE(application_abort(""));
}

// ---- before serve -------------------------------------------------------------------------

TEST_F(PmiServerTest, NothingIsAnsweredBeforeServe)
{
    adopt();
    ASSERT_TRUE(send(0, "cmd=init pmi_version=1 pmi_subversion=1\n"));
    ASSERT_TRUE(send(1, "cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n"));
    EXPECT_TRUE(quiet(0));
    EXPECT_TRUE(quiet(1));
    EXPECT_TRUE(step.connected.empty());

    serve();
    EXPECT_EQ(line(0), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
    EXPECT_EQ(line(1), "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0");
    EXPECT_EQ(line(1), "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0");
    EXPECT_EQ(step.connected.size(), 2u);
}

TEST_F(PmiServerTest, ServingTwiceChangesNothing)
{
    start();
    serve({0, 1, 0, 1});  // ignored: the first map stands
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_process_mapping\n"),
              "cmd=get_result rc=0 value=(vector,(0,2,2))");
}

// ---- PMI-1 ---------------------------------------------------------------------------------

TEST_F(PmiServerTest, InitAnswersVersionOneAndMakesTheTaskAClient)
{
    start();
    EXPECT_EQ(server->clients(), 0u);
    init1(1);
    EXPECT_EQ(step.connected, std::vector<std::uint32_t>{1});
    EXPECT_EQ(server->clients(), 1u);
    // A second init is answered; the task is still one client.
    init1(1);
    EXPECT_EQ(step.connected, std::vector<std::uint32_t>{1});
    EXPECT_EQ(server->clients(), 1u);
}

TEST_F(PmiServerTest, InitAskingForAnUnknownVersionIsRefusedAndTheConnectionIsDone)
{
    start();
    EXPECT_EQ(ask(0, "cmd=init pmi_version=3 pmi_subversion=0\n"),
              "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1");
    EXPECT_TRUE(step.connected.empty());
    ASSERT_TRUE(send(0, "cmd=get_maxes\n"));
    EXPECT_TRUE(quiet(0));
    EXPECT_EQ(server->clients(), 0u);
}

TEST_F(PmiServerTest, GetMaxesTellsMpichItsLimits)
{
    start();
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get_maxes\n"), "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0");
}

TEST_F(PmiServerTest, GetAppnumIsZero)
{
    start();
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

TEST_F(PmiServerTest, GetMyKvsnameIsJobDotStep)
{
    start();
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get_my_kvsname\n"), "cmd=my_kvsname kvsname=42.3 rc=0");
}

TEST_F(PmiServerTest, GetUniverseSizeIsTheStepsTaskCount)
{
    start();
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get_universe_size\n"), "cmd=universe_size size=4 rc=0");
}

TEST_F(PmiServerTest, APutIsVisibleToGetsAtOnce)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=P2-businesscard value=description#host$port#1$ifname#10.0.0.1$\n"),
              "cmd=put_result rc=0");
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=P2-businesscard\n"),
              "cmd=get_result rc=0 value=description#host$port#1$ifname#10.0.0.1$");
    // The node's other task sees it as well, before any barrier.
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=P2-businesscard\n"),
              "cmd=get_result rc=0 value=description#host$port#1$ifname#10.0.0.1$");
    // A second put of the key replaces the value.
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=P2-businesscard value=v2\n"), "cmd=put_result rc=0");
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=P2-businesscard\n"), "cmd=get_result rc=0 value=v2");
}

TEST_F(PmiServerTest, GetOfAMissingKeyFails)
{
    start();
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=P7-businesscard\n"), "cmd=get_result rc=-1 msg=key_not_found");
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3\n"), "cmd=get_result rc=-1 msg=key_not_found");
}

TEST_F(PmiServerTest, GetOfProcessMappingDescribesTheStep)
{
    start({0, 1}, {0, 0, 1, 1});
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_process_mapping\n"),
              "cmd=get_result rc=0 value=(vector,(0,2,2))");
}

// Any task may put any key: one that names the server's own (the step's
// layout, who has died) must not change what every rank reads of them.
TEST_F(PmiServerTest, ATasksPutNeverReplacesTheServersOwnKeys)
{
    start({0, 1}, {0, 0, 1, 1});
    init1(0);
    init1(1);
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=PMI_process_mapping value=(vector,(0,4,1))\n"),
              "cmd=put_result rc=0");
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=PMI_dead_processes value=1\n"), "cmd=put_result rc=0");
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=PMI_process_mapping\n"),
              "cmd=get_result rc=0 value=(vector,(0,2,2))");
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=PMI_dead_processes\n"), "cmd=get_result rc=-1 msg=key_not_found");
}

TEST_F(PmiServerTest, AMappingOverTheLimitIsLeftOut)
{
    start({0, 1}, uneven(2000));
    init1(0);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_process_mapping\n"), "cmd=get_result rc=-1 msg=key_not_found");
}

TEST_F(PmiServerTest, BarrierFencesOnceEveryLocalTaskIsInWithThisNodesPuts)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=P0-businesscard value=card0\n"), "cmd=put_result rc=0");
    EXPECT_EQ(ask(1, "cmd=put kvsname=42.3 key=P1-businesscard value=card1\n"), "cmd=put_result rc=0");

    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(0));
    EXPECT_TRUE(step.fences.empty()) << "fenced before the node's other task came";

    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    ASSERT_EQ(step.fences.size(), 1u);
    EXPECT_TRUE(step.fences[0].ranks.empty());  // all the step's ranks
    EXPECT_EQ(step.fences[0].timeout_s, 0);
    EXPECT_EQ(step.fences[0].data, encode({{"P0-businesscard", "card0"}, {"P1-businesscard", "card1"}}));
    // Nobody is out before the step's fence completes.
    EXPECT_TRUE(quiet(0));
    EXPECT_TRUE(quiet(1));

    // The overlay brings every node's part: this node's and node 1's.
    const protocol::Bytes node1 = encode({{"P2-businesscard", "card2"}, {"P3-businesscard", "card3"}});
    step.complete(0, 0, joined(step.fences[0].data, node1));
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(line(1), "cmd=barrier_out rc=0");
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=P3-businesscard\n"), "cmd=get_result rc=0 value=card3");
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=P2-businesscard\n"), "cmd=get_result rc=0 value=card2");
    EXPECT_EQ(ask(1, "cmd=get kvsname=42.3 key=P0-businesscard\n"), "cmd=get_result rc=0 value=card0");
    EXPECT_EQ(step.fences.size(), 1u);
}

TEST_F(PmiServerTest, ANextBarrierCarriesOnlyWhatWasPutSinceTheLast)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=a value=1\n"), "cmd=put_result rc=0");
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, 0, step.fences[0].data);
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(line(1), "cmd=barrier_out rc=0");

    EXPECT_EQ(ask(1, "cmd=put kvsname=42.3 key=b value=2\n"), "cmd=put_result rc=0");
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(1));
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(2));
    EXPECT_EQ(step.fences[1].data, encode({{"b", "2"}}));
    step.complete(1, 0, step.fences[1].data);
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(line(1), "cmd=barrier_out rc=0");

    // A barrier with nothing put carries nothing.
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(3));
    EXPECT_TRUE(step.fences[2].data.empty());
}

TEST_F(PmiServerTest, AFailedFenceAnswersBarrierOutWithAnError)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, -1, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=-1");
    EXPECT_EQ(line(1), "cmd=barrier_out rc=-1");
    // The next barrier is a new fence.
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(2));
}

TEST_F(PmiServerTest, AFenceThatFailsAtOnceAnswersEveryTaskInTheBarrier)
{
    start();
    init1(0);
    init2(1);
    step.fail_at_once = -1;
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;")));
    EXPECT_EQ(line(0), "cmd=barrier_out rc=-1");
    EXPECT_EQ(frame(1), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "-1"}}));
    EXPECT_EQ(step.fences.size(), 1u);
    // The next barrier is fenced again.
    step.fail_at_once.reset();
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;")));
    ASSERT_TRUE(fences_come(2));
    step.complete(1, 0, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(field(frame(1), "rc"), "0");
}

TEST_F(PmiServerTest, MalformedFenceDataFailsTheBarrier)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    protocol::Bytes cut = encode({{"key", "value"}});
    cut.pop_back();
    step.complete(0, 0, cut);
    EXPECT_EQ(line(0), "cmd=barrier_out rc=-1");
    EXPECT_EQ(line(1), "cmd=barrier_out rc=-1");
}

TEST_F(PmiServerTest, FinalizeIsAckedAndTheClientFinalized)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(server->clients(), 2u);
    EXPECT_EQ(ask(0, "cmd=finalize\n"), "cmd=finalize_ack rc=0");
    EXPECT_EQ(step.finalized, std::vector<std::uint32_t>{0});
    EXPECT_EQ(server->clients(), 1u);
    // MPICH 4.0 then closes its end: no more than a hang-up.
    hang_up(0);
    EXPECT_EQ(ask(1, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
    EXPECT_EQ(step.finalized, std::vector<std::uint32_t>{0});
    EXPECT_TRUE(step.aborts.empty());
}

TEST_F(PmiServerTest, AFinalizedTaskIsNotWaitedForInABarrier)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(ask(1, "cmd=finalize\n"), "cmd=finalize_ack rc=0");
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, 0, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
}

// MPI_Publish_name, MPI_Lookup_name, MPI_Unpublish_name over PMI-1: the
// step's names, kept at the front end under keys of their own.
TEST_F(PmiServerTest, ThePmi1NameServiceIsTheSteps)
{
    start();
    init1(0);
    init1(1);
    EXPECT_EQ(ask(0, "cmd=publish_name service=ocean port=tag#0$\n"), "cmd=publish_result rc=0 info=ok");
    EXPECT_EQ(ask(1, "cmd=lookup_name service=ocean\n"), "cmd=lookup_result rc=0 info=ok port=tag#0$");
    EXPECT_EQ(ask(1, "cmd=publish_name service=ocean port=other\n"), "cmd=publish_result rc=-1 info=failed");
    EXPECT_EQ(ask(0, "cmd=unpublish_name service=ocean\n"), "cmd=unpublish_result rc=0 info=ok");
    EXPECT_EQ(ask(1, "cmd=lookup_name service=ocean\n"), "cmd=lookup_result rc=-1 info=unknown_service");
    EXPECT_EQ(ask(1, "cmd=lookup_name\n"), "cmd=lookup_result rc=-1 info=no_service_name");
    ASSERT_EQ(step.data_requests.size(), 5u);
    EXPECT_EQ(step.data_requests[0].keys, std::vector<std::string>{"pmi:ocean"});
    EXPECT_EQ(step.data_requests[0].rank, 0u);
    EXPECT_EQ(step.data_requests[1].rank, 1u);
    EXPECT_EQ(step.data_requests[1].wait, 0);  // MPI_Lookup_name does not wait
}

TEST_F(PmiServerTest, ThePmi2NameServiceIsTheSteps)
{
    start();
    init2(0);
    EXPECT_EQ(ask2(0, "cmd=name-publish;name=ocean;port=tag#0$;infokeycount=0;thrid=0x1;"),
              (Fields{{"cmd", "name-publish-response"}, {"rc", "0"}, {"thrid", "0x1"}}));
    // MPICH 4.1 and later read `port`, earlier ones `value`.
    EXPECT_EQ(ask2(0, "cmd=name-lookup;name=ocean;infokeycount=0;"),
              (Fields{{"cmd", "name-lookup-response"}, {"rc", "0"}, {"found", "TRUE"}, {"port", "tag#0$"},
                      {"value", "tag#0$"}}));
    EXPECT_EQ(field(ask2(0, "cmd=name-unpublish;name=ocean;infokeycount=0;"), "rc"), "0");
    const Fields missing = ask2(0, "cmd=name-lookup;name=ocean;infokeycount=0;");
    EXPECT_EQ(field(missing, "rc"), "-1");
    EXPECT_EQ(field(missing, "found"), "FALSE");
    EXPECT_EQ(field(missing, "errmsg"), "the name is not published");
}

TEST_F(PmiServerTest, ASpawnIsRefusedOnceItsLastBlockHasCome)
{
    start();
    init1(0);
    const std::string block1 = "mcmd=spawn\nnprocs=2\nexecname=./worker\ntotspawns=1\nspawnssofar=1\n"
                               "argcnt=1\narg1=--fast\npreput_num=0\ninfo_num=0\nendcmd\n";
    EXPECT_EQ(ask(0, block1), "cmd=spawn_result rc=-1 msg=spawn_is_not_supported_under_srun");

    // MPI_Comm_spawn_multiple of two commands: one block each, one answer.
    const std::string first = "mcmd=spawn\nnprocs=1\nexecname=./a\ntotspawns=2\nspawnssofar=1\nargcnt=0\n"
                              "preput_num=0\ninfo_num=0\nendcmd\n";
    const std::string second = "mcmd=spawn\nnprocs=1\nexecname=./b\ntotspawns=2\nspawnssofar=2\nargcnt=0\n"
                               "preput_num=0\ninfo_num=0\nendcmd\n";
    ASSERT_TRUE(send(0, first));
    EXPECT_TRUE(quiet(0));
    EXPECT_EQ(ask(0, second), "cmd=spawn_result rc=-1 msg=spawn_is_not_supported_under_srun");
    EXPECT_TRUE(quiet(0));
    // The connection goes on.
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

TEST_F(PmiServerTest, AnUnknownCommandGetsAnErrorReply)
{
    start();
    init1(0);
    const std::string reply = ask(0, "cmd=get_ranks2hosts\n");
    EXPECT_TRUE(reply.starts_with("cmd=get_ranks2hosts_result ")) << reply;
    EXPECT_NE(reply.find(" rc=-1"), std::string::npos) << reply;
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

TEST_F(PmiServerTest, AbortReachesTheStepWithItsCodeAndMessageAndEndsTheConnection)
{
    start({4, 5}, {0, 0, 1, 1, 2, 2});
    init1(0);
    init1(1);
    // What follows an abort on its connection is not read, even in the same write.
    ASSERT_TRUE(send(1, "cmd=abort exitcode=7 message=application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5\n"
                        "cmd=get_maxes\n"));
    ASSERT_TRUE(loop.run_until([&] { return !step.aborts.empty(); }));
    ASSERT_EQ(step.aborts.size(), 1u);
    EXPECT_EQ(step.aborts[0].rank, 5u);
    EXPECT_EQ(step.aborts[0].status, 7);
    EXPECT_EQ(step.aborts[0].message, "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5");
    EXPECT_TRUE(quiet(1));
    ASSERT_TRUE(send(1, "cmd=abort exitcode=9\ncmd=get_maxes\n"));
    EXPECT_TRUE(quiet(1));
    EXPECT_EQ(step.aborts.size(), 1u);
    EXPECT_EQ(server->clients(), 1u);
    // The node's other task is served as before.
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

TEST_F(PmiServerTest, AbortWithoutAMessageAsMpich402SendsIt)
{
    start();
    init1(1);
    ASSERT_TRUE(send(1, "cmd=abort exitcode=7\n"));
    ASSERT_TRUE(loop.run_until([&] { return !step.aborts.empty(); }));
    ASSERT_EQ(step.aborts.size(), 1u);
    EXPECT_EQ(step.aborts[0].rank, 1u);
    EXPECT_EQ(step.aborts[0].status, 7);
    EXPECT_FALSE(step.aborts[0].message.empty());
}

// An MPICH rank writes its abort and exits; a peer's end over it may come
// to the daemon first: read_pending() hears what was written before, with
// the loop not turned at all.
TEST_F(PmiServerTest, WhatATaskWroteIsHeardBeforeTheLoopTurns)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(1, "cmd=abort exitcode=7\n"));
    hang_up(1);
    EXPECT_TRUE(step.aborts.empty());
    server->read_pending();
    ASSERT_EQ(step.aborts.size(), 1u);
    EXPECT_EQ(step.aborts[0].rank, 1u);
    EXPECT_EQ(step.aborts[0].status, 7);
    // Nothing to read: nothing happens, and nothing blocks.
    server->read_pending();
    EXPECT_EQ(step.aborts.size(), 1u);
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

// ---- PMI-2 ---------------------------------------------------------------------------------

TEST_F(PmiServerTest, Pmi2InitIsAnsweredWithAPmi1LineThenFramesFollow)
{
    start();
    init2(0);
    EXPECT_EQ(step.connected, std::vector<std::uint32_t>{0});
    EXPECT_EQ(server->clients(), 1u);
    EXPECT_EQ(ask2(0, "cmd=job-getid;"), (Fields{{"cmd", "job-getid-response"}, {"rc", "0"}, {"jobid", "42.3"}}));
}

TEST_F(PmiServerTest, Pmi2FullinitGivesRankSizeAndAppnum)
{
    start();
    init2(1);
    EXPECT_EQ(ask2(1, "cmd=fullinit;pmirank=1;"), (Fields{{"cmd", "fullinit-response"},
                                                           {"rc", "0"},
                                                           {"rank", "1"},
                                                           {"size", "4"},
                                                           {"appnum", "0"},
                                                           {"pmiverbose", "0"}}));
}

TEST_F(PmiServerTest, Pmi2JobGetidIsJobDotStep)
{
    start();
    init2(0);
    const Fields reply = ask2(0, "cmd=job-getid;");
    EXPECT_EQ(field(reply, "cmd"), "job-getid-response");
    EXPECT_EQ(field(reply, "rc"), "0");
    EXPECT_EQ(field(reply, "jobid"), "42.3");
}

TEST_F(PmiServerTest, Pmi2KvsPutThenGetAndMissingKeys)
{
    start();
    init2(0);
    EXPECT_EQ(ask2(0, "cmd=kvs-put;key=-bcast-1-0;value=2f636f6d6d;"),
              (Fields{{"cmd", "kvs-put-response"}, {"rc", "0"}}));
    EXPECT_EQ(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=-1;key=-bcast-1-0;"),
              (Fields{{"cmd", "kvs-get-response"}, {"rc", "0"}, {"found", "TRUE"}, {"value", "2f636f6d6d"}}));
    EXPECT_EQ(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=3;key=P3-businesscard;"),
              (Fields{{"cmd", "kvs-get-response"}, {"rc", "0"}, {"found", "FALSE"}}));
    // MPICH's barrier ends with a get of a key no one puts.
    EXPECT_EQ(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=-1;key=-NONEXIST-KEY;"),
              (Fields{{"cmd", "kvs-get-response"}, {"rc", "0"}, {"found", "FALSE"}}));
}

TEST_F(PmiServerTest, Pmi2KvsFenceWaitsForBothTasksThenAnswersEach)
{
    start();
    init2(0);
    init2(1);
    EXPECT_EQ(field(ask2(0, "cmd=kvs-put;key=k0;value=v0;"), "rc"), "0");
    EXPECT_EQ(field(ask2(1, "cmd=kvs-put;key=k1;value=v1;"), "rc"), "0");
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;")));
    EXPECT_TRUE(quiet(1));
    EXPECT_TRUE(step.fences.empty());
    ASSERT_TRUE(send(0, v2("cmd=kvs-fence;")));
    ASSERT_TRUE(fences_come(1));
    EXPECT_EQ(step.fences[0].data, encode({{"k0", "v0"}, {"k1", "v1"}}));
    EXPECT_TRUE(quiet(0));

    step.complete(0, 0, joined(step.fences[0].data, encode({{"k3", "v3"}})));
    EXPECT_EQ(frame(0), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "0"}}));
    EXPECT_EQ(frame(1), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "0"}}));
    EXPECT_EQ(field(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=3;key=k3;"), "value"), "v3");
    EXPECT_EQ(field(ask2(1, "cmd=kvs-get;jobid=42.3;srcid=0;key=k0;"), "value"), "v0");
}

TEST_F(PmiServerTest, Pmi2AFailedFenceAnswersWithAnError)
{
    start();
    init2(0);
    init2(1);
    ASSERT_TRUE(send(0, v2("cmd=kvs-fence;")));
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;")));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, -1, {});
    EXPECT_EQ(frame(0), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "-1"}}));
    EXPECT_EQ(frame(1), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "-1"}}));
}

TEST_F(PmiServerTest, Pmi1AndPmi2TasksShareOneBarrier)
{
    start();
    init1(0);
    init2(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;")));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, 0, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(frame(1), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "0"}}));
}

TEST_F(PmiServerTest, Pmi2JobAttributesAreTheMappingAndUniverseSize)
{
    start();
    init2(0);
    EXPECT_EQ(ask2(0, "cmd=info-getjobattr;key=PMI_process_mapping;"),
              (Fields{{"cmd", "info-getjobattr-response"},
                      {"rc", "0"},
                      {"found", "TRUE"},
                      {"value", "(vector,(0,2,2))"}}));
    EXPECT_EQ(ask2(0, "cmd=info-getjobattr;key=universeSize;"),
              (Fields{{"cmd", "info-getjobattr-response"}, {"rc", "0"}, {"found", "TRUE"}, {"value", "4"}}));
    EXPECT_EQ(ask2(0, "cmd=info-getjobattr;key=PMI_hwloc_xmlfile;"),
              (Fields{{"cmd", "info-getjobattr-response"}, {"rc", "0"}, {"found", "FALSE"}}));
}

TEST_F(PmiServerTest, Pmi2NodeAttributesAreSharedByTheNodesTasks)
{
    start();
    init2(0);
    init2(1);
    EXPECT_EQ(ask2(0, "cmd=info-putnodeattr;key=-bcast-1-0;value=0a0b0c;"),
              (Fields{{"cmd", "info-putnodeattr-response"}, {"rc", "0"}}));
    EXPECT_EQ(ask2(1, "cmd=info-getnodeattr;key=-bcast-1-0;"),
              (Fields{{"cmd", "info-getnodeattr-response"}, {"rc", "0"}, {"found", "TRUE"}, {"value", "0a0b0c"}}));
    EXPECT_EQ(ask2(1, "cmd=info-getnodeattr;key=-bcast-2-0;wait=FALSE;"),
              (Fields{{"cmd", "info-getnodeattr-response"}, {"rc", "0"}, {"found", "FALSE"}}));
    // Node attributes are not the step's space.
    EXPECT_EQ(field(ask2(1, "cmd=kvs-get;jobid=42.3;srcid=-1;key=-bcast-1-0;"), "found"), "FALSE");
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=-bcast-1-0;"), "rc"), "-1");
}

TEST_F(PmiServerTest, Pmi2GetNodeAttrWithWaitIsAnsweredWhenAnotherTaskPutsIt)
{
    start();
    init2(0);
    init2(1);
    ASSERT_TRUE(send(1, v2("cmd=info-getnodeattr;key=-bcast-1-0;wait=TRUE;")));
    EXPECT_TRUE(quiet(1));
    // Another key does not answer it.
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=other;value=x;"), "rc"), "0");
    EXPECT_TRUE(quiet(1));
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=-bcast-1-0;value=0a0b0c;"), "rc"), "0");
    EXPECT_EQ(frame(1),
              (Fields{{"cmd", "info-getnodeattr-response"}, {"rc", "0"}, {"found", "TRUE"}, {"value", "0a0b0c"}}));
    EXPECT_TRUE(quiet(1));
}

TEST_F(PmiServerTest, Pmi2ThridIsEchoedWhenSent)
{
    start();
    init2(0);
    EXPECT_EQ(ask2(0, "cmd=fullinit;pmirank=0;thrid=0x7ffd1234;"), (Fields{{"cmd", "fullinit-response"},
                                                                           {"rc", "0"},
                                                                           {"rank", "0"},
                                                                           {"size", "4"},
                                                                           {"appnum", "0"},
                                                                           {"pmiverbose", "0"},
                                                                           {"thrid", "0x7ffd1234"}}));
    EXPECT_EQ(ask2(0, "cmd=job-getid;thrid=0x54;"),
              (Fields{{"cmd", "job-getid-response"}, {"rc", "0"}, {"jobid", "42.3"}, {"thrid", "0x54"}}));
    EXPECT_EQ(field(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=-1;key=k;thrid=0x56;"), "thrid"), "0x56");
    EXPECT_EQ(field(ask2(0, "cmd=info-getjobattr;key=universeSize;thrid=0x57;"), "thrid"), "0x57");
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=a;value=b;thrid=0x58;"), "thrid"), "0x58");
    EXPECT_EQ(field(ask2(0, "cmd=info-getnodeattr;key=a;thrid=0x59;"), "thrid"), "0x59");
    EXPECT_EQ(field(ask2(0, "cmd=name-publish;name=n;port=p;thrid=0x5a;"), "thrid"), "0x5a");
    EXPECT_EQ(field(ask2(0, "cmd=job-getid;"), "thrid"), "(none)");
    EXPECT_EQ(field(ask2(0, "cmd=finalize;thrid=0x5b;"), "thrid"), "0x5b");
}

// Also the replies written outside handle_v2 echo the request's thrid:
// kvs-put-response (accepted or refused), kvs-fence-response (when the
// fence is done) and a wait=TRUE info-getnodeattr-response answered later.
// A threaded PMI-2 client (MPICH's PMIU_cmd_read with PMIU_is_threaded)
// hands each reply to the command its thrid names.
TEST_F(PmiServerTest, Pmi2EveryReplyEchoesThrid)
{
    start();
    init2(0);
    init2(1);
    EXPECT_EQ(ask2(0, "cmd=kvs-put;key=k;value=v;thrid=0x1000;"),
              (Fields{{"cmd", "kvs-put-response"}, {"rc", "0"}, {"thrid", "0x1000"}}));
    EXPECT_EQ(field(ask2(0, "cmd=kvs-put;key=k;thrid=0x1001;"), "thrid"), "0x1001");

    ASSERT_TRUE(send(0, v2("cmd=kvs-fence;thrid=0x2000;")));
    ASSERT_TRUE(send(1, v2("cmd=kvs-fence;thrid=0x2001;")));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, 0, {});
    EXPECT_EQ(frame(0), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "0"}, {"thrid", "0x2000"}}));
    EXPECT_EQ(frame(1), (Fields{{"cmd", "kvs-fence-response"}, {"rc", "0"}, {"thrid", "0x2001"}}));

    ASSERT_TRUE(send(1, v2("cmd=info-getnodeattr;key=-bcast-1-0;wait=TRUE;thrid=0x3000;")));
    EXPECT_TRUE(quiet(1));
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=-bcast-1-0;value=0a;"), "rc"), "0");
    EXPECT_EQ(frame(1), (Fields{{"cmd", "info-getnodeattr-response"},
                                {"rc", "0"},
                                {"found", "TRUE"},
                                {"value", "0a"},
                                {"thrid", "0x3000"}}));
}

TEST_F(PmiServerTest, Pmi2FinalizeIsAnsweredAndTheClientFinalized)
{
    start();
    init2(1);
    EXPECT_EQ(ask2(1, "cmd=finalize;"), (Fields{{"cmd", "finalize-response"}, {"rc", "0"}}));
    EXPECT_EQ(step.finalized, std::vector<std::uint32_t>{1});
    EXPECT_EQ(server->clients(), 0u);
}

TEST_F(PmiServerTest, Pmi2UnsupportedCommandsAreRefusedWithAMessage)
{
    start();
    init2(0);
    for (const char* body : {"cmd=job-connect;jobid=7.0;",
                             "cmd=spawn;ncmds=1;preputcount=0;subcmd=./w;maxprocs=2;argc=0;infokeycount=0;"}) {
        SCOPED_TRACE(body);
        const Fields reply = ask2(0, body);
        const std::string name = field(fields(body), "cmd");
        EXPECT_EQ(field(reply, "cmd"), name + "-response");
        EXPECT_EQ(field(reply, "rc"), "-1");
        EXPECT_FALSE(reply.count("errmsg") == 0 || field(reply, "errmsg").empty());
    }
    EXPECT_EQ(field(ask2(0, "cmd=job-getid;"), "rc"), "0");
}

TEST_F(PmiServerTest, Pmi2AbortReachesTheStepWithTheCodeItsMessageGives)
{
    start();
    init2(0);
    init2(1);
    // MPICH's PMI-2 client sends -1 whatever MPI_Abort was given.
    ASSERT_TRUE(
        send(1, v2("cmd=abort;exitcode=-1;message=application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1;")));
    ASSERT_TRUE(loop.run_until([&] { return !step.aborts.empty(); }));
    EXPECT_EQ(step.aborts[0].rank, 1u);
    EXPECT_EQ(step.aborts[0].status, 7);
    EXPECT_EQ(step.aborts[0].message, "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1");
    ASSERT_TRUE(send(1, v2("cmd=job-getid;")));
    EXPECT_TRUE(quiet(1));

    // A message is the rest of the body, ';' and all.
    ASSERT_TRUE(send(0, v2("cmd=abort;exitcode=-1;message=Fatal error in PMPI_Init; other MPI error;")));
    ASSERT_TRUE(loop.run_until([&] { return step.aborts.size() == 2; }));
    EXPECT_EQ(step.aborts[1].rank, 0u);
    EXPECT_EQ(step.aborts[1].status, -1);
    EXPECT_EQ(step.aborts[1].message, "Fatal error in PMPI_Init; other MPI error");
}

TEST_F(PmiServerTest, Pmi2PutRefusesOversizedKeysAndValues)
{
    start();
    init2(0);
    const std::string key64(64, 'k'), value1024(1024, 'v');
    EXPECT_EQ(field(ask2(0, "cmd=kvs-put;key=" + key64 + ";value=" + value1024 + ";"), "rc"), "0");
    const Fields long_value = ask2(0, "cmd=kvs-put;key=k;value=" + value1024 + "v;");
    EXPECT_EQ(field(long_value, "rc"), "-1");
    EXPECT_FALSE(field(long_value, "errmsg").empty());
    EXPECT_EQ(field(ask2(0, "cmd=kvs-put;key=" + key64 + "k;value=v;"), "rc"), "-1");
    EXPECT_EQ(field(ask2(0, "cmd=kvs-get;jobid=42.3;srcid=-1;key=k;"), "found"), "FALSE");
}

// ---- PMI_dead_processes ---------------------------------------------------------------------

TEST_F(PmiServerTest, DeadProcessesAreNamedOnceKnown)
{
    start();
    init1(0);
    init2(1);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_dead_processes\n"), "cmd=get_result rc=-1 msg=key_not_found");
    EXPECT_EQ(field(ask2(1, "cmd=kvs-get;jobid=42.3;srcid=-1;key=PMI_dead_processes;"), "found"), "FALSE");
    server->failed(3);
    server->failed(5);
    server->failed(3);  // once is enough
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_dead_processes\n"), "cmd=get_result rc=0 value=3,5");
    EXPECT_EQ(ask2(1, "cmd=kvs-get;jobid=42.3;srcid=-1;key=PMI_dead_processes;"),
              (Fields{{"cmd", "kvs-get-response"}, {"rc", "0"}, {"found", "TRUE"}, {"value", "3,5"}}));
    server->failed(1);
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=PMI_dead_processes\n"), "cmd=get_result rc=0 value=1,3,5");
}

// ---- unhappy tasks ---------------------------------------------------------------------------

TEST_F(PmiServerTest, AHangUpInTheMiddleOfACommandHarmsNoOne)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(1, "cmd=put kvsname=42.3 key=half"));
    hang_up(1);
    ASSERT_TRUE(loop.run_until([&] { return server->clients() == 1; }));
    EXPECT_TRUE(step.aborts.empty());
    EXPECT_TRUE(step.finalized.empty());
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=half\n"), "cmd=get_result rc=-1 msg=key_not_found");
}

TEST_F(PmiServerTest, AHangUpDuringTheOthersBarrierLetsTheBarrierFence)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(0));
    EXPECT_TRUE(step.fences.empty());
    hang_up(1);
    ASSERT_TRUE(fences_come(1));
    EXPECT_TRUE(step.aborts.empty());
    // The overlay fails it (a participant is gone) or completes it; task 0 hears either.
    step.complete(0, -1, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=-1");
}

TEST_F(PmiServerTest, AHangUpWhileTheFenceIsOnItsWayLeavesTheOthersAnswered)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    hang_up(1);
    ASSERT_TRUE(loop.run_until([&] { return server->clients() == 1; }));
    EXPECT_EQ(step.fences.size(), 1u);  // this node's part is already on its way
    step.complete(0, 0, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    // The next barrier is task 0's alone.
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(2));
}

TEST_F(PmiServerTest, AHangUpOfAWaitingTaskInABarrierLeavesTheOthersToComplete)
{
    start({0, 1, 2}, {0, 0, 0, 1});
    init1(0);
    init1(1);
    init1(2);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(0));
    hang_up(1);  // in the barrier and gone: not answered, not waited for
    ASSERT_TRUE(loop.run_until([&] { return server->clients() == 2; }));
    EXPECT_TRUE(step.fences.empty());
    ASSERT_TRUE(send(2, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    step.complete(0, 0, {});
    EXPECT_EQ(line(0), "cmd=barrier_out rc=0");
    EXPECT_EQ(line(2), "cmd=barrier_out rc=0");
}

TEST_F(PmiServerTest, AHangUpWhileWaitingForANodeAttrHarmsNoOne)
{
    start();
    init2(0);
    init2(1);
    ASSERT_TRUE(send(1, v2("cmd=info-getnodeattr;key=k;wait=TRUE;")));
    EXPECT_TRUE(quiet(1));
    hang_up(1);
    ASSERT_TRUE(loop.run_until([&] { return server->clients() == 1; }));
    EXPECT_EQ(field(ask2(0, "cmd=info-putnodeattr;key=k;value=v;"), "rc"), "0");
    EXPECT_EQ(field(ask2(0, "cmd=info-getnodeattr;key=k;"), "value"), "v");
}

TEST_F(PmiServerTest, ALineNotStartingWithCmdClosesThatConnectionOnly)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(1, "GET / HTTP/1.0\n"));
    EXPECT_TRUE(closed_by_server(1));
    EXPECT_TRUE(step.aborts.empty());
    EXPECT_EQ(server->clients(), 1u);
    EXPECT_EQ(ask(0, "cmd=get_appnum\n"), "cmd=appnum appnum=0 rc=0");
}

TEST_F(PmiServerTest, AMalformedPmi2FrameClosesThatConnectionOnly)
{
    start();
    init2(0);
    init2(1);
    ASSERT_TRUE(send(1, "abcdefcmd=job-getid;"));
    EXPECT_TRUE(closed_by_server(1));
    EXPECT_TRUE(step.aborts.empty());
    EXPECT_EQ(field(ask2(0, "cmd=job-getid;"), "jobid"), "42.3");
}

TEST_F(PmiServerTest, AnOversizedLineClosesThatConnection)
{
    start();
    init1(0);
    init1(1);
    const std::string prefix = "cmd=put kvsname=42.3 key=k value=";
    ASSERT_TRUE(send(1, prefix + std::string(pmi::max_request + 1 - prefix.size(), 'x')));
    EXPECT_TRUE(closed_by_server(1));
    EXPECT_TRUE(step.aborts.empty());
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=k\n"), "cmd=get_result rc=-1 msg=key_not_found");
}

TEST_F(PmiServerTest, APutRefusesAValueOver1024AndAKeyOver64)
{
    start();
    init1(0);
    const std::string key64(64, 'k'), value1024(1024, 'v');
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=" + key64 + " value=" + value1024 + "\n"), "cmd=put_result rc=0");
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=long value=" + value1024 + "v\n"),
              "cmd=put_result rc=-1 msg=invalid_key_or_value");
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=" + key64 + "k value=v\n"),
              "cmd=put_result rc=-1 msg=invalid_key_or_value");
    EXPECT_EQ(ask(0, "cmd=put kvsname=42.3 key=novalue\n"), "cmd=put_result rc=-1 msg=invalid_key_or_value");
    EXPECT_EQ(ask(0, "cmd=get kvsname=42.3 key=long\n"), "cmd=get_result rc=-1 msg=key_not_found");
    // Refused puts are not fenced.
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    ASSERT_TRUE(send(1, "cmd=barrier_in\n"));
    ASSERT_TRUE(fences_come(1));
    EXPECT_EQ(step.fences[0].data, encode({{key64, value1024}}));
}

// A connection closed for what is not PMI counts as a hang-up: the tasks
// already in a barrier no longer wait for it (with its reading off, the
// server would never see the task close its end later, and the step's
// fence would wait forever).
TEST_F(PmiServerTest, AConnectionClosedForGarbageNoLongerHoldsUpABarrier)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(0));
    ASSERT_TRUE(send(1, "garbage\n"));
    ASSERT_TRUE(closed_by_server(1));
    hang_up(1);  // and the task is gone
    EXPECT_TRUE(loop.run_until([&] { return !step.fences.empty(); }, std::chrono::seconds(1)))
        << "task 0's barrier still waits for a connection the server closed";
}

// A finalized task is not waited for in a barrier
// (AFinalizedTaskIsNotWaitedForInABarrier), also when it finalizes while
// the other task already waits: that one need not wait until the finalized
// one exits (MPICH 4's PMI-1 client keeps PMI_FD open after finalize).
TEST_F(PmiServerTest, AFinalizeDuringTheOthersBarrierLetsTheBarrierFence)
{
    start();
    init1(0);
    init1(1);
    ASSERT_TRUE(send(0, "cmd=barrier_in\n"));
    EXPECT_TRUE(quiet(0));
    EXPECT_EQ(ask(1, "cmd=finalize\n"), "cmd=finalize_ack rc=0");
    EXPECT_TRUE(loop.run_until([&] { return !step.fences.empty(); }, std::chrono::seconds(1)))
        << "task 0's barrier still waits for a task that finalized";
}

}  // namespace
}  // namespace exitpolicy::pmix_server
