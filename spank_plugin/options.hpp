// options.hpp - what a step asks of exitpolicy: from srun's command line, its
// environment (SLURM_EXIT_POLICY, ...; sbatch/salloc --exit-policy sets these
// for the job), and the site's defaults. The command line wins over the
// environment, the environment over the site.
//
// No Slurm headers here, so it is unit-tested.
#pragma once

#include "config.hpp"
#include "exitpolicy/policy.hpp"
#include "exitpolicy/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exitpolicy::plugin {

// The option names and their environment equivalents.
struct OptionName {
    const char* option;  // without "--"
    const char* env;
};
inline constexpr OptionName opt_policy{"exit-policy", "SLURM_EXIT_POLICY"};
inline constexpr OptionName opt_main_rank{"exit-main-rank", "SLURM_EXIT_MAIN_RANK"};
inline constexpr OptionName opt_report{"exit-report", "SLURM_EXIT_REPORT"};
inline constexpr OptionName opt_report_json{"exit-report-json", "SLURM_EXIT_REPORT_JSON"};
// A flag on the command line (no value); yes/no in the environment.
inline constexpr OptionName opt_recoverable{"exit-recoverable", "SLURM_EXIT_RECOVERABLE"};

// Raw values, as given, from one source.
struct RawOptions {
    std::optional<std::string> policy;
    std::optional<std::string> main_rank;
    std::optional<std::string> report;
    std::optional<std::string> report_json;
    std::optional<std::string> recoverable;  // the flag on the command line: "yes"
    bool any() const noexcept { return policy || main_rank || report || report_json || recoverable; }
};

struct StepOptions {
    std::optional<Policy> policy;     // none: no policy for this step
    std::uint32_t main_rank = 0;
    bool main_rank_given = false;
    ReportMode report = ReportMode::automatic;
    std::string report_json;          // path template, empty: none
    bool recoverable = false;         // run-through after a PMIx client fails
};

// Checks one value as an option callback would: the error names the option.
Result<bool> check_option(const OptionName& name, std::string_view value, const Config& config);

// Resolves command line > environment > site. Errors name the source
// ("--exit-policy" or "SLURM_EXIT_POLICY") and list the valid values.
Result<StepOptions> resolve_options(const RawOptions& cli, const RawOptions& env, const Config& config);

// A main rank must be a task of the step: 0..ntasks-1.
Result<bool> check_main_rank(const StepOptions& options, std::uint32_t ntasks);

// Expands %j (job id), %s (step id) and %% in a --exit-report-json path.
std::string expand_report_path(std::string_view pattern, std::uint32_t job_id, std::uint32_t step_id);

}  // namespace exitpolicy::plugin
