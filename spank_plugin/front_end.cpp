// SPDX-License-Identifier: Apache-2.0
// front_end.cpp - the FE's libevent thread and its links. See front_end.hpp.
//
// Every peer connects here, proves it holds the step's secret and says who
// it is (node, role); its frames go by role: task outcomes to the
// OutcomeCollector (outcome_collector.hpp), a daemon's traffic to the
// OverlayRoot (overlay_root.hpp), which reaches the daemons back through
// the links kept here.
#include "front_end.hpp"
#include "user_line.hpp"

#include "het_placement.hpp"
#include "outcome_collector.hpp"
#include "overlay_root.hpp"

#include "protocol/channel.hpp"
#include "protocol/guard.hpp"
#include "protocol/wire.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

// A socket listening on every address, on the first free port of `ports`
// (an ephemeral one without): non-blocking, close-on-exec.
Result<Reserved> listen_in(const std::optional<PortRange>& ports, int backlog)
{
    const std::uint16_t first = ports ? ports->first : 0;
    const std::uint16_t last = ports ? ports->last : 0;
    int error = 0;
    for (std::uint32_t p = first; p <= last; ++p) {
        protocol::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
            error = errno;
            break;
        }
        const int on = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = htonl(INADDR_ANY);
        sin.sin_port = htons(static_cast<std::uint16_t>(p));
        socklen_t len = sizeof sin;
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0 || ::listen(fd.get(), backlog) != 0 ||
            ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
            error = errno;
            continue;
        }
        Reserved r;
        r.fd = std::move(fd);
        r.port = ntohs(sin.sin_port);
        return Result<Reserved>::ok(std::move(r));
    }
    const std::string where =
        ports ? "any port of port_range " + std::to_string(first) + "-" + std::to_string(last) : "an ephemeral port";
    return Result<Reserved>::fail("cannot listen on " + where + ": " + std::strerror(error));
}

// Before the step's size is known (FrontEnd::reserve); the FE then listens
// with its own backlog.
constexpr int reserved_backlog = 128;

}  // namespace

struct FrontEnd::Impl final : OverlayRoot::Links {
    struct Held;
    // One connection (protocol/channel.hpp does the handshake); FE thread only.
    struct Conn {
        std::unique_ptr<protocol::Channel> channel;
        std::optional<std::uint32_t> node;  // set once authenticated
        protocol::Role role = protocol::Role::stepd;
        bool adopted = false;               // a daemon's link asking for adoption
        std::string peer_address;           // numeric, for the step map
        // Not ready yet: its place in `pending`.
        std::optional<std::list<Conn*>::iterator> pending_at;
        // A heterogeneous step's component: which (its Hello's), where it
        // starts in the step once every component has spoken, and until
        // then what its node said, held.
        std::optional<protocol::Component> component;
        std::optional<HetPlacement::Start> at;
        Held* held = nullptr;
    };
    // What a component's node said before the step's placement was known.
    struct Held {
        Conn* conn = nullptr;  // none once its link closed
        protocol::Hello hello;
        std::vector<protocol::Outcome> outcomes;  // the component's ranks
    };

    explicit Impl(const FrontEndSetup& s) : setup(s), collector(s.ntasks, s.nnodes), tree_link(s.nnodes, nullptr)
    {
        if (s.heterogeneous)
            het.emplace(s.ntasks, s.nnodes);
    }

    FrontEndSetup setup;
    protocol::Secret secret{};
    protocol::EventBaseHandle base;
    protocol::ListenerHandle listener;
    std::uint16_t port = 0;
    std::thread thread;
    std::map<protocol::Channel*, std::unique_ptr<Conn>> conns;  // FE thread only
    std::vector<std::unique_ptr<Conn>> closed_conns;         // freed on the next loop turn
    // The connections not ready yet, oldest first (FE thread only): at most
    // protocol::unauthenticated_cap() of the step's peers.
    std::list<Conn*> pending;
    bool told_over_cap = false;
    std::unique_ptr<protocol::AcceptBackoff> accept_backoff;

    // Shared with srun's main thread.
    OutcomeCollector collector;
    // The root of the daemons' tree (FE thread only; made with the loop).
    std::unique_ptr<OverlayRoot> overlay;
    std::vector<Conn*> tree_link;  // by node id: a daemon's open link to the FE
    // A heterogeneous step's placement and what is held until it is known
    // (FE thread only).
    std::optional<HetPlacement> het;
    std::list<Held> held;

    // ---- OverlayRoot::Links ----
    bool tree_linked(std::uint32_t node) const override { return tree_link[node] != nullptr; }
    void send_tree(const std::vector<std::uint32_t>& nodes, const protocol::Bytes& frame) override
    {
        const auto digest = protocol::frame_digest(frame);
        if (nodes.size() > 1 && frame.size() >= protocol::shared_frame_size) {
            // A fence's result: one copy in srun's memory for all children.
            const auto shared = std::make_shared<const protocol::Bytes>(frame);
            for (std::uint32_t node : nodes)
                tree_link[node]->channel->send(shared, digest);
            return;
        }
        for (std::uint32_t node : nodes)
            tree_link[node]->channel->send(frame, digest);
    }
    void send_daemons(const protocol::Bytes& frame) override
    {
        const auto digest = protocol::frame_digest(frame);
        for (auto& [channel, other] : conns)
            if (other->node && other->role == protocol::Role::daemon)
                channel->send(frame, digest);
    }

    // The channel closed: forget it, free it on the next loop turn (the FE's
    // code up the stack, inside the channel's callback, may still hold the
    // Conn). Anything but the peer's own close is a problem for srun's user.
    void drop(Conn* c, protocol::Channel::Reason reason, const std::string& why)
    {
        if (reason != protocol::Channel::Reason::peer_closed)
            collector.problem("closed a connection: " + why);
        unpend(c);
        if (c->held)
            c->held->conn = nullptr;
        if (c->node)
            collector.link_closed();
        if (c->node && c->role == protocol::Role::stepd) {
            overlay->stepd_closed(*c->node);
        } else if (c->node && tree_link[*c->node] == c) {
            tree_link[*c->node] = nullptr;
            overlay->tree_link_closed(*c->node, c->adopted);
        }
        auto it = conns.find(c->channel.get());
        if (it == conns.end())
            return;
        closed_conns.push_back(std::move(it->second));
        conns.erase(it);
        const timeval now{0, 0};
        event_base_once(
            base.get(), -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) {
                static_cast<Impl*>(arg)->closed_conns.clear();
            },
            this, &now);
    }

    void unpend(Conn* c)
    {
        if (c->pending_at)
            pending.erase(*std::exchange(c->pending_at, std::nullopt));
    }

    // A new connection (fd) is on its way: room for it among those not
    // ready, and descriptors left for the rest of srun, by closing the
    // oldest not ready (no `closed`: it is destroyed, outside its own
    // callbacks).
    void make_room(int fd)
    {
        // A slurmstepd and a daemon per node may come at once.
        const std::size_t cap = protocol::unauthenticated_cap(2 * std::size_t{setup.nnodes});
        std::size_t short_of = protocol::descriptors_short(fd);
        if (pending.size() < cap && short_of == 0)
            return;
        if (!told_over_cap) {
            told_over_cap = true;
            collector.problem(short_of ? "srun was short of descriptors (RLIMIT_NOFILE); the oldest unauthenticated "
                                         "connections were closed"
                                       : "more than " + std::to_string(cap) +
                                             " connections were unauthenticated at once; the oldest were closed");
        }
        while (!pending.empty() && (pending.size() >= cap || short_of > 0)) {
            close_oldest_pending();
            if (short_of > 0)
                --short_of;
        }
    }

    // Whether there was one to close.
    bool close_oldest_pending()
    {
        if (pending.empty())
            return false;
        Conn* oldest = pending.front();
        unpend(oldest);
        conns.erase(oldest->channel.get());
        return true;
    }

    void send(Conn* c, const protocol::Bytes& frame)
    {
        c->channel->send(frame);
    }

    // A peer proved it holds the secret: who it is.
    void on_ready(Conn* c)
    {
        unpend(c);
        const protocol::Hello& hello = c->channel->peer();
        if (het || hello.component.ntasks != 0) {
            component_ready(c, hello);
            return;
        }
        if (hello.node_id >= setup.nnodes) {
            c->channel->close("node id " + std::to_string(hello.node_id) + " is outside the step's " +
                              std::to_string(setup.nnodes) + " nodes");
            return;
        }
        node_joined(c, hello.node_id, hello, hello.ranks);
    }

    // `c` is node `node` of the step, which runs `ranks` (the step's).
    void node_joined(Conn* c, std::uint32_t node, const protocol::Hello& hello, const std::vector<std::uint32_t>& ranks)
    {
        collector.node_ready(node, hello.hostname, ranks);
        c->node = node;
        c->role = hello.role == protocol::Role::orphan ? protocol::Role::daemon : hello.role;
        c->adopted = hello.role == protocol::Role::orphan;
        if (hello.role == protocol::Role::stepd) {
            overlay->stepd_opened(node);
            return;
        }
        if (hello.role == protocol::Role::orphan) {
            // Every daemon between it and us left the tree; it may have
            // missed what we broadcast meanwhile.
            if (!overlay->adopt(node)) {
                c->channel->close("adoption asked before the step map");
                return;
            }
            for (const auto& frame : overlay->history())
                send(c, frame);
        }
        tree_link[node] = c;
    }

    // A heterogeneous step's slurmstepd: held until every component has
    // spoken, then placed in the step (het_placement.hpp).
    void component_ready(Conn* c, const protocol::Hello& hello)
    {
        const protocol::Component& part = hello.component;
        std::string refused;
        if (!het)
            refused = "a heterogeneous step's component, but this step is not one";
        else if (part.ntasks == 0 || hello.role != protocol::Role::stepd)
            refused = "not a component of this heterogeneous step";
        else if (hello.node_id >= part.nnodes)
            refused = "node id " + std::to_string(hello.node_id) + " is outside its component's " +
                      std::to_string(part.nnodes) + " nodes";
        else if (std::any_of(hello.ranks.begin(), hello.ranks.end(), [&](std::uint32_t r) { return r >= part.ntasks; }))
            refused = "a rank outside its component's " + std::to_string(part.ntasks) + " tasks";
        else if (auto added = het->add(part); !added)
            refused = added.error();
        if (!refused.empty()) {
            c->channel->close(refused);
            return;
        }
        c->component = part;
        held.push_back({c, hello, {}});
        c->held = &held.back();
        if (het->complete())
            place_held();
    }

    // Every component has spoken: what each held node said goes into the
    // step, its ranks and node moved to the step's.
    void place_held()
    {
        for (Held& h : held) {
            const HetPlacement::Start start = *het->start(h.hello.component);
            std::vector<std::uint32_t> ranks;
            for (std::uint32_t r : h.hello.ranks)
                ranks.push_back(start.rank + r);
            const std::uint32_t node = start.node + h.hello.node_id;
            if (h.conn) {
                h.conn->held = nullptr;
                h.conn->at = start;
                node_joined(h.conn, node, h.hello, ranks);
            } else {
                collector.node_ready(node, h.hello.hostname, ranks);
                overlay->stepd_opened(node);
            }
            for (protocol::Outcome o : h.outcomes) {
                o.rank = start.rank + o.rank;
                recorded_direct(collector.record(node, o));
            }
            if (!h.conn) {  // its link closed while it was held
                collector.link_closed();
                overlay->stepd_closed(node);
            }
        }
        held.clear();
    }

    // An outcome as the step knows it: a component's rank moved to the
    // step's (one outside its component, outside the step).
    protocol::Outcome in_step(const Conn* c, protocol::Outcome o) const
    {
        if (c->at)
            o.rank = o.rank < c->component->ntasks ? c->at->rank + o.rank : setup.ntasks;
        return o;
    }

    // A held node's outcomes, acknowledged: they are the FE's now.
    Result<bool> hold_frame(Conn* c, protocol::Type type, std::span<const std::uint8_t> body)
    {
        std::vector<protocol::Outcome> list;
        if (type == protocol::Type::outcomes) {
            auto batch = protocol::Outcomes::decode(body);
            if (!batch)
                return Result<bool>::fail(batch.error());
            list = std::move(batch->list);
        } else if (type == protocol::Type::outcome) {
            auto o = protocol::Outcome::decode(body);
            if (!o)
                return Result<bool>::fail(o.error());
            list.push_back(*o);
        } else {
            return Result<bool>::fail("unexpected " + std::string(protocol::type_name(type)) +
                                      " frame before the heterogeneous step's components are known");
        }
        protocol::Acks acks;
        for (const auto& o : list) {
            if (o.rank >= c->component->ntasks)
                collector.problem("rank " + std::to_string(o.rank) + " is outside its component's " +
                                  std::to_string(c->component->ntasks) + " tasks");
            else
                c->held->outcomes.push_back(o);
            acks.list.push_back({o.rank, o.epoch});
        }
        send(c, type == protocol::Type::outcome ? protocol::Ack{list[0].rank, list[0].epoch}.encode() : acks.encode());
        return Result<bool>::ok(true);
    }

    // A frame by the sender's role: outcomes to the collector (acknowledged
    // once recorded), a daemon's traffic to the overlay root.
    Result<bool> on_frame(Conn* c, protocol::Type type, std::span<const std::uint8_t> body)
    {
        if (c->held)
            return hold_frame(c, type, body);
        const OverlayRoot::Peer from{*c->node, c->role, c->peer_address};
        // From a daemon or slurmstepd itself; a standby's address only
        // from its node's slurmstepd.
        if (type == protocol::Type::notice || (type == protocol::Type::standby && c->role == protocol::Role::stepd))
            return overlay->daemon_frame(from, type, body);
        if (type == protocol::Type::outcomes) {
            auto batch = protocol::Outcomes::decode(body);
            if (!batch)
                return Result<bool>::fail(batch.error());
            protocol::Acks acks;
            for (const auto& o : batch->list) {
                recorded(c, collector.record(*c->node, in_step(c, o)));
                acks.list.push_back({o.rank, o.epoch});
            }
            send(c, acks.encode());
            return Result<bool>::ok(true);
        }
        if (type != protocol::Type::outcome) {
            if (c->role == protocol::Role::daemon)
                return overlay->daemon_frame(from, type, body);
            return Result<bool>::fail("unexpected " + std::string(protocol::type_name(type)) + " frame");
        }
        auto o = protocol::Outcome::decode(body);
        if (!o)
            return Result<bool>::fail(o.error());
        const auto r = collector.record(*c->node, in_step(c, *o));
        send(c, protocol::Ack{o->rank, o->epoch}.encode());
        recorded(c, r);
        return Result<bool>::ok(true);
    }

    // What came by slurmstepd's direct path, the overlay root may have to
    // announce.
    void recorded(Conn* c, const OutcomeCollector::Recorded& r)
    {
        if (c->role == protocol::Role::stepd)
            recorded_direct(r);
        else
            overlay->outcome_recorded();
    }
    void recorded_direct(const OutcomeCollector::Recorded& r)
    {
        if (r.recorded == OutcomeSet::Recorded::added)
            overlay->direct_outcome(r.frame, r.task.node);
        overlay->outcome_recorded();
    }

    static void on_accept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int, void* arg) noexcept
    {
        auto* fe = static_cast<Impl*>(arg);
        protocol::guarded([&] { fe->accept(fd, addr); },
                          [fe](const char*) { fe->collector.problem("could not accept a connection"); });
    }

    void accept(evutil_socket_t fd, sockaddr* addr)
    {
        accept_backoff->accepted();
        make_room(fd);
        auto c = std::make_unique<Conn>();
        Conn* raw = c.get();
        char text[INET6_ADDRSTRLEN] = {};
        if (addr && addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(addr)->sin_addr, text, sizeof(text));
        c->peer_address = text;
        protocol::Channel::Handlers h;
        h.ready = [this, raw](protocol::Channel&) { on_ready(raw); };
        h.frame = [this, raw](protocol::Channel&, protocol::Type type, std::span<const std::uint8_t> body) {
            return on_frame(raw, type, body);
        };
        h.closed = [this, raw](protocol::Channel&, protocol::Channel::Reason reason, const std::string& why) {
            drop(raw, reason, why);
        };
        c->channel = protocol::Channel::accept(base.get(), fd, secret, setup.job_id, setup.step_id, std::move(h));
        if (!c->channel) {
            collector.problem("could not accept a connection");
            return;
        }
        protocol::Channel* channel = c->channel.get();
        conns.emplace(channel, std::move(c));
        pending.push_back(raw);
        raw->pending_at = std::prev(pending.end());
    }

    // On the reserved socket, with a backlog for the step's size.
    Result<bool> listen(Reserved reserved)
    {
        // Every node's slurmstepd and daemon connect as the step starts: a
        // backlog shorter than that drops their SYNs, and each retries only
        // after a second (the kernel caps it at net.core.somaxconn).
        const int backlog = static_cast<int>(std::clamp<std::uint64_t>(2 * std::uint64_t{setup.nnodes}, 128, 65535));
        if (::listen(reserved.fd.get(), backlog) != 0)
            return Result<bool>::fail(std::string("cannot listen: ") + std::strerror(errno));
        const unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
        listener.reset(evconnlistener_new(base.get(), on_accept, this, flags, 0, reserved.fd.get()));
        if (!listener)
            return Result<bool>::fail(std::string("cannot listen: ") + std::strerror(errno));
        reserved.fd.release();  // the listener's
        // Straight to srun's stderr, once per episode of failed accepts.
        accept_backoff = std::make_unique<protocol::AcceptBackoff>(
            listener.get(),
            [](const std::string& line) { user_line("front end: %s", line.c_str()); },
            [this] { return close_oldest_pending(); });
        evconnlistener_set_error_cb(listener.get(), [](evconnlistener*, void* arg) {
            static_cast<Impl*>(arg)->accept_backoff->failed(EVUTIL_SOCKET_ERROR());
        });
        port = reserved.port;
        secret = reserved.secret;
        return Result<bool>::ok(true);
    }

    void stop()
    {
        if (!thread.joinable())
            return;
        event_base_loopexit(base.get(), nullptr);
        thread.join();
        held.clear();
        conns.clear();
        closed_conns.clear();
        pending.clear();
        accept_backoff.reset();
        listener.reset();
        overlay.reset();
    }
};

FrontEnd::FrontEnd(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FrontEnd::~FrontEnd()
{
    impl_->stop();
}

std::uint16_t FrontEnd::port() const noexcept
{
    return impl_->port;
}

const protocol::Secret& FrontEnd::secret() const noexcept
{
    return impl_->secret;
}

Result<Reserved> FrontEnd::reserve(const std::optional<PortRange>& ports)
{
    auto secret = protocol::random_secret();
    if (!secret)
        return Result<Reserved>::fail(secret.error());
    auto reserved = listen_in(ports, reserved_backlog);
    if (reserved)
        reserved->secret = *secret;
    return reserved;
}

Result<std::unique_ptr<FrontEnd>> FrontEnd::start(const FrontEndSetup& setup, std::optional<Reserved> reserved)
{
    using R = Result<std::unique_ptr<FrontEnd>>;
    static const int threads_ok = evthread_use_pthreads();
    if (threads_ok != 0)
        return R::fail("libevent has no thread support");

    if (!reserved) {
        auto own = reserve(setup.ports);
        if (!own)
            return R::fail(own.error());
        reserved = std::move(*own);
    }
    auto impl = std::make_unique<Impl>(setup);
    impl->base.reset(event_base_new());
    if (!impl->base)
        return R::fail("cannot create an event loop");
    impl->overlay = std::make_unique<OverlayRoot>(setup, impl->base.get(), *impl, impl->collector);
    if (auto ok = impl->listen(std::move(*reserved)); !ok)
        return R::fail(ok.error());

    // The FE thread takes no signal: srun's own handling stays as it is,
    // and a write to a closed peer gives EPIPE, not SIGPIPE.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        Impl* raw = impl.get();
        impl->thread = std::thread([raw] { event_base_loop(raw->base.get(), EVLOOP_NO_EXIT_ON_EMPTY); });
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return R::fail("cannot start the front end's thread");
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return R::ok(std::unique_ptr<FrontEnd>(new FrontEnd(std::move(impl))));
}

Collected FrontEnd::finish(std::chrono::milliseconds grace)
{
    impl_->collector.wait(grace);
    impl_->stop();
    Collected got = impl_->collector.collected();
    if (impl_->het)  // the FE thread has stopped
        for (const auto& part : impl_->het->parts())
            got.step.components.push_back(part.first_rank);
    return got;
}

}  // namespace exitpolicy::spank_plugin
