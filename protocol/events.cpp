// SPDX-License-Identifier: Apache-2.0
// events.cpp - see events.hpp.
#include "events.hpp"

#include "exitpolicy/outcome.hpp"

namespace exitpolicy::protocol::pmix {

static_assert(pmix_termination_name(proc_aborted) == "PMIX_ERR_PROC_ABORTED");
static_assert(pmix_termination_name(proc_requested_abort) == "PMIX_ERR_PROC_REQUESTED_ABORT");
static_assert(pmix_termination_name(proc_term_wo_sync) == "PMIX_ERR_PROC_TERM_WO_SYNC");
static_assert(pmix_termination_name(proc_terminated) == "PMIX_EVENT_PROC_TERMINATED");
static_assert(pmix_termination_name(node_down) == "PMIX_EVENT_NODE_DOWN");
static_assert(pmix_termination_name(proc_aborted_by_sig) == "PMIX_ERR_PROC_ABORTED_BY_SIG");
static_assert(pmix_termination_name(exit_nonzero_term) == "PMIX_ERR_EXIT_NONZERO_TERM");

std::optional<Event> termination_event(const Outcome& o, std::uint32_t origin)
{
    const bool aborted = (o.flags & Outcome::flag_aborted) != 0;
    const bool unfinalized =
        (o.flags & Outcome::flag_finalized_known) != 0 && (o.flags & Outcome::flag_finalized) == 0;
    const WaitStatus s = WaitStatus::decode(o.wait_status);
    // A client that exits without finalizing, with any code, is the
    // "terminated without sync" of the standard, as PRRTE says it: the code
    // Open MPI 5's fault tolerance takes, where a non-zero exit's is fatal.
    int code = 0;
    if (aborted)
        code = proc_requested_abort;
    else if (s.kind == WaitStatus::Kind::signaled)
        code = proc_aborted_by_sig;
    else if (unfinalized)
        code = proc_term_wo_sync;
    else if (s.kind == WaitStatus::Kind::exited && s.exit_code != 0)
        code = exit_nonzero_term;
    else
        return std::nullopt;
    TaskOutcome t;
    t.rank = o.rank;
    t.wait_status = o.wait_status;
    if (aborted)
        t.abort_status = o.abort_status;
    const bool client = (o.flags & Outcome::flag_finalized_known) != 0;
    return Event{origin, o.rank, code, task_code(t, 1), o.wait_status, client};
}

}  // namespace exitpolicy::protocol::pmix
