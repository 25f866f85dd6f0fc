// SPDX-License-Identifier: Apache-2.0
// events.hpp - which PMIx event a task's end raises, decided once for the
// node daemons (which see their own tasks end) and the FE (which sees the
// ends of a node whose daemon is gone, by slurmstepd's direct link).
//
// The overlay carries PMIx status codes as plain numbers. Every one that
// crosses the wire is named here, once, with OpenPMIx's value (checked
// against the library's pmix_common.h at compile time in
// pmix_server/pmix_host.cpp), so that srun's side needs no PMIx header.
#pragma once

#include "wire.hpp"

#include <optional>

namespace exitpolicy::protocol::pmix {

inline constexpr int success = 0;                  // PMIX_SUCCESS
inline constexpr int error = -1;                   // PMIX_ERROR
inline constexpr int proc_aborted = -7;            // PMIX_ERR_PROC_ABORTED (legacy, generic)
inline constexpr int proc_requested_abort = -8;    // PMIX_ERR_PROC_REQUESTED_ABORT
inline constexpr int timeout = -24;                // PMIX_ERR_TIMEOUT
inline constexpr int out_of_resource = -29;        // PMIX_ERR_OUT_OF_RESOURCE
inline constexpr int not_supported = -47;          // PMIX_ERR_NOT_SUPPORTED
inline constexpr int not_found = -46;              // PMIX_ERR_NOT_FOUND
inline constexpr int duplicate_key = -53;          // PMIX_ERR_DUPLICATE_KEY
inline constexpr int unreach = -25;                // PMIX_ERR_UNREACH
inline constexpr int proc_term_wo_sync = -200;     // PMIX_ERR_PROC_TERM_WO_SYNC
inline constexpr int proc_terminated = -201;       // PMIX_EVENT_PROC_TERMINATED
inline constexpr int proc_aborted_by_sig = -402;   // PMIX_ERR_PROC_ABORTED_BY_SIG
inline constexpr int exit_nonzero_term = -404;     // PMIX_ERR_EXIT_NONZERO_TERM
inline constexpr int node_down = -231;             // PMIX_EVENT_NODE_DOWN

// The event a task's end raises, seen at node `origin`: its specific code
// (abort, signal, a client that never finalized, or a non-zero exit, in that
// order) and the task's code (128 + signal, the abort status, ...); none
// when the task ended well. What is known of abort and finalization comes in
// the outcome's flags, and so is whether the task was a PMIx client (the
// event's `client`).
std::optional<Event> termination_event(const Outcome& o, std::uint32_t origin);

}  // namespace exitpolicy::protocol::pmix
