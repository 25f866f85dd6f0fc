// SPDX-License-Identifier: Apache-2.0
// guard.hpp - no exception crosses into Slurm's C frames.
#pragma once

#include "spank_plugin/log.hpp"

#include <exception>

namespace exitpolicy::spank_plugin {

// Runs fn(); an escaped exception is logged once and becomes `fallback`
// (0 for hooks, so that the plugin's own trouble never fails a step).
template <typename Fn>
int guarded(const char* hook, int fallback, Fn&& fn) noexcept
{
    try {
        return fn();
    } catch (const std::exception& e) {
        log::error("%s: internal error: %s; leaving the step to Slurm", hook, e.what());
    } catch (...) {
        log::error("%s: internal error; leaving the step to Slurm", hook);
    }
    return fallback;
}

}  // namespace exitpolicy::spank_plugin
