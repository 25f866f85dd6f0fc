// SPDX-License-Identifier: Apache-2.0
// options.hpp - what a step asks of exitpolicy: from srun's command line, its
// environment (SLURM_EXIT_POLICY, ...; sbatch/salloc --exit-policy sets these
// for the job), and the site's defaults. The command line wins over the
// environment, the environment over the site.
//
// No Slurm headers here, so it is unit-tested.
#pragma once

#include "config.hpp"
#include "option_table.hpp"
#include "exitpolicy/policy.hpp"
#include "exitpolicy/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {

struct StepOptions {
    std::optional<Policy> policy;     // none: no policy for this step
    std::uint32_t main_rank = 0;
    bool main_rank_given = false;
    ReportMode report = ReportMode::automatic;
    std::string report_json;          // path template, empty: none
    bool recoverable = false;         // run-through after a PMIx client fails
};

// The environment's option values (SLURM_EXIT_POLICY, ...), via lookup:
// const char* name -> std::optional<std::string>.
template <typename Lookup>
RawOptions options_from_env(Lookup&& lookup)
{
    RawOptions env;
    for (const auto& spec : option_table)
        env.*spec.value = lookup(spec.env);
    return env;
}

// Checks one value as an option callback would: the error names the option.
Result<bool> check_option(const OptionSpec& spec, std::string_view value, const Config& config);

// Resolves command line > environment > site. Errors name the source
// ("--exit-policy" or "SLURM_EXIT_POLICY") and list the valid values.
Result<StepOptions> resolve_options(const RawOptions& cli, const RawOptions& env, const Config& config);

// A main rank must be a task of the step: 0..ntasks-1.
Result<bool> check_main_rank(const StepOptions& options, std::uint32_t ntasks);

// What each task of a run-through step (--exit-recoverable) with
// exitpolicy's PMIx service is told, each only where the job has not set
// it: Open MPI's fault tolerance (ULFM) on, and around two bugs of Open MPI
// 5.0 that make a survivor crash (coll/han after a death,
// open-mpi/ompi#13915) or an agreement across nodes wait forever (a peer not
// yet spoken to is taken as alive, open-mpi/ompi#13501: every peer is added
// at MPI_Init when the cutoff is above the step's size). Open MPI 6 needs
// only the first; the others cost it hierarchical collectives and the
// early connection setup, in such steps only. No other MPI reads them.
std::vector<std::pair<std::string, std::string>> run_through_environment(std::uint32_t ntasks);

// Whether srun's own options (argv[1..], up to the first word that is no
// option: the program and its arguments) ask for --async (Slurm 26.05), or
// a prefix of it, as getopt_long takes: the step manager launches such a
// step and srun returns at once, waiting for none of it. The value of an
// option of srun's (Slurm 26.05's) or ours may be the next word (-N 2,
// --ntasks 4); another plugin's option whose value is the next word ends
// the look there: what cannot be told apart counts as not asked.
bool asks_async(const std::vector<std::string>& argv);

// Whether srun's command line (argv, srun's own first) runs a
// heterogeneous step, "srun [OPTIONS] PROG [ARGS] : [OPTIONS] PROG ...":
// srun splits it at every ":" word after its own name (src/srun/opt.c).
bool is_heterogeneous(const std::vector<std::string>& argv);

// An option's text for srun --help.
std::string option_help(const OptionSpec& spec);

// A job array's ids, as srun's environment has them in an array's job
// (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID); none outside one.
struct ArrayIds {
    std::optional<std::uint32_t> job;
    std::optional<std::uint32_t> task;
};

// Expands %j (job id), %s (step id), %A (the array's job id, else the job
// id), %a (the array task id, else 0) and %% in a --exit-report-json path,
// as srun expands its own --output patterns.
std::string expand_report_path(std::string_view pattern, std::uint32_t job_id, std::uint32_t step_id,
                               const ArrayIds& array = {});

}  // namespace exitpolicy::spank_plugin
