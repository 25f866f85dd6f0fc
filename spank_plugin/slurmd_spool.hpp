// SPDX-License-Identifier: Apache-2.0
// slurmd_spool.hpp - where slurmd keeps its files (SlurmdSpoolDir), as seen
// from a slurmstepd: SPANK has no item for it, and slurm.conf may not be on
// the node at all (configless). Each slurmstepd listens on its step's socket
// DIR/NODE_JOB.STEP (or DIR/NODE_JOB.STEP.HETCOMP; Slurm's
// src/slurmd/slurmstepd/req.c, the same in 22.05 and 24.11): DIR is the
// spool directory. Only a socket this process holds counts, and its path is
// the one the kernel keeps for it (getsockname), not text parsed from
// /proc/net/unix: a socket of the same name that another user bound
// elsewhere, or one whose path forges a line of that file, cannot redirect
// us.
//
// The node daemon's default hardware topology comes from there: slurmd
// writes DIR/hwloc_topo_whole.xml as it starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exitpolicy::spank_plugin {

// The spool directory from this process's own step socket; none when it
// holds none (not in a slurmstepd, or /proc unreadable).
std::optional<std::string> slurmd_spool_dir(std::uint32_t job_id, std::uint32_t step_id);

// The component of a heterogeneous step of one job that this slurmstepd
// serves (Slurm's step_het_comp: its socket's HETCOMP); none in any other
// step, and when it holds no step socket.
std::optional<std::uint32_t> step_het_component(std::uint32_t job_id, std::uint32_t step_id);

// The hwloc XML slurmd wrote in its spool directory, if it is there, and
// it and the directory are root's and writable by no one else.
std::optional<std::string> slurmd_topology_xml(std::uint32_t job_id, std::uint32_t step_id);

}  // namespace exitpolicy::spank_plugin
