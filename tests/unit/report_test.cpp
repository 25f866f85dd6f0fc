// SPDX-License-Identifier: Apache-2.0
// report_test.cpp - rank ranges, hostlists, the summary text and the JSON.
#include "builders.hpp"
#include "exitpolicy/report.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace exitpolicy {
namespace {

using namespace test;

TEST(RanksTest, Compress)
{
    const std::pair<std::vector<std::uint32_t>, const char*> cases[] = {
        {{}, ""},
        {{0}, "0"},
        {{3, 5, 6, 7}, "3,5-7"},
        {{7, 5, 3, 6, 5}, "3,5-7"},
        {{0, 1}, "0-1"},
        {{0, 2, 4}, "0,2,4"},
        {{4294967294u, 4294967295u}, "4294967294-4294967295"},
    };
    for (const auto& [ranks, text] : cases)
        EXPECT_EQ(compress_ranks(ranks), text);
}

TEST(HostlistTest, SlurmNotation)
{
    const std::pair<std::vector<std::string>, const char*> cases[] = {
        {{}, ""},
        {{"node1"}, "node1"},
        {{"node2", "node3", "node7"}, "node[2-3,7]"},
        {{"node3", "node2", "node2"}, "node[2-3]"},
        {{"node9", "node10", "node11"}, "node[9-11]"},
        {{"node01", "node02", "node03"}, "node[01-03]"},
        {{"node09", "node10"}, "node[09-10]"},
        {{"node1", "node01"}, "node[01,1]"},
        {{"login", "node1", "node2"}, "login,node[1-2]"},
        {{"gpu1", "cpu1", "cpu2"}, "cpu[1-2],gpu1"},
        {{"n1-1", "n1-2", "n1-3"}, "n1-[1-3]"},
        {{"a", "b"}, "a,b"},
    };
    for (const auto& [hosts, text] : cases)
        EXPECT_EQ(hostlist(hosts), text);
}

// -N4 -n8 with block placement: ranks 2k, 2k+1 on node k+1.
StepOutcomes eight_on_four(std::vector<TaskOutcome> tasks)
{
    for (auto& t : tasks)
        t.node = t.rank / 2;
    return step(std::move(tasks), 4);
}

TEST(SummaryTest, NonMainFailureUnderMainRank)
{
    const StepOutcomes s = eight_on_four({ok(0), ok(1), ok(2), segv(3).at(100),
                                          killed(4, SIGTERM).at(200), killed(5, SIGTERM).at(200),
                                          exits(6, 2).at(300), ok(7)});
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d),
              "exitpolicy: exit code 0 under policy main-rank: main rank 0 on node1 exited with code 0\n"
              "exitpolicy: Slurm's native exit code would be 143\n"
              "exitpolicy: 8 tasks on 4 nodes: 4 succeeded, 4 failed\n"
              "exitpolicy: first failure: rank 3 on node2, killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   rank 3 on node2: killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   rank 6 on node4: exited with code 2\n"
              "exitpolicy:   ranks 4-5 on node3: killed by SIGTERM (collateral: ended after rank 3 failed)\n"
              "exitpolicy:   ranks 0-2,7 on node[1-2,4]: succeeded\n");
}

TEST(SummaryTest, AbortAndLostUnderMaxWithAnotherMainRank)
{
    const StepOutcomes s = eight_on_four({killed(0, SIGKILL).at(300), ok(1), ok(2), ok(3),
                                          ok(4), aborts(5, 7).at(100), lost(6), lost(7)});
    const Settings settings{Policy::max, 2, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d, "> "),
              "> exit code 7 under policy max: rank 5 on node3 aborted with status 7, the first failure; its abort decides the step's code\n"
              "> Slurm's native exit code would be 137\n"
              "> 8 tasks on 4 nodes: 4 succeeded, 2 failed, 2 lost\n"
              "> first failure: rank 5 on node3, aborted with status 7\n"
              ">   rank 5 on node3: aborted with status 7\n"
              ">   ranks 6-7 on node4: lost (no outcome reported; counted as code 1)\n"
              ">   rank 0 on node1: killed by SIGKILL (collateral: ended after rank 5 failed)\n"
              ">   ranks 1-4 on node[1-3]: succeeded\n");
}

// Open MPI's default handler, on hearing that rank 5 was killed, aborts its
// rank with the event's status and "N/A" for a message: the report says what
// the status is and prints no placeholder.
TEST(SummaryTest, AnAbortOnHearingOfAPeersDeathIsNamedAndNAIsNoMessage)
{
    auto reaction = aborts(0, -402).at(200);
    reaction.o.abort_message = "N/A";
    const StepOutcomes s = eight_on_four({reaction, ok(1), ok(2), ok(3), ok(4), killed(5, SIGSEGV).at(100), ok(6),
                                          ok(7)});
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    const std::string text = render_summary(s, settings, *d, "> ");
    EXPECT_EQ(text.find("abort message"), std::string::npos) << text;
    EXPECT_NE(text.find(">   rank 0 on node1: aborted with status -402 (PMIX_ERR_PROC_ABORTED_BY_SIG: on hearing of "
                        "another task's end)"),
              std::string::npos)
        << text;
}

// Open MPI 5's MPI_Abort banner, as it passes it with PMIx_Abort.
constexpr const char* ompi5_banner =
    "--------------------------------------------------------------------------\n"
    "MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD\n"
    "  Proc: [[1,0],5]\n"
    "  Errorcode: 7\n"
    "\n"
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    "You may or may not see output from other processes, depending on\n"
    "exactly when Open MPI kills them.\n"
    "--------------------------------------------------------------------------\n";

TEST(OneLineTest, TheFirstLineThatSaysSomething)
{
    EXPECT_EQ(one_line(ompi5_banner), "MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD (5 more lines)");
    EXPECT_EQ(one_line("  ep_abort  "), "ep_abort");
    EXPECT_EQ(one_line("a\nb\n"), "a (1 more line)");
    EXPECT_EQ(one_line(""), "");
    EXPECT_EQ(one_line("----\n\n====\n"), "");
    // A terminal's control sequences never reach srun's stderr.
    EXPECT_EQ(one_line("\x1b[2Jgone\tx"), "?[2Jgone?x");
    EXPECT_EQ(one_line(std::string(200, 'x'), 20), std::string(17, 'x') + "...");
    // Cut at a character's start, never inside UTF-8 ("é" is two bytes).
    EXPECT_EQ(one_line("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9zzzz", 52),
              std::string(48, 'a') + "...");
}

// The verdict comes first; the abort's message follows it, as one line.
TEST(SummaryTest, AnAbortsMessageFollowsTheVerdict)
{
    T five = aborts(5, 7).at(100);
    five.o.abort_message = ompi5_banner;
    const StepOutcomes s = eight_on_four({ok(0), ok(1), ok(2), ok(3), ok(4), five, ok(6), ok(7)});
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d, "> "),
              "> exit code 7 under policy main-rank: rank 5 on node3 aborted with status 7, the first failure; its "
              "abort decides the step's code\n"
              "> Slurm's native exit code would be 137\n"
              "> 8 tasks on 4 nodes: 7 succeeded, 1 failed\n"
              "> first failure: rank 5 on node3, aborted with status 7\n"
              "> rank 5's abort message: MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD (5 more lines)\n"
              ">   rank 5 on node3: aborted with status 7\n"
              ">   ranks 0-4,6-7 on node[1-4]: succeeded\n");
    const auto doc = nlohmann::json::parse(render_json(s, settings, *d));
    EXPECT_EQ(doc["abort"]["message"], ompi5_banner);
}

// Rank 5 segfaults; every node learns of it and SIGTERMs its other tasks.
TEST(SummaryTest, CollateralMainRankGivesTheRootCause)
{
    std::vector<TaskOutcome> tasks;
    for (std::uint32_t r = 0; r < 8; ++r)
        tasks.push_back(r == 5 ? T(segv(5).at(100)) : flagged(killed(r, SIGTERM).at(600)));
    const StepOutcomes s = eight_on_four(std::move(tasks));
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d),
              "exitpolicy: exit code 139 under policy main-rank: main rank 0 on node1 ended after the first "
              "failure (collateral); the first failure's code: rank 5 on node3, killed by SIGSEGV (core dumped)\n"
              "exitpolicy: Slurm's native exit code would be 143\n"
              "exitpolicy: 8 tasks on 4 nodes: 0 succeeded, 8 failed\n"
              "exitpolicy: first failure: rank 5 on node3, killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   rank 5 on node3: killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   ranks 0-4,6-7 on node[1-4]: killed by SIGTERM (collateral: ended after rank 5 failed)\n");
}

// Rank 3 exits 1; rank 0's MPI library is told and aborts (its node flags
// it); rank 1 is SIGKILLed by srun -K without a flag: both are collateral.
TEST(SummaryTest, NodeFlaggedAndHeuristicCollateralShareOneLabel)
{
    const StepOutcomes s = step({flagged(aborts(0, 7).at(200)), killed(1, SIGKILL).at(300).on(1),
                                 ok(2), exits(3, 1).at(100).on(1)}, 2);
    const Settings settings{Policy::main_rank_check, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d),
              "exitpolicy: exit code 1 under policy main-rank-check: main rank 0 on node1 ended after the "
              "first failure (collateral); the first failure's code: rank 3 on node2, exited with code 1\n"
              "exitpolicy: Slurm's native exit code would be 137\n"
              "exitpolicy: 4 tasks on 2 nodes: 1 succeeded, 3 failed\n"
              "exitpolicy: first failure: rank 3 on node2, exited with code 1\n"
              "exitpolicy:   rank 3 on node2: exited with code 1\n"
              "exitpolicy:   rank 0 on node1: aborted with status 7 (collateral: ended after rank 3 failed)\n"
              "exitpolicy:   rank 1 on node2: killed by SIGKILL (collateral: ended after rank 3 failed)\n"
              "exitpolicy:   rank 2 on node1: succeeded\n");
}

TEST(SummaryTest, AllSucceeded)
{
    const StepOutcomes s = eight_on_four({ok(0), ok(1), ok(2), ok(3), ok(4), ok(5), ok(6), ok(7)});
    const Settings settings{Policy::all_success, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(render_summary(s, settings, *d),
              "exitpolicy: exit code 0 under policy all-success: all 8 tasks succeeded\n"
              "exitpolicy: 8 tasks on 4 nodes: 8 succeeded, 0 failed\n"
              "exitpolicy:   ranks 0-7 on node[1-4]: succeeded\n");
}

TEST(SummaryTest, ExplanationOfEveryReason)
{
    const StepOutcomes s = step({ok(0), exits(1, 3).at(50), segv(2).at(100), ok(3)}, 1);
    const std::pair<Settings, const char*> cases[] = {
        {{Policy::max, 0, 1}, "rank 2 on node1 killed by SIGSEGV (core dumped), the highest signal (any signal beats any exit code)"},
        {{Policy::main_rank, 2, 1}, "main rank 2 on node1 killed by SIGSEGV (core dumped)"},
        {{Policy::all_success, 0, 1}, "2 of 4 tasks did not succeed"},
        {{Policy::main_rank_check, 0, 1}, "main rank 0 succeeded but 2 other tasks did not"},
        {{Policy::main_rank_check, 1, 1}, "main rank 1 on node1 exited with code 3"},
        {{Policy::first_failure, 0, 1}, "rank 1 on node1 exited with code 3, the first failure"},
        {{Policy::lowest_rank, 0, 1}, "rank 1 on node1 exited with code 3, the lowest failing rank"},
    };
    for (const auto& [settings, text] : cases) {
        const auto d = decide(s, settings);
        ASSERT_TRUE(d);
        EXPECT_EQ(explain(s, settings, *d), text);
    }
    const StepOutcomes told = step({flagged(killed(0, SIGTERM).at(200)), exits(1, 3).at(100),
                                    aborts(2, 9).at(150), exits(3, 5).at(300)}, 1);
    const std::pair<Settings, const char*> root_cases[] = {
        {{Policy::main_rank, 0, 1}, "main rank 0 on node1 ended after the first failure (collateral); "
                                    "the first failure's code: rank 1 on node1, exited with code 3"},
        {{Policy::main_rank_check, 0, 1}, "main rank 0 on node1 ended after the first failure (collateral); "
                                          "the first failure's code: rank 1 on node1, exited with code 3"},
        // An abort that is not the first failure: max reads its SIGKILL.
        {{Policy::max, 0, 1}, "rank 0 on node1 killed by SIGTERM, the highest signal (any signal beats any exit code)"},
        {{Policy::main_rank, 2, 1}, "main rank 2 on node1 aborted with status 9"},
    };
    for (const auto& [settings, text] : root_cases) {
        const auto d = decide(told, settings);
        ASSERT_TRUE(d);
        EXPECT_EQ(explain(told, settings, *d), text);
    }
    const StepOutcomes late_abort = step({ok(0), exits(1, 3).at(100), aborts(2, 9).at(150)}, 1);
    EXPECT_EQ(explain(late_abort, {}, *decide(late_abort, {})),
              "rank 2 on node1 killed by SIGKILL (after aborting with status 9), the highest signal "
              "(any signal beats any exit code)");
    const StepOutcomes first_abort = step({killed(0, SIGKILL).at(200), aborts(1, 4).at(100)}, 1);
    EXPECT_EQ(explain(first_abort, {Policy::lowest_rank, 0, 1}, *decide(first_abort, {Policy::lowest_rank, 0, 1})),
              "rank 1 on node1 aborted with status 4, the first failure; its abort decides the step's code");
    const StepOutcomes codes = step({exits(0, 4), exits(1, 3)}, 1);
    EXPECT_EQ(explain(codes, {}, *decide(codes, {})), "rank 0 on node1 exited with code 4, the highest exit code");
    const StepOutcomes one = step({ok(0)}, 1);
    EXPECT_EQ(explain(one, {}, *decide(one, {})), "the task succeeded");
}

TEST(SummaryTest, SingleFailingTaskHasNoFirstFailureLine)
{
    const StepOutcomes s = step({exits(0, 42)}, 1);
    const Settings settings{Policy::main_rank, 0, 1};
    EXPECT_EQ(render_summary(s, settings, *decide(s, settings)),
              "exitpolicy: exit code 42 under policy main-rank: main rank 0 on node1 exited with code 42\n"
              "exitpolicy: 1 task on 1 node: 0 succeeded, 1 failed\n"
              "exitpolicy:   rank 0 on node1: exited with code 42\n");
}

TEST(SummaryTest, HundredThousandTasksStayShort)
{
    std::vector<TaskOutcome> tasks;
    for (std::uint32_t r = 0; r < 100'000; ++r)
        tasks.push_back(ok(r).on(r / 16));
    tasks[40'000] = segv(40'000).on(2500).at(5);
    StepOutcomes s;
    for (int n = 0; n < 6250; ++n)
        s.nodes.push_back("nid" + std::to_string(100000 + n));
    s.tasks = std::move(tasks);
    const Settings settings{Policy::main_rank_check, 0, 1};
    const std::string text = render_summary(s, settings, *decide(s, settings));
    EXPECT_EQ(text,
              "exitpolicy: exit code 1 under policy main-rank-check: main rank 0 succeeded but 1 other task did not\n"
              "exitpolicy: Slurm's native exit code would be 139\n"
              "exitpolicy: 100000 tasks on 6250 nodes: 99999 succeeded, 1 failed\n"
              "exitpolicy: first failure: rank 40000 on nid102500, killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   rank 40000 on nid102500: killed by SIGSEGV (core dumped)\n"
              "exitpolicy:   ranks 0-39999,40001-99999 on nid[100000-106249]: succeeded\n");
}

TEST(JsonTest, DocumentListsEveryTask)
{
    const StepOutcomes s = eight_on_four({ok(0), ok(1).unfinalized(), ok(2), segv(3).at(100),
                                          killed(4, SIGTERM).at(200), aborts(5, 7).at(150),
                                          lost(6), exits(7, 2).at(300)});
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    const auto doc = nlohmann::json::parse(render_json(s, settings, *d, {"1234", "0"}));

    EXPECT_EQ(doc["version"], 1);
    EXPECT_EQ(doc["job_id"], "1234");
    EXPECT_EQ(doc["step_id"], "0");
    EXPECT_EQ(doc["policy"], "main-rank");
    EXPECT_EQ(doc["main_rank"], 0);
    EXPECT_EQ(doc["lost_code"], 1);
    // Rank 5's abort came after rank 3's SIGSEGV: the abort is reported but
    // does not decide; the main rank succeeded.
    EXPECT_EQ(doc["exit_code"], 0);
    EXPECT_EQ(doc["native_exit_code"], 143);
    EXPECT_EQ(doc["reason"], "main_rank");
    EXPECT_EQ(doc["explanation"], "main rank 0 on node1 exited with code 0");
    EXPECT_EQ(doc["deciding_rank"], 0);
    EXPECT_EQ(doc["first_failure_rank"], 3);
    EXPECT_EQ(doc["abort"], (nlohmann::json{{"rank", 5}, {"status", 7}, {"message", ""}}));
    EXPECT_EQ(doc["counts"], (nlohmann::json{{"tasks", 8}, {"nodes", 4}, {"succeeded", 3},
                                             {"failed", 4}, {"lost", 1}, {"collateral", 1}}));

    const auto& tasks = doc["tasks"];
    ASSERT_EQ(tasks.size(), 8u);
    for (std::size_t i = 0; i < tasks.size(); ++i)
        EXPECT_EQ(tasks[i]["rank"], i);
    EXPECT_EQ(tasks[0], nlohmann::json::parse(R"j({
        "rank": 0, "epoch": 0, "node": "node1", "pid": 1000, "state": "exited",
        "wait_status": 0, "exit_code": 0, "signal": null, "signal_name": null,
        "core_dumped": false, "oom_killed": false, "memory_limit": null, "aborted": false, "abort_status": null, "finalized": null,
        "end_time_us": 1000000, "code": 0, "succeeded": true, "collateral": false,
        "description": "exited with code 0"})j"));
    EXPECT_EQ(tasks[1]["finalized"], false);
    EXPECT_EQ(tasks[1]["succeeded"], true);
    EXPECT_EQ(tasks[3], nlohmann::json::parse(R"j({
        "rank": 3, "epoch": 0, "node": "node2", "pid": 1003, "state": "signaled",
        "wait_status": 139, "exit_code": null, "signal": 11, "signal_name": "SIGSEGV",
        "core_dumped": true, "oom_killed": false, "memory_limit": null, "aborted": false, "abort_status": null, "finalized": null,
        "end_time_us": 100, "code": 139, "succeeded": false, "collateral": false,
        "description": "killed by SIGSEGV (core dumped)"})j"));
    EXPECT_EQ(tasks[4]["collateral"], true);
    EXPECT_EQ(tasks[5]["aborted"], true);
    EXPECT_EQ(tasks[5]["abort_status"], 7);
    EXPECT_EQ(tasks[5]["code"], 7);
    EXPECT_EQ(tasks[5]["signal_name"], "SIGKILL");
    EXPECT_EQ(tasks[6], nlohmann::json::parse(R"j({
        "rank": 6, "epoch": 0, "node": "node4", "pid": null, "state": "lost",
        "wait_status": null, "exit_code": null, "signal": null, "signal_name": null,
        "core_dumped": false, "oom_killed": false, "memory_limit": null, "aborted": false, "abort_status": null, "finalized": null,
        "end_time_us": null, "code": 1, "succeeded": false, "collateral": false,
        "description": "lost (no outcome reported; counted as code 1)"})j"));
    EXPECT_EQ(tasks[7]["exit_code"], 2);
}

TEST(JsonTest, RootCauseReasonAndNodeFlaggedCollateral)
{
    const StepOutcomes s = eight_on_four({flagged(killed(0, SIGTERM).at(600)), ok(1), ok(2), ok(3), ok(4),
                                          segv(5).at(100), flagged(aborts(6, 7).at(200)),
                                          killed(7, SIGKILL).at(300)});
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    const auto doc = nlohmann::json::parse(render_json(s, settings, *d));
    EXPECT_EQ(doc["exit_code"], 139);
    EXPECT_EQ(doc["native_exit_code"], 143);
    EXPECT_EQ(doc["reason"], "root_cause");
    EXPECT_EQ(doc["explanation"], "main rank 0 on node1 ended after the first failure (collateral); "
                                  "the first failure's code: rank 5 on node3, killed by SIGSEGV (core dumped)");
    EXPECT_EQ(doc["deciding_rank"], 5);
    EXPECT_EQ(doc["first_failure_rank"], 5);
    EXPECT_EQ(doc["abort"], (nlohmann::json{{"rank", 6}, {"status", 7}, {"message", ""}}));
    EXPECT_EQ(doc["counts"]["collateral"], 3);
    std::vector<bool> collateral;
    for (const auto& t : doc["tasks"])
        collateral.push_back(t["collateral"].get<bool>());
    // 0, 6: flagged by their nodes; 7: a SIGKILL after the SIGSEGV.
    EXPECT_EQ(collateral, (std::vector<bool>{true, false, false, false, false, false, true, true}));
    EXPECT_EQ(doc["tasks"][6]["code"], 7);
}

// A rank the OOM killer ended, under srun -K: named so in the JSON and the
// explanation, the root cause (137), its neighbours' SIGTERMs collateral.
TEST(JsonTest, AnOomKilledRankIsNamedAndItsTeardownIsCollateral)
{
    const StepOutcomes s = step({killed(0, SIGTERM).at(150), killed(1, SIGKILL).oom(50 << 20).at(100),
                                 killed(2, SIGTERM).at(150), ok(3)}, 2);
    const Settings settings{Policy::main_rank, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    const auto doc = nlohmann::json::parse(render_json(s, settings, *d));
    EXPECT_EQ(doc["exit_code"], 137);
    // Slurm's own srun returns 1 for a step its task/cgroup saw an OOM kill in.
    EXPECT_EQ(doc["native_exit_code"], 1);
    EXPECT_EQ(doc["reason"], "root_cause");
    EXPECT_EQ(doc["first_failure_rank"], 1);
    EXPECT_NE(doc["explanation"].get<std::string>().find("killed by the OOM killer (SIGKILL)"), std::string::npos)
        << doc["explanation"];
    EXPECT_EQ(doc["tasks"][1]["oom_killed"], true);
    EXPECT_EQ(doc["tasks"][1]["memory_limit"], 50 << 20);
    EXPECT_TRUE(doc["tasks"][0]["memory_limit"].is_null());
    EXPECT_EQ(doc["tasks"][1]["signal_name"], "SIGKILL");
    EXPECT_EQ(doc["tasks"][0]["oom_killed"], false);
    EXPECT_EQ(doc["tasks"][0]["collateral"], true);
    EXPECT_EQ(doc["tasks"][2]["collateral"], true);
    const std::string text = render_summary(s, settings, *d, "exitpolicy: ");
    EXPECT_NE(text.find("killed by the OOM killer"), std::string::npos) << text;
    EXPECT_NE(text.find("exitpolicy: Slurm's native exit code would be 1\n"), std::string::npos) << text;
}

TEST(JsonTest, NullsWithoutContextAndSafeWithOddNodeNames)
{
    StepOutcomes s = step({ok(0), exits(1, 1)}, 1);
    s.nodes[0] = "bad\xff" "name";
    const Settings settings{Policy::max, 0, 1};
    const auto doc = nlohmann::json::parse(render_json(s, settings, *decide(s, settings)));
    EXPECT_TRUE(doc["job_id"].is_null());
    EXPECT_TRUE(doc["step_id"].is_null());
    EXPECT_TRUE(doc["abort"].is_null());
    EXPECT_EQ(doc["tasks"][0]["node"], "bad\xef\xbf\xbdname");  // replaced, not thrown
    EXPECT_EQ(doc["first_failure_rank"], 1);
}

// Checks a document against the subset of JSON Schema docs/report.schema.json
// uses: type (one or a list), enum, const, properties + required (and no
// property the schema does not name), items.
void expect_conforms(const nlohmann::json& doc, const nlohmann::json& schema, const std::string& where)
{
    auto type_of = [](const nlohmann::json& v) -> std::string {
        if (v.is_null()) return "null";
        if (v.is_boolean()) return "boolean";
        if (v.is_number_integer()) return "integer";
        if (v.is_number()) return "number";
        if (v.is_string()) return "string";
        if (v.is_array()) return "array";
        return "object";
    };
    const std::string type = type_of(doc);
    const auto& allowed = schema.at("type");
    const bool type_ok = allowed.is_array()
                             ? std::find(allowed.begin(), allowed.end(), type) != allowed.end()
                             : allowed == type;
    EXPECT_TRUE(type_ok) << where << ": " << type << " is not " << allowed.dump();
    if (!type_ok || doc.is_null())
        return;
    if (schema.contains("enum")) {
        const auto& values = schema["enum"];
        EXPECT_NE(std::find(values.begin(), values.end(), doc), values.end()) << where << ": " << doc;
    }
    if (schema.contains("const")) {
        EXPECT_EQ(doc, schema["const"]) << where;
    }
    if (doc.is_object() && schema.contains("properties")) {
        for (const auto& key : schema.value("required", nlohmann::json::array()))
            EXPECT_TRUE(doc.contains(key)) << where << ": missing " << key;
        for (const auto& [key, value] : doc.items()) {
            ASSERT_TRUE(schema["properties"].contains(key)) << where << ": undocumented " << key;
            expect_conforms(value, schema["properties"][key], where + "." + key);
        }
    }
    if (doc.is_array() && schema.contains("items"))
        for (std::size_t i = 0; i < doc.size(); ++i)
            expect_conforms(doc[i], schema["items"], where + "[" + std::to_string(i) + "]");
}

// srun -n1 A : -N2 -n3 B: ranks are the step's; the report says which
// component each is in, the JSON where each component starts.
TEST(SummaryTest, AHeterogeneousStepNamesItsComponents)
{
    StepOutcomes s = heterogeneous(step({ok(0), exits(1, 3).at(100), killed(2, SIGTERM).at(200), ok(3)}, 3), {0, 1});
    const Settings settings{Policy::main_rank_check, 0, 1};
    const auto d = decide(s, settings);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->code, 1);
    const std::string text = render_summary(s, settings, *d);
    EXPECT_NE(text.find("exitpolicy: heterogeneous step: component 0 rank 0, component 1 ranks 1-3\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("exitpolicy: first failure: rank 1 (component 1) on "), std::string::npos) << text;
    const auto doc = nlohmann::json::parse(render_json(s, settings, *d));
    EXPECT_EQ(doc["components"], nlohmann::json::array({0, 1}));
    s.components.clear();
    EXPECT_TRUE(nlohmann::json::parse(render_json(s, settings, *d))["components"].is_null());
    EXPECT_EQ(render_summary(s, settings, *d).find("component"), std::string::npos);
}

TEST(JsonTest, DocumentsConformToTheDocumentedSchema)
{
    std::ifstream file(EXITPOLICY_SOURCE_DIR "/docs/report.schema.json");
    ASSERT_TRUE(file) << "docs/report.schema.json not found";
    const auto schema = nlohmann::json::parse(file);

    const std::vector<std::pair<StepOutcomes, Settings>> cases = {
        {eight_on_four({ok(0), ok(1).unfinalized(), ok(2), segv(3).at(100), killed(4, SIGTERM).at(200),
                        aborts(5, 7).at(150), lost(6), exits(7, 2).at(300)}),
         {Policy::main_rank, 0, 1}},
        {eight_on_four({ok(0), ok(1), ok(2), ok(3), ok(4), ok(5), ok(6), ok(7)}), {Policy::all_success, 0, 1}},
        {step({killed(0, SIGKILL), exits(1, 3)}, 1), {Policy::max, 1, 1}},
        {step({exits(0, 3), exits(1, 3)}, 1), {Policy::main_rank_check, 0, 1}},
        {step({exits(0, 3), lost(1)}, 1), {Policy::first_failure, 0, 1}},
        {step({ok(0), lost(1)}, 1), {Policy::lowest_rank, 0, 1}},
        {step({flagged(killed(0, SIGTERM).at(200)), segv(1).at(100)}, 1), {Policy::main_rank, 0, 1}},
        {step({flagged(killed(0, SIGTERM).at(200)), segv(1).at(100)}, 1), {Policy::main_rank_check, 0, 1}},
        {step({killed(0, SIGKILL).at(200), aborts(1, 4).at(100)}, 1), {Policy::max, 0, 1}},
        {step({killed(0, SIGTERM).at(200), killed(1, SIGKILL).oom().at(100)}, 1), {Policy::main_rank, 0, 1}},
        {heterogeneous(step({ok(0), exits(1, 3), ok(2)}, 2), {0, 1}), {Policy::main_rank_check, 0, 1}},
    };
    for (const auto& [s, settings] : cases) {
        SCOPED_TRACE(policy_name(settings.policy));
        const auto d = decide(s, settings);
        ASSERT_TRUE(d);
        expect_conforms(nlohmann::json::parse(render_json(s, settings, *d, {"7", "1"})), schema, "$");
        expect_conforms(nlohmann::json::parse(render_json(s, settings, *d)), schema, "$");
    }
}

}  // namespace
}  // namespace exitpolicy
