// SPDX-License-Identifier: Apache-2.0
// plugin.cpp - what every context does: read plugstack.conf arguments and
// register the options.
#include "plugin.hpp"

#include "guard.hpp"
#include "spank_plugin/log.hpp"

#include <cstdlib>
#include <unistd.h>
#include <string_view>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

State the_state;

// A SPANK option's val is its index in option_table, plus one.
const OptionSpec* spec_of(int val) noexcept
{
    if (val < 1 || static_cast<std::size_t>(val) > std::size(option_table))
        return nullptr;
    return &option_table[val - 1];
}

// Option callback: runs in srun/sbatch/salloc while the command line is
// parsed (remote = 0), and in slurmstepd for options forwarded to the step
// (remote = 1). A bad value stops srun before it allocates anything.
int on_option(int val, const char* optarg, int remote) noexcept
{
    return guarded("an option", 0, [&] {
        const OptionSpec* spec = spec_of(val);
        if (!spec)
            return 0;
        // A flag (--exit-recoverable) given is yes, whatever comes with it:
        // srun passes no value, slurmstepd gets the forwarded flag as an
        // empty one, and an srun inside sbatch --exit-recoverable as
        // "(null)" (from SLURM_SPANK__SLURM_SPANK_OPTION_*).
        const std::string value = !spec->arg ? "yes" : optarg ? optarg : "";
        if (!remote && !the_state.disabled) {
            if (auto ok = check_option(*spec, value, the_state.config); !ok) {
                log::error("%s", ok.error().c_str());
                return -1;
            }
        }
        the_state.cli.*spec->value = value;
        return 0;
    });
}

// Built from option_table in init. Slurm keeps pointers to these for the
// life of the process.
constexpr std::size_t option_count = std::size(option_table);
std::string help_texts[option_count];
struct spank_option options[option_count];

}  // namespace

State& state() noexcept
{
    return the_state;
}

std::string daemon_path(const Config& config)
{
    if (!config.daemon.empty())
        return config.daemon;
#ifdef EXITPOLICY_BUILD_DAEMON  // not in a package's plugin: it knows no daemon but the installed one
    for (const char* candidate : {EXITPOLICY_INSTALLED_DAEMON, EXITPOLICY_BUILD_DAEMON})
        if (::access(candidate, X_OK) == 0)
            return candidate;
#endif
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
    for (std::size_t i = 0; i < option_count; ++i) {
        const OptionSpec& spec = option_table[i];
        help_texts[i] = option_help(spec);
        options[i] = {const_cast<char*>(spec.option), const_cast<char*>(spec.arg), help_texts[i].data(),
                      spec.arg ? 1 : 0, static_cast<int>(i + 1), on_option};
        if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
            log::error("cannot register --%s", spec.option);
    }
    return 0;
}

}  // namespace exitpolicy::spank_plugin
