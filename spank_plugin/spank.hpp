// SPDX-License-Identifier: Apache-2.0
// spank.hpp - <slurm/spank.h> for C++: it declares the slurm_spank_* hooks
// outside its own extern "C" block, so the whole header is wrapped here;
// item(), the one way the plugin reads a spank item, and job_env(), the
// one way it reads the job's environment.
#pragma once

#include <optional>
#include <string>

extern "C" {
#include <slurm/spank.h>
}

namespace exitpolicy::spank_plugin {

// One spank_get_item() value of a single out-parameter; false when Slurm
// has none to give in this context.
template <typename T>
bool item(spank_t sp, spank_item_t which, T& out)
{
    return spank_get_item(sp, which, &out) == ESPANK_SUCCESS;
}

// The job's variable `name`, if it has one (of at most 4 KiB).
inline std::optional<std::string> job_env(spank_t sp, const char* name)
{
    char buf[4096];
    if (spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_SUCCESS)
        return std::nullopt;
    return std::string(buf);
}

}  // namespace exitpolicy::spank_plugin
