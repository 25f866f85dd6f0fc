// SPDX-License-Identifier: Apache-2.0
// guard.hpp - no exception crosses into Slurm's C frames: each SPANK entry
// point runs its hook through protocol::guarded() (protocol/guard.hpp),
// logged in Slurm's log.
#pragma once

#include "protocol/guard.hpp"
#include "spank_plugin/log.hpp"

namespace exitpolicy::spank_plugin {

// Runs fn(); an escaped exception is logged once and becomes `fallback`
// (0 for hooks, so that the plugin's own trouble never fails a step).
template <typename Fn>
int guarded(const char* hook, int fallback, Fn&& fn) noexcept
{
    int rc = fallback;
    protocol::guarded([&] { rc = fn(); },
                      [hook](const char* why) {
                          log::error("%s: internal error: %s; leaving the step to Slurm", hook, why);
                      });
    return rc;
}

}  // namespace exitpolicy::spank_plugin
