// SPDX-License-Identifier: Apache-2.0
// step_cgroups.hpp - the node daemon in its step's cgroups, as a task is.
//
// Root starts the daemon from init_post_opt, before Slurm has made the
// step's cgroups, so it begins in slurmstepd's. Under cgroup/v2 those are
// the step's already (job_N/step_N/slurm: the job's memory limit and
// CPUs). Under cgroup/v1, slurmstepd stays outside every hierarchy of the
// step but the freezer's, and the daemon with it: not limited, not counted
// (its memory is not the job's) and free to run on every CPU of the node.
// So, once the node's first task is in its cgroups (task_post_fork:
// Slurm has called task_g_pre_launch_priv for it), root moves the daemon
// and its children into the step's cgroup (the task's, less its task_N)
// of each v1 hierarchy whose cgroup the task has of its step: memory,
// cpuset, devices, cpuacct as Slurm made them. Never the freezer's (or
// any hierarchy whose cgroup the tasks share with slurmstepd): what
// process tracking waits for at the step's end must not include it.
//
// What it then gets: the step's memory limit and accounting, the step's
// CPUs on this node (a cpuset's, so task/affinity's binding of one task
// is not its own) and the step's devices.
#pragma once

#include "exitpolicy/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace exitpolicy::spank_plugin {

// A cgroup of a v1 hierarchy: its controllers as /proc/PID/cgroup names
// them ("memory", "cpu,cpuacct") and its path in the hierarchy.
struct V1Cgroup {
    std::string controllers;
    std::string path;
    bool operator==(const V1Cgroup&) const = default;
};

// The step cgroups the daemon should join, from the task's and the
// daemon's /proc/PID/cgroup texts: for each v1 hierarchy but the freezer's
// where the task's cgroup has a step_* component and the daemon's is not
// that step cgroup, the path up to that component. Named hierarchies and
// cgroup v2's line are never among them.
std::vector<V1Cgroup> step_cgroups_to_join(std::string_view task_cgroups, std::string_view daemon_cgroups);

// The directory of `cgroup` on this node, from /proc/self/mountinfo's text:
// where a cgroup (v1) file system of exactly its controllers is mounted,
// whose root is the path's or one above it. None if it is not mounted here.
std::optional<std::string> v1_cgroup_dir(std::string_view mountinfo, const V1Cgroup& cgroup);

// Moves the daemon (`pidfd` pins it) and its children into the step
// cgroups the first task `task` is in. What it joined (the hierarchies'
// controllers), or why it could not; an empty list where there is nothing
// to join (cgroup v2, no task/cgroup).
Result<std::vector<std::string>> join_step_cgroups(pid_t task, pid_t daemon, int pidfd);

// ---- the OOM killer, per task ----------------------------------------------
//
// Slurm counts OOM kills per step and labels every task end of the node
// after one as OOM. The kernel counts them per cgroup, and under task/cgroup
// each task has a memory cgroup of its own (task_N): its oom_kill count
// rose while it ran exactly when the OOM killer ended it or a process of it.

// The file that counts OOM kills in the task's own memory cgroup, from its
// /proc/PID/cgroup and /proc/self/mountinfo texts: cgroup v2's
// DIR/memory.events, v1's memory hierarchy's DIR/memory.oom_control (both
// say "oom_kill N"). None where the task has no memory cgroup of its own (a
// cgroup whose last part is task_*): one shared by several tasks cannot
// say whose process was killed.
std::optional<std::string> oom_counter_file(std::string_view task_cgroups, std::string_view mountinfo);

// The "oom_kill N" count in such a file's text.
std::optional<std::uint64_t> oom_kills_in(std::string_view text);

// The task's counter file and its count now (task_post_fork); none as above.
struct OomCounter {
    std::string file;
    std::uint64_t at_start = 0;
};
std::optional<OomCounter> oom_counter_of(pid_t task, const std::string& mountinfo);
// Whether the count rose since the counter was read (task_exit).
bool oom_killed_since(const OomCounter& counter);

// A memory limit file's value: v1's memory.limit_in_bytes, v2's memory.max;
// none for no limit (v2's "max", v1's page counter's maximum) or no number.
std::optional<std::uint64_t> memory_limit_in(std::string_view text);
// The lowest memory limit of the counter's cgroup and those above it in
// its hierarchy (the task's, step's and job's: Slurm sets the step's and
// the job's), up to where the hierarchy's files end; none if none is set.
std::optional<std::uint64_t> memory_limit_of(const OomCounter& counter);
// /proc/self/mountinfo's text (read once a step).
std::string own_mountinfo();

}  // namespace exitpolicy::spank_plugin
