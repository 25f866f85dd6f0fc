// allocator.cpp - the allocator context: sbatch and salloc.
//
// sbatch --exit-policy=X (or salloc) makes X the default of every srun in the
// job: the values go into the environment the job inherits (salloc's shell,
// sbatch's exported environment); for the batch script, slurmstepd.cpp sets
// them again from the forwarded options, so that --export=NONE keeps them.
#include "log.hpp"
#include "plugin.hpp"

#include <cstdlib>

namespace exitpolicy::plugin::allocator {

int init_post_opt(spank_t)
{
    const State& st = state();
    if (st.disabled)
        return 0;
    const std::pair<const std::optional<std::string>*, const char*> vars[] = {
        {&st.cli.policy, opt_policy.env},
        {&st.cli.main_rank, opt_main_rank.env},
        {&st.cli.report, opt_report.env},
        {&st.cli.report_json, opt_report_json.env},
        {&st.cli.recoverable, opt_recoverable.env},
    };
    for (const auto& [value, name] : vars)
        if (*value && ::setenv(name, (*value)->c_str(), 1) != 0)
            log::error("cannot set %s for the job", name);
    return 0;
}

}  // namespace exitpolicy::plugin::allocator
