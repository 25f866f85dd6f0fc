// SPDX-License-Identifier: Apache-2.0
// pmix_compat.hpp - where the OpenPMIx versions the project supports (4.2 on
// Debian 12, 5.0 on Debian 13) differ for a server: the one place that says
// so, decided at compile time from OpenPMIx's own version macros.
//
// Everything else is the same on both: the server API the daemon calls, the
// upcalls it answers, the attributes it passes. Differences in what clients
// see (a PMIx_Get with PMIX_OPTIONAL after a collecting fence, the spelling
// of status names, a failed fence told to one participant per node) are the
// clients' and the library's; README "Supported versions" lists them.
#pragma once

#include "protocol/planned_environment.hpp"

#include <pmix.h>
#include <pmix_version.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

namespace exitpolicy::pmix_server::compat {

inline constexpr long pmix_major = PMIX_VERSION_MAJOR;

// OpenPMIx 5 keeps job data in shared memory that every client maps at the
// address its server chose (gds/shmem2). That address can be taken in the
// client (by its heap or a library, as address space layout randomization
// places them): then PMIx_Init fails ("The gds/shmem2 component attempted to
// attach to a shared-memory segment at a particular base address, but was
// given a different one", PMIX_ERR_OUT_OF_RESOURCE) and the task dies in
// MPI_Init. Seen about once in a few hundred Open MPI 5 steps here;
// OpenPMIx made the attach reliable only in 6.1.1. gds/hash, which the
// library always has, sends each client its data instead. OpenPMIx 4.2's
// shared-memory store (gds/ds21) maps where the client chooses and stays.
inline constexpr bool gds_shmem2_unreliable = pmix_major == 5;

// Before PMIx_server_init, in the daemon's main thread: the server offers
// its clients only the job-data modules it has (PMIX_GDS_MODULE in their
// environment, from PMIx_server_setup_fork). A PMIX_MCA_gds already in the
// daemon's environment is kept.
inline void set_library_defaults()
{
    if constexpr (gds_shmem2_unreliable)
        ::setenv("PMIX_MCA_gds", "hash", 0);
}

// The library the daemon runs with (not the one it was built with).
using Version = protocol::LibraryVersion;
inline std::optional<Version> running_version()
{
    const char* full = PMIx_Get_version();
    return protocol::library_version(full ? full : "");
}
using protocol::activation_errno;

}  // namespace exitpolicy::pmix_server::compat
