// SPDX-License-Identifier: Apache-2.0
// user_line.hpp - a line for srun's user on srun's stderr: "exitpolicy: " +
// text, not through Slurm's log (no "srun: " prefix). The report, warnings
// and the front end's news (a node lost, the step ended) go this way, from
// srun's main thread or the front end's. Whole, however long, and never
// mixed with another thread's line (stderr is locked while it is written).
#pragma once

namespace exitpolicy::spank_plugin {

void user_line(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace exitpolicy::spank_plugin
