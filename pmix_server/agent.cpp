// SPDX-License-Identifier: Apache-2.0
// agent.cpp - a node's agent in the overlay tree: its life (start, serving,
// drain), the outcomes it carries up, and the dispatch of every frame that
// comes to it. Its links are in agent_links.cpp, what it does for the PMIx
// server in agent_requests.cpp. See agent.hpp.
#include "agent.hpp"

#include "pmix_server/log.hpp"
#include "protocol/events.hpp"

#include <event2/event.h>
#include <event2/listener.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <utility>

namespace exitpolicy::pmix_server {

Agent::Agent(event_base* base, AgentSetup setup, protocol::Secret secret, Node& node)
    : base_(base),
      setup_(std::move(setup)),
      secret_(secret),
      node_(node),
      timers_(base),
      outcomes_(timers_, {[this](const protocol::Bytes& frame) { send_up(frame); },
                          [this](std::uint32_t child, const protocol::Bytes& frame) {
                              const auto linked = std::find_if(children_.begin(), children_.end(), [child](const auto& c) {
                                  return c->is_ready() && c->tag == child;
                              });
                              if (linked != children_.end())
                                  (*linked)->send(frame);
                          }}),
      fences_(base, setup_.ranks,
              {[this](const protocol::Bytes& frame) { send_up(frame); },
               [this](const protocol::Bytes& frame) { send_down(std::nullopt, frame); },
               [this](const std::vector<std::uint32_t>& ranks) {
                   return protocol::fence_expected(*tree_, map_->rank_node, setup_.node_id, ranks);
               },
               [this] { return tree_ && !tree_->children(setup_.node_id).empty(); }}),
      dmodex_waiting_(timers_),
      data_waiting_(timers_)
{
}

Agent::~Agent()
{
    stopping_ = true;  // a link that closes now changes nothing here
    children_.clear();
    up_.reset();
    fe_.reset();
    child_backoff_.reset();
    child_listener_.reset();
}

void Agent::start()
{
    listen_children();  // without it, a leaf still serves its own tasks
    start_fe_link();
}

void Agent::quit(int code)
{
    if (stopping_)
        return;
    stopping_ = true;
    node_.stop(code);
}

bool Agent::linked_up() const
{
    return !up_ || up_->is_ready();
}

void Agent::serving()
{
    if (serving_)
        return;
    serving_ = true;
    // What came before goes now, in the order it came: a direct-modex
    // request needs the node's server up, an event needs it to tell the
    // clients, and a frame on its way up must take the link to the parent,
    // not the one to the front end.
    for (auto& held : std::exchange(early_, {}))
        (void)dispatch(held.from_above, nullptr, held.type, held.body);
}

void Agent::task_failed(const protocol::Event& e)
{
    fences_.rank_dead(e.rank);
    send_up(e.encode());
}

Result<bool> Agent::on_frame(protocol::Channel& from, protocol::Type type, std::span<const std::uint8_t> body)
{
    const bool from_above = &from == fe_.get() || &from == up_.get();
    // Until this node serves (the step map is here and the PMIx server up),
    // frames wait: a child's, which may have the map before us, and what
    // comes from above after the map. Outcomes and their acks only pass
    // through, and the map itself is what we wait for.
    const bool passes = type == protocol::Type::outcomes || type == protocol::Type::acks ||
                        (from_above && (type == protocol::Type::step_map || type == protocol::Type::step_done));
    if (!serving_ && !passes) {
        early_.push_back(Held{from_above, type, protocol::Bytes(body.begin(), body.end())});
        return Result<bool>::ok(true);
    }
    return dispatch(from_above, &from, type, body);
}

// What each frame does here, by where it comes from: from above (srun's
// front end or the parent), from below (a child), or either. A frame with
// no route, or from the wrong side, is a peer's error and closes its link.
// Frames from below for the front end alone pass up undecoded; the front
// end reads them. One table, one row per route, read as one: it is as long
// as the frames an agent handles, and kept whole so that what a frame does
// here, and from which side, is found in one place.
Result<bool> Agent::dispatch(bool from_above, protocol::Channel* from, protocol::Type type, std::span<const std::uint8_t> body)
{
    using protocol::decoded;
    using T = protocol::Type;
    // from: the link it came on (none for a frame kept until the step map).
    struct In {
        Agent& a;
        bool from_above;
        protocol::Channel* from;
        protocol::Type type;
        std::span<const std::uint8_t> body;
    };
    enum class Side { above, below, either };
    struct Route {
        T type;
        Side side;
        Result<bool> (*handle)(const In&);
    };
    constexpr auto up_as_is = [](const In& in) {
        in.a.send_up(protocol::reframe(in.type, in.body));
        return Result<bool>::ok(true);
    };
    static const Route routes[] = {
        {T::step_map, Side::above, [](const In& in) {
             return decoded<protocol::StepMap>(in.body, [&](const auto& m) {
                 if (!in.a.map_)
                     in.a.on_map(m);
             });
         }},
        {T::acks, Side::above, [](const In& in) {  // the FE has these
             return decoded<protocol::Acks>(in.body, [&](const auto& acks) {
                 in.a.outcomes_.acknowledged(acks);
                 in.a.drained();
             });
         }},
        {T::step_done, Side::above, [](const In& in) {  // every task of the step has ended
             return decoded<protocol::StepDone>(in.body, [&](const auto&) {
                 if (!std::exchange(in.a.step_done_, true)) {
                     const protocol::Bytes frame = protocol::StepDone{}.encode();
                     in.a.history_.push_back(frame);  // a child adopted later hears it too
                     in.a.send_down(std::nullopt, frame);
                 }
                 in.a.drained();
             });
         }},
        {T::outcomes, Side::below, [](const In& in) {  // on their way to the FE
             return decoded<protocol::Outcomes>(in.body, [&](const auto& batch) {
                 // Acknowledged to the child only once the FE has them: a
                 // relay that dies with them on their way loses nothing, as
                 // the child sends them again on its next way up.
                 for (const auto& o : batch.list)
                     in.a.outcomes_.report(o, in.from ? std::optional(in.from->tag) : std::nullopt);
             });
         }},
        {T::event, Side::either, [](const In& in) {
             return decoded<protocol::Event>(in.body, [&](const auto& e) { in.a.on_event(e, in.from_above); });
         }},
        {T::node_down, Side::above, [](const In& in) {
             return decoded<protocol::NodeDown>(in.body, [&](const auto& n) { in.a.on_node_down(n); });
         }},
        {T::fence_up, Side::either, [](const In& in) {
             return decoded<protocol::FenceUp>(in.body, [&](const auto& f) { in.a.fences_.from_below(f); });
         }},
        {T::fence_down, Side::either, [](const In& in) {
             return decoded<protocol::FenceDown>(in.body, [&](const auto& f) { in.a.fences_.from_above(f); });
         }},
        {T::dmodex_req, Side::either, [](const In& in) {
             return decoded<protocol::DmodexReq>(in.body, [&](const auto& r) { in.a.on_dmodex_req(r); });
         }},
        {T::dmodex_resp, Side::either, [](const In& in) {
             return decoded<protocol::DmodexResp>(in.body, [&](const auto& r) { in.a.on_dmodex_resp(r); });
         }},
        {T::data_reply, Side::either, [](const In& in) {
             return decoded<protocol::DataReply>(in.body, [&](const auto& r) { in.a.on_data_reply(r); });
         }},
        {T::relay, Side::above, [](const In& in) {
             return decoded<protocol::Relay>(in.body, [&](const auto& r) {
                 in.a.send_down(std::nullopt, protocol::reframe(in.type, in.body));
                 if (r.origin != in.a.setup_.node_id)
                     in.a.node_.relayed(r);
             });
         }},
        {T::terminate, Side::above, [](const In& in) {
             return decoded<protocol::Terminate>(in.body, [&](const auto& t) {
                 in.a.send_down(std::nullopt, protocol::reframe(in.type, in.body));
                 in.a.node_.terminate(t);
             });
         }},
        // For the FE: passed up as they came.
        {T::gone, Side::below, up_as_is},
        {T::data_request, Side::below, up_as_is},
        {T::abort, Side::below, up_as_is},
        {T::notice, Side::either, up_as_is},
        {T::relay, Side::below, up_as_is},
        {T::terminate, Side::below, up_as_is},
    };
    for (const Route& r : routes)
        if (r.type == type && (r.side == Side::either || (r.side == Side::above) == from_above))
            return r.handle(In{*this, from_above, from, type, body});
    return Result<bool>::fail("unexpected " + std::string(protocol::type_name(type)) + " frame from " +
                              (from_above ? "above" : "below"));
}

void Agent::drain()
{
    // Every outcome acknowledged upstream first, and the links of the
    // children this node relays for closed (their own tasks are done too):
    // a relay that left as soon as its own tasks ended would lose what was
    // on its way through it (a direct-modex request, a fence's share) and
    // fail its subtree's fences. And the step's end everywhere (the FE's
    // step_done): a node that left as soon as its own tasks ended could no
    // longer answer a direct-modex request for their data from a task
    // still running elsewhere, which then timed out. All within one bound,
    // under slurmstepd's patience for the daemon's end.
    if (draining_)
        return;
    draining_ = true;
    if (drained())
        return;
    timers_.after_ms(static_cast<std::uint32_t>(drain_limit.count()), [this] {
        if (stopping_)
            return;
        if (const auto n = outcomes_.unacked(); n > 0)
            log::error("%zu outcomes not acknowledged at exit", n);
        if (const auto n = linked_children(); n > 0)
            log::info("leaving the tree with %zu child daemons still linked; they link further up", n);
        else if (!step_done_)
            log::info("leaving before every task of the step has ended: what this node's tasks committed "
                      "is no longer served to the others");
        quit(0);
    });
}

// A drain is done once nothing waits for an ack, no child is linked below
// and every task of the step has ended (a task still running may ask for
// what this node's tasks committed): the daemon stops. Whether it is
// stopping.
bool Agent::drained()
{
    if (draining_ && !stopping_ && step_done_ && outcomes_.unacked() == 0 && linked_children() == 0)
        quit(0);
    return stopping_;
}

std::size_t Agent::linked_children() const
{
    return static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(),
                                                  [](const auto& c) { return c->is_ready() && !c->is_closed(); }));
}

}  // namespace exitpolicy::pmix_server
