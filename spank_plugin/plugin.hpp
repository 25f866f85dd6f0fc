// SPDX-License-Identifier: Apache-2.0
// plugin.hpp - the plugin's state and the hooks of each context.
//
// dispatch.cpp holds the slurm_spank_* entry points and switches on the
// context to srun.cpp (local), slurmstepd.cpp (remote) or allocator.cpp
// (sbatch/salloc). Each process loads the plugin once and runs its hooks on
// one thread, so the state is a plain global.
#pragma once

#include "config.hpp"
#include "options.hpp"

#include "spank.hpp"

#include <string>

namespace exitpolicy::spank_plugin {

struct State {
    Config config;
    bool disabled = false;  // by a plugstack.conf error: everything is left to Slurm
    RawOptions cli;         // what the option callbacks saw
    bool cli_warned = false;
};

// The daemon to start: the site's daemon=, else the installed one, else,
// only in a plugin built with EXITPOLICY_BUILD_TREE_DAEMON=ON (development),
// the one of the build tree this plugin comes from.
std::string daemon_path(const Config& config);
State& state() noexcept;

// Every context: parse plugstack.conf arguments, register the options.
int init(spank_t sp, int ac, char** av);

// The bootstrap variable srun hands to the step: "1:PORT:SECRET", plus
// ":pmix:FANOUT" when the step gets exitpolicy's PMIx service, or ":het"
// in a heterogeneous step (srun A : B). Its name
// starts with SLURM_ because srun passes SLURM_* variables to the step
// whatever --export says (--export=NONE, or a list of names).
inline constexpr const char* bootstrap_env = "SLURM_EXITPOLICY_BOOTSTRAP";

namespace srun {
int init_post_opt(spank_t sp);
int local_user_init(spank_t sp);
int exit(spank_t sp);
}  // namespace srun

namespace slurmstepd {
int init_post_opt(spank_t sp);
int task_init(spank_t sp);
int task_post_fork(spank_t sp);
int task_exit(spank_t sp);
int exit(spank_t sp);
}  // namespace slurmstepd

namespace allocator {
int init_post_opt(spank_t sp);
}  // namespace allocator

}  // namespace exitpolicy::spank_plugin
