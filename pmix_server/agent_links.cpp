// SPDX-License-Identifier: Apache-2.0
// agent_links.cpp - the agent's links in the overlay tree: to the front end
// and its parent, from its children (accepted with backoff, the oldest
// unauthenticated closed first), frames up, down and routed, the step map.
// A parent or child that leaves: agent_lost.cpp. See agent.hpp.
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

protocol::Channel::Handlers Agent::overlay_handlers()
{
    protocol::Channel::Handlers h;
    h.frame = [this](protocol::Channel& c, protocol::Type t, std::span<const std::uint8_t> b) {
        return on_frame(c, t, b);
    };
    return h;
}

void Agent::start_fe_link()
{
    protocol::Hello me;
    me.role = protocol::Role::daemon;
    me.node_id = setup_.node_id;
    me.hostname = setup_.hostname;
    me.ranks = setup_.ranks;
    auto h = overlay_handlers();
    h.ready = [this](protocol::Channel& c) {
        c.send(protocol::Enroll{setup_.hostname, child_port_}.encode());
        flush_up(c);
        log::debug("enrolled with the front end at %s:%u", setup_.fe_host.c_str(), setup_.fe_port);
    };
    h.closed = [this](protocol::Channel&, protocol::Channel::Reason, const std::string& why) {
        if (!map_ || !up_) {
            log::error("lost the front end: %s", why.c_str());
            // Without the FE the step's PMIx service is gone; stop (the
            // plugin's fallback still reports this node's exits).
            timers_.defer([this] { quit(1); });
        }
    };
    auto c = protocol::Channel::connect(base_, setup_.fe_host, setup_.fe_port, secret_, setup_.job_id, setup_.step_id, me,
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
    child_listener_.reset(evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Agent*>(arg);
            guarded("accepting a child's connection", [&] {
                d->child_backoff_->accepted();
                d->make_room_for_child(fd);
                auto h = d->overlay_handlers();
                h.ready = [d](protocol::Channel& c) {
                    c.tag = c.peer().node_id;
                    log::debug("child node %u connected", c.tag);
                    d->adopt(c);
                    if (c.is_ready())  // adopt() may have refused it
                        d->flush_down(c);
                };
                h.closed = [d](protocol::Channel& c, protocol::Channel::Reason, const std::string& why) {
                    log::debug("child link closed: %s", why.c_str());
                    protocol::Channel* gone = &c;
                    const bool was_child = c.is_ready();
                    const std::uint32_t node = c.tag;
                    d->timers_.defer([d, gone, was_child, node] {
                        std::erase_if(d->children_, [gone](const auto& p) { return p.get() == gone; });
                        if (was_child)
                            d->node_left(node);
                        d->drained();
                    });
                };
                if (auto c = protocol::Channel::accept(d->base_, fd, d->secret_, d->setup_.job_id, d->setup_.step_id, h))
                    d->children_.push_back(std::move(c));
            });
        },
        // Its children connect at once, and the orphans of one that left:
        // up to twice the fan-out (2 to 1024), before the map says which.
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 2048,
        reinterpret_cast<sockaddr*>(&sin), sizeof(sin)));
    if (!child_listener_) {
        log::error("cannot listen for child daemons: %s", std::strerror(errno));
        return false;
    }
    child_backoff_ = std::make_unique<protocol::AcceptBackoff>(
        child_listener_.get(), [](const std::string& line) { log::error("child listener: %s", line.c_str()); },
        [this] { return close_oldest_waiting_child(); });
    evconnlistener_set_error_cb(child_listener_.get(), [](evconnlistener*, void* arg) {
        static_cast<Agent*>(arg)->child_backoff_->failed(EVUTIL_SOCKET_ERROR());
    });
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    getsockname(evconnlistener_get_fd(child_listener_.get()), reinterpret_cast<sockaddr*>(&bound), &len);
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
    const std::uint32_t fanout = map_ ? map_->fanout : protocol::max_fanout;
    const std::size_t cap = protocol::unauthenticated_cap(2 * std::size_t{fanout});
    // Descriptors for its PMIx server's clients too.
    std::size_t short_of = protocol::descriptors_short(fd, protocol::descriptor_reserve + setup_.ranks.size());
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

// A frame that did not fit (protocol::Writer gives none) is not sent: the
// link it would have broken stays. Senders of task-sized data check first.
static bool sendable(const protocol::Bytes& frame)
{
    if (frame.empty())
        log::error("a message over the %u MiB a frame carries was not sent", protocol::max_body_trusted >> 20);
    return !frame.empty();
}

void Agent::send_up(const protocol::Bytes& frame)
{
    if (!sendable(frame))
        return;
    protocol::Channel* up = up_ ? up_.get() : fe_.get();
    if (up && up->is_ready() && up_queue_.empty())
        up->send(frame);
    else if (up)
        up_queue_.push_back(frame);  // sent once the link is up
    else
        log::error("no link toward the front end; a message is lost");
}

// A link up is ready: what waited for it goes first.
void Agent::flush_up(protocol::Channel& up)
{
    for (const auto& frame : up_queue_)
        up.send(frame);
    up_queue_.clear();
}

// To every child (or the one whose subtree holds `to`) as the tree is now; a
// child that has not linked yet gets it when it does: in a deep tree a
// request can reach a relay before the relay's own children have linked.
void Agent::send_down(std::optional<std::uint32_t> to, const protocol::Bytes& frame)
{
    if (!tree_ || !sendable(frame))
        return;
    std::optional<protocol::FrameDigest> digest;  // hashed once for all children
    std::shared_ptr<const protocol::Bytes> shared;  // a large one held once for all
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
            digest = protocol::frame_digest(frame);
        if (!shared && frame.size() >= protocol::shared_frame_size && tree_->children(setup_.node_id).size() > 1)
            shared = std::make_shared<const protocol::Bytes>(frame);
        if (shared)
            (*linked)->send(shared, *digest);
        else
            (*linked)->send(frame, *digest);
    }
}

void Agent::flush_down(protocol::Channel& child)
{
    const auto waiting = down_queue_.find(child.tag);
    if (waiting == down_queue_.end())
        return;
    for (const auto& frame : waiting->second)
        child.send(frame);
    down_queue_.erase(waiting);
}

void Agent::route(std::uint32_t to, const protocol::Bytes& frame)
{
    if (tree_->next_hop(setup_.node_id, to))
        send_down(to, frame);
    else
        send_up(frame);
}

void Agent::on_map(const protocol::StepMap& map)
{
    map_ = map;
    tree_.emplace(static_cast<std::uint32_t>(map.hostnames.size()), map.fanout);
    // A node without a port never enrolled (its part of the step ended
    // while its daemon stood by, or srun could not wake it): it has left
    // the tree from the start, here as at the FE and on every node.
    for (std::uint32_t node = 0; node < map.ports.size(); ++node)
        if (map.ports[node] == 0 && node != setup_.node_id)
            tree_->leave(node);
    if (const auto parent = tree_->parent(setup_.node_id)) {
        protocol::Hello me;
        me.role = protocol::Role::daemon;
        me.node_id = setup_.node_id;
        me.hostname = setup_.hostname;
        auto h = overlay_handlers();
        h.ready = [this](protocol::Channel& c) {
            log::debug("linked to the parent daemon");
            fe_.reset();  // the parent is our way up from now on
            flush_up(c);
            outcomes_.resend();  // any the FE link carried but did not see acknowledged
            node_.linked_up();
        };
        h.closed = [this](protocol::Channel&, protocol::Channel::Reason, const std::string& why) {
            // It died, or finished its own node's share of the step first:
            // on to the next live ancestor (off this callback).
            timers_.defer([this, why] { parent_lost(why); });
        };
        auto c = protocol::Channel::connect(base_, map.hosts[*parent], static_cast<std::uint16_t>(map.ports[*parent]),
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

}  // namespace exitpolicy::pmix_server
