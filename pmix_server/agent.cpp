// SPDX-License-Identifier: Apache-2.0
// agent.cpp - a node's agent in the overlay tree. See agent.hpp.
#include "agent.hpp"

#include "log.hpp"
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

namespace exitpolicy::pmixd {

Agent::Agent(event_base* base, AgentSetup setup, wire::Secret secret, Node& node)
    : base_(base), setup_(std::move(setup)), secret_(secret), node_(node), timers_(base)
{
}

Agent::~Agent()
{
    stopping_ = true;  // a link that closes now changes nothing here
    children_.clear();
    up_.reset();
    fe_.reset();
    child_backoff_.reset();
    if (child_listener_)
        evconnlistener_free(child_listener_);
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

void Agent::task_failed(const wire::Event& e)
{
    fail_fences_with(e.rank);
    send_up(e.encode());
}

void Agent::report(const wire::Outcome& o)
{
    unacked_[{o.rank, o.epoch}] = o;
    outgoing_.push_back(o);
    schedule_outcomes();
}

void Agent::on_acks(const wire::Acks& acks)
{
    std::map<std::uint32_t, wire::Acks> down;  // by the child that sent them up
    for (const auto& one : acks.list) {
        const std::pair key{one.rank, one.epoch};
        if (unacked_.erase(key) == 0)
            continue;  // a repeat: it was sent up twice
        if (const auto child = relayed_for_.find(key); child != relayed_for_.end()) {
            down[child->second].list.push_back(one);
            relayed_for_.erase(child);
        } else {
            confirmed_.push_back(one);
        }
    }
    for (auto& [node, list] : down) {
        const auto linked = std::find_if(children_.begin(), children_.end(),
                                         [node](const auto& c) { return c->is_ready() && c->tag == node; });
        // A child no longer linked here sends them again on its new way up.
        if (linked != children_.end())
            wire::in_pieces(list.list, wire::max_ranks,
                            [&](std::vector<wire::Ack> part) { (*linked)->send(wire::Acks{std::move(part)}.encode()); });
    }
}

void Agent::schedule_outcomes()
{
    if (!std::exchange(outgoing_scheduled_, true))
        timers_.defer([this] { send_outcomes(); });
}

void Agent::send_outcomes()
{
    outgoing_scheduled_ = false;
    wire::in_pieces(std::exchange(outgoing_, {}), wire::max_ranks,
                    [&](std::vector<wire::Outcome> batch) { send_up(wire::Outcomes{std::move(batch)}.encode()); });
}

wire::Channel::Handlers Agent::overlay_handlers()
{
    wire::Channel::Handlers h;
    h.frame = [this](wire::Channel& c, wire::Type t, std::span<const std::uint8_t> b) {
        return on_frame(c, t, b);
    };
    return h;
}

void Agent::start_fe_link()
{
    wire::Hello me;
    me.role = wire::Role::daemon;
    me.node_id = setup_.node_id;
    me.hostname = setup_.hostname;
    me.ranks = setup_.ranks;
    auto h = overlay_handlers();
    h.ready = [this](wire::Channel& c) {
        c.send(wire::Enroll{setup_.hostname, child_port_}.encode());
        flush_up(c);
        log::debug("enrolled with the front end at %s:%u", setup_.fe_host.c_str(), setup_.fe_port);
    };
    h.closed = [this](wire::Channel&, wire::Channel::Reason, const std::string& why) {
        if (!map_ || !up_) {
            log::error("lost the front end: %s", why.c_str());
            // Without the FE the step's PMIx service is gone; stop (the
            // plugin's fallback still reports this node's exits).
            timers_.defer([this] { quit(1); });
        }
    };
    auto c = wire::Channel::connect(base_, setup_.fe_host, setup_.fe_port, secret_, setup_.job_id, setup_.step_id, me,
                                    std::move(h));
    if (!c) {
        log::error("front end: %s", c.error().c_str());
        quit(1);
        return;
    }
    fe_ = std::move(*c);
}

bool Agent::listen_children()
{
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    child_listener_ = evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Agent*>(arg);
            // No exception leaves a libevent callback.
            try {
                d->child_backoff_->accepted();
                d->make_room_for_child(fd);
                auto h = d->overlay_handlers();
                h.ready = [d](wire::Channel& c) {
                    c.tag = c.peer().node_id;
                    log::debug("child node %u connected", c.tag);
                    d->adopt(c);
                    if (c.is_ready())  // adopt() may have refused it
                        d->flush_down(c);
                };
                h.closed = [d](wire::Channel& c, wire::Channel::Reason, const std::string& why) {
                    log::debug("child link closed: %s", why.c_str());
                    wire::Channel* gone = &c;
                    const bool was_child = c.is_ready();
                    const std::uint32_t node = c.tag;
                    d->timers_.defer([d, gone, was_child, node] {
                        std::erase_if(d->children_, [gone](const auto& p) { return p.get() == gone; });
                        if (was_child)
                            d->node_left(node);
                        d->drained();
                    });
                };
                if (auto c = wire::Channel::accept(d->base_, fd, d->secret_, d->setup_.job_id, d->setup_.step_id, h))
                    d->children_.push_back(std::move(c));
            } catch (const std::exception& e) {
                log::error("could not accept a child's connection: %s", e.what());
            } catch (...) {
                log::error("could not accept a child's connection");
            }
        },
        // Its children connect at once, and the orphans of one that left:
        // up to twice the fan-out (2 to 1024), before the map says which.
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 2048,
        reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    if (!child_listener_) {
        log::error("cannot listen for child daemons: %s", std::strerror(errno));
        return false;
    }
    child_backoff_ = std::make_unique<wire::AcceptBackoff>(
        child_listener_, [](const std::string& line) { log::error("child listener: %s", line.c_str()); },
        [this] { return close_oldest_waiting_child(); });
    evconnlistener_set_error_cb(child_listener_, [](evconnlistener*, void* arg) {
        static_cast<Agent*>(arg)->child_backoff_->failed(EVUTIL_SOCKET_ERROR());
    });
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    getsockname(evconnlistener_get_fd(child_listener_), reinterpret_cast<sockaddr*>(&bound), &len);
    child_port_ = ntohs(bound.sin_port);
    return true;
}

// A child's connection is on its way: room for it among those not ready,
// by destroying the oldest (outside its callbacks: no `closed`).
void Agent::make_room_for_child(int fd)
{
    auto waiting = [](const auto& c) { return !c->is_ready() && !c->is_closed(); };
    auto count = static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(), waiting));
    // Its children, and as many orphans of a child that left. Before the
    // step map this node cannot know its fan-out, while its children may
    // have theirs already and connect: the widest a step may have.
    const std::uint32_t fanout = map_ ? map_->fanout : wire::max_fanout;
    const std::size_t cap = wire::unauthenticated_cap(2 * std::size_t{fanout});
    // Descriptors for its PMIx server's clients too.
    std::size_t short_of = wire::descriptors_short(fd, wire::descriptor_reserve + setup_.ranks.size());
    if (count < cap && short_of == 0)
        return;
    if (!told_over_cap_) {
        told_over_cap_ = true;
        log::error("%s; the oldest unauthenticated connections from children are closed",
                   short_of ? "short of descriptors (RLIMIT_NOFILE)"
                            : ("more than " + std::to_string(cap) + " connections from children were unauthenticated "
                                                                    "at once")
                                  .c_str());
    }
    for (auto it = children_.begin(); it != children_.end() && (count >= cap || short_of > 0);) {
        if (waiting(*it)) {
            it = children_.erase(it);
            --count;
            if (short_of > 0)
                --short_of;
        } else {
            ++it;
        }
    }
}

bool Agent::close_oldest_waiting_child()
{
    const auto it = std::find_if(children_.begin(), children_.end(),
                                 [](const auto& c) { return !c->is_ready() && !c->is_closed(); });
    if (it == children_.end())
        return false;
    children_.erase(it);
    return true;
}

// A frame that did not fit (wire::Writer gives none) is not sent: the
// link it would have broken stays. Senders of task-sized data check first.
static bool sendable(const wire::Bytes& frame)
{
    if (frame.empty())
        log::error("a message over the %u MiB a frame carries was not sent", wire::max_body_trusted >> 20);
    return !frame.empty();
}

void Agent::send_up(const wire::Bytes& frame)
{
    if (!sendable(frame))
        return;
    wire::Channel* up = up_ ? up_.get() : fe_.get();
    if (up && up->is_ready() && up_queue_.empty())
        up->send(frame);
    else if (up)
        up_queue_.push_back(frame);  // sent once the link is up
    else
        log::error("no link toward the front end; a message is lost");
}

// A link up is ready: what waited for it goes first.
void Agent::flush_up(wire::Channel& up)
{
    for (const auto& frame : up_queue_)
        up.send(frame);
    up_queue_.clear();
}

// To every child (or the one whose subtree holds `to`) as the tree is now; a
// child that has not linked yet gets it when it does: in a deep tree a
// request can reach a relay before the relay's own children have linked.
void Agent::send_down(std::optional<std::uint32_t> to, const wire::Bytes& frame)
{
    if (!tree_ || !sendable(frame))
        return;
    std::optional<wire::FrameDigest> digest;  // hashed once for all children
    std::shared_ptr<const wire::Bytes> shared;  // a large one held once for all
    for (std::uint32_t child : tree_->children(setup_.node_id)) {
        if (to && !tree_->in_subtree(*to, child))
            continue;
        const auto linked = std::find_if(children_.begin(), children_.end(),
                                         [child](const auto& c) { return c->is_ready() && c->tag == child; });
        if (linked == children_.end()) {
            down_queue_[child].push_back(frame);
            continue;
        }
        if (!digest)
            digest = wire::frame_digest(frame);
        if (!shared && frame.size() >= wire::shared_frame_size && tree_->children(setup_.node_id).size() > 1)
            shared = std::make_shared<const wire::Bytes>(frame);
        if (shared)
            (*linked)->send(shared, *digest);
        else
            (*linked)->send(frame, *digest);
    }
}

void Agent::flush_down(wire::Channel& child)
{
    const auto waiting = down_queue_.find(child.tag);
    if (waiting == down_queue_.end())
        return;
    for (const auto& frame : waiting->second)
        child.send(frame);
    down_queue_.erase(waiting);
}

void Agent::route(std::uint32_t to, const wire::Bytes& frame)
{
    if (tree_->next_hop(setup_.node_id, to))
        send_down(to, frame);
    else
        send_up(frame);
}

void Agent::on_map(const wire::StepMap& map)
{
    map_ = map;
    tree_.emplace(static_cast<std::uint32_t>(map.hostnames.size()), map.fanout);
    if (const auto parent = tree_->parent(setup_.node_id)) {
        wire::Hello me;
        me.role = wire::Role::daemon;
        me.node_id = setup_.node_id;
        me.hostname = setup_.hostname;
        auto h = overlay_handlers();
        h.ready = [this](wire::Channel& c) {
            log::debug("linked to the parent daemon");
            fe_.reset();  // the parent is our way up from now on
            flush_up(c);
            flush_outcomes();  // any the FE link carried but did not see acknowledged
            node_.linked_up();
        };
        h.closed = [this](wire::Channel&, wire::Channel::Reason, const std::string& why) {
            // It died, or finished its own node's share of the step first:
            // on to the next live ancestor (off this callback).
            timers_.defer([this, why] { parent_lost(why); });
        };
        auto c = wire::Channel::connect(base_, map.hosts[*parent], static_cast<std::uint16_t>(map.ports[*parent]),
                                        secret_, setup_.job_id, setup_.step_id, me, std::move(h));
        if (!c) {
            log::error("parent daemon on %s: %s", map.hostnames[*parent].c_str(), c.error().c_str());
            quit(1);
            return;
        }
        up_ = std::move(*c);
        up_node_ = parent;
    }
    node_.mapped();
}

void Agent::parent_lost(const std::string& why)
{
    if (stopping_)
        return;
    if (up_node_) {
        log::info("the parent daemon on %s left the tree (%s): asking the next live ancestor",
                  map_->hostnames[*up_node_].c_str(), why.c_str());
        tree_->leave(*up_node_);
    } else {
        log::info("the link to the front end closed (%s): reconnecting once", why.c_str());
    }
    // Every fence in progress here went, or would have gone, through the
    // parent: it fails here and below (never succeeds short, never hangs).
    for (auto& key : fences_.affected([](const auto&) { return true; }))
        fail_fence(std::move(key), wire::pmix::unreach);
    // Publish / lookup requests it carried are lost with it.
    for (auto& [id, done] : std::exchange(data_waiting_, {}))
        done(wire::DataReply{id, setup_.node_id, wire::pmix::unreach, {}, {}, {}});
    connect_up();
}

// Asks the nearest ancestor still in the tree (the FE last) to adopt us; an
// ancestor that cannot be reached is gone too, and the next one is asked.
void Agent::connect_up()
{
    const auto target = tree_->parent(setup_.node_id);
    wire::Hello me;
    me.role = wire::Role::orphan;
    me.node_id = setup_.node_id;
    me.hostname = setup_.hostname;
    auto h = overlay_handlers();
    h.ready = [this](wire::Channel& c) {
        log::info("adopted by %s", up_node_ ? map_->hostnames[*up_node_].c_str() : "the front end");
        fe_.reset();  // the enrollment link, if it was still open
        flush_up(c);
        flush_outcomes();  // what the lost parent took but may not have passed on
        node_.linked_up();
    };
    h.closed = [this, target](wire::Channel& c, wire::Channel::Reason, const std::string& why) {
        const bool was_ready = c.is_ready();
        timers_.defer([this, target, was_ready, why] {
            if (was_ready) {
                parent_lost(why);
            } else if (target) {
                log::info("ancestor %s unreachable (%s)", map_->hostnames[*target].c_str(), why.c_str());
                tree_->leave(*target);
                connect_up();
            } else {
                log::error("lost the front end: %s", why.c_str());
                quit(1);
            }
        });
    };
    const std::string host = target ? map_->hosts[*target] : setup_.fe_host;
    const auto port = target ? static_cast<std::uint16_t>(map_->ports[*target]) : setup_.fe_port;
    auto c = wire::Channel::connect(base_, host, port, secret_, setup_.job_id, setup_.step_id, me, std::move(h));
    if (!c) {
        log::error("%s: %s", target ? map_->hostnames[*target].c_str() : "front end", c.error().c_str());
        quit(1);
        return;
    }
    up_ = std::move(*c);
    up_node_ = target;
}

// A child came: when its own parent was not us, the daemons in between left
// the tree; it may have missed what came down meanwhile.
void Agent::adopt(wire::Channel& child)
{
    if (!tree_)
        return;
    const std::uint32_t node = child.tag;
    if (node == setup_.node_id || !tree_->in_static_subtree(node, setup_.node_id)) {
        child.close("node " + std::to_string(node) + " is not below this node");
        return;
    }
    bool skipped = false;
    for (auto a = tree_->static_parent(node); a && *a != setup_.node_id; a = tree_->static_parent(*a)) {
        node_left(*a);
        skipped = true;
    }
    if (skipped || child.peer().role == wire::Role::orphan) {
        log::info("adopted %s", map_->hostnames[node].c_str());
        for (const auto& frame : history_)
            child.send(frame);
    }
}

void Agent::node_left(std::uint32_t node)
{
    if (!tree_ || stopping_ || !tree_->leave(node))
        return;
    log::debug("node %u left the tree", node);
    down_queue_.erase(node);
    send_up(wire::Gone{node}.encode());
    // Fences whose contributions may have been on their way through it.
    const auto through = fences_.affected([&](const std::vector<std::uint32_t>& ranks) {
        return ranks.empty() || std::any_of(ranks.begin(), ranks.end(), [&](std::uint32_t r) {
                   return r < map_->rank_node.size() && tree_->in_static_subtree(map_->rank_node[r], node);
               });
    });
    for (auto key : through)
        fail_fence(std::move(key), wire::pmix::unreach);
}

Result<bool> Agent::on_frame(wire::Channel& from, wire::Type type, std::span<const std::uint8_t> body)
{
    const bool from_above = &from == fe_.get() || &from == up_.get();
    // Until this node serves (the step map is here and the PMIx server up),
    // frames wait: a child's, which may have the map before us, and what
    // comes from above after the map. Outcomes and their acks only pass
    // through, and the map itself is what we wait for.
    const bool passes = type == wire::Type::outcomes || type == wire::Type::acks ||
                        (from_above && (type == wire::Type::step_map || type == wire::Type::step_done));
    if (!serving_ && !passes) {
        early_.push_back(Held{from_above, type, wire::Bytes(body.begin(), body.end())});
        return Result<bool>::ok(true);
    }
    return dispatch(from_above, &from, type, body);
}

// from: the link it came on (none for a frame kept until the step map).
Result<bool> Agent::dispatch(bool from_above, wire::Channel* from, wire::Type type, std::span<const std::uint8_t> body)
{
    using R = Result<bool>;
    switch (type) {
    case wire::Type::step_map: {
        auto m = wire::StepMap::decode(body);
        if (!m)
            return R::fail(m.error());
        if (!map_)
            on_map(*m);
        return R::ok(true);
    }
    case wire::Type::acks: {  // from above: the FE has these
        if (!from_above)
            return R::fail("a child acknowledged outcomes");
        auto a = wire::Acks::decode(body);
        if (!a)
            return R::fail(a.error());
        on_acks(*a);
        drained();
        return R::ok(true);
    }
    case wire::Type::step_done: {  // from above: every task of the step has ended
        if (!from_above || !wire::StepDone::decode(body))
            return R::fail("a step done from below, or malformed");
        if (!std::exchange(step_done_, true)) {
            const wire::Bytes frame = wire::StepDone{}.encode();
            history_.push_back(frame);  // a child adopted later hears it too
            send_down(std::nullopt, frame);
        }
        drained();
        return R::ok(true);
    }
    case wire::Type::outcomes: {  // from a child, on their way to the FE
        auto batch = wire::Outcomes::decode(body);
        if (!batch)
            return R::fail(batch.error());
        // Acknowledged to the child only once the FE has them: a relay that
        // dies with them on their way loses nothing, as the child sends
        // them again on its next way up.
        for (const auto& o : batch->list) {
            if (from && !from_above)
                relayed_for_[{o.rank, o.epoch}] = from->tag;
            report(o);
        }
        return R::ok(true);
    }
    case wire::Type::event: {
        auto e = wire::Event::decode(body);
        if (!e)
            return R::fail(e.error());
        on_event(*e, from_above);
        return R::ok(true);
    }
    case wire::Type::gone: {  // from below, for the FE
        auto g = wire::Gone::decode(body);
        if (!g)
            return R::fail(g.error());
        send_up(g->encode());
        return R::ok(true);
    }
    case wire::Type::node_down: {
        auto n = wire::NodeDown::decode(body);
        if (!n || !from_above)
            return R::fail(n ? std::string("a node down from below") : n.error());
        on_node_down(*n);
        return R::ok(true);
    }
    case wire::Type::fence_up: {
        auto f = wire::FenceUp::decode(body);
        if (!f)
            return R::fail(f.error());
        on_fence_up(*f);
        return R::ok(true);
    }
    case wire::Type::fence_down: {
        auto f = wire::FenceDown::decode(body);
        if (!f)
            return R::fail(f.error());
        on_fence_down(*f);
        return R::ok(true);
    }
    case wire::Type::dmodex_req: {
        auto r = wire::DmodexReq::decode(body);
        if (!r)
            return R::fail(r.error());
        on_dmodex_req(*r);
        return R::ok(true);
    }
    case wire::Type::dmodex_resp: {
        auto r = wire::DmodexResp::decode(body);
        if (!r)
            return R::fail(r.error());
        on_dmodex_resp(*r);
        return R::ok(true);
    }
    case wire::Type::data_request: {  // from below, for the FE
        auto r = wire::DataRequest::decode(body);
        if (!r)
            return R::fail(r.error());
        send_up(r->encode());
        return R::ok(true);
    }
    case wire::Type::data_reply: {
        auto r = wire::DataReply::decode(body);
        if (!r)
            return R::fail(r.error());
        if (r->node != setup_.node_id) {
            route(r->node, r->encode());
            return R::ok(true);
        }
        if (auto it = data_waiting_.find(r->id); it != data_waiting_.end()) {
            auto done = std::move(it->second);
            data_waiting_.erase(it);
            done(*r);
        }
        return R::ok(true);
    }
    case wire::Type::relay: {
        auto r = wire::Relay::decode(body);
        if (!r)
            return R::fail(r.error());
        if (!from_above) {
            send_up(r->encode());
            return R::ok(true);
        }
        send_down(std::nullopt, r->encode());
        if (r->origin != setup_.node_id)
            node_.relayed(*r);
        return R::ok(true);
    }
    case wire::Type::abort: {  // from below, for the FE
        auto a = wire::Abort::decode(body);
        if (!a)
            return R::fail(a.error());
        send_up(a->encode());
        return R::ok(true);
    }
    case wire::Type::notice: {
        auto n = wire::Notice::decode(body);
        if (!n)
            return R::fail(n.error());
        send_up(n->encode());
        return R::ok(true);
    }
    case wire::Type::terminate: {
        auto t = wire::Terminate::decode(body);
        if (!t)
            return R::fail(t.error());
        if (!from_above) {  // a request from below, for the FE
            send_up(t->encode());
            return R::ok(true);
        }
        send_down(std::nullopt, t->encode());
        node_.terminate(*t);
        return R::ok(true);
    }
    default:
        return R::fail("unexpected " + std::string(wire::type_name(type)) + " frame");
    }
}

// ---- events --------------------------------------------------------------------

void Agent::on_event(const wire::Event& e, bool from_above)
{
    if (!from_above) {  // on its way up to the FE, which sends it to everyone
        send_up(e.encode());
        return;
    }
    if (!events_seen_.insert(e.rank).second)
        return;  // a replay
    const wire::Bytes frame = e.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    fail_fences_with(e.rank);
    node_.peer_failed(e);
}

void Agent::on_node_down(const wire::NodeDown& d)
{
    if (!nodes_down_.insert(d.node).second)
        return;  // a replay
    const wire::Bytes frame = d.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    log::info("node %s is lost with %zu ranks", d.hostname.c_str(), d.ranks.size());
    tree_->leave(d.node);
    for (std::uint32_t r : d.ranks)
        fail_fences_with(r);
    node_.node_lost(d);
}

// ---- fences ----------------------------------------------------------------------

// The instance's state here, opened on its first contribution.
Agent::Fences::Instance& Agent::open_fence(const std::string& key, const wire::FenceKey& id)
{
    return fences_.open(key, id, [&] { return wire::fence_expected(*tree_, map_->rank_node, setup_.node_id, id.ranks); });
}

void Agent::fence(std::vector<std::uint32_t> ranks, wire::Bytes data, int timeout_s, Done done)
{
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    wire::FenceKey id;
    id.set = wire::fence_set(ranks);
    id.instance = ++fence_calls_[id.set];
    id.ranks = std::move(ranks);
    const std::string key = wire::fence_key(id.ranks, id.instance);
    if (key.size() > wire::max_fence_key) {
        // Every participant names them alike and so ends here alike.
        log::error("a fence over %zu ranks is not supported: naming them takes %zu bytes, over %zu",
                   id.ranks.size(), key.size(), wire::max_fence_key);
        done(wire::pmix::not_supported, {});
        return;
    }
    if (auto ahead = failed_ahead_.find(key); ahead != failed_ahead_.end()) {
        const int status = ahead->second;
        failed_ahead_.erase(ahead);
        done(status, {});
        return;
    }
    if (fences_.finished(id)) {
        done(wire::pmix::error, {});  // over without this node: its fences are numbered unlike the others'
        return;
    }
    auto& f = open_fence(key, id);
    f.extra = std::move(done);
    if (wire::names_dead(f.id.ranks, dead_)) {
        fail_fence(key, wire::pmix::proc_term_wo_sync);
        return;
    }
    const bool all_in = Fences::add(f, data);
    if (timeout_s > 0)
        timers_.after_ms(static_cast<std::uint32_t>(timeout_s) * 1000, [this, key] { fence_timed_out(key); });
    if (all_in)
        pass_fence_up(key, f);
}

void Agent::on_fence_up(const wire::FenceUp& up)
{
    const auto id = *wire::parse_fence_key(up.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    if (up.status != wire::pmix::success) {
        // Failed below (a timeout): here, below, and through the FE everywhere.
        send_up(wire::FenceUp{up.key, up.status, 0, {}}.encode());
        fail_fence(up.key, up.status);
        return;
    }
    if (wire::names_dead(id.ranks, dead_)) {
        fail_fence(up.key, wire::pmix::proc_term_wo_sync);
        return;
    }
    auto& f = open_fence(up.key, id);
    if (Fences::add(f, up.data))
        pass_fence_up(up.key, f);
}

// Everything below is in: up it goes, and the result comes back down with
// everyone's data.
void Agent::pass_fence_up(const std::string& key, Fences::Instance& f)
{
    auto frame = wire::FenceUp{key, wire::pmix::success, f.received, std::move(f.data)}.encode();
    f.data.clear();
    if (frame.empty()) {
        // This subtree's data alone is over what a frame carries: the
        // instance fails everywhere (the FE says why), no link breaks.
        log::error("fence %s: this subtree's data is over the %u MiB a frame carries", key.c_str(),
                   wire::max_body_trusted >> 20);
        send_up(wire::FenceUp{key, wire::pmix::out_of_resource, 0, {}}.encode());
        fail_fence(key, wire::pmix::out_of_resource);
        return;
    }
    send_up(frame);
}

void Agent::on_fence_down(const wire::FenceDown& down)
{
    if (tree_ && !tree_->children(setup_.node_id).empty())  // a leaf has nothing to encode it for
        send_down(std::nullopt, down.encode());
    const auto id = *wire::parse_fence_key(down.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    finish_fence(down.key, id, down.status, down.data);
}

// An instance is over here: recorded as finished (a late contribution or
// result of it is dropped), its local caller answered, and a local call of
// it that is still to come fails at once.
void Agent::finish_fence(const std::string& key, const wire::FenceKey& id, int status, const wire::Bytes& data)
{
    auto f = fences_.finish(key, id);
    const auto calls = fence_calls_.find(id.set);
    const bool called_here = calls != fence_calls_.end() && id.instance <= calls->second;
    if (status != wire::pmix::success && !called_here &&
        std::any_of(setup_.ranks.begin(), setup_.ranks.end(), [&](std::uint32_t r) { return wire::takes_part(id.ranks, r); }))
        failed_ahead_[key] = status;
    if (f && f->extra)
        (*f->extra)(status, data);
}

// The caller's PMIX_TIMEOUT expired: an instance still pending here fails
// here, below, and through the FE on every node.
void Agent::fence_timed_out(const std::string& key)
{
    if (!fences_.in_progress(key))
        return;  // over
    log::info("fence %s timed out", key.c_str());
    send_up(wire::FenceUp{key, wire::pmix::timeout, 0, {}}.encode());
    fail_fence(key, wire::pmix::timeout);
}

void Agent::fail_fences_with(std::uint32_t rank)
{
    // Later fences over it fail at once.
    dead_.insert(rank);
    // The FE fails it for everyone as well; only the local caller here.
    for (const auto& key : fences_.affected([&](const auto& ranks) { return wire::takes_part(ranks, rank); }))
        finish_fence(key, *wire::parse_fence_key(key), wire::pmix::proc_term_wo_sync, {});
}

// Fails an instance here and in the subtree below, which waits for its
// result from us.
void Agent::fail_fence(std::string key, int status)
{
    send_down(std::nullopt, wire::FenceDown{key, status, {}}.encode());
    finish_fence(key, *wire::parse_fence_key(key), status, {});
}

// ---- direct modex ------------------------------------------------------------------

void Agent::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    if (rank >= map_->rank_node.size()) {
        done(wire::pmix::not_found, {});
        return;
    }
    const std::uint64_t id = next_dmodex_++;
    dmodex_waiting_.emplace(id, std::move(done));
    route(map_->rank_node[rank], wire::DmodexReq{id, setup_.node_id, map_->rank_node[rank], rank}.encode());
    // Bounded: a request nobody answers fails.
    timers_.after_ms(static_cast<std::uint32_t>(timeout_s > 0 ? timeout_s : default_timeout_s) * 1000, [this, id] {
        auto it = dmodex_waiting_.find(id);
        if (it == dmodex_waiting_.end())
            return;  // answered
        auto waiting = std::move(it->second);
        dmodex_waiting_.erase(it);
        waiting(wire::pmix::timeout, {});
    });
}

void Agent::on_dmodex_req(const wire::DmodexReq& r)
{
    if (r.to != setup_.node_id) {
        route(r.to, r.encode());
        return;
    }
    node_.dmodex(r.rank, [this, r](int status, wire::Bytes data) {
        route(r.from, wire::DmodexResp{r.id, setup_.node_id, r.from, status, std::move(data)}.encode());
    });
}

void Agent::on_dmodex_resp(const wire::DmodexResp& r)
{
    if (r.to != setup_.node_id) {
        route(r.to, r.encode());
        return;
    }
    auto it = dmodex_waiting_.find(r.id);
    if (it == dmodex_waiting_.end())
        return;  // timed out already
    auto done = std::move(it->second);
    dmodex_waiting_.erase(it);
    done(r.status, r.data);
}

void Agent::data_request(wire::DataRequest request, int timeout_s, DataDone done)
{
    const std::uint64_t id = next_data_++;
    request.id = id;
    request.node = setup_.node_id;
    const bool waits_for_publish = request.op == wire::DataRequest::Op::lookup && request.wait;
    data_waiting_.emplace(id, std::move(done));
    send_up(request.encode());
    if (waits_for_publish && timeout_s <= 0)
        return;
    timers_.after_ms(static_cast<std::uint32_t>(timeout_s > 0 ? timeout_s : default_timeout_s) * 1000, [this, id] {
        auto it = data_waiting_.find(id);
        if (it == data_waiting_.end())
            return;  // answered
        auto waiting = std::move(it->second);
        data_waiting_.erase(it);
        waiting(wire::DataReply{id, setup_.node_id, wire::pmix::timeout, {}, {}, {}});
    });
}

void Agent::flush_outcomes()
{
    // Everything not acknowledged, once: what waited for the turn's end is
    // among it.
    outgoing_.clear();
    for (const auto& [key, o] : unacked_)
        outgoing_.push_back(o);
    if (!outgoing_.empty())
        schedule_outcomes();
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
        if (!unacked_.empty())
            log::error("%zu outcomes not acknowledged at exit", unacked_.size());
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
    if (draining_ && !stopping_ && step_done_ && unacked_.empty() && linked_children() == 0)
        quit(0);
    return stopping_;
}

std::size_t Agent::linked_children() const
{
    return static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(),
                                                  [](const auto& c) { return c->is_ready() && !c->is_closed(); }));
}

}  // namespace exitpolicy::pmixd
