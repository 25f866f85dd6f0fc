// SPDX-License-Identifier: Apache-2.0
// allocator.cpp - the allocator context: sbatch and salloc.
//
// sbatch --exit-policy=X (or salloc) makes X the default of every srun in the
// job: the values go into the environment the job inherits (salloc's shell,
// sbatch's exported environment); for the batch script, slurmstepd.cpp sets
// them again from the forwarded options, so that --export=NONE keeps them.
#include "spank_plugin/log.hpp"
#include "plugin.hpp"

#include <cstdlib>

namespace exitpolicy::spank_plugin::allocator {

int init_post_opt(spank_t)
{
    const State& st = state();
    if (st.disabled)
        return 0;
    for (const auto& spec : option_table)
        if (const auto& value = st.cli.*spec.value; value && ::setenv(spec.env, value->c_str(), 1) != 0)
            log::error("cannot set %s for the job", spec.env);
    return 0;
}

}  // namespace exitpolicy::spank_plugin::allocator
