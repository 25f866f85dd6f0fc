// SPDX-License-Identifier: Apache-2.0
// local_ends.cpp - what the node daemon knows of how its tasks end. See
// local_ends.hpp.
#include "local_ends.hpp"

#include "exitpolicy/outcome.hpp"
#include "pmi_encoding.hpp"
#include "protocol/process.hpp"

#include <algorithm>

namespace exitpolicy::pmix_server {

bool ended_by_itself(int wait_status, bool aborted, bool oom_killed)
{
    TaskOutcome t;
    t.wait_status = wait_status;
    if (aborted)
        t.abort_status = 0;  // whatever its status: an abort
    t.oom_killed = oom_killed;
    return exitpolicy::ended_by_itself(t);
}

std::int64_t LocalEnds::abort_called(std::uint32_t rank, int status, const std::string& message, const Running& running)
{
    const std::int64_t at_us = aborts_.try_emplace(rank, AbortCall{status, protocol::process::realtime_us()}).first->second.when_us;
    // MPICH 4.2 does not wait to be ended after its abort: a node-mate can
    // fail over the aborting rank a few milliseconds later (MPI_Finalize's
    // flush to it, say). A task the kernel still runs now cannot be what
    // the application reacted to.
    failures_.abort_called(rank, at_us, application_abort(message), running);
    return at_us;
}

void LocalEnds::failure_known(std::uint32_t rank, bool by_itself)
{
    failures_.known(rank, protocol::process::realtime_us(), by_itself);
}

void LocalEnds::describe(protocol::Outcome& o) const
{
    if (const auto aborted = aborts_.find(o.rank); aborted != aborts_.end()) {
        o.flags |= protocol::Outcome::flag_aborted;
        o.abort_status = aborted->second.status;
        o.end_time_us = std::min(o.end_time_us, aborted->second.when_us);
    }
    if (connected_.count(o.rank) != 0) {
        o.flags |= protocol::Outcome::flag_finalized_known;
        if (finalized_.count(o.rank))
            o.flags |= protocol::Outcome::flag_finalized;
    }
}

LocalEnds::Verdict LocalEnds::judge(const protocol::Outcome& o, bool torn_down) const
{
    const auto aborted = aborts_.find(o.rank);
    const bool called_abort = aborted != aborts_.end();
    exitpolicy::NodeFailures::End end;
    end.rank = o.rank;
    end.when_us = called_abort ? aborted->second.when_us : o.end_time_us;
    end.by_itself =
        ended_by_itself(o.wait_status, called_abort, (o.flags & protocol::Outcome::flag_oom_killed) != 0);
    end.client = connected_.count(o.rank) != 0;
    end.torn_down = torn_down;
    end.aborted = called_abort;
    return Verdict{end.by_itself, failures_.collateral(end)};
}

}  // namespace exitpolicy::pmix_server
