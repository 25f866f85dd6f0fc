// SPDX-License-Identifier: Apache-2.0
// job_record.hpp - the policy's verdict in Slurm's accounting record, for
// sacct's users (plugstack.conf record_verdict=yes).
//
// A job's own user may set its DerivedExitCode and Comment in slurmdbd at
// any time, as sjobexitmod does (sacctmgr modify job; slurmdbd's
// as_mysql_modify_job lets the job's user, 22.05 to 26.05). srun does so
// with the sacctmgr beside it once the step is decided:
//
// - A job srun made for itself has ended before srun's exit hooks run
//   (srun tells slurmctld its end, with Slurm's code, first). srun waits,
//   bounded, until slurmdbd has that end (sacct shows an End), since
//   slurmctld's record of it sets DerivedExitCode too; then it sets
//   DerivedExitCode to the policy's code and Comment to why.
// - In a job that goes on (a batch script's, salloc's), Comment only: the
//   job's end sets DerivedExitCode from its steps again (22.05: as they
//   are; 24.11 and later: the higher of theirs and what is there), and the
//   job's ExitCode is srun's when srun is its last command.
//
// The Comment keeps what the job had before a verdict of ours (its
// --comment) and replaces an earlier step's verdict. A job with a
// --comment of its own gets that back at its end (slurmctld records it).
#pragma once

#include "exitpolicy/result.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::spank_plugin {

struct VerdictRecord {
    std::uint32_t job_id = 0;
    int code = 0;           // srun's exit code under the policy
    std::string comment;    // verdict_comment's
    bool job_ended = false; // srun made the job for itself, and has ended it
    std::string bin_dir;    // where sacct and sacctmgr are: srun's own directory
};

// "exitpolicy main-rank 0: main rank 0 on node1 exited with code 0": one
// line of printable ASCII without quotes (sacctmgr takes them for its
// own), at most comment_limit bytes.
inline constexpr std::size_t comment_limit = 400;
std::string verdict_comment(std::string_view policy, int code, std::string_view why);

// The job's Comment once this verdict is in it: `had` without an earlier
// verdict of ours, then the verdict.
std::string merged_comment(std::string_view had, std::string_view verdict);

// Records it; the error says what failed. Bounded by `timeout` in all.
Result<bool> record_verdict(const VerdictRecord& record, std::chrono::milliseconds timeout);

// What a program wrote (stdout and stderr) and its wait status; it is
// killed (SIGKILL) at the deadline, which is an error.
struct ProgramRun {
    int status = 0;
    std::string output;
};
Result<ProgramRun> run_program(const std::vector<std::string>& argv, std::chrono::steady_clock::time_point deadline);

}  // namespace exitpolicy::spank_plugin
