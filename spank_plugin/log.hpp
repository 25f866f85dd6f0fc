// SPDX-License-Identifier: Apache-2.0
// log.hpp - the plugin's log lines, through Slurm's own logging
// (slurm_error/info/verbose/debug, resolved from srun or slurmstepd), every
// line prefixed "exitpolicy: ". Messages are formatted into a fixed buffer:
// safe in any hook, no allocation.
#pragma once

namespace exitpolicy::spank_plugin::log {

// debug=N (plugstack.conf) or EXITPOLICY_DEBUG=N raises verbose and debug
// lines to info level so they show without srun -v or a slurmd debug level.
void set_level(int level) noexcept;

void error(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void verbose(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace exitpolicy::spank_plugin::log
