// SPDX-License-Identifier: Apache-2.0
// daemon.hpp - exitpolicy-pmixd: one per node per step, as the job's user.
//
// One libevent loop thread owns all state. The daemon is the node's side of
// the step: the local socket (exit reports and Stop from slurmstepd,
// environment requests from tasks), the local tasks (their pidfds, the
// teardown's signals, what makes a failure collateral), and the PMIx server
// (pmix_service.hpp, pmix_host.hpp), whose upcalls (upcalls.hpp) arrive on the PMIx progress
// thread and are posted to this loop through the StepServices interface
// (step_services.hpp). Its agent in the overlay tree (agent.hpp) does everything
// between nodes, and asks the node's part of it through Agent::Node.
#pragma once

#include "agent.hpp"
#include "protocol/daemon_args.hpp"
#include "local_ends.hpp"
#include "local_links.hpp"
#include "local_tasks.hpp"
#include "step_services.hpp"
#include "pmi_server.hpp"
#include "pmix_service.hpp"
#include "timers.hpp"
#include "work_queue.hpp"

#include <cstdint>
#include <sys/types.h>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct event;
struct event_base;
struct evconnlistener;

namespace exitpolicy::pmix_server {

class Daemon final : public StepServices, private Agent::Node, private LocalLinks::Node, private PmixService::Step {
public:
    Daemon(protocol::DaemonArgs args, protocol::Secret secret);
    ~Daemon() override;
    // Runs until stopped; returns the process exit code.
    int run();

    // ---- StepServices (step_services.hpp): what the PMIx side asks of the step ----
    void post(std::function<void()> fn) override;
    void fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done) override;
    void direct_modex(std::uint32_t rank, int timeout_s, Done done) override;
    void abort(std::uint32_t rank, int status, std::string message) override;
    void data_request(protocol::DataRequest request, int timeout_s, DataDone done) override;
    void relay(int code, std::uint32_t source_rank, protocol::Bytes info) override;
    void terminate_step(const std::string& why) override;
    void task_log(std::uint32_t rank, const std::string& text) override;
    void client_connected(std::uint32_t rank) override;
    void client_finalized(std::uint32_t rank) override;
    const ServedStep& served() const noexcept override { return served_; }
    event_base* base() const noexcept { return base_.get(); }
    // Runs fn on the loop after `ms` milliseconds.
    void after_ms(std::uint32_t ms, std::function<void()> fn);

private:
    // ---- Agent::Node: what the overlay agent asks of this node ----
    void mapped() override;
    void linked_up() override;
    void peer_failed(const protocol::Event& e) override;
    void node_lost(const protocol::NodeDown& d) override;
    void relayed(const protocol::Relay& r) override;
    void terminate(const protocol::Terminate& t) override;
    void dmodex(std::uint32_t rank, Agent::Done done) override;
    void stop(int code) override;

    // ---- LocalLinks::Node: what the tasks and slurmstepd ask on the local links ----
    bool environment_ready() const override;
    Result<std::vector<std::string>> task_environment(std::uint32_t rank, pid_t pid) override;
    void task_started(const protocol::TaskStarted& started) override;
    void task_outcome(const protocol::Outcome& o) override;
    void step_ends() override;
    void slurmstepd_gone() override;

    // ---- PmixService::Step: what the PMIx server's start asks of the step ----
    bool way_up_open() const override;
    void initialized() override;
    void registered() override;
    void environment_released() override;
    void failed() override;

    // Once both the step map and the PMIx server are there (in either
    // order): the namespace is registered, and the agent serves.
    void serve();
    // This node learned that `rank` ended abnormally: a PMIx client that
    // fails here after it is collateral (local_ends.hpp), and the PMI
    // service's clients hear of it. An own end is an exit or a signal of
    // the task's own, not an abort or a tear-down kill.
    void failure_known(std::uint32_t rank, bool by_itself);
    // Teardown: SIGTERM to every local task still running, SIGKILL to
    // those left after kill_after_ms.
    void terminate_local(const std::string& why, std::uint32_t kill_after_ms);
    // The loop, its wake for posted work, its timers and the local tasks'
    // watches; false if libevent cannot make one.
    bool make_loop();
    void watch_signals();
    // The local socket, and slurmstepd's control link.
    void open_local_links();
    // The local tasks' PMI sockets (--pmi-fd), served by pmi_ once the map
    // has come.
    void adopt_pmi_sockets();
    void ready();

    protocol::DaemonArgs args_;
    protocol::Secret secret_;
    protocol::Fd ready_;  // "ready PID\n" once serving; closed unwritten if never (the plugin reads EOF)
    ServedStep served_;   // what of args_ the PMIx side sees
    protocol::EventBaseHandle base_;
    protocol::EventHandle wake_;
    std::vector<protocol::EventHandle> signals_;  // SIGTERM, SIGINT, SIGHUP: stop as at the step's end
    WorkQueue posted_;
    std::unique_ptr<Timers> timers_;
    std::unique_ptr<Agent> agent_;

    std::unique_ptr<LocalLinks> local_;

    // The PMIx server, its start and its event anchor.
    std::unique_ptr<PmixService> pmix_;
    std::unique_ptr<PmiServer> pmi_;
    bool stopping_ = false;
    int exit_code_ = 0;
    // The local tasks, as their env requests came (the kernel's word for
    // the pid: SO_PEERCRED): a pidfd, so that a signal never reaches a
    // process that reused a pid.
    // The local tasks as processes; made with the loop.
    std::unique_ptr<LocalTasks> tasks_;
    // How the local tasks ended, and the failures this node knows of.
    LocalEnds ends_;
    std::set<std::uint32_t> notified_;  // ranks whose end our clients heard of
};

}  // namespace exitpolicy::pmix_server
