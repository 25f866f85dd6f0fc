// SPDX-License-Identifier: Apache-2.0
// spank.hpp - <slurm/spank.h> for C++: it declares the slurm_spank_* hooks
// outside its own extern "C" block, so the whole header is wrapped here;
// and item(), the one way the plugin reads a spank item.
#pragma once

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

}  // namespace exitpolicy::spank_plugin
