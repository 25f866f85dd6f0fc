// SPDX-License-Identifier: Apache-2.0
// spank.hpp - <slurm/spank.h> for C++: it declares the slurm_spank_* hooks
// outside its own extern "C" block, so the whole header is wrapped here.
#pragma once

extern "C" {
#include <slurm/spank.h>
}
