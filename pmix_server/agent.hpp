// SPDX-License-Identifier: Apache-2.0
// agent.hpp - a node's agent in the step's overlay tree, without PMIx.
//
// The agent enrolls with srun's front end (FE), gets the step map, links to
// its parent in the k-ary tree over the step's nodes (protocol/tree.hpp)
// and takes its children's links; it routes what goes up to the FE and
// down to a node or to every node, and it runs the tree's side of the
// step: fences with data (the subtree's contributions go up as one), direct
// modex requests and answers, publish/lookup requests, failure events and
// lost nodes (broadcast down, replayed to a child adopted later), task
// outcomes (kept until acknowledged), the adoption of a child whose parent
// left, and the drain at the step's end.
//
// The agent owns the links, the step map and tree, and what came down (to
// replay to a child adopted later); each frame's route is here (dispatch).
// The fences in progress are a FenceRelay's (fence_relay.hpp), the
// outcomes on their way up an OutcomeRelay's (outcome_relay.hpp), the
// requests awaiting answers PendingRequests' (pending_requests.hpp): each
// owns its state and reaches the tree through the agent's links.
//
// What it needs of its node it asks through Agent::Node: the node daemon's
// PMIx side (daemon.hpp) gives one, and so does the overlay simulation
// (bench/overlay_sim.cpp), which runs hundreds of agents without Slurm or
// PMIx. Everything runs on one libevent loop thread; several agents may
// share a loop.
#pragma once

#include "fence_relay.hpp"
#include "outcome_relay.hpp"
#include "pending_requests.hpp"
#include "timers.hpp"

#include "exitpolicy/result.hpp"
#include "protocol/channel.hpp"
#include "protocol/fences.hpp"
#include "protocol/handles.hpp"
#include "protocol/place.hpp"
#include "protocol/timeouts.hpp"
#include "protocol/tree.hpp"
#include "protocol/wire.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

struct event_base;
struct evconnlistener;

namespace exitpolicy::pmix_server {

struct AgentSetup : protocol::NodePlace {
    std::string fe_host;
    std::uint16_t fe_port = 0;
};

class Agent {
public:
    using Done = std::function<void(int status, protocol::Bytes data)>;
    using DataDone = std::function<void(const protocol::DataReply& reply)>;

    // What the agent asks of its node; every call on the loop thread.
    class Node {
    public:
        virtual ~Node() = default;
        // The step map came (map() has it): the node gets ready to serve,
        // and calls serving() when it does.
        virtual void mapped() = 0;
        // The way up is open (linked_up()): the parent linked, or adopted us.
        virtual void linked_up() = 0;
        // From above, once each: another node's task ended abnormally; a
        // node was lost; an event a client raised for the step; the step
        // ends (every local task still running is to be ended).
        virtual void peer_failed(const protocol::Event& e) = 0;
        virtual void node_lost(const protocol::NodeDown& d) = 0;
        virtual void relayed(const protocol::Relay& r) = 0;
        virtual void terminate(const protocol::Terminate& t) = 0;
        // Another node asks for what local `rank` committed; done at most once.
        virtual void dmodex(std::uint32_t rank, Done done) = 0;
        // The agent is through (drained, or its way up is gone for good).
        virtual void stop(int code) = 0;
    };

    // Requests to other nodes fail with PMIX_ERR_TIMEOUT after the caller's
    // timeout, or after this many seconds when it gave none.
    static constexpr int default_timeout_s =
        static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(protocol::timeouts::request_default).count());
    // Under slurmstepd's wait for the daemon's end (protocol/timeouts.hpp).
    static constexpr std::chrono::milliseconds drain_limit = protocol::timeouts::daemon_drain_limit;

    Agent(event_base* base, AgentSetup setup, protocol::Secret secret, Node& node);
    // Closes every link: a child reroutes what it has not had confirmed as
    // soon as it sees its link close.
    ~Agent();
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    // Listens for children and enrolls with the FE (the node is told to
    // stop when it cannot reach the FE).
    void start();
    // The node serves now: frames held until then (a child's, which may
    // have had the map before us, and what came from above after the map)
    // are dispatched in the order they came.
    void serving();
    // The node stops: the agent does nothing more of its own.
    void stop() noexcept { stopping_ = true; }

    const protocol::StepMap* map() const noexcept { return map_ ? &*map_ : nullptr; }
    bool linked_up() const;
    std::size_t unacked() const noexcept { return outcomes_.unacked(); }
    // This node's own outcomes (not a child's) that the FE acknowledged.
    const std::vector<protocol::Ack>& confirmed() const noexcept { return outcomes_.confirmed(); }

    // ---- what the node asks (loop thread) ----
    // A fence over `ranks` (empty: all) with this node's data: the next
    // instance over that set (fence_relay.hpp).
    void fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done)
    {
        fences_.call(std::move(ranks), std::move(data), timeout_s, std::move(done));
    }
    // The data `rank` committed, from the node that owns it.
    void direct_modex(std::uint32_t rank, int timeout_s, Done done);
    // Publish, lookup, unpublish: to the FE and back. A lookup that waits
    // for publication (wait) with no timeout waits as long as it takes.
    void data_request(protocol::DataRequest request, int timeout_s, DataDone done);
    // A local task ended abnormally: fences over it fail, and the event
    // goes to the FE, which tells every node.
    void task_failed(const protocol::Event& e);
    // A local task's outcome, up to the FE; sent again after a new link up
    // until acknowledged (outcome_relay.hpp).
    void report(const protocol::Outcome& o) { outcomes_.report(o); }
    // Up to the FE as it is (an abort, a relayed event, a teardown request,
    // a task's log line).
    void to_root(const protocol::Bytes& frame) { send_up(frame); }
    // The step's end on this node: the node is told to stop once every
    // outcome is acknowledged, no child is linked below and the FE said
    // that every task of the step has ended (until then a task elsewhere
    // may still ask for what this node's tasks committed: a direct-modex
    // request for a node that left is lost), or after drain_limit.
    void drain();

private:
    void quit(int code);
    void start_fe_link();
    bool listen_children();
    // fd: the child's accepted descriptor.
    void make_room_for_child(int fd);
    bool close_oldest_waiting_child();
    protocol::Channel::Handlers overlay_handlers();
    void on_map(const protocol::StepMap& map);
    void send_up(const protocol::Bytes& frame);
    void flush_up(protocol::Channel& up);
    void send_down(std::optional<std::uint32_t> to, const protocol::Bytes& frame);  // none: every child
    void flush_down(protocol::Channel& child);
    void route(std::uint32_t to, const protocol::Bytes& frame);
    Result<bool> on_frame(protocol::Channel& from, protocol::Type type, std::span<const std::uint8_t> body);
    Result<bool> dispatch(bool from_above, protocol::Channel* from, protocol::Type type, std::span<const std::uint8_t> body);
    void on_event(const protocol::Event& e, bool from_above);
    void on_node_down(const protocol::NodeDown& d);
    // Run-through: a daemon left the tree (its link closed, or a child
    // adopted here skipped it): report it, fail the fences it carried.
    void node_left(std::uint32_t node);
    void adopt(protocol::Channel& child);
    void parent_lost(const std::string& why);
    void connect_up();
    void on_dmodex_req(const protocol::DmodexReq& r);
    void on_dmodex_resp(const protocol::DmodexResp& r);
    void on_data_reply(const protocol::DataReply& r);
    // A drain is done once nothing waits for an ack and no child is linked
    // below: the node is told to stop. Whether the agent is stopping.
    bool drained();
    std::size_t linked_children() const;

    event_base* base_;
    AgentSetup setup_;
    protocol::Secret secret_;
    Node& node_;
    Timers timers_;  // before the links: freed after them

    std::unique_ptr<protocol::Channel> fe_;     // enrollment; the up-link when the FE is our parent
    std::unique_ptr<protocol::Channel> up_;     // the parent daemon, when there is one
    std::optional<std::uint32_t> up_node_;  // whom up_ leads to (none: the FE, after a run-through)
    std::vector<std::unique_ptr<protocol::Channel>> children_;
    protocol::ListenerHandle child_listener_;
    std::unique_ptr<protocol::AcceptBackoff> child_backoff_;
    bool told_over_cap_ = false;
    std::uint16_t child_port_ = 0;
    std::optional<protocol::StepMap> map_;
    std::optional<protocol::Tree> tree_;
    bool serving_ = false;
    bool stopping_ = false;
    bool draining_ = false;
    bool step_done_ = false;  // the FE said every task of the step has ended

    // Frames for the parent while its link is still being set up.
    std::vector<protocol::Bytes> up_queue_;
    // Frames for children that have not linked yet, by the child's node.
    std::map<std::uint32_t, std::vector<protocol::Bytes>> down_queue_;
    // Frames that came before the node serves (serving()).
    struct Held {
        bool from_above;
        protocol::Type type;
        protocol::Bytes body;
    };
    std::vector<Held> early_;

    OutcomeRelay outcomes_;
    FenceRelay fences_;
    // Events and node losses that came from above, in order: replayed to a
    // child adopted later, which may have missed them while it reconnected.
    std::vector<protocol::Bytes> history_;
    std::set<std::uint32_t> events_seen_;  // ranks whose event came from above
    std::set<std::uint32_t> nodes_down_;
    // Direct-modex and publish/lookup requests awaiting their answer.
    PendingRequests<Done> dmodex_waiting_;
    PendingRequests<DataDone> data_waiting_;
};

}  // namespace exitpolicy::pmix_server
