// outcome_sink_test.cpp - what the slurmstepd side reads before it registers
// its sinks: the bootstrap variable, the daemon's ready line.
#include "spank_plugin/daemon_link.hpp"
#include "spank_plugin/outcome_sink.hpp"

#include "protocol/auth.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace exitpolicy::plugin {
namespace {

const std::string secret_hex(64, 'a');

TEST(BootstrapTest, ReadsThePortTheSecretAndThePmixFanout)
{
    auto b = parse_bootstrap("1:4242:" + secret_hex);
    ASSERT_TRUE(b) << b.error();
    EXPECT_EQ(b->port, 4242);
    EXPECT_EQ(b->secret, *wire::secret_from_hex(secret_hex));
    EXPECT_FALSE(b->pmix);

    b = parse_bootstrap("1:4242:" + secret_hex + ":pmix:32");
    ASSERT_TRUE(b) << b.error();
    EXPECT_TRUE(b->pmix);
    EXPECT_EQ(b->fanout, 32u);
}

TEST(BootstrapTest, WithoutAFrontEndToReachItFailsAndNeverThrowsNorShowsTheSecret)
{
    for (const std::string& bad : std::vector<std::string>{"", "1", "1:4242", "2:4242:" + secret_hex, "1::" + secret_hex,
                                  "1:0:" + secret_hex, "1:65536:" + secret_hex, "1:-1:" + secret_hex,
                                  "1:42x:" + secret_hex, "1: 42:" + secret_hex, "1:99999999999999999999:" + secret_hex,
                                  "1:4242:" + secret_hex.substr(1), "1:4242:" + std::string(64, 'z')}) {
        const auto b = parse_bootstrap(bad);
        ASSERT_FALSE(b) << bad;
        EXPECT_EQ(b.error().find(secret_hex.substr(0, 16)), std::string::npos) << b.error();
    }
    EXPECT_EQ(parse_bootstrap("1:42x:" + secret_hex).error(), "its port is not a port number");
}

TEST(BootstrapTest, AMalformedPmixPartStillGivesTheFrontEnd)
{
    for (const std::string tail : {":pmix:", ":pmix:x", ":pmix:1", ":pmix:-4", ":pmix:4x", ":pmix:99999999999",
                                   ":other:4", ":pmix", ":pmix:4:more"}) {
        const auto b = parse_bootstrap("1:4242:" + secret_hex + tail);
        ASSERT_TRUE(b) << tail << ": " << b.error();
        EXPECT_EQ(b->port, 4242) << tail;
        EXPECT_TRUE(b->pmix) << tail;
        EXPECT_FALSE(b->fanout) << tail;
    }
}

TEST(ReadyLineTest, AMalformedPidIsAnErrorNotAThrow)
{
    EXPECT_EQ(*parse_ready("ready 1234\n"), 1234);
    EXPECT_EQ(*parse_ready("ready 1234"), 1234);
    for (const char* bad : {"ready \n", "ready abc\n", "ready 12x\n", "ready -5\n", "ready 0\n",
                            "ready 99999999999999999999\n", "ready  12\n", "READY 12\n", ""}) {
        const auto pid = parse_ready(bad);
        ASSERT_FALSE(pid) << bad;
        EXPECT_EQ(pid.error(), "the node daemon's ready line is malformed");
    }
}

}  // namespace
}  // namespace exitpolicy::plugin
