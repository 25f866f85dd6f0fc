// SPDX-License-Identifier: Apache-2.0
// report.hpp - what srun tells its user about how the step ended.
//
// The human summary (grouped by outcome, compressed rank ranges, Slurm
// hostlists, the policy's code and why, Slurm's native code when it differs,
// the first failure, the root cause, named before the collateral ranks, lost
// ranks) and the versioned JSON document described in docs/report-json.md.
// Pure: no I/O, never throws.
#pragma once

#include "policy.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy {

// "3,5-7" from any order and repeats. Like every function of the core, the
// helpers here never throw (out of memory gives an empty text).
std::string compress_ranks(std::vector<std::uint32_t> ranks);

// Slurm hostlist notation: "node[2-3,7]", "login1,node[01-03]". Hosts are
// grouped by their prefix before a trailing number, zero padding kept.
std::string hostlist(std::vector<std::string> hosts);

// Where the report stands: optional, for the report's header and JSON.
struct ReportContext {
    std::string job_id;   // "1234", may be empty
    std::string step_id;  // "0", may be empty
};

// A task's message (an abort's, Open MPI's multi-line banner) as one line a
// person reads: its first line that says something (not blank, not only
// dashes or other punctuation), at most `width` characters, control
// characters shown as '?', then "(N more lines)" for the other lines that
// say something. Empty when nothing does.
std::string one_line(std::string_view message, std::size_t width = 160);

// The human summary: one line each, every line starting with prefix. An
// abort's message follows the lines that give the verdict, as one_line().
std::string render_summary(const StepOutcomes& step, const Settings& settings,
                           const Decision& decision, std::string_view prefix = "exitpolicy: ");

// Why the policy gave its code, in words: "main rank 0 was killed by SIGSEGV".
std::string explain(const StepOutcomes& step, const Settings& settings, const Decision& decision);

// The JSON document, version 1 (docs/report-json.md), pretty-printed.
std::string render_json(const StepOutcomes& step, const Settings& settings,
                        const Decision& decision, const ReportContext& context = {});

inline constexpr int report_json_version = 1;

}  // namespace exitpolicy
