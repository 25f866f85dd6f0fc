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
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <thread>

namespace exitpolicy::spank_plugin {
namespace {

}  // namespace

struct FrontEnd::Impl final : OverlayRoot::Links {
    // One connection (protocol/channel.hpp does the handshake); FE thread only.
    struct Conn {
        std::unique_ptr<protocol::Channel> channel;
        std::optional<std::uint32_t> node;  // set once authenticated
        protocol::Role role = protocol::Role::stepd;
        bool adopted = false;               // a daemon's link asking for adoption
        std::string peer_address;           // numeric, for the step map
        // Not ready yet: its place in `pending`.
        std::optional<std::list<Conn*>::iterator> pending_at;
    };

    explicit Impl(const FrontEndSetup& s) : setup(s), collector(s.ntasks, s.nnodes), tree_link(s.nnodes, nullptr) {}

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
        if (hello.node_id >= setup.nnodes) {
            c->channel->close("node id " + std::to_string(hello.node_id) + " is outside the step's " +
                              std::to_string(setup.nnodes) + " nodes");
            return;
        }
        collector.node_ready(hello.node_id, hello.hostname, hello.ranks);
        c->node = hello.node_id;
        c->role = hello.role == protocol::Role::orphan ? protocol::Role::daemon : hello.role;
        c->adopted = hello.role == protocol::Role::orphan;
        if (hello.role == protocol::Role::stepd) {
            overlay->stepd_opened(hello.node_id);
            return;
        }
        if (hello.role == protocol::Role::orphan) {
            // Every daemon between it and us left the tree; it may have
            // missed what we broadcast meanwhile.
            if (!overlay->adopt(hello.node_id)) {
                c->channel->close("adoption asked before the step map");
                return;
            }
            for (const auto& frame : overlay->history())
                send(c, frame);
        }
        tree_link[hello.node_id] = c;
    }

    // A frame by the sender's role: outcomes to the collector (acknowledged
    // once recorded), a daemon's traffic to the overlay root.
    Result<bool> on_frame(Conn* c, protocol::Type type, std::span<const std::uint8_t> body)
    {
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
                recorded(c, collector.record(*c->node, o));
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
        auto r = collector.record(*c->node, body);
        if (!r)
            return Result<bool>::fail(r.error());
        send(c, protocol::Ack{r->frame.rank, r->frame.epoch}.encode());
        recorded(c, *r);
        return Result<bool>::ok(true);
    }

    // What came by slurmstepd's direct path, the overlay root may have to
    // announce.
    void recorded(Conn* c, const OutcomeCollector::Recorded& r)
    {
        if (r.recorded == OutcomeSet::Recorded::added && c->role == protocol::Role::stepd)
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

    Result<bool> listen()
    {
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = htonl(INADDR_ANY);
        const unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
        const std::uint16_t first = setup.ports ? setup.ports->first : 0;
        const std::uint16_t last = setup.ports ? setup.ports->last : 0;
        // Every node's slurmstepd and daemon connect as the step starts: a
        // backlog shorter than that drops their SYNs, and each retries only
        // after a second (the kernel caps it at net.core.somaxconn).
        const int backlog = static_cast<int>(std::clamp<std::uint64_t>(2 * std::uint64_t{setup.nnodes}, 128, 65535));
        for (std::uint32_t p = first; p <= last; ++p) {
            sin.sin_port = htons(static_cast<std::uint16_t>(p));
            listener.reset(evconnlistener_new_bind(base.get(), on_accept, this, flags, backlog,
                                                   reinterpret_cast<sockaddr*>(&sin), sizeof(sin)));
            if (listener)
                break;
        }
        if (!listener) {
            const std::string where = setup.ports ? "any port of port_range " + std::to_string(first) + "-" +
                                                        std::to_string(last)
                                                  : "an ephemeral port";
            return Result<bool>::fail("cannot listen on " + where + ": " + std::strerror(errno));
        }
        // Straight to srun's stderr, once per episode of failed accepts.
        accept_backoff = std::make_unique<protocol::AcceptBackoff>(
            listener.get(),
            [](const std::string& line) { user_line("front end: %s", line.c_str()); },
            [this] { return close_oldest_pending(); });
        evconnlistener_set_error_cb(listener.get(), [](evconnlistener*, void* arg) {
            static_cast<Impl*>(arg)->accept_backoff->failed(EVUTIL_SOCKET_ERROR());
        });
        sockaddr_in bound{};
        socklen_t len = sizeof(bound);
        getsockname(evconnlistener_get_fd(listener.get()), reinterpret_cast<sockaddr*>(&bound), &len);
        port = ntohs(bound.sin_port);
        return Result<bool>::ok(true);
    }

    void stop()
    {
        if (!thread.joinable())
            return;
        event_base_loopexit(base.get(), nullptr);
        thread.join();
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

Result<std::unique_ptr<FrontEnd>> FrontEnd::start(const FrontEndSetup& setup)
{
    using R = Result<std::unique_ptr<FrontEnd>>;
    static const int threads_ok = evthread_use_pthreads();
    if (threads_ok != 0)
        return R::fail("libevent has no thread support");

    auto impl = std::make_unique<Impl>(setup);
    auto secret = protocol::random_secret();
    if (!secret)
        return R::fail(secret.error());
    impl->secret = *secret;
    impl->base.reset(event_base_new());
    if (!impl->base)
        return R::fail("cannot create an event loop");
    impl->overlay = std::make_unique<OverlayRoot>(setup, impl->base.get(), *impl, impl->collector);
    if (auto ok = impl->listen(); !ok)
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
    return impl_->collector.collected();
}

}  // namespace exitpolicy::spank_plugin
