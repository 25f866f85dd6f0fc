// daemon.hpp - exitpolicy-pmixd: one per node per step, as the job's user.
//
// One libevent loop thread owns all state. It holds the overlay links (up
// to the parent in the tree: srun's front end or another daemon; down to its
// children), the local socket (exit reports from slurmstepd, environment
// requests from tasks) and the PMIx server (pmix_host.hpp), whose upcalls
// (upcalls.hpp) arrive on the PMIx progress thread and are posted to this
// loop through the Overlay interface (overlay.hpp).
#pragma once

#include "args.hpp"
#include "overlay.hpp"
#include "work_queue.hpp"
#include "protocol/channel.hpp"
#include "protocol/fences.hpp"
#include "protocol/tree.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <sys/types.h>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

struct event;
struct event_base;
struct evconnlistener;

namespace exitpolicy::pmixd {

class PmixHost;
class EventAnchor;

class Daemon final : public Overlay {
public:
    Daemon(Args args, wire::Secret secret);
    ~Daemon() override;
    // Runs until stopped; returns the process exit code.
    int run();

    // ---- Overlay (overlay.hpp): what the PMIx side asks of the step ----
    void post(std::function<void()> fn) override;
    void fence(std::vector<std::uint32_t> ranks, wire::Bytes data, int timeout_s, Done done) override;
    // Requests to other nodes fail with PMIX_ERR_TIMEOUT after the caller's
    // PMIX_TIMEOUT, or after this many seconds when it gave none.
    static constexpr int default_timeout_s = 30;
    void direct_modex(std::uint32_t rank, int timeout_s, Done done) override;
    void abort(std::uint32_t rank, int status, std::string message) override;
    void data_request(wire::DataRequest request, int timeout_s, DataDone done) override;
    void relay(int code, std::uint32_t source_rank, wire::Bytes info) override;
    void terminate_step(const std::string& why) override;
    void task_log(std::uint32_t rank, const std::string& text) override;
    void client_connected(std::uint32_t rank) override;
    void client_finalized(std::uint32_t rank) override;
    const Args& args() const noexcept override { return args_; }
    event_base* base() const noexcept { return base_; }
    // Runs fn on the loop after `ms` milliseconds.
    void after_ms(std::uint32_t ms, std::function<void()> fn);
    const wire::StepMap& map() const noexcept { return *map_; }

private:
    struct Local;
    struct FenceExtra {
        std::optional<Done> local;  // the PMIx callback on this node
    };
    using Fences = wire::FenceTable<FenceExtra>;

    void start_fe_link();
    void on_map(const wire::StepMap& map);
    void serve();
    void send_up(const wire::Bytes& frame);
    void flush_up(wire::Channel& up);
    void flush_down(wire::Channel& child);
    void send_down(std::optional<std::uint32_t> to, const wire::Bytes& frame);  // none: every child
    wire::Channel::Handlers overlay_handlers();
    Result<bool> on_overlay_frame(wire::Channel& from, wire::Type type, std::span<const std::uint8_t> body);
    Result<bool> dispatch(bool from_above, wire::Channel* from, wire::Type type, std::span<const std::uint8_t> body);
    void on_event(const wire::Event& e, bool from_above);
    void on_node_down(const wire::NodeDown& d);
    // Run-through: a daemon left the tree (its link closed, or a child
    // adopted here skipped it): report it, fail the fences it carried.
    void node_left(std::uint32_t node);
    void adopt(wire::Channel& child);
    void on_fence_up(const wire::FenceUp& f);
    void on_fence_down(const wire::FenceDown& f);
    Fences::Instance& open_fence(const std::string& key, const wire::FenceKey& id);
    void pass_fence_up(const std::string& key, Fences::Instance& f);
    void finish_fence(const std::string& key, const wire::FenceKey& id, int status, const wire::Bytes& data);
    void fence_timed_out(const std::string& key);
    void fail_fences_with(std::uint32_t rank);
    void fail_fence(std::string key, int status);
    void on_dmodex_req(const wire::DmodexReq& r);
    void on_dmodex_resp(const wire::DmodexResp& r);
    void route(std::uint32_t to, const wire::Bytes& frame);
    // Runs fn on the loop after `seconds`.
    void after(int seconds, std::function<void()> fn);
    // This node learned that `rank` ended abnormally (or called abort):
    // a PMIx client that fails here after it is collateral. An own end is
    // an exit or a signal of the task's own, not an abort or a tear-down
    // kill.
    void failure_known(std::uint32_t rank, bool own_end);
    bool collateral(std::uint32_t rank, std::int64_t when_us, bool own_end) const;
    void outcome(const wire::Outcome& o);
    void flush_outcomes();
    // Teardown: SIGTERM to every local task still running, SIGKILL to
    // those left after kill_after_ms.
    void terminate_local(const std::string& why, std::uint32_t kill_after_ms);
    void signal_local(int sig, const std::set<std::uint32_t>& ranks);
    void listen_children();
    void make_room_for_child();
    void listen_local();
    void add_local(int fd, uid_t uid, pid_t pid, bool control);
    void on_local_frame(Local& l, wire::Type type, std::span<const std::uint8_t> body);
    void ready();
    void parent_lost(const std::string& why);
    void connect_up();
    // The step's end on this node: stop once every outcome is acknowledged
    // and no child daemon is linked below, or after drain_limit.
    void drain();
    bool drained();
    std::size_t linked_children() const;
    void stop(int code);
    // Under slurmstepd's wait for the daemon's end (3 s, slurmstepd.cpp).
    static constexpr std::chrono::milliseconds drain_limit{2000};

    Args args_;
    wire::Secret secret_;
    event_base* base_ = nullptr;
    event* wake_ = nullptr;
    std::vector<event*> signals_;  // SIGTERM, SIGINT, SIGHUP: stop as at the step's end
    WorkQueue posted_;

    std::unique_ptr<wire::Channel> fe_;  // enrollment; the up-link when the FE is our parent
    std::unique_ptr<wire::Channel> up_;  // the parent daemon, when there is one
    std::optional<std::uint32_t> up_node_;  // whom up_ leads to (none: the FE, after a run-through)
    std::vector<std::unique_ptr<wire::Channel>> children_;
    evconnlistener* child_listener_ = nullptr;
    std::unique_ptr<wire::AcceptBackoff> child_backoff_;
    bool told_over_cap_ = false;
    std::uint16_t child_port_ = 0;
    std::optional<wire::StepMap> map_;
    std::optional<wire::Tree> tree_;

    evconnlistener* local_listener_ = nullptr;
    std::vector<std::unique_ptr<Local>> locals_;

    std::unique_ptr<PmixHost> pmix_;
    // Keeps clients' default event handlers registered (event_anchor.hpp).
    // It starts with the PMIx server and overlaps the rest of the start-up:
    // only the tasks' environment requests wait until it registered or
    // failed (bounded), so that no task starts before it.
    std::unique_ptr<EventAnchor> anchor_;
    bool anchor_settled_ = false;
    std::vector<std::pair<Local*, wire::Bytes>> env_waiting_;
    // PMIx_server_init takes ~20 ms, more on a loaded machine: it runs on
    // its own thread while the daemon enrolls, and posts its result to the
    // loop (serve()).
    std::thread pmix_init_;
    std::optional<Result<bool>> pmix_init_result_;
    bool serving_ = false;
    bool ready_sent_ = false;
    bool namespace_ready_ = false;
    // Frames for the parent while its link is still being set up.
    std::vector<wire::Bytes> up_queue_;
    // Frames for children that have not linked yet, by the child's node.
    std::map<std::uint32_t, std::vector<wire::Bytes>> down_queue_;
    // Frames that came before this node serves (serve()).
    struct Held {
        bool from_above;
        wire::Type type;
        wire::Bytes body;
    };
    std::vector<Held> early_;
    bool stopping_ = false;
    bool draining_ = false;
    int exit_code_ = 0;

    std::deque<wire::Outcome> unacked_;  // sent up, not yet acknowledged
    // The local tasks, as their env requests came (the kernel's word for
    // the pid: SO_PEERCRED): a pidfd, so that a signal never reaches a
    // process that reused a pid.
    struct Task {
        pid_t pid = -1;
        int pidfd = -1;
        // The pidfd turns readable the moment the process exits, before
        // slurmstepd reaps it and reports its outcome: that moment is its
        // end (a peer's runtime may react to it before the report comes).
        event* exit_watch = nullptr;
        std::int64_t exited_at_us = 0;
        Task() = default;
        Task(const Task&) = delete;
        Task& operator=(const Task&) = delete;
        ~Task();
    };
    std::map<std::uint32_t, std::unique_ptr<Task>> tasks_;
    void watch_exit(Task& task);
    static bool exited(Task& task);
    // The first abnormal end this node learned of (its own tasks' or, by
    // an event, another node's), and when, on this node's clock.
    struct KnownFailure {
        std::uint32_t rank = 0;
        std::int64_t at_us = 0;
        bool own_end = false;  // see failure_known
    };
    std::optional<KnownFailure> first_known_;
    std::set<std::uint32_t> torn_down_;  // local ranks our teardown signalled
    struct AbortCall {
        int status = 0;
        std::int64_t when_us = 0;  // the failure's moment: the kill comes later
    };
    std::map<std::uint32_t, AbortCall> aborts_;
    std::set<std::uint32_t> connected_;
    std::set<std::uint32_t> finalized_;
    std::set<std::uint32_t> ended_;  // local ranks whose outcome arrived
    Fences fences_;  // instances in progress here, and those finished
    std::map<std::string, std::uint64_t> fence_calls_;  // local fence calls per participant set
    // Instances that failed here before the local call came (their status):
    // that call fails at once.
    std::map<std::string, int> failed_ahead_;
    std::set<std::uint32_t> dead_;  // ranks known to have ended abnormally or been lost
    // Events and node losses that came from above, in order: replayed to a
    // child adopted later, which may have missed them while it reconnected.
    std::vector<wire::Bytes> history_;
    std::set<std::uint32_t> events_seen_;  // ranks whose event came from above
    std::set<std::uint32_t> nodes_down_;
    std::set<std::uint32_t> notified_;     // ranks whose end our clients heard of
    std::uint64_t next_dmodex_ = 1;
    std::map<std::uint64_t, Done> dmodex_waiting_;
    std::uint64_t next_data_ = 1;
    std::map<std::uint64_t, DataDone> data_waiting_;
};

}  // namespace exitpolicy::pmixd
