// SPDX-License-Identifier: Apache-2.0
// dispatch.cpp - the SPANK entry points. Each is a guard around the hook of
// the running context: srun.cpp (local), slurmstepd.cpp (remote),
// allocator.cpp (sbatch, salloc). Nothing else is exported (exitpolicy.map).
#include "guard.hpp"
#include "plugin.hpp"

#include "spank.hpp"

extern "C" {

// A const at namespace scope is internal in C++: declare these extern first
// so that Slurm's loader finds them.
extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
SPANK_PLUGIN(exitpolicy, 1);

int slurm_spank_init(spank_t sp, int ac, char** av)
{
    using namespace exitpolicy::spank_plugin;
    return guarded("init", 0, [&] { return init(sp, ac, av); });
}

int slurm_spank_init_post_opt(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    return guarded("init_post_opt", 0, [&] {
        switch (spank_context()) {
        case S_CTX_LOCAL: return srun::init_post_opt(sp);
        case S_CTX_REMOTE: return slurmstepd::init_post_opt(sp);
        case S_CTX_ALLOCATOR: return allocator::init_post_opt(sp);
        default: return 0;
        }
    });
}

int slurm_spank_local_user_init(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    return guarded("local_user_init", 0, [&] { return srun::local_user_init(sp); });
}

int slurm_spank_task_init(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    // In the task, as the job's user, before exec.
    return guarded("task_init", 0, [&] { return slurmstepd::task_init(sp); });
}

int slurm_spank_task_post_fork(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    // In slurmstepd, once per task, after its fork and before its exec.
    return guarded("task_post_fork", 0, [&] { return slurmstepd::task_post_fork(sp); });
}

int slurm_spank_task_exit(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    return guarded("task_exit", 0, [&] { return slurmstepd::task_exit(sp); });
}

int slurm_spank_exit(spank_t sp, int, char**)
{
    using namespace exitpolicy::spank_plugin;
    return guarded("exit", 0, [&] {
        switch (spank_context()) {
        case S_CTX_LOCAL: return srun::exit(sp);
        case S_CTX_REMOTE: return slurmstepd::exit(sp);
        default: return 0;
        }
    });
}

}  // extern "C"
