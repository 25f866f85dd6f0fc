// SPDX-License-Identifier: Apache-2.0
// options_test.cpp - command line > environment > site, and their errors.
#include "spank_plugin/options.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <string_view>

namespace exitpolicy::spank_plugin {
namespace {

const std::string valid =
    "valid policies are max (native), main-rank (rank0), all-success (require-all-success), main-rank-check "
    "(check-all-nodes), first-failure, lowest-rank";

TEST(OptionsTest, NothingAskedMeansNoPolicy)
{
    const auto o = resolve_options({}, {}, Config{});
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->policy);
    EXPECT_FALSE(o->main_rank_given);
    EXPECT_EQ(o->report, ReportMode::automatic);
    EXPECT_TRUE(o->report_json.empty());
}

TEST(OptionsTest, CommandLineBeatsEnvironmentBeatsSite)
{
    Config site;
    site.default_policy = Policy::all_success;
    site.report = ReportMode::never;
    RawOptions env{"rank0", "3", "always", "env.json"};
    RawOptions cli{"lowest-rank", std::nullopt, std::nullopt, "cli-%j.json"};

    EXPECT_EQ(resolve_options({}, {}, site)->policy, Policy::all_success);
    EXPECT_EQ(resolve_options({}, {}, site)->report, ReportMode::never);
    const auto from_env = resolve_options({}, env, site);
    ASSERT_TRUE(from_env);
    EXPECT_EQ(from_env->policy, Policy::main_rank);
    EXPECT_EQ(from_env->main_rank, 3u);
    EXPECT_TRUE(from_env->main_rank_given);
    EXPECT_EQ(from_env->report, ReportMode::always);
    EXPECT_EQ(from_env->report_json, "env.json");
    const auto both = resolve_options(cli, env, site);
    ASSERT_TRUE(both);
    EXPECT_EQ(both->policy, Policy::lowest_rank);
    EXPECT_EQ(both->main_rank, 3u);
    EXPECT_EQ(both->report, ReportMode::always);
    EXPECT_EQ(both->report_json, "cli-%j.json");
}

TEST(OptionsTest, ErrorsNameTheirSource)
{
    Config site;
    site.allowed_policies = {Policy::main_rank, Policy::max};
    struct Case {
        RawOptions cli;
        RawOptions env;
        std::string message;
    };
    const Case cases[] = {
        {{"best"}, {}, "--exit-policy: invalid exit policy 'best': " + valid},
        {{}, {"best"}, "SLURM_EXIT_POLICY: invalid exit policy 'best': " + valid},
        {{"lowest-rank"}, {},
         "--exit-policy: exit policy 'lowest-rank' is not allowed on this cluster; allowed: main-rank, max"},
        {{std::nullopt, "-1"}, {},
         "--exit-main-rank: invalid main rank '-1': expected a task rank, a whole number from 0"},
        {{}, {std::nullopt, "one"},
         "SLURM_EXIT_MAIN_RANK: invalid main rank 'one': expected a task rank, a whole number from 0"},
        {{std::nullopt, std::nullopt, "loud"}, {},
         "--exit-report: invalid exit report mode 'loud': valid modes are auto, always, never"},
        {{}, {std::nullopt, std::nullopt, "loud"},
         "SLURM_EXIT_REPORT: invalid exit report mode 'loud': valid modes are auto, always, never"},
        {{std::nullopt, std::nullopt, std::nullopt, ""}, {},
         "--exit-report-json: expected a file path (%j and %s expand to the job and step id)"},
        {{}, {std::nullopt, std::nullopt, std::nullopt, ""},
         "SLURM_EXIT_REPORT_JSON: expected a file path (%j and %s expand to the job and step id)"},
    };
    for (const auto& [cli, env, message] : cases) {
        const auto o = resolve_options(cli, env, site);
        ASSERT_FALSE(o) << message;
        EXPECT_EQ(o.error(), message);
    }
    // A bad environment value does not matter when the command line overrides it.
    EXPECT_TRUE(resolve_options({"max"}, {"best"}, site));
}

TEST(OptionsTest, RecoverableFromTheSiteTheEnvironmentOrTheFlag)
{
    Config site;
    EXPECT_FALSE(resolve_options({}, {}, site)->recoverable);
    site.recoverable = true;
    EXPECT_TRUE(resolve_options({}, {}, site)->recoverable);
    RawOptions env;
    env.recoverable = "NO";
    EXPECT_FALSE(resolve_options({}, env, site)->recoverable);
    RawOptions cli;
    cli.recoverable = "yes";  // what the flag --exit-recoverable records
    EXPECT_TRUE(resolve_options(cli, env, site)->recoverable);
    env.recoverable = "sometimes";
    EXPECT_EQ(resolve_options({}, env, site).error(),
              "SLURM_EXIT_RECOVERABLE: invalid value 'sometimes': expected yes or no (or true/false, 1/0)");
    EXPECT_TRUE(resolve_options(cli, env, site));  // the command line wins
    EXPECT_TRUE(check_option(opt_recoverable, "1", site));
    EXPECT_FALSE(check_option(opt_recoverable, "on", site));
}

// A run-through step's tasks: Open MPI's fault tolerance on, coll/han off
// and every peer added at MPI_Init (a cutoff above the step's size).
TEST(OptionsTest, ARunThroughStepTurnsOpenMpisFaultToleranceOnForItsTasks)
{
    using Env = std::vector<std::pair<std::string, std::string>>;
    EXPECT_EQ(run_through_environment(8), (Env{{"OMPI_MCA_mpi_ft_enable", "1"},
                                               {"OMPI_MCA_coll", "^han"},
                                               {"OMPI_MCA_mpi_add_procs_cutoff", "9"}}));
    EXPECT_EQ(run_through_environment(100000).back().second, "100001");
    EXPECT_EQ(run_through_environment(UINT32_MAX).back().second, "4294967296");
}

TEST(OptionsTest, CheckOptionAsTheCallbackDoes)
{
    const Config site;
    EXPECT_TRUE(check_option(opt_policy, "Main-Rank", site));
    EXPECT_EQ(check_option(opt_policy, "x", site).error(), "--exit-policy: invalid exit policy 'x': " + valid);
    EXPECT_TRUE(check_option(opt_main_rank, "12", site));
    EXPECT_FALSE(check_option(opt_main_rank, "1e3", site));
    EXPECT_FALSE(check_option(opt_report, "", site));
    EXPECT_TRUE(check_option(opt_report_json, "out.json", site));
    EXPECT_FALSE(check_option(opt_report_json, "", site));
}

TEST(OptionsTest, MainRankMustBeATask)
{
    StepOptions o;
    o.main_rank = 7;
    EXPECT_TRUE(check_main_rank(o, 8));
    EXPECT_EQ(check_main_rank(o, 4).error(),
              "main rank 7 is not a task of this step: with 4 tasks give --exit-main-rank (or "
              "SLURM_EXIT_MAIN_RANK) from 0 to 3");
    EXPECT_EQ(check_main_rank(o, 1).error(),
              "main rank 7 is not a task of this step: with 1 task give --exit-main-rank (or "
              "SLURM_EXIT_MAIN_RANK) from 0 to 0");
}

TEST(OptionsTest, HelpTexts)
{
    EXPECT_EQ(option_help(opt_policy),
              "How srun's exit code is chosen from the tasks' codes: max (native), main-rank (rank0), all-success "
              "(require-all-success), main-rank-check (check-all-nodes), first-failure, lowest-rank. Default: "
              "Slurm's own rule, or the site's default");
    EXPECT_EQ(option_help(opt_main_rank), "The main rank for main-rank and main-rank-check (default 0)");
    EXPECT_EQ(option_help(opt_report_json), "Also write the exit report as JSON to PATH (%j: job id, %s: step id)");
}

TEST(OptionsTest, TheTableSpellsEachNameOnce)
{
    const auto count = std::size(option_table);
    for (std::size_t i = 0; i < count; ++i) {
        const OptionSpec& spec = option_table[i];
        EXPECT_EQ(std::string_view(spec.option).substr(0, 5), "exit-") << spec.option;
        for (std::size_t j = i + 1; j < count; ++j) {
            EXPECT_STRNE(spec.option, option_table[j].option);
            EXPECT_STRNE(spec.env, option_table[j].env);
        }
        // The environment's name is the option's: exit-report-json, SLURM_EXIT_REPORT_JSON.
        std::string env = "SLURM_";
        for (const char* c = spec.option; *c; ++c)
            env += *c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
        EXPECT_EQ(env, spec.env);
    }
    EXPECT_EQ(opt_recoverable.arg, nullptr);  // a flag
    EXPECT_STREQ(opt_policy.site->name, "default_policy");
    EXPECT_STREQ(opt_report.site->name, "report");
    EXPECT_STREQ(opt_recoverable.site->name, "recoverable");
    EXPECT_EQ(opt_main_rank.site, nullptr);
}

TEST(OptionsTest, OptionsFromTheEnvironment)
{
    const RawOptions env = options_from_env([](const char* name) -> std::optional<std::string> {
        if (std::string_view(name) == "SLURM_EXIT_REPORT_JSON")
            return "r.json";
        if (std::string_view(name) == "SLURM_EXIT_RECOVERABLE")
            return "yes";
        return std::nullopt;
    });
    EXPECT_FALSE(env.policy);
    EXPECT_EQ(env.report_json, "r.json");
    EXPECT_EQ(env.recoverable, "yes");
    EXPECT_TRUE(env.any());
    EXPECT_FALSE(RawOptions{}.any());
}

TEST(OptionsTest, ReportPathExpansion)
{
    EXPECT_EQ(expand_report_path("exit-%j.%s.json", 1234, 0), "exit-1234.0.json");
    EXPECT_EQ(expand_report_path("/tmp/%j/%j-%s", 7, 2), "/tmp/7/7-2");
    EXPECT_EQ(expand_report_path("100%%-%x-%", 1, 2), "100%-%x-%");
    EXPECT_EQ(expand_report_path("plain.json", 1, 2), "plain.json");
    // A job array's, as srun's own --output: %A the array's job id, %a
    // the task's index; outside an array the job id and 0.
    EXPECT_EQ(expand_report_path("exit-%A_%a.%s.json", 1237, 0, ArrayIds{1234, 3}), "exit-1234_3.0.json");
    EXPECT_EQ(expand_report_path("exit-%A_%a.json", 77, 0), "exit-77_0.json");
}

TEST(OptionsTest, AColonWordMakesAHeterogeneousStep)
{
    using V = std::vector<std::string>;
    EXPECT_TRUE(is_heterogeneous(V{"srun", "-n1", "./a", ":", "-n2", "./b"}));
    EXPECT_TRUE(is_heterogeneous(V{"srun", "./a", "x", ":", "./b"}));  // srun splits its program's words too
    EXPECT_FALSE(is_heterogeneous(V{"srun", "-n2", "./app", "a:b", "--opt=:"}));
    EXPECT_FALSE(is_heterogeneous(V{":"}));  // srun's own name
    EXPECT_FALSE(is_heterogeneous(V{}));
}

TEST(OptionsTest, AsyncIsSrunsOwnOptionNotTheProgramsArgument)
{
    using V = std::vector<std::string>;
    EXPECT_TRUE(asks_async(V{"srun", "--async", "true"}));
    EXPECT_TRUE(asks_async(V{"srun", "-N2", "--mpi=none", "--async", "--exit-policy=max", "true"}));
    // The program's arguments, and what follows "--", are not srun's.
    EXPECT_FALSE(asks_async(V{"srun", "-n2", "./app", "--async"}));
    EXPECT_FALSE(asks_async(V{"srun", "--", "./app", "--async"}));
    EXPECT_FALSE(asks_async(V{"srun", "true"}));
    EXPECT_FALSE(asks_async(V{"srun"}));
    EXPECT_FALSE(asks_async(V{}));
    // A value in a word of its own, of srun's options (Slurm 26.05's) and
    // ours: srun -N 2 --async was taken for a program "2" before.
    EXPECT_TRUE(asks_async(V{"srun", "-n", "2", "--async", "true"}));
    EXPECT_TRUE(asks_async(V{"srun", "-N", "2", "--async", "true"}));
    EXPECT_TRUE(asks_async(V{"srun", "--ntasks", "4", "--mem", "1G", "--async", "true"}));
    EXPECT_TRUE(asks_async(V{"srun", "-lN", "2", "--async", "true"}));  // a flag, then -N's value
    EXPECT_TRUE(asks_async(V{"srun", "--nod", "2", "--async", "true"}));  // a prefix of --nodes
    EXPECT_TRUE(asks_async(V{"srun", "--exit-policy", "max", "--async", "true"}));
    EXPECT_FALSE(asks_async(V{"srun", "-N2", "-l", "./app", "--async"}));
    EXPECT_FALSE(asks_async(V{"srun", "-lN2", "./app", "--async"}));  // -N's value is "2"
    // Another plugin's option whose value is a word of its own cannot be
    // told from the program: the look ends there.
    EXPECT_FALSE(asks_async(V{"srun", "--other-plugin", "value", "--async", "true"}));
    // getopt_long takes a unique prefix ("--a" is not one: --account...).
    EXPECT_TRUE(asks_async(V{"srun", "--asyn", "true"}));
    EXPECT_FALSE(asks_async(V{"srun", "--a", "true"}));
    EXPECT_FALSE(asks_async(V{"srun", "--asyncx", "true"}));
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
