// SPDX-License-Identifier: Apache-2.0
// pmi_sockets.hpp - the local tasks' PMI sockets, for MPICH's built-in
// PMI-1/PMI-2 client (PMI_FD): a socketpair per task, made by slurmstepd
// before the tasks start. The daemon gets one end of each (the launch puts
// them from fd 10 up); each task keeps its own end across its exec, and
// slurmstepd closes its copy once the task is forked, so the daemon sees a
// task's end as its socket's. No Slurm headers: unit-tested
// (tests/unit/daemon_link_test.cpp).
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/fd.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace exitpolicy::spank_plugin {

class PmiSockets {
public:
    // More tasks on a node than this get no PMI sockets (a process's
    // descriptors, the daemon's poll set): they run without PMI, as before.
    static constexpr std::size_t max_tasks = 1000;

    // Makes `tasks` pairs, close-on-exec: the daemon's ends are returned
    // (the caller closes them once the daemon has them), the tasks' kept.
    // None made on any failure.
    Result<std::vector<protocol::Fd>> make(std::size_t tasks);
    // In task `local`'s process before its exec: its own end stays open
    // across the exec (the others close there); -1 when it has none.
    int keep_for_task(std::size_t local);
    // In slurmstepd once task `local` is forked.
    void forked(std::size_t local);
    void close_all();
    // Whether make() gave the tasks their sockets.
    bool made() const { return !task_ends_.empty(); }

private:
    std::vector<protocol::Fd> task_ends_;
};

// What a task is told: its own (PMI_FD, PMI_RANK) and what every task of
// the step has alike (PMI_SIZE, PMI_JOBID "JOB.STEP"). MPICH's PMI-1
// client reads its rank and the step's size from here.
using Environment = std::vector<std::pair<std::string, std::string>>;
Environment pmi_task_environment(int fd, std::uint32_t rank);
Environment pmi_step_environment(std::uint32_t ntasks, std::uint32_t job_id, std::uint32_t step_id);

// Which of the two a task of MPICH takes, set only where the job has not
// set it: MPICH from 5.0 picks PMI or PMIx from the environment, and stops
// in MPI_Init when it finds both PMI_SIZE and PMIX_NAMESPACE, as every task
// served here has them. "1" is PMI-1, what MPICH 4.2 took by default, and
// an MPICH built without it goes on to PMI-2, then PMIx (both served here
// too); before 4.2 MPICH reads no such variable.
inline constexpr const char* mpich_pmi_variable = "MPIR_CVAR_PMI_VERSION";
inline constexpr const char* mpich_pmi_choice = "1";

}  // namespace exitpolicy::spank_plugin
