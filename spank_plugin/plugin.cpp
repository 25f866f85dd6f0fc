// plugin.cpp - what every context does: read plugstack.conf arguments and
// register the options.
#include "plugin.hpp"

#include "log.hpp"

#include <cstdlib>
#include <unistd.h>
#include <string_view>
#include <vector>

namespace exitpolicy::plugin {
namespace {

State the_state;

std::optional<std::string>* slot(int val)
{
    switch (val) {
    case 1: return &the_state.cli.policy;
    case 2: return &the_state.cli.main_rank;
    case 3: return &the_state.cli.report;
    case 4: return &the_state.cli.report_json;
    case 5: return &the_state.cli.recoverable;
    default: return nullptr;
    }
}

const OptionName& name_of(int val)
{
    switch (val) {
    case 1: return opt_policy;
    case 2: return opt_main_rank;
    case 3: return opt_report;
    case 5: return opt_recoverable;
    default: return opt_report_json;
    }
}

// Option callback: runs in srun/sbatch/salloc while the command line is
// parsed (remote = 0), and in slurmstepd for options forwarded to the step
// (remote = 1). A bad value stops srun before it allocates anything.
int on_option(int val, const char* optarg, int remote) noexcept
{
    try {
        auto* target = slot(val);
        if (!target)
            return 0;
        // --exit-recoverable is a flag: no value means yes.
        const std::string value = optarg ? optarg : (val == 5 ? "yes" : "");
        if (!remote && !the_state.disabled) {
            if (auto ok = check_option(name_of(val), value, the_state.config); !ok) {
                log::error("%s", ok.error().c_str());
                return -1;
            }
        }
        *target = value;
        return 0;
    } catch (...) {
        return 0;
    }
}

std::string policy_usage()
{
    return "How srun's exit code is chosen from the tasks' codes: " + valid_policies() +
           ". Default: Slurm's own rule, or the site's default";
}

// Slurm keeps pointers to these for the life of the process.
std::string policy_usage_text;
struct spank_option options[] = {
    {const_cast<char*>(opt_policy.option), const_cast<char*>("POLICY"), nullptr, 1, 1, on_option},
    {const_cast<char*>(opt_main_rank.option), const_cast<char*>("RANK"),
     const_cast<char*>("The main rank for main-rank and main-rank-check (default 0)"), 1, 2, on_option},
    {const_cast<char*>(opt_report.option), const_cast<char*>("auto|always|never"),
     const_cast<char*>("When srun prints the exit report (auto: when something failed or the code differs from "
                       "Slurm's own)"),
     1, 3, on_option},
    {const_cast<char*>(opt_report_json.option), const_cast<char*>("PATH"),
     const_cast<char*>("Also write the exit report as JSON to PATH (%j: job id, %s: step id)"), 1, 4, on_option},
    {const_cast<char*>(opt_recoverable.option), nullptr,
     const_cast<char*>("In a step served by exitpolicy's PMIx: when a task fails, tell the others and let them "
                       "run on (default: end the step)"),
     0, 5, on_option},
};

}  // namespace

State& state() noexcept
{
    return the_state;
}

std::string daemon_path(const Config& config)
{
    if (!config.daemon.empty())
        return config.daemon;
    for (const char* candidate : {EXITPOLICY_INSTALLED_DAEMON, EXITPOLICY_BUILD_DAEMON})
        if (::access(candidate, X_OK) == 0)
            return candidate;
    return EXITPOLICY_INSTALLED_DAEMON;
}

int init(spank_t sp, int ac, char** av)
{
    std::vector<std::string_view> args(av, av + ac);
    auto config = parse_config(args);
    if (config) {
        the_state.config = *config;
    } else {
        the_state.disabled = true;
        log::error("%s. The plugin is disabled; steps run as without it", config.error().c_str());
    }
    int level = the_state.config.debug;
    if (const char* env = std::getenv("EXITPOLICY_DEBUG"); env && *env >= '0' && *env <= '3' && !env[1])
        level = std::max(level, *env - '0');
    log::set_level(level);

    // Options are registered in every context (also when disabled: a job
    // script that passes --exit-policy must not break because of us).
    const spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
        return 0;
    policy_usage_text = policy_usage();
    options[0].usage = policy_usage_text.data();
    for (auto& opt : options)
        if (spank_option_register(sp, &opt) != ESPANK_SUCCESS)
            log::error("cannot register --%s", opt.name);
    return 0;
}

}  // namespace exitpolicy::plugin
