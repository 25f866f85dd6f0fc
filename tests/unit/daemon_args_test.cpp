// SPDX-License-Identifier: Apache-2.0
// daemon_args_test.cpp - exitpolicy-pmixd's bootstrap arguments.
#include "protocol/daemon_args.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace exitpolicy::protocol {
namespace {

std::vector<std::string> good()
{
    return {"--job", "42", "--step", "3", "--node", "1", "--nnodes", "4", "--ntasks", "8", "--ranks", "2,3",
            "--hostname", "node2", "--fe", "10.0.0.1:60001", "--secret-fd", "3", "--ready-fd", "4",
            "--control-fd", "5", "--dir", "/tmp/exitpolicy.42.3.node2", "--uid", "1000", "--debug", "2"};
}

TEST(DaemonArgsTest, EveryArgument)
{
    const auto a = parse_daemon_args(good());
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a->job_id, 42u);
    EXPECT_EQ(a->step_id, 3u);
    EXPECT_EQ(a->node_id, 1u);
    EXPECT_EQ(a->nnodes, 4u);
    EXPECT_EQ(a->ntasks, 8u);
    EXPECT_EQ(a->ranks, (std::vector<std::uint32_t>{2, 3}));
    EXPECT_EQ(a->hostname, "node2");
    EXPECT_EQ(a->fe_host, "10.0.0.1");
    EXPECT_EQ(a->fe_port, 60001);
    EXPECT_EQ(a->secret_fd, 3);
    EXPECT_EQ(a->ready_fd, 4);
    EXPECT_EQ(a->control_fd, 5);
    EXPECT_EQ(a->dir, "/tmp/exitpolicy.42.3.node2");
    EXPECT_EQ(a->uid, 1000u);
    EXPECT_EQ(a->debug, 2);
    EXPECT_TRUE(a->log_dir.empty());
    EXPECT_EQ(a->topology, "discover");
    auto v = good();
    v.insert(v.end(), {"--topology", "/var/spool/slurmd/hwloc_topo_whole.xml"});
    EXPECT_EQ(parse_daemon_args(v)->topology, "/var/spool/slurmd/hwloc_topo_whole.xml");
}

// What slurmstepd writes is what the daemon reads, each field, the
// optional ones given and left out.
TEST(DaemonArgsTest, TheCommandLineReadsBackAsWritten)
{
    DaemonArgs a;
    a.job_id = 4294967295u;
    a.step_id = 7;
    a.node_id = 2;
    a.nnodes = 3;
    a.ntasks = 9;
    a.ranks = {6, 7, 8};
    a.hostname = "node-3.cluster";
    a.fe_host = "fe01.example.org";
    a.fe_port = 65535;
    a.secret_fd = 3;
    a.ready_fd = 4;
    a.control_fd = 5;
    a.dir = "/tmp/exitpolicy.1.7.node-3";
    a.uid = 1001;
    a.log_dir = "/var/log/exitpolicy";
    a.topology = "/var/spool/slurmd/hwloc_topo_whole.xml";
    a.debug = 3;
    a.reserved_fd = 6;
    a.planned_version = "4.2.2rc2";
    a.pmi_fd = 10;
    auto back = parse_daemon_args(daemon_command_line(a));
    ASSERT_TRUE(back) << back.error();
    EXPECT_TRUE(*back == a);

    DaemonArgs lean = a;
    lean.log_dir.clear();
    lean.topology = "none";
    lean.debug = 0;
    lean.ranks = {8};
    lean.reserved_fd = -1;
    lean.planned_version.clear();
    lean.pmi_fd = -1;
    back = parse_daemon_args(daemon_command_line(lean));
    ASSERT_TRUE(back) << back.error();
    EXPECT_TRUE(*back == lean);

    // The descriptors are the launcher's to add: without them it is no
    // complete command line.
    DaemonArgs unlaunched = a;
    unlaunched.secret_fd = unlaunched.ready_fd = unlaunched.control_fd = -1;
    const auto words = daemon_command_line(unlaunched);
    EXPECT_EQ(std::count(words.begin(), words.end(), "--secret-fd"), 0);
    EXPECT_EQ(parse_daemon_args(words).error(), "missing or bad --secret-fd");

    // A planned environment names the socket and the version together.
    DaemonArgs half = a;
    half.reserved_fd = -1;
    EXPECT_EQ(parse_daemon_args(daemon_command_line(half)).error(), "--reserved-fd and --planned-version go together");
}

TEST(DaemonArgsTest, BadArgumentsAreNamed)
{
    auto with = [](const std::string& key, const std::string& value) {
        auto v = good();
        for (std::size_t i = 0; i + 1 < v.size(); i += 2)
            if (v[i] == key)
                v[i + 1] = value;
        return v;
    };
    const std::pair<std::vector<std::string>, std::string> cases[] = {
        {with("--job", "x"), "missing or bad --job"},
        {with("--ranks", "2,9"), "bad --ranks 2,9"},
        {with("--ranks", "2,,3"), "bad --ranks 2,,3"},
        {with("--fe", "nohost"), "missing or bad --fe HOST:PORT"},
        {with("--fe", "host:99999"), "missing or bad --fe HOST:PORT"},
        {with("--secret-fd", "-1"), "missing or bad --secret-fd"},
        {with("--control-fd", "x"), "missing or bad --control-fd"},
        {with("--node", "4"), "--node is not below --nnodes"},
        {with("--debug", "7"), "bad --debug"},
        {with("--dir", ""), "missing --dir"},
        {[&] { auto v = good(); v.insert(v.end(), {"--topology", "x.xml"}); return v; }(),
         "bad --topology x.xml (discover, none or an absolute path)"},
        {[&] { auto v = good(); v.insert(v.end(), {"--pmi-fd", "2"}); return v; }(), "bad --pmi-fd"},
        {{"--job"}, "unexpected argument '--job'"},
        {{"job", "1"}, "unexpected argument 'job'"},
    };
    for (const auto& [argv, message] : cases) {
        const auto a = parse_daemon_args(argv);
        ASSERT_FALSE(a) << message;
        EXPECT_EQ(a.error(), message);
    }
}

}  // namespace
}  // namespace exitpolicy::protocol
