// daemon.cpp - the daemon's loop: overlay links, routing, fences, direct
// modex, events, outcomes and the local socket. See daemon.hpp.
#include "daemon.hpp"

#include "event_anchor.hpp"
#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "log.hpp"
#include "pmix_host.hpp"
#include "protocol/events.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <pmix_common.h>

#include <algorithm>
#include <utility>
#include <charconv>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

namespace exitpolicy::pmixd {
namespace {

std::int64_t now_us()
{
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
}

// The process has begun to exit (PF_EXITING in /proc/PID/stat's flags): a
// signal can no longer change how it ends. Its sockets may be closed and
// its peers told, while its pidfd turns readable only once it is gone.
bool exiting(pid_t pid)
{
    constexpr unsigned long pf_exiting = 0x4;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat))
        return false;
    const auto paren = stat.rfind(')');  // the name may hold anything
    if (paren == std::string::npos)
        return false;
    std::istringstream fields(stat.substr(paren + 1));
    std::string skip;
    unsigned long flags = 0;
    for (int i = 3; i < 9; ++i)  // state ppid pgrp session tty_nr tpgid
        fields >> skip;
    return fields >> flags && (flags & pf_exiting) != 0;
}

// A failure of the task's own: an exit or a signal, not an abort or the
// SIGTERM or SIGKILL of a teardown.
bool own_end(int wait_status, bool aborted)
{
    TaskOutcome t;
    t.wait_status = wait_status;
    return !aborted && !killed_by_teardown(t);
}

}  // namespace

// One connection on the local socket.
struct Daemon::Local {
    Daemon* d = nullptr;
    bufferevent* bev = nullptr;
    uid_t uid = static_cast<uid_t>(-1);
    pid_t pid = -1;  // the peer, as the kernel says
    bool control = false;  // slurmstepd's control link
    ~Local()
    {
        if (bev)
            bufferevent_free(bev);
    }
    // Closes the connection and frees this Local, with any request of it
    // still waiting (a later Local may get its address). The caller, maybe
    // its own callback, returns at once.
    void drop()
    {
        Daemon* daemon = d;
        const Local* self = this;
        std::erase_if(daemon->env_waiting_, [self](const auto& w) { return w.first == self; });
        std::erase_if(daemon->locals_, [self](const auto& p) { return p.get() == self; });
    }
};

Daemon::Daemon(Args args, wire::Secret secret) : args_(std::move(args)), secret_(secret) {}

Daemon::Task::~Task()
{
    if (exit_watch)
        event_free(exit_watch);
    if (pidfd >= 0)
        ::close(pidfd);
}

Daemon::~Daemon()
{
    // The links first: a child whose parent stops reroutes what it has not
    // had confirmed as soon as it sees the link close.
    children_.clear();
    up_.reset();
    fe_.reset();
    locals_.clear();
    anchor_.reset();  // a client of our server: it finalizes before the server
    // Work for the loop, which no longer runs, is dropped while the library
    // is still up: each upcall it carried answers its client then.
    posted_.close();
    pmix_.reset();
    child_backoff_.reset();
    if (child_listener_)
        evconnlistener_free(child_listener_);
    if (local_listener_)
        evconnlistener_free(local_listener_);
    if (wake_)
        event_free(wake_);
    for (event* e : signals_)
        event_free(e);
    tasks_.clear();  // their exit watches
    if (base_)
        event_base_free(base_);
}

void Daemon::post(std::function<void()> fn)
{
    if (posted_.push(std::move(fn)))
        event_active(wake_, EV_READ, 0);
}

int Daemon::run()
{
    evthread_use_pthreads();
    base_ = event_base_new();
    if (!base_)
        return 1;
    // Two priorities: a task's exit (0) is seen before anything else that
    // became ready with it (1, the default), such as another node's news.
    event_base_priority_init(base_, 2);
    wake_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->posted_.run(); },
        this);
    pmix_ = std::make_unique<PmixHost>(*this);
    pmix_->discover_topology();
    anchor_ = std::make_unique<EventAnchor>(*this);
    pmix_init_ = std::thread([this] {
        auto started = pmix_->init(args_.dir);
        post([this, started = std::move(started)] {
            pmix_init_result_ = started;
            if (started)
                anchor_->start([this](bool) {
                    anchor_settled_ = true;
                    // The tasks that asked meanwhile get their environment.
                    for (auto& [local, frame] : std::exchange(env_waiting_, {}))
                        if (std::any_of(locals_.begin(), locals_.end(), [&](const auto& l) { return l.get() == local; }))
                            on_local_frame(*local, wire::Type::env_request, frame);
                });
            serve();
        });
    });
    // Told to end (by hand, or by a process tracker that reaches us): the
    // same way out as at the step's end, so that the clients' cleanup runs.
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        event* e = evsignal_new(
            base_, sig,
            [](evutil_socket_t signo, short, void* arg) {
                auto* d = static_cast<Daemon*>(arg);
                log::info("%s: stopping", strsignal(static_cast<int>(signo)));
                d->drain();
            },
            this);
        if (e && event_add(e, nullptr) == 0)
            signals_.push_back(e);
        else if (e)
            event_free(e);
    }
    listen_local();
    listen_children();
    start_fe_link();
    event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY);
    if (pmix_init_.joinable())
        pmix_init_.join();
    return exit_code_;
}

// ---- overlay -------------------------------------------------------------------

wire::Channel::Handlers Daemon::overlay_handlers()
{
    wire::Channel::Handlers h;
    h.frame = [this](wire::Channel& c, wire::Type t, std::span<const std::uint8_t> b) {
        return on_overlay_frame(c, t, b);
    };
    return h;
}

void Daemon::start_fe_link()
{
    wire::Hello me;
    me.role = wire::Role::daemon;
    me.node_id = args_.node_id;
    me.hostname = args_.hostname;
    me.ranks = args_.ranks;
    auto h = overlay_handlers();
    h.ready = [this](wire::Channel& c) {
        c.send(wire::Enroll{args_.hostname, child_port_}.encode());
        flush_up(c);
        log::debug("enrolled with the front end at %s:%u", args_.fe_host.c_str(), args_.fe_port);
    };
    h.closed = [this](wire::Channel&, wire::Channel::Reason, const std::string& why) {
        if (!map_ || !up_) {
            log::error("lost the front end: %s", why.c_str());
            // Without the FE the step's PMIx service is gone; stop (the
            // plugin's fallback still reports this node's exits).
            post([this] { stop(1); });
        }
    };
    auto c = wire::Channel::connect(base_, args_.fe_host, args_.fe_port, secret_, args_.job_id, args_.step_id, me,
                                    std::move(h));
    if (!c) {
        log::error("front end: %s", c.error().c_str());
        stop(1);
        return;
    }
    fe_ = std::move(*c);
}

void Daemon::listen_children()
{
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    child_listener_ = evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Daemon*>(arg);
            // No exception leaves a libevent callback.
            try {
                d->child_backoff_->accepted();
                d->make_room_for_child();
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
                    d->post([d, gone, was_child, node] {
                        std::erase_if(d->children_, [gone](const auto& p) { return p.get() == gone; });
                        if (was_child)
                            d->node_left(node);
                        d->drained();
                    });
                };
                if (auto c = wire::Channel::accept(d->base_, fd, d->secret_, d->args_.job_id, d->args_.step_id, h))
                    d->children_.push_back(std::move(c));
            } catch (const std::exception& e) {
                log::error("could not accept a child's connection: %s", e.what());
            } catch (...) {
                log::error("could not accept a child's connection");
            }
        },
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 64,
        reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    if (!child_listener_) {
        log::error("cannot listen for child daemons: %s", std::strerror(errno));
        return;
    }
    child_backoff_ = std::make_unique<wire::AcceptBackoff>(
        child_listener_, [](const std::string& line) { log::error("child listener: %s", line.c_str()); });
    evconnlistener_set_error_cb(child_listener_, [](evconnlistener*, void* arg) {
        static_cast<Daemon*>(arg)->child_backoff_->failed(EVUTIL_SOCKET_ERROR());
    });
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    getsockname(evconnlistener_get_fd(child_listener_), reinterpret_cast<sockaddr*>(&bound), &len);
    child_port_ = ntohs(bound.sin_port);
}

// A child's connection is on its way: room for it among those not ready,
// by destroying the oldest (outside its callbacks: no `closed`).
void Daemon::make_room_for_child()
{
    auto waiting = [](const auto& c) { return !c->is_ready() && !c->is_closed(); };
    auto count = static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(), waiting));
    if (count < wire::max_unauthenticated_channels)
        return;
    if (!told_over_cap_) {
        told_over_cap_ = true;
        log::error("more than %zu connections from children were unauthenticated at once; the oldest are closed",
                   wire::max_unauthenticated_channels);
    }
    for (auto it = children_.begin(); it != children_.end() && count >= wire::max_unauthenticated_channels;) {
        if (waiting(*it)) {
            it = children_.erase(it);
            --count;
        } else {
            ++it;
        }
    }
}

void Daemon::send_up(const wire::Bytes& frame)
{
    wire::Channel* up = up_ ? up_.get() : fe_.get();
    if (up && up->is_ready() && up_queue_.empty())
        up->send(frame);
    else if (up)
        up_queue_.push_back(frame);  // sent once the link is up
    else
        log::error("no link toward the front end; a message is lost");
}

// A link up is ready: what waited for it goes first.
void Daemon::flush_up(wire::Channel& up)
{
    for (const auto& frame : up_queue_)
        up.send(frame);
    up_queue_.clear();
}

// To every child (or the one whose subtree holds `to`) as the tree is now; a
// child that has not linked yet gets it when it does: in a deep tree a
// request can reach a relay before the relay's own children have linked.
void Daemon::send_down(std::optional<std::uint32_t> to, const wire::Bytes& frame)
{
    if (!tree_)
        return;
    for (std::uint32_t child : tree_->children(args_.node_id)) {
        if (to && !tree_->in_subtree(*to, child))
            continue;
        const auto linked = std::find_if(children_.begin(), children_.end(),
                                         [child](const auto& c) { return c->is_ready() && c->tag == child; });
        if (linked != children_.end())
            (*linked)->send(frame);
        else
            down_queue_[child].push_back(frame);
    }
}

void Daemon::flush_down(wire::Channel& child)
{
    const auto waiting = down_queue_.find(child.tag);
    if (waiting == down_queue_.end())
        return;
    for (const auto& frame : waiting->second)
        child.send(frame);
    down_queue_.erase(waiting);
}

void Daemon::route(std::uint32_t to, const wire::Bytes& frame)
{
    if (tree_->next_hop(args_.node_id, to))
        send_down(to, frame);
    else
        send_up(frame);
}

void Daemon::on_map(const wire::StepMap& map)
{
    map_ = map;
    tree_.emplace(static_cast<std::uint32_t>(map.hostnames.size()), map.fanout);
    if (const auto parent = tree_->parent(args_.node_id)) {
        wire::Hello me;
        me.role = wire::Role::daemon;
        me.node_id = args_.node_id;
        me.hostname = args_.hostname;
        auto h = overlay_handlers();
        h.ready = [this](wire::Channel& c) {
            log::debug("linked to the parent daemon");
            fe_.reset();  // the parent is our way up from now on
            flush_up(c);
            flush_outcomes();  // any the FE link carried but did not see acknowledged
            ready();
        };
        h.closed = [this](wire::Channel&, wire::Channel::Reason, const std::string& why) {
            // It died, or finished its own node's share of the step first:
            // on to the next live ancestor (off this callback).
            post([this, why] { parent_lost(why); });
        };
        auto c = wire::Channel::connect(base_, map.hosts[*parent], static_cast<std::uint16_t>(map.ports[*parent]),
                                        secret_, args_.job_id, args_.step_id, me, std::move(h));
        if (!c) {
            log::error("parent daemon on %s: %s", map.hostnames[*parent].c_str(), c.error().c_str());
            stop(1);
            return;
        }
        up_ = std::move(*c);
        up_node_ = parent;
    }
    serve();
}

// Once both the step map and the PMIx server are there (in either order,
// on the loop): the namespace is registered, and the frames held until
// then are dispatched. The loop never waits for PMIx_server_init.
void Daemon::serve()
{
    if (!map_ || !pmix_init_result_ || serving_ || stopping_)
        return;
    serving_ = true;
    if (!*pmix_init_result_) {
        log::error("PMIx server: %s", pmix_init_result_->error().c_str());
        stop(1);
        return;
    }
    auto registered = pmix_->register_namespace(*map_, [this](int status) {
        if (status != PMIX_SUCCESS) {
            log::error("registering the namespace failed: %d", status);
            stop(1);
            return;
        }
        namespace_ready_ = true;
        ready();
    });
    if (!registered) {
        log::error("%s", registered.error().c_str());
        stop(1);
        return;
    }
    // What came before goes now, in the order it came: a direct-modex
    // request needs the PMIx server up (the library queues it until the
    // namespace is registered and the rank has committed), an event needs
    // it to notify the clients, and a frame on its way up must take the
    // link to the parent, not the one to the front end.
    for (auto& held : std::exchange(early_, {}))
        (void)dispatch(held.from_above, nullptr, held.type, held.body);
}

void Daemon::parent_lost(const std::string& why)
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
        done(wire::DataReply{id, args_.node_id, wire::pmix::unreach, {}, {}, {}});
    connect_up();
}

// Asks the nearest ancestor still in the tree (the FE last) to adopt us; an
// ancestor that cannot be reached is gone too, and the next one is asked.
void Daemon::connect_up()
{
    const auto target = tree_->parent(args_.node_id);
    wire::Hello me;
    me.role = wire::Role::orphan;
    me.node_id = args_.node_id;
    me.hostname = args_.hostname;
    auto h = overlay_handlers();
    h.ready = [this](wire::Channel& c) {
        log::info("adopted by %s", up_node_ ? map_->hostnames[*up_node_].c_str() : "the front end");
        fe_.reset();  // the enrollment link, if it was still open
        flush_up(c);
        flush_outcomes();  // what the lost parent took but may not have passed on
        ready();
    };
    h.closed = [this, target](wire::Channel& c, wire::Channel::Reason, const std::string& why) {
        const bool was_ready = c.is_ready();
        post([this, target, was_ready, why] {
            if (was_ready) {
                parent_lost(why);
            } else if (target) {
                log::info("ancestor %s unreachable (%s)", map_->hostnames[*target].c_str(), why.c_str());
                tree_->leave(*target);
                connect_up();
            } else {
                log::error("lost the front end: %s", why.c_str());
                stop(1);
            }
        });
    };
    const std::string host = target ? map_->hosts[*target] : args_.fe_host;
    const auto port = target ? static_cast<std::uint16_t>(map_->ports[*target]) : args_.fe_port;
    auto c = wire::Channel::connect(base_, host, port, secret_, args_.job_id, args_.step_id, me, std::move(h));
    if (!c) {
        log::error("%s: %s", target ? map_->hostnames[*target].c_str() : "front end", c.error().c_str());
        stop(1);
        return;
    }
    up_ = std::move(*c);
    up_node_ = target;
}

// A child came: when its own parent was not us, the daemons in between left
// the tree; it may have missed what came down meanwhile.
void Daemon::adopt(wire::Channel& child)
{
    if (!tree_)
        return;
    const std::uint32_t node = child.tag;
    if (node == args_.node_id || !tree_->in_static_subtree(node, args_.node_id)) {
        child.close("node " + std::to_string(node) + " is not below this node");
        return;
    }
    bool skipped = false;
    for (auto a = tree_->static_parent(node); a && *a != args_.node_id; a = tree_->static_parent(*a)) {
        node_left(*a);
        skipped = true;
    }
    if (skipped || child.peer().role == wire::Role::orphan) {
        log::info("adopted %s", map_->hostnames[node].c_str());
        for (const auto& frame : history_)
            child.send(frame);
    }
}

void Daemon::node_left(std::uint32_t node)
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

void Daemon::ready()
{
    // Serving once the namespace is in and the way up is open: a task's
    // first fence must find both.
    if (!namespace_ready_ || (up_ && !up_->is_ready()))
        return;
    if (ready_sent_ || args_.ready_fd < 0)
        return;
    ready_sent_ = true;
    const std::string line = "ready " + std::to_string(::getpid()) + "\n";
    [[maybe_unused]] auto n = ::write(args_.ready_fd, line.data(), line.size());
    ::close(args_.ready_fd);
    args_.ready_fd = -1;
    log::info("serving %zu local ranks of %s", args_.ranks.size(), pmix_->nspace().c_str());
}

Result<bool> Daemon::on_overlay_frame(wire::Channel& from, wire::Type type, std::span<const std::uint8_t> body)
{
    const bool from_above = &from == fe_.get() || &from == up_.get();
    // Until this node serves (the step map is here and the PMIx server up),
    // frames wait: a child's, which may have the map before us, and what
    // comes from above after the map. Outcomes and their acks only pass
    // through, and the map itself is what we wait for.
    const bool passes = type == wire::Type::outcome || type == wire::Type::ack ||
                        (from_above && type == wire::Type::step_map);
    if (!serving_ && !passes) {
        early_.push_back(Held{from_above, type, wire::Bytes(body.begin(), body.end())});
        return Result<bool>::ok(true);
    }
    return dispatch(from_above, &from, type, body);
}

// from: the link it came on (none for a frame kept until the step map).
Result<bool> Daemon::dispatch(bool from_above, wire::Channel* from, wire::Type type, std::span<const std::uint8_t> body)
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
    case wire::Type::ack: {
        auto a = wire::Ack::decode(body);
        if (!a)
            return R::fail(a.error());
        std::erase_if(unacked_, [&](const wire::Outcome& o) { return o.rank == a->rank && o.epoch == a->epoch; });
        drained();
        return R::ok(true);
    }
    case wire::Type::outcome: {  // from a child, on its way to the FE
        auto o = wire::Outcome::decode(body);
        if (!o)
            return R::fail(o.error());
        if (from)
            from->send(wire::Ack{o->rank, o->epoch}.encode());
        unacked_.push_back(*o);
        send_up(o->encode());
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
        if (r->node != args_.node_id) {
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
        if (r->origin != args_.node_id)
            pmix_->deliver_relayed(r->code, r->source_rank, r->info);
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
        terminate_local(t->reason, t->kill_after_ms);
        return R::ok(true);
    }
    default:
        return R::fail("unexpected " + std::string(wire::type_name(type)) + " frame");
    }
}

// ---- events --------------------------------------------------------------------

void Daemon::on_event(const wire::Event& e, bool from_above)
{
    if (!from_above) {  // on its way up to the FE, which sends it to everyone
        send_up(e.encode());
        return;
    }
    if (!events_seen_.insert(e.rank).second)
        return;  // a replay
    failure_known(e.rank, own_end(e.wait_status, e.code == wire::pmix::proc_requested_abort));
    const wire::Bytes frame = e.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    fail_fences_with(e.rank);
    if (notified_.insert(e.rank).second)  // the origin told its own clients already
        pmix_->notify_terminated(e.rank, e.code, e.exit_code);
}

void Daemon::on_node_down(const wire::NodeDown& d)
{
    if (!nodes_down_.insert(d.node).second)
        return;  // a replay
    const wire::Bytes frame = d.encode();
    history_.push_back(frame);
    send_down(std::nullopt, frame);
    log::info("node %s is lost with %zu ranks", d.hostname.c_str(), d.ranks.size());
    tree_->leave(d.node);
    std::vector<std::uint32_t> fresh;
    for (std::uint32_t r : d.ranks) {
        failure_known(r, true);  // lost: nothing it did can be a reaction
        fail_fences_with(r);
        if (notified_.insert(r).second)
            fresh.push_back(r);
    }
    pmix_->notify_node_down(d.node, d.hostname, d.ranks, fresh, d.exit_code);
}

// ---- fences ----------------------------------------------------------------------

// The instance's state here, opened on its first contribution.
Daemon::Fences::Instance& Daemon::open_fence(const std::string& key, const wire::FenceKey& id)
{
    return fences_.open(key, id, [&] { return wire::fence_expected(*tree_, map_->rank_node, args_.node_id, id.ranks); });
}

void Daemon::fence(std::vector<std::uint32_t> ranks, wire::Bytes data, int timeout_s, Done done)
{
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    wire::FenceKey id;
    id.set = wire::fence_set(ranks);
    id.instance = ++fence_calls_[id.set];
    id.ranks = std::move(ranks);
    const std::string key = wire::fence_key(id.ranks, id.instance);
    if (auto ahead = failed_ahead_.find(key); ahead != failed_ahead_.end()) {
        const int status = ahead->second;
        failed_ahead_.erase(ahead);
        done(status, {});
        return;
    }
    if (fences_.finished(id)) {
        done(PMIX_ERROR, {});  // over without this node: its fences are numbered unlike the others'
        return;
    }
    auto& f = open_fence(key, id);
    f.extra.local = std::move(done);
    if (wire::names_dead(f.id.ranks, dead_)) {
        fail_fence(key, PMIX_ERR_PROC_TERM_WO_SYNC);
        return;
    }
    const bool all_in = Fences::add(f, data);
    if (timeout_s > 0)
        after(timeout_s, [this, key] { fence_timed_out(key); });
    if (all_in)
        pass_fence_up(key, f);
}

void Daemon::on_fence_up(const wire::FenceUp& up)
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
        fail_fence(up.key, PMIX_ERR_PROC_TERM_WO_SYNC);
        return;
    }
    auto& f = open_fence(up.key, id);
    if (Fences::add(f, up.data))
        pass_fence_up(up.key, f);
}

// Everything below is in: up it goes, and the result comes back down with
// everyone's data.
void Daemon::pass_fence_up(const std::string& key, Fences::Instance& f)
{
    send_up(wire::FenceUp{key, wire::pmix::success, f.received, std::move(f.data)}.encode());
    f.data.clear();
}

void Daemon::on_fence_down(const wire::FenceDown& down)
{
    send_down(std::nullopt, down.encode());
    const auto id = *wire::parse_fence_key(down.key);  // checked by decode
    if (fences_.finished(id))
        return;  // late: that instance is over here
    finish_fence(down.key, id, down.status, down.data);
}

// An instance is over here: recorded as finished (a late contribution or
// result of it is dropped), its local caller answered, and a local call of
// it that is still to come fails at once.
void Daemon::finish_fence(const std::string& key, const wire::FenceKey& id, int status, const wire::Bytes& data)
{
    auto f = fences_.finish(key, id);
    const auto calls = fence_calls_.find(id.set);
    const bool called_here = calls != fence_calls_.end() && id.instance <= calls->second;
    if (status != wire::pmix::success && !called_here &&
        std::any_of(args_.ranks.begin(), args_.ranks.end(), [&](std::uint32_t r) { return wire::takes_part(id.ranks, r); }))
        failed_ahead_[key] = status;
    if (f && f->extra.local)
        (*f->extra.local)(status, data);
}

// The caller's PMIX_TIMEOUT expired: an instance still pending here fails
// here, below, and through the FE on every node.
void Daemon::fence_timed_out(const std::string& key)
{
    if (!fences_.in_progress(key))
        return;  // over
    log::info("fence %s timed out", key.c_str());
    send_up(wire::FenceUp{key, PMIX_ERR_TIMEOUT, 0, {}}.encode());
    fail_fence(key, PMIX_ERR_TIMEOUT);
}

void Daemon::fail_fences_with(std::uint32_t rank)
{
    // Later fences over it fail at once.
    dead_.insert(rank);
    // The FE fails it for everyone as well; only the local caller here.
    for (const auto& key : fences_.affected([&](const auto& ranks) { return wire::takes_part(ranks, rank); }))
        finish_fence(key, *wire::parse_fence_key(key), PMIX_ERR_PROC_TERM_WO_SYNC, {});
}

// Fails an instance here and in the subtree below, which waits for its
// result from us.
void Daemon::fail_fence(std::string key, int status)
{
    send_down(std::nullopt, wire::FenceDown{key, status, {}}.encode());
    finish_fence(key, *wire::parse_fence_key(key), status, {});
}

// ---- direct modex ------------------------------------------------------------------

void Daemon::direct_modex(std::uint32_t rank, int timeout_s, Done done)
{
    if (rank >= map_->rank_node.size()) {
        done(PMIX_ERR_NOT_FOUND, {});
        return;
    }
    const std::uint64_t id = next_dmodex_++;
    dmodex_waiting_.emplace(id, std::move(done));
    route(map_->rank_node[rank], wire::DmodexReq{id, args_.node_id, map_->rank_node[rank], rank}.encode());
    // Bounded: a request nobody answers fails.
    after(timeout_s > 0 ? timeout_s : default_timeout_s, [this, id] {
        auto it = dmodex_waiting_.find(id);
        if (it == dmodex_waiting_.end())
            return;  // answered
        auto done = std::move(it->second);
        dmodex_waiting_.erase(it);
        done(PMIX_ERR_TIMEOUT, {});
    });
}

void Daemon::after(int seconds, std::function<void()> fn)
{
    after_ms(static_cast<std::uint32_t>(seconds) * 1000, std::move(fn));
}

void Daemon::after_ms(std::uint32_t ms, std::function<void()> fn)
{
    struct Timer {
        std::function<void()> fn;
        event* ev = nullptr;
    };
    auto* t = new Timer{std::move(fn), nullptr};
    t->ev = evtimer_new(
        base_,
        [](evutil_socket_t, short, void* arg) {
            std::unique_ptr<Timer> t(static_cast<Timer*>(arg));
            event_free(t->ev);
            try {
                t->fn();
            } catch (const std::exception& e) {
                log::error("internal error: %s", e.what());
            }
        },
        t);
    const timeval limit{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
    evtimer_add(t->ev, &limit);
}

void Daemon::on_dmodex_req(const wire::DmodexReq& r)
{
    if (r.to != args_.node_id) {
        route(r.to, r.encode());
        return;
    }
    pmix_->dmodex(r.rank, [this, r](int status, wire::Bytes data) {
        route(r.from, wire::DmodexResp{r.id, args_.node_id, r.from, status, std::move(data)}.encode());
    });
}

void Daemon::on_dmodex_resp(const wire::DmodexResp& r)
{
    if (r.to != args_.node_id) {
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

// ---- abort, clients ----------------------------------------------------------------

void Daemon::abort(std::uint32_t rank, int status, std::string message)
{
    // The first call is the failure's moment: Open MPI's MPI_Abort calls
    // PMIx_Abort twice (its peers, then everyone), the teardown in between.
    aborts_.try_emplace(rank, AbortCall{status, now_us()});
    failure_known(rank, false);
    log::info("rank %u called abort with status %d: %s", rank, status, message.c_str());
    send_up(wire::Abort{rank, status, std::move(message)}.encode());
}

void Daemon::data_request(wire::DataRequest request, int timeout_s, DataDone done)
{
    const std::uint64_t id = next_data_++;
    request.id = id;
    request.node = args_.node_id;
    const bool waits_for_publish = request.op == wire::DataRequest::Op::lookup && request.wait;
    data_waiting_.emplace(id, std::move(done));
    send_up(request.encode());
    if (waits_for_publish && timeout_s <= 0)
        return;
    after(timeout_s > 0 ? timeout_s : default_timeout_s, [this, id] {
        auto it = data_waiting_.find(id);
        if (it == data_waiting_.end())
            return;  // answered
        auto done = std::move(it->second);
        data_waiting_.erase(it);
        done(wire::DataReply{id, args_.node_id, PMIX_ERR_TIMEOUT, {}, {}, {}});
    });
}

void Daemon::relay(int code, std::uint32_t source_rank, wire::Bytes info)
{
    send_up(wire::Relay{args_.node_id, code, source_rank, std::move(info)}.encode());
}

void Daemon::terminate_step(const std::string& why)
{
    send_up(wire::Terminate{why}.encode());
}

void Daemon::task_log(std::uint32_t rank, const std::string& text)
{
    send_up(wire::Notice{args_.node_id, rank, text}.encode());
}

void Daemon::client_connected(std::uint32_t rank)
{
    connected_.insert(rank);
    // OpenPMIx talks to its clients over loopback TCP without TCP_NODELAY:
    // an event sent while the client still owes a delayed ACK (right after a
    // fence, say) waits up to 40 ms. The sockets are the library's, but
    // they live in this process: turn Nagle off on every TCP socket we have.
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", std::filesystem::directory_options::skip_permission_denied)) {
        int fd = -1;
        const std::string name = entry.path().filename();
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc())
            continue;
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
            (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) ||
            ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
            continue;
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    }
}

void Daemon::client_finalized(std::uint32_t rank)
{
    finalized_.insert(rank);
}

void Daemon::failure_known(std::uint32_t rank, bool own_end)
{
    if (!first_known_)
        first_known_ = KnownFailure{rank, now_us(), own_end};
}

// Signalled by our own teardown, or a PMIx client (which can have been
// told) that ended or aborted at `when_us`, after this node knew of another
// task's failure. A task that never used PMIx heard of nothing: its failure
// is its own.
bool Daemon::collateral(std::uint32_t rank, std::int64_t when_us, bool own_end) const
{
    // A task that called abort failed by itself when it did: the teardown
    // that abort started may still find it running.
    if (torn_down_.count(rank) && !aborts_.count(rank))
        return true;
    if (!connected_.count(rank) || !first_known_ || first_known_->rank == rank)
        return false;
    // An abort, and the teardown it starts, can be a reaction to this
    // task's own end, whose sockets closed before the end was seen: then
    // the root cause decides (reaction_window_us in policy.hpp).
    const std::int64_t margin = own_end && !first_known_->own_end ? reaction_window_us : 0;
    return when_us > first_known_->at_us + margin;
}

void Daemon::terminate_local(const std::string& why, std::uint32_t kill_after_ms)
{
    if (!torn_down_.empty())
        return;  // a teardown is under way here already
    std::set<std::uint32_t> running;
    for (const auto& [rank, task] : tasks_)
        if (!ended_.count(rank) && !exited(*task))
            running.insert(rank);
    log::info("terminating %zu local tasks: %s", running.size(), why.c_str());
    if (running.empty())
        return;
    torn_down_ = running;
    signal_local(SIGTERM, running);
    signal_local(SIGCONT, running);  // a stopped task must see its SIGTERM
    after_ms(kill_after_ms, [this] {
        std::set<std::uint32_t> left;
        for (std::uint32_t rank : torn_down_)
            if (!ended_.count(rank))
                left.insert(rank);
        if (left.empty())
            return;
        log::info("%zu local tasks outlived SIGTERM: SIGKILL", left.size());
        signal_local(SIGKILL, left);
    });
}

// Asks the kernel, not the loop: an exit whose event is still queued
// behind the one being handled counts, and so does one under way.
bool Daemon::exited(Task& task)
{
    if (task.exited_at_us == 0 && task.pidfd >= 0) {
        pollfd p{task.pidfd, POLLIN, 0};
        // Should the pid be gone and taken by another process between the
        // two looks, the task has exited all the same.
        if ((::poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) || exiting(task.pid))
            task.exited_at_us = now_us();
    }
    return task.exited_at_us != 0;
}

void Daemon::watch_exit(Task& task)
{
    if (task.pidfd < 0)
        return;  // no pidfds on this kernel: the outcome's own time stands
    task.exit_watch = event_new(
        base_, task.pidfd, EV_READ,
        [](evutil_socket_t, short, void* arg) {
            auto* t = static_cast<Task*>(arg);
            if (t->exited_at_us == 0)
                t->exited_at_us = now_us();
        },
        &task);
    if (!task.exit_watch)
        return;
    event_priority_set(task.exit_watch, 0);
    if (event_add(task.exit_watch, nullptr) != 0) {
        event_free(task.exit_watch);
        task.exit_watch = nullptr;
    }
}

void Daemon::signal_local(int sig, const std::set<std::uint32_t>& ranks)
{
    for (std::uint32_t rank : ranks) {
        auto it = tasks_.find(rank);
        if (it == tasks_.end() || ended_.count(rank))
            continue;
        const Task& t = *it->second;
        if (t.pidfd >= 0) {
            if (::syscall(SYS_pidfd_send_signal, t.pidfd, sig, nullptr, 0) != 0 && errno != ESRCH)
                log::error("cannot signal rank %u: %s", rank, std::strerror(errno));
        } else if (t.pid > 0) {
            ::kill(t.pid, sig);  // no pidfds on this kernel
        }
    }
}

// ---- outcomes ----------------------------------------------------------------------

void Daemon::outcome(const wire::Outcome& in)
{
    wire::Outcome o = in;
    log::debug("rank %u ended: wait status %d, at %lld us", o.rank, o.wait_status,
               static_cast<long long>(o.end_time_us));
    ended_.insert(o.rank);
    if (const auto task = tasks_.find(o.rank); task != tasks_.end() && task->second->exited_at_us > 0)
        o.end_time_us = std::min(o.end_time_us, task->second->exited_at_us);
    const auto aborted = aborts_.find(o.rank);
    if (aborted != aborts_.end()) {
        o.flags |= wire::Outcome::flag_aborted;
        o.abort_status = aborted->second.status;
        o.end_time_us = std::min(o.end_time_us, aborted->second.when_us);
    }
    const bool was_client = connected_.count(o.rank) != 0;
    if (was_client) {
        o.flags |= wire::Outcome::flag_finalized_known;
        if (finalized_.count(o.rank))
            o.flags |= wire::Outcome::flag_finalized;
    }
    if (const auto event = wire::pmix::termination_event(o, args_.node_id)) {
        const bool called_abort = aborted != aborts_.end();
        const std::int64_t when = called_abort ? aborted->second.when_us : o.end_time_us;
        const bool own = own_end(o.wait_status, called_abort);
        if (collateral(o.rank, when, own))
            o.flags |= wire::Outcome::flag_collateral;
        failure_known(o.rank, own);
        // Our own clients first, then everyone else through the FE.
        if (notified_.insert(o.rank).second)
            pmix_->notify_terminated(o.rank, event->code, event->exit_code);
        fail_fences_with(o.rank);
        send_up(event->encode());
    }
    unacked_.push_back(o);
    send_up(o.encode());
}

void Daemon::flush_outcomes()
{
    for (const auto& o : unacked_)
        send_up(o.encode());
}

void Daemon::drain()
{
    // Every outcome acknowledged upstream first, and the links of the
    // children this node relays for closed (their own tasks are done too):
    // a relay that left as soon as its own tasks ended would lose what was
    // on its way through it (a direct-modex request, a fence's share) and
    // fail its subtree's fences. Both within one bound, under slurmstepd's
    // patience for the daemon's end.
    if (draining_)
        return;
    draining_ = true;
    if (drained())
        return;
    after_ms(static_cast<std::uint32_t>(drain_limit.count()), [this] {
        if (stopping_)
            return;
        if (!unacked_.empty())
            log::error("%zu outcomes not acknowledged at exit", unacked_.size());
        if (const auto n = linked_children(); n > 0)
            log::info("leaving the tree with %zu child daemons still linked; they link further up", n);
        stop(0);
    });
}

// A drain is done once nothing waits for an ack and no child is linked
// below: the daemon stops. Whether it is stopping.
bool Daemon::drained()
{
    if (draining_ && !stopping_ && unacked_.empty() && linked_children() == 0)
        stop(0);
    return stopping_;
}

std::size_t Daemon::linked_children() const
{
    return static_cast<std::size_t>(std::count_if(children_.begin(), children_.end(),
                                                  [](const auto& c) { return c->is_ready() && !c->is_closed(); }));
}

void Daemon::stop(int code)
{
    if (stopping_)
        return;
    stopping_ = true;
    exit_code_ = code;
    if (anchor_)
        anchor_->release();
    if (args_.ready_fd >= 0) {  // never became ready: the plugin reads EOF
        ::close(args_.ready_fd);
        args_.ready_fd = -1;
    }
    event_base_loopexit(base_, nullptr);
}

// ---- local socket --------------------------------------------------------------------

// A local connection: a task's or root's by the socket's path (pid and
// uid as the kernel says), or slurmstepd's control link.
void Daemon::add_local(int fd, uid_t uid, pid_t pid, bool control)
{
    auto l = std::make_unique<Local>();
    l->d = this;
    l->uid = uid;
    l->pid = pid;
    l->control = control;
    l->bev = bufferevent_socket_new(base_, fd, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(
        l->bev,
        [](bufferevent* bev, void* arg) noexcept {
            auto* l = static_cast<Local*>(arg);
            try {
                evbuffer* in = bufferevent_get_input(bev);
                while (evbuffer_get_length(in) >= wire::header_size) {
                    std::array<std::uint8_t, wire::header_size> head{};
                    evbuffer_copyout(in, head.data(), head.size());
                    auto h = wire::decode_header(head);
                    if (!h || (h->type != wire::Type::env_request && h->type != wire::Type::outcome &&
                               h->type != wire::Type::stop)) {
                        // Bad magic, version, type or length: nothing more of it is read.
                        const std::string why = h ? "a " + std::string(wire::type_name(h->type)) +
                                                        " frame is no local request"
                                                  : h.error();
                        log::info("closed a local connection of pid %d: %s", static_cast<int>(l->pid),
                                  why.c_str());
                        l->drop();
                        return;
                    }
                    if (evbuffer_get_length(in) < wire::header_size + h->length)
                        return;  // the rest is on its way
                    evbuffer_drain(in, wire::header_size);
                    wire::Bytes body(h->length);
                    evbuffer_remove(in, body.data(), body.size());
                    try {
                        l->d->on_local_frame(*l, h->type, body);
                    } catch (const std::exception& e) {
                        log::error("local request: %s", e.what());
                    }
                }
            } catch (...) {
                log::error("closed a local connection of pid %d: internal error", static_cast<int>(l->pid));
                l->drop();
            }
        },
        nullptr,
        [](bufferevent*, short, void* arg) { static_cast<Local*>(arg)->drop(); },
        l.get());
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    locals_.push_back(std::move(l));
}

void Daemon::listen_local()
{
    const std::string path = args_.dir + "/daemon.sock";
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path)) {
        log::error("socket path too long: %s", path.c_str());
        return;
    }
    std::strcpy(sun.sun_path, path.c_str());
    ::unlink(path.c_str());
    local_listener_ = evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Daemon*>(arg);
            ucred cred{};
            socklen_t len = sizeof(cred);
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                (cred.uid != 0 && cred.uid != d->args_.uid)) {
                ::close(fd);
                return;
            }
            d->add_local(fd, cred.uid, cred.pid, false);
        },
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 64, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
    if (!local_listener_)
        log::error("cannot listen on %s: %s", path.c_str(), std::strerror(errno));
    // slurmstepd's control link, which no other process holds.
    if (args_.control_fd >= 0) {
        ::fcntl(args_.control_fd, F_SETFD, FD_CLOEXEC);
        evutil_make_socket_nonblocking(args_.control_fd);
        add_local(std::exchange(args_.control_fd, -1), 0, -1, true);
    }
}

void Daemon::on_local_frame(Local& l, wire::Type type, std::span<const std::uint8_t> body)
{
    auto reply = [&](const wire::Bytes& frame) { bufferevent_write(l.bev, frame.data(), frame.size()); };
    switch (type) {
    case wire::Type::env_request: {
        // A task starts once the event anchor is in place: its default
        // event handler must find the anchor's registration.
        if (!anchor_settled_) {
            env_waiting_.emplace_back(&l, wire::Bytes(body.begin(), body.end()));
            return;
        }
        auto r = wire::EnvRequest::decode(body);
        wire::EnvReply out;
        if (!r || std::find(args_.ranks.begin(), args_.ranks.end(), r->rank) == args_.ranks.end()) {
            out.status = 1;
            out.error = r ? "rank " + std::to_string(r->rank) + " is not a task of this node" : r.error();
        } else if (auto env = pmix_->environment(r->rank); !env) {
            out.status = 1;
            out.error = env.error();
        } else {
            // The task itself asks, before exec: its pid is the peer's.
            auto task = std::make_unique<Task>();
            task->pid = l.pid;
            task->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, l.pid, 0));
            watch_exit(*task);
            tasks_[r->rank] = std::move(task);
            out.env = std::move(*env);
        }
        reply(out.encode());
        return;
    }
    case wire::Type::outcome: {
        if (!l.control)
            return;  // only slurmstepd reports exits, on its control link
        auto o = wire::Outcome::decode(body);
        if (!o)
            return;
        if (std::find(args_.ranks.begin(), args_.ranks.end(), o->rank) == args_.ranks.end()) {
            log::error("an outcome for rank %u, which is not a task of this node, is ignored", o->rank);
            return;
        }
        outcome(*o);
        reply(wire::Ack{o->rank, o->epoch}.encode());
        return;
    }
    case wire::Type::stop:
        if (!l.control)
            return;
        log::debug("stopping at the step's end (%zu outcomes to flush)", unacked_.size());
        reply(wire::Ack{}.encode());
        drain();
        return;
    default:
        return;
    }
}

}  // namespace exitpolicy::pmixd
