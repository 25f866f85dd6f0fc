// SPDX-License-Identifier: Apache-2.0
// daemon_tasks.cpp - the node's tasks: their clients' abort, log and
// finalization, failures known here and elsewhere (the facts are
// local_ends.hpp's, which end is collateral to them the core's
// judgement), the local teardown, and the outcomes passed on. See
// daemon.hpp.
#include "daemon.hpp"

#include "exitpolicy/outcome.hpp"
#include "pmix_server/log.hpp"
#include "pmi_encoding.hpp"
#include "pmix_host.hpp"
#include "protocol/process.hpp"
#include "protocol/events.hpp"

#include <event2/event.h>

#include <pmix_common.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <utility>

namespace exitpolicy::pmix_server {

void Daemon::peer_failed(const protocol::Event& e)
{
    failure_known(e.rank, ended_by_itself(e.wait_status, e.code == protocol::pmix::proc_requested_abort));
    if (notified_.insert(e.rank).second)  // the origin told its own clients already
        pmix_->when_served([this, e] { pmix_->host().notify_terminated(e.rank, e.code, e.exit_code); });
}

// ---- abort, clients ----------------------------------------------------------------

void Daemon::abort(std::uint32_t rank, int status, std::string message)
{
    // The first call is the failure's moment: Open MPI's MPI_Abort calls
    // PMIx_Abort twice (its peers, then everyone), the teardown in between.
    ends_.abort_called(rank, status, message, [this] { return tasks_->running(); });
    failure_known(rank, false);  // the PMI service's clients hear of it; the first failure is set above
    log::info("rank %u called abort with status %d: %s", rank, status, message.c_str());
    agent_->to_root(protocol::Abort{rank, status, protocol::clipped(message)}.encode());
}


void Daemon::relay(int code, std::uint32_t source_rank, protocol::Bytes info)
{
    agent_->to_root(protocol::Relay{args_.node_id, code, source_rank, std::move(info)}.encode());
}

void Daemon::terminate_step(const std::string& why)
{
    agent_->to_root(protocol::Terminate{protocol::clipped(why)}.encode());
}

void Daemon::task_log(std::uint32_t rank, const std::string& text)
{
    // A long line goes whole, in pieces the FE prints one after the other.
    for (std::size_t at = 0; at < text.size() || at == 0; at += protocol::max_string)
        agent_->to_root(protocol::Notice{args_.node_id, rank, text.substr(at, protocol::max_string)}.encode());
}

void Daemon::client_connected(std::uint32_t rank)
{
    ends_.connected(rank);
}

void Daemon::client_finalized(std::uint32_t rank)
{
    ends_.finalized(rank);
}

void Daemon::failure_known(std::uint32_t rank, bool by_itself)
{
    if (pmi_)
        pmi_->failed(rank);
    ends_.failure_known(rank, by_itself);
}

void Daemon::terminate_local(const std::string& why, std::uint32_t kill_after_ms)
{
    if (tasks_->tearing_down())
        return;  // a teardown is under way here already
    const auto running = tasks_->running();
    log::info("terminating %zu local tasks: %s", running.size(), why.c_str());
    if (!running.empty())
        tasks_->terminate(running, kill_after_ms);
}

// ---- outcomes ----------------------------------------------------------------------

void Daemon::task_outcome(const protocol::Outcome& in)
{
    protocol::Outcome o = in;
    log::debug("rank %u ended: wait status %d, at %lld us", o.rank, o.wait_status,
               static_cast<long long>(o.end_time_us));
    tasks_->ended(o.rank);
    if (const std::int64_t exited_at = tasks_->exited_at_us(o.rank); exited_at > 0)
        o.end_time_us = std::min(o.end_time_us, exited_at);
    ends_.describe(o);
    if (const auto event = protocol::pmix::termination_event(o, args_.node_id)) {
        const auto verdict = ends_.judge(o, tasks_->torn_down(o.rank));
        if (verdict.collateral)
            o.flags |= protocol::Outcome::flag_collateral;
        failure_known(o.rank, verdict.by_itself);
        // Our own clients first, then everyone else through the FE.
        if (notified_.insert(o.rank).second)
            pmix_->when_served([this, rank = o.rank, code = event->code, exit_code = event->exit_code] {
                pmix_->host().notify_terminated(rank, code, exit_code);
            });
        agent_->task_failed(*event);
    }
    agent_->report(o);
}

}  // namespace exitpolicy::pmix_server
