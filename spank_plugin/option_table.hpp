// SPDX-License-Identifier: Apache-2.0
// option_table.hpp - every name a user or a site writes, spelled once: the
// srun/sbatch/salloc options with their environment variables and help
// texts, and the plugstack.conf arguments. The SPANK option table, the
// environment's reading and forwarding, the help texts, the plugstack parser
// and its list of valid arguments derive from these tables, and a unit test
// (tests/unit/option_docs_test.cpp) checks that the README, the manual pages
// and the plugstack.conf files name every entry.
//
// Constant tables of string literals: nothing here allocates or runs at load
// time (slurmstepd loads this too). No Slurm headers, so it is unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

namespace exitpolicy::spank_plugin {

// The plugstack.conf arguments, in the order of site_arguments.
enum class SiteArg : std::uint8_t {
    default_policy,
    allowed_policies,
    report,
    lost_code,
    grace_ms,
    pmix,
    fanout,
    port_range,
    daemon,
    debug,
    log_dir,
    topology,
    recoverable,
    teardown_grace_ms,
    record_verdict,
};

// A number's range and default; `what` names it in an error ("expected
// milliseconds, 0 to 60000"). what == nullptr: the argument is no number.
struct Number {
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    std::int64_t fallback = 0;  // the default
    const char* what = nullptr;
};

struct SiteArgument {
    SiteArg id;
    const char* name;          // before the "="
    const char* syntax;        // its values, as the list of valid arguments shows them ("0..255" for a number)
    const char* default_text;  // the default as the documents give it (checked by tests/unit/option_docs_test.cpp)
    const char* about;         // one line
    Number number{};
};

inline constexpr SiteArgument site_arguments[] = {
    {SiteArg::default_policy, "default_policy", "POLICY", "none",
     "the policy of steps whose user asked for none (none: Slurm's own code)"},
    {SiteArg::allowed_policies, "allowed_policies", "POLICY[,POLICY...]", "all", "the policies users may choose"},
    {SiteArg::report, "report", "auto|always|never", "auto", "the default of --exit-report"},
    {SiteArg::lost_code, "lost_code", "0..255", "1", "the code of a task whose outcome never arrived",
     {0, 255, 1, "an exit code"}},
    {SiteArg::grace_ms, "grace_ms", "0..600000", "3000",
     "how long srun waits for missing outcomes after the step, in ms", {0, 600000, 3000, "milliseconds"}},
    {SiteArg::pmix, "pmix", "auto|never", "auto",
     "auto: exitpolicy serves PMIx to steps without another PMIx server; never: exit policies only"},
    {SiteArg::fanout, "fanout", "2..1024", "32", "the width of the node daemons' tree", {2, 1024, 32, "a tree fan-out"}},
    {SiteArg::port_range, "port_range", "FIRST-LAST", "an ephemeral port", "the TCP ports srun's front end may listen on"},
    {SiteArg::daemon, "daemon", "/PATH", "the installed one", "the node daemon, exitpolicy-pmixd"},
    {SiteArg::debug, "debug", "0..3", "0", "the log level of the plugin and the node daemons", {0, 3, 0, "a level"}},
    {SiteArg::log_dir, "log_dir", "/PATH", "syslog", "where the node daemons log, a file per step and node"},
    {SiteArg::topology, "topology", "slurmd|discover|none|/PATH", "slurmd",
     "the hardware topology the node daemons give their PMIx clients (slurmd: slurmd's own XML if there, else "
     "discover)"},
    {SiteArg::recoverable, "recoverable", "yes|no", "no", "the default of --exit-recoverable"},
    {SiteArg::teardown_grace_ms, "teardown_grace_ms", "0..60000", "500",
     "how long the survivors of a failure have before the step is torn down, in ms", {0, 60000, 500, "milliseconds"}},
    {SiteArg::record_verdict, "record_verdict", "yes|no", "no",
     "record the policy's code and why in the job's accounting record (sacct's DerivedExitCode and Comment)"},
};

constexpr const SiteArgument& site_argument(SiteArg id) noexcept
{
    return site_arguments[static_cast<std::size_t>(id)];
}

// The default of a number argument, as its setting's type.
template <typename T>
constexpr T site_default(SiteArg id) noexcept
{
    return static_cast<T>(site_argument(id).number.fallback);
}

// Raw option values, as given, from one source (the command line or the
// environment); an OptionSpec names its member.
struct RawOptions {
    std::optional<std::string> policy;
    std::optional<std::string> main_rank;
    std::optional<std::string> report;
    std::optional<std::string> report_json;
    std::optional<std::string> recoverable;  // the flag on the command line: "yes"
    bool any() const noexcept;
};

// The options, in the order of option_table.
enum class OptionId : std::uint8_t { policy, main_rank, report, report_json, recoverable };

struct OptionSpec {
    OptionId id;
    const char* option;  // without "--"
    const char* arg;     // its argument in srun --help; nullptr: a flag (yes/no in the environment)
    const char* env;     // the same in the environment; sbatch and salloc pass options on this way
    // srun --help; "{policies}" stands for the list of valid policies.
    const char* help;
    const SiteArgument* site;  // the plugstack argument that sets the site's default; nullptr: none
    std::optional<std::string> RawOptions::*value;
};

inline constexpr OptionSpec option_table[] = {
    {OptionId::policy, "exit-policy", "POLICY", "SLURM_EXIT_POLICY",
     "How srun's exit code is chosen from the tasks' codes: {policies}. Default: Slurm's own rule, or the site's "
     "default",
     &site_argument(SiteArg::default_policy), &RawOptions::policy},
    {OptionId::main_rank, "exit-main-rank", "RANK", "SLURM_EXIT_MAIN_RANK",
     "The main rank for main-rank and main-rank-check (default 0)", nullptr, &RawOptions::main_rank},
    {OptionId::report, "exit-report", "auto|always|never", "SLURM_EXIT_REPORT",
     "When srun prints the exit report (auto: when something failed or the code differs from Slurm's own)",
     &site_argument(SiteArg::report), &RawOptions::report},
    {OptionId::report_json, "exit-report-json", "PATH", "SLURM_EXIT_REPORT_JSON",
     "Also write the exit report as JSON to PATH (%j: job id, %s: step id)", nullptr, &RawOptions::report_json},
    {OptionId::recoverable, "exit-recoverable", nullptr, "SLURM_EXIT_RECOVERABLE",
     "In a step served by exitpolicy's PMIx: when a task fails, tell the others and let them run on (default: "
     "end the step)",
     &site_argument(SiteArg::recoverable), &RawOptions::recoverable},
};

constexpr const OptionSpec& option_spec(OptionId id) noexcept
{
    return option_table[static_cast<std::size_t>(id)];
}

inline constexpr const OptionSpec& opt_policy = option_spec(OptionId::policy);
inline constexpr const OptionSpec& opt_main_rank = option_spec(OptionId::main_rank);
inline constexpr const OptionSpec& opt_report = option_spec(OptionId::report);
inline constexpr const OptionSpec& opt_report_json = option_spec(OptionId::report_json);
inline constexpr const OptionSpec& opt_recoverable = option_spec(OptionId::recoverable);

// Each entry sits at the index of its id.
constexpr bool tables_in_order() noexcept
{
    for (std::size_t i = 0; i < std::size(site_arguments); ++i)
        if (static_cast<std::size_t>(site_arguments[i].id) != i)
            return false;
    for (std::size_t i = 0; i < std::size(option_table); ++i)
        if (static_cast<std::size_t>(option_table[i].id) != i)
            return false;
    return true;
}
static_assert(tables_in_order(), "option_table and site_arguments are in the order of their ids");

// A number's syntax is "LO..HI", its default within and its default_text:
// the range and the default are written once, in `number`.
// text after value's decimal digits at its start; nullptr if they are not.
constexpr const char* after_number(const char* text, std::int64_t value) noexcept
{
    char digits[24] = {};
    int n = 0;
    do {
        digits[n++] = static_cast<char>('0' + value % 10);
        value /= 10;
    } while (value > 0);
    for (int i = n - 1; i >= 0; --i, ++text)
        if (*text != digits[i])
            return nullptr;
    return text;
}

constexpr bool numbers_written_once() noexcept
{
    for (const auto& a : site_arguments) {
        const Number& n = a.number;
        if (!n.what)
            continue;
        if (n.lo < 0 || n.lo > n.hi || n.fallback < n.lo || n.fallback > n.hi)
            return false;
        const char* range = after_number(a.syntax, n.lo);
        if (!range || range[0] != '.' || range[1] != '.')
            return false;
        const char* end = after_number(range + 2, n.hi);
        if (!end || *end != '\0')
            return false;
        const char* text = after_number(a.default_text, n.fallback);
        if (!text || *text != '\0')
            return false;
    }
    return true;
}
static_assert(numbers_written_once(), "a number argument's syntax is LO..HI and its default_text its default");

inline bool RawOptions::any() const noexcept
{
    for (const auto& spec : option_table)
        if (this->*spec.value)
            return true;
    return false;
}

}  // namespace exitpolicy::spank_plugin
