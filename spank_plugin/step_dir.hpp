// SPDX-License-Identifier: Apache-2.0
// step_dir.hpp - the step's private directory on a node
// (/tmp/exitpolicy.JOB.STEP.NODE.XXXXXX): where the node daemon's local
// socket and the PMIx server's files live, named in the tasks' PMIx
// environment. Made by root in slurmstepd, given to the job's user, and
// removed as that user; what a step that died left is removed by the
// next one on the node. Blocking and bounded, no threads; no Slurm
// headers (tests/unit/daemon_link_test.cpp).
#pragma once

#include "exitpolicy/result.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace exitpolicy::spank_plugin {

// The step's private directory in /tmp on this node, made by root with a
// name no one can predict (mkdtemp) and given to the job's user (0700).
Result<std::string> make_step_dir(std::uint32_t job_id, std::uint32_t step_id, const std::string& node, uid_t uid,
                                  gid_t gid);
// The node daemon's local socket in it.
std::string daemon_socket(const std::string& dir);
// Removes it as the job's user (rm -rf in a child that drops to uid/gid),
// so that root never walks a tree its user could rearrange; bounded, and
// never a blocking wait on that child (its user may trace it), which is
// killed at the bound and left to slurmstepd to reap if it cannot be.
Result<bool> remove_step_dir(const std::string& dir, uid_t uid, gid_t gid, std::chrono::milliseconds timeout);

// Where root records the step directories it makes (one file each), on
// disk: kept across a reboot, as a /tmp on disk keeps the directories.
inline constexpr const char* step_dir_registry = "/var/lib/exitpolicy/step-dirs";

// This node's step directories of `uid` whose steps are gone, as root
// recorded them when it made them (step_dir_registry, root's alone: what
// anyone else names like a step directory in /tmp is never a candidate): a
// real directory of mode 0700 of the recorded owner, unchanged for
// older_than, whose daemon's socket nobody listens on, nor its step's
// slurmstepd on its step socket (a daemon that stands by has none): a node
// that crashed left it; on Debian 12 /tmp is on disk. Only the step's own
// user's: a user whose directory rm cannot empty (or who stops that rm)
// can then hold only their own steps' start, never another user's, and
// never has a process as a child of another user's slurmstepd. Each is
// removed as its owner (remove_step_dir); at most max_stale_removed tries
// (failures count) and `timeout` in all, per call. Returns those removed.
inline constexpr std::size_t max_stale_removed = 8;
std::vector<std::string> remove_stale_step_dirs(const std::string& node, uid_t uid, std::chrono::seconds older_than,
                                                std::chrono::milliseconds timeout);

}  // namespace exitpolicy::spank_plugin
