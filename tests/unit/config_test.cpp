// SPDX-License-Identifier: Apache-2.0
// config_test.cpp - plugstack.conf arguments, strictly parsed.
#include "spank_plugin/config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

Result<Config> parse(std::vector<std::string_view> args)
{
    return parse_config(args);
}

TEST(ConfigTest, DefaultsWithoutArguments)
{
    const auto c = parse({});
    ASSERT_TRUE(c) << c.error();
    EXPECT_FALSE(c->default_policy);
    EXPECT_TRUE(c->allowed_policies.empty());
    EXPECT_EQ(c->report, ReportMode::automatic);
    EXPECT_EQ(c->lost_code, 1);
    EXPECT_EQ(c->grace_ms, 3000u);
    EXPECT_EQ(c->pmix, PmixMode::automatic);
    EXPECT_EQ(c->fanout, 32u);
    EXPECT_FALSE(c->port_range);
    EXPECT_EQ(c->debug, 0);
    EXPECT_EQ(c->topology, "slurmd");
    EXPECT_FALSE(c->recoverable);
    EXPECT_EQ(c->teardown_grace_ms, 500u);
    EXPECT_TRUE(c->allows(Policy::lowest_rank));
    EXPECT_EQ(c->allowed_list(), "all policies");
}

TEST(ConfigTest, WordsAreReadInAnyCaseAsPolicyNamesAre)
{
    const auto c = parse({"default_policy=Main-Rank", "pmix=Never", "report=ALWAYS", "recoverable=Yes",
                          "topology=Discover"});
    ASSERT_TRUE(c) << c.error();
    EXPECT_EQ(c->default_policy, Policy::main_rank);
    EXPECT_EQ(c->pmix, PmixMode::never);
    EXPECT_EQ(c->report, ReportMode::always);
    EXPECT_TRUE(c->recoverable);
    EXPECT_EQ(c->topology, "discover");
    // A path keeps its case.
    EXPECT_EQ(parse({"topology=/Spool/%n.xml"})->topology, "/Spool/%n.xml");
}

TEST(ConfigTest, EveryArgument)
{
    const auto c = parse({"default_policy=rank0", "allowed_policies=main-rank,max,all-success", "report=always",
                          "lost_code=75", "grace_ms=0", "pmix=never", "fanout=2", "port_range=60000-60010",
                          "daemon=/usr/libexec/exitpolicy-pmixd", "debug=3", "log_dir=/var/log/exitpolicy",
                          "topology=/var/spool/slurmd/%n/hwloc_topo_whole.xml", "recoverable=yes",
                          "teardown_grace_ms=0"});
    ASSERT_TRUE(c) << c.error();
    EXPECT_EQ(c->default_policy, Policy::main_rank);
    EXPECT_EQ(c->allowed_policies, (std::vector<Policy>{Policy::main_rank, Policy::max, Policy::all_success}));
    EXPECT_EQ(c->allowed_list(), "main-rank, max, all-success");
    EXPECT_FALSE(c->allows(Policy::first_failure));
    EXPECT_EQ(c->report, ReportMode::always);
    EXPECT_EQ(c->lost_code, 75);
    EXPECT_EQ(c->grace_ms, 0u);
    EXPECT_EQ(c->pmix, PmixMode::never);
    EXPECT_EQ(c->fanout, 2u);
    ASSERT_TRUE(c->port_range);
    EXPECT_EQ(c->port_range->first, 60000);
    EXPECT_EQ(c->port_range->last, 60010);
    EXPECT_EQ(c->daemon, "/usr/libexec/exitpolicy-pmixd");
    EXPECT_EQ(c->debug, 3);
    EXPECT_EQ(c->log_dir, "/var/log/exitpolicy");
    EXPECT_EQ(c->topology, "/var/spool/slurmd/%n/hwloc_topo_whole.xml");
    EXPECT_EQ(parse({"topology=none"})->topology, "none");
    EXPECT_EQ(parse({"topology=discover"})->topology, "discover");
    EXPECT_TRUE(c->recoverable);
    EXPECT_EQ(c->teardown_grace_ms, 0u);
    EXPECT_FALSE(parse({"recoverable=No"})->recoverable);
    EXPECT_EQ(parse({"teardown_grace_ms=60000"})->teardown_grace_ms, 60000u);
}

TEST(ConfigTest, BadArgumentsAreOneClearError)
{
    const std::string usage =
        "valid arguments: default_policy=POLICY allowed_policies=POLICY[,POLICY...] report=auto|always|never "
        "lost_code=0..255 grace_ms=0..600000 pmix=auto|never fanout=2..1024 port_range=FIRST-LAST "
        "daemon=/PATH debug=0..3 log_dir=/PATH topology=slurmd|discover|none|/PATH recoverable=yes|no "
        "teardown_grace_ms=0..60000 record_verdict=yes|no";
    const std::pair<std::vector<std::string_view>, std::string> cases[] = {
        {{"policy=max"}, "unknown plugstack.conf argument 'policy'; " + usage},
        {{"debug"}, "plugstack.conf argument 'debug' is not KEY=VALUE; " + usage},
        {{"=3"}, "plugstack.conf argument '=3' is not KEY=VALUE; " + usage},
        {{"debug=1", "debug=2"}, "plugstack.conf argument debug is given twice; give it once"},
        {{"default_policy=best"},
         "plugstack.conf default_policy: invalid exit policy 'best': valid policies are max (native), main-rank "
         "(rank0), all-success (require-all-success), main-rank-check (check-all-nodes), first-failure, "
         "lowest-rank"},
        {{"allowed_policies=max,,main-rank"},
         "plugstack.conf allowed_policies: invalid exit policy '': valid policies are max (native), main-rank "
         "(rank0), all-success (require-all-success), main-rank-check (check-all-nodes), first-failure, "
         "lowest-rank"},
        {{"default_policy=max", "allowed_policies=main-rank"},
         "plugstack.conf default_policy=max is not among allowed_policies (main-rank)"},
        {{"report=loud"}, "plugstack.conf report: invalid exit report mode 'loud': valid modes are auto, always, never"},
        {{"lost_code=256"}, "plugstack.conf argument lost_code=256 is invalid: expected an exit code, 0 to 255"},
        {{"lost_code=-1"}, "plugstack.conf argument lost_code=-1 is invalid: expected an exit code, 0 to 255"},
        {{"grace_ms=5s"}, "plugstack.conf argument grace_ms=5s is invalid: expected milliseconds, 0 to 600000"},
        {{"teardown_grace_ms=60001"},
         "plugstack.conf argument teardown_grace_ms=60001 is invalid: expected milliseconds, 0 to 60000"},
        {{"recoverable=maybe"},
         "plugstack.conf recoverable: invalid value 'maybe': expected yes or no (or true/false, 1/0)"},
        {{"pmix=yes"}, "plugstack.conf argument pmix=yes is invalid: expected auto or never"},
        {{"fanout=1"}, "plugstack.conf argument fanout=1 is invalid: expected a tree fan-out, 2 to 1024"},
        {{"port_range=70000-70010"},
         "plugstack.conf argument port_range=70000-70010 is invalid: expected FIRST-LAST, two TCP ports with FIRST "
         "<= LAST, e.g. 60000-60999"},
        {{"port_range=6000"},
         "plugstack.conf argument port_range=6000 is invalid: expected FIRST-LAST, two TCP ports with FIRST <= "
         "LAST, e.g. 60000-60999"},
        {{"port_range=6010-6000"},
         "plugstack.conf argument port_range=6010-6000 is invalid: expected FIRST-LAST, two TCP ports with FIRST "
         "<= LAST, e.g. 60000-60999"},
        {{"daemon=exitpolicy-pmixd"},
         "plugstack.conf argument daemon=exitpolicy-pmixd is invalid: expected an absolute path"},
        {{"log_dir="}, "plugstack.conf argument log_dir= is invalid: expected an absolute path"},
        {{"debug=4"}, "plugstack.conf argument debug=4 is invalid: expected a level, 0 to 3"},
        {{"topology=hwloc.xml"},
         "plugstack.conf argument topology=hwloc.xml is invalid: expected slurmd, discover, none, or the absolute path of "
         "an hwloc XML file"},
    };
    for (const auto& [args, message] : cases) {
        const auto c = parse(args);
        ASSERT_FALSE(c) << args.front();
        EXPECT_EQ(c.error(), message);
    }
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
