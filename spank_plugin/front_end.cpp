// front_end.cpp - the FE's libevent thread. See front_end.hpp.
#include "front_end.hpp"

#include "option_table.hpp"

#include "exitpolicy/report.hpp"
#include "protocol/channel.hpp"
#include "protocol/events.hpp"
#include "protocol/fences.hpp"
#include "protocol/tree.hpp"
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
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace exitpolicy::plugin {
namespace {

struct BaseDeleter {
    void operator()(event_base* b) const noexcept { event_base_free(b); }
};
struct ListenerDeleter {
    void operator()(evconnlistener* l) const noexcept { evconnlistener_free(l); }
};
// How long finish() still waits for outcomes once every link has closed,
// in a step with node daemons (one may be rerouting to us).
constexpr std::chrono::milliseconds settle_after_close{500};

struct EventDeleter {
    void operator()(::event* e) const noexcept { event_free(e); }
};

// "was killed by SIGSEGV", "exited with code 3", ... for srun's user.
std::string how_it_ended(const wire::Event& e)
{
    if (e.code == wire::pmix::proc_requested_abort)
        return "called abort with status " + std::to_string(e.exit_code);
    const WaitStatus s = WaitStatus::decode(e.wait_status);
    if (s.kind == WaitStatus::Kind::signaled)
        return "was killed by " + signal_name(s.signal);
    if (s.kind == WaitStatus::Kind::exited && s.exit_code != 0)
        return "exited with code " + std::to_string(s.exit_code);
    return "exited without finalizing PMIx";
}

}  // namespace

struct FrontEnd::Impl {
    // One connection (protocol/channel.hpp does the handshake); FE thread only.
    struct Conn {
        std::unique_ptr<wire::Channel> channel;
        std::optional<std::uint32_t> node;  // set once authenticated
        wire::Role role = wire::Role::stepd;
        std::string peer_address;           // numeric, for the step map
        // Not ready yet: its place in `pending`.
        std::optional<std::list<Conn*>::iterator> pending_at;
    };

    FrontEndSetup setup;
    wire::Secret secret{};
    std::unique_ptr<event_base, BaseDeleter> base;
    std::unique_ptr<evconnlistener, ListenerDeleter> listener;
    std::uint16_t port = 0;
    std::thread thread;
    std::map<wire::Channel*, std::unique_ptr<Conn>> conns;  // FE thread only
    std::vector<std::unique_ptr<Conn>> closed_conns;         // freed on the next loop turn
    // The connections not ready yet, oldest first (FE thread only): at most
    // wire::unauthenticated_cap() of the step's peers.
    std::list<Conn*> pending;
    bool told_over_cap = false;
    std::unique_ptr<wire::AcceptBackoff> accept_backoff;

    // Shared with srun's main thread.
    std::mutex mu;
    std::condition_variable cv;
    OutcomeSet outcomes{0};
    std::vector<std::string> node_names;
    std::vector<bool> node_seen;   // a stepd link or a daemon of that node authenticated
    std::uint32_t open_links = 0;  // authenticated links still open
    std::vector<std::uint32_t> node_of_rank;
    std::vector<std::string> problems;
    struct Abort {
        int status = 0;
        std::string message;
    };
    std::map<std::uint32_t, Abort> aborts;  // rank -> its PMIx_Abort

    // The overlay root (FE thread only).
    std::vector<std::optional<std::pair<std::string, std::uint32_t>>> enrolled;  // address, port
    std::uint32_t enrolled_count = 0;
    std::optional<wire::Tree> tree;
    bool map_sent = false;  // written under mu (finish() reads it)
    // Fences at the root of the tree: in progress, and finished (a late
    // contribution to one is dropped).
    wire::FenceTable<> fences;
    std::set<std::uint32_t> dead;              // ranks that ended abnormally or were lost
    // Run-through and lost nodes, by node id.
    std::vector<Conn*> tree_link;              // a daemon's open link to the FE
    std::vector<std::uint32_t> stepd_links;    // slurmstepd's open links
    std::vector<bool> daemon_gone;             // left the tree
    std::vector<bool> declared_down;
    // Events and node losses as broadcast, replayed to a daemon adopted later.
    std::vector<wire::Bytes> history;
    // Published data (PMIx_Publish), and lookups waiting for it.
    std::map<std::string, std::pair<std::uint32_t, wire::Bytes>> published;
    std::vector<wire::DataRequest> waiting_lookups;
    // Teardown (FE thread only): scheduled after a failure, sent once.
    bool teardown_scheduled = false;
    bool teardown_sent = false;
    std::string teardown_reason;
    std::unique_ptr<::event, EventDeleter> teardown_timer;  // the grace

    void problem(std::string text)
    {
        std::lock_guard lock(mu);
        if (problems.size() < 20)
            problems.push_back(std::move(text));
    }

    bool done() const  // under mu
    {
        if (outcomes.complete())
            return true;
        if (open_links != 0)
            return false;
        for (bool seen : node_seen)
            if (!seen)
                return false;
        return true;
    }

    // The channel closed: forget it, free it on the next loop turn (the FE's
    // code up the stack, inside the channel's callback, may still hold the
    // Conn). Anything but the peer's own close is a problem for srun's user.
    void drop(Conn* c, wire::Channel::Reason reason, const std::string& why)
    {
        if (reason != wire::Channel::Reason::peer_closed)
            problem("closed a connection: " + why);
        unpend(c);
        if (c->node) {
            std::lock_guard lock(mu);
            --open_links;
        }
        cv.notify_all();
        if (c->node && c->role == wire::Role::stepd) {
            --stepd_links[*c->node];
            check_lost(*c->node);
        } else if (c->node && tree_link[*c->node] == c) {
            tree_link[*c->node] = nullptr;
            // Its way up was this link (not just the enrollment): it left.
            if (tree && !tree->parent(*c->node))
                node_left(*c->node);
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

    // A new connection is on its way: room for it among those not ready,
    // by closing the oldest (no `closed`: it is destroyed, outside its own
    // callbacks).
    void make_room()
    {
        // A slurmstepd and a daemon per node may come at once.
        const std::size_t cap = wire::unauthenticated_cap(2 * std::size_t{setup.nnodes});
        if (pending.size() < cap)
            return;
        if (!told_over_cap) {
            told_over_cap = true;
            problem("more than " + std::to_string(cap) +
                    " connections were unauthenticated at once; the oldest were closed");
        }
        while (pending.size() >= cap) {
            Conn* oldest = pending.front();
            unpend(oldest);
            conns.erase(oldest->channel.get());
        }
    }

    void send(Conn* c, const wire::Bytes& frame)
    {
        c->channel->send(frame);
    }

    // ---- the overlay root: daemons below the FE ----

    // The daemons linked to the FE that are its children in the tree now.
    std::vector<Conn*> children()
    {
        std::vector<Conn*> out;
        if (!tree)
            return out;
        for (std::uint32_t node : tree->children(std::nullopt))
            if (tree_link[node])
                out.push_back(tree_link[node]);
        return out;
    }

    // ---- run-through, lost nodes ----

    // A daemon left the tree (its link to us closed, its parent reported
    // it, or an orphan below it asked us to adopt it).
    void node_left(std::uint32_t node)
    {
        if (!tree || node >= setup.nnodes)
            return;
        daemon_gone[node] = true;
        if (tree->leave(node)) {
            // Fences whose contributions may have been on their way through it.
            fail_fences(wire::pmix::unreach, [&](const std::vector<std::uint32_t>& ranks) {
                return std::any_of(ranks.begin(), ranks.end(), [&](std::uint32_t r) {
                    return r < node_of_rank.size() && tree->in_static_subtree(node_of_rank[r], node);
                });
            });
        }
        check_lost(node);
    }

    // A node is lost when its daemon left the tree and its slurmstepd's
    // link is closed while some of its ranks never reported an end: the
    // daemons tell their clients (PMIX_EVENT_NODE_DOWN, and a termination
    // event per lost rank).
    void check_lost(std::uint32_t node)
    {
        if (!map_sent || !daemon_gone[node] || stepd_links[node] != 0 || declared_down[node])
            return;
        wire::NodeDown down;
        down.node = node;
        down.exit_code = setup.lost_code;
        {
            std::lock_guard lock(mu);
            down.hostname = node_names[node];
            for (std::uint32_t r = 0; r < node_of_rank.size(); ++r)
                if (node_of_rank[r] == node && !outcomes.has(r))
                    down.ranks.push_back(r);
        }
        if (down.ranks.empty())
            return;
        declared_down[node] = true;
        dead.insert(down.ranks.begin(), down.ranks.end());
        std::fprintf(stderr, "exitpolicy: %s: node lost (its node daemon and slurmstepd are gone) with rank%s %s\n",
                     down.hostname.c_str(), down.ranks.size() == 1 ? "" : "s", compress_ranks(down.ranks).c_str());
        fail_fences(wire::pmix::proc_term_wo_sync, [&](const std::vector<std::uint32_t>& ranks) {
            return std::any_of(down.ranks.begin(), down.ranks.end(),
                               [&](std::uint32_t r) { return std::binary_search(ranks.begin(), ranks.end(), r); });
        });
        const wire::Bytes frame = down.encode();
        history.push_back(frame);
        broadcast(frame);
        failure(down.hostname + " was lost");
    }

    void broadcast(const wire::Bytes& frame)
    {
        for (Conn* c : children())
            send(c, frame);
    }

    // ---- teardown: failures end a step that is not recoverable ----

    // Every daemon ends its node's tasks that still run. Kept in the
    // history: a daemon adopted later must hear it too.
    void teardown(const std::string& reason)
    {
        if (teardown_sent)
            return;
        teardown_sent = true;
        wire::Terminate t;
        t.reason = reason;
        t.kill_after_ms = static_cast<std::uint32_t>(setup.kill_after.count());
        const wire::Bytes frame = t.encode();
        history.push_back(frame);
        broadcast(frame);
    }

    // A failure that ends the step unless it is recoverable: the survivors
    // have been told; they get teardown_grace to act on it first.
    void failure(const std::string& what)
    {
        if (setup.recoverable || teardown_scheduled || teardown_sent)
            return;
        teardown_scheduled = true;
        teardown_reason = what;
        teardown_timer.reset(evtimer_new(
            base.get(),
            [](evutil_socket_t, short, void* arg) {
                auto* fe = static_cast<Impl*>(arg);
                try {
                    fe->teardown_after(fe->teardown_reason);
                } catch (...) {
                    fe->problem("the teardown could not be sent");
                }
            },
            this));
        const auto ms = setup.teardown_grace.count();
        const timeval grace{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
        if (!teardown_timer || evtimer_add(teardown_timer.get(), &grace) != 0)
            teardown_after(what);
    }

    // The grace is over: unless every task has ended meanwhile, the rest go.
    void teardown_after(const std::string& what)
    {
        {
            std::lock_guard lock(mu);
            if (outcomes.complete())
                return;
        }
        std::fprintf(stderr, "exitpolicy: %s: ending the step (srun --%s lets the others run on)\n", what.c_str(),
                     opt_recoverable.option);
        teardown(what);
    }

    std::string where(std::uint32_t rank)
    {
        std::lock_guard lock(mu);
        const std::uint32_t node = rank < node_of_rank.size() ? node_of_rank[rank] : setup.nnodes;
        return "rank " + std::to_string(rank) + " on " + (node < node_names.size() ? node_names[node] : "?");
    }

    void route(std::uint32_t to, const wire::Bytes& frame)
    {
        const auto hop = tree ? tree->next_hop(std::nullopt, to) : std::nullopt;
        for (Conn* c : children())
            if (hop && *c->node == *hop)
                send(c, frame);
    }

    void enroll(Conn* c, const wire::Enroll& e)
    {
        auto& slot = enrolled[*c->node];
        if (!slot)
            ++enrolled_count;
        slot = std::make_pair(c->peer_address, e.port);
        if (enrolled_count < setup.nnodes || map_sent)
            return;
        wire::StepMap map;
        map.nspace = "exitpolicy." + std::to_string(setup.job_id) + "." + std::to_string(setup.step_id);
        map.fanout = setup.fanout;
        {
            std::lock_guard lock(mu);
            map.hostnames = node_names;
            map.rank_node = node_of_rank;
        }
        map.recoverable = setup.recoverable;
        for (const auto& slot_of : enrolled) {
            map.hosts.push_back(slot_of->first);
            map.ports.push_back(slot_of->second);
        }
        tree.emplace(setup.nnodes, setup.fanout);
        {
            std::lock_guard lock(mu);  // finish() reads it on srun's thread
            map_sent = true;
        }
        const wire::Bytes frame = map.encode();
        for (auto& [channel, other] : conns)
            if (other->node && other->role == wire::Role::daemon)
                send(other.get(), frame);
    }

    void fence_up(const wire::FenceUp& up)
    {
        const auto id = *wire::parse_fence_key(up.key);  // checked by decode
        if (fences.finished(id))
            return;  // late: that instance is over
        // A subtree that failed it (a timeout), or a participant known
        // dead: it fails for everyone at once.
        if (up.status != wire::pmix::success || wire::names_dead(id.ranks, dead)) {
            fail_fence(up.key, id, up.status != wire::pmix::success ? up.status : wire::pmix::proc_term_wo_sync);
            return;
        }
        auto& f = fences.open(up.key, id, [&] { return wire::fence_expected(*tree, node_of_rank, std::nullopt, id.ranks); });
        if (!wire::FenceTable<>::add(f, up.data))
            return;
        wire::Bytes all = std::move(f.data);
        fences.finish(up.key, id);
        broadcast(wire::FenceDown{up.key, wire::pmix::success, std::move(all)}.encode());
    }

    // Fails an instance on every node (they drop what they already ended).
    void fail_fence(const std::string& key, const wire::FenceKey& id, int status)
    {
        broadcast(wire::FenceDown{key, status, {}}.encode());
        fences.finish(key, id);
    }

    void event(const wire::Event& e)
    {
        dead.insert(e.rank);
        const wire::Bytes frame = e.encode();
        history.push_back(frame);
        broadcast(frame);
        // Tasks that never used our PMIx keep Slurm's own rules (-K, ...).
        if (e.client)
            failure(where(e.rank) + " " + how_it_ended(e));
        // A fence that loses a participant fails everywhere.
        fail_fences(wire::pmix::proc_term_wo_sync, [&](const std::vector<std::uint32_t>& ranks) {
            return std::binary_search(ranks.begin(), ranks.end(), e.rank);
        });
    }

    // Fails, on every node, each fence in progress at the root whose
    // participants (sorted ranks; every rank when empty) `hit` says are
    // affected.
    template <typename Hit>
    void fail_fences(int status, Hit hit)
    {
        const auto failed =
            fences.affected([&](const std::vector<std::uint32_t>& ranks) { return ranks.empty() || hit(ranks); });
        for (const auto& key : failed)
            fail_fence(key, *wire::parse_fence_key(key), status);
    }
    // Answers a lookup if it can: true when answered.
    bool try_lookup(const wire::DataRequest& r)
    {
        wire::DataReply reply{r.id, r.node, 0, {}, {}, {}};
        for (const auto& key : r.keys) {
            auto it = published.find(key);
            if (it == published.end())
                continue;
            reply.keys.push_back(key);
            reply.ranks.push_back(it->second.first);
            reply.values.push_back(it->second.second);
        }
        const bool all = reply.keys.size() == r.keys.size();
        if (!all && r.wait)
            return false;
        if (reply.keys.empty())
            reply.status = wire::pmix::not_found;
        route(r.node, reply.encode());
        return true;
    }

    void data_request(const wire::DataRequest& r)
    {
        using Op = wire::DataRequest::Op;
        wire::DataReply reply{r.id, r.node, 0, {}, {}, {}};
        switch (r.op) {
        case Op::publish:
            for (std::size_t i = 0; i < r.keys.size(); ++i)
                if (published.count(r.keys[i]))
                    reply.status = wire::pmix::duplicate_key;  // the first publication stands
            if (reply.status == wire::pmix::success)
                for (std::size_t i = 0; i < r.keys.size(); ++i)
                    published[r.keys[i]] = {r.rank, r.values[i]};
            route(r.node, reply.encode());
            std::erase_if(waiting_lookups, [this](const wire::DataRequest& w) { return try_lookup(w); });
            return;
        case Op::lookup:
            if (!try_lookup(r))
                waiting_lookups.push_back(r);
            return;
        case Op::unpublish:
            std::erase_if(published, [&](const auto& kv) {
                return kv.second.first == r.rank &&
                       (r.keys.empty() || std::find(r.keys.begin(), r.keys.end(), kv.first) != r.keys.end());
            });
            route(r.node, reply.encode());
            return;
        }
    }

    Result<bool> daemon_frame(Conn* c, wire::Type type, std::span<const std::uint8_t> body)
    {
        switch (type) {
        case wire::Type::data_request: {
            auto r = wire::DataRequest::decode(body);
            if (!r)
                return Result<bool>::fail(r.error());
            data_request(*r);
            return Result<bool>::ok(true);
        }
        case wire::Type::gone: {
            auto g = wire::Gone::decode(body);
            if (!g)
                return Result<bool>::fail(g.error());
            node_left(g->node);
            return Result<bool>::ok(true);
        }
        case wire::Type::enroll: {
            auto e = wire::Enroll::decode(body);
            if (!e)
                return Result<bool>::fail(e.error());
            enroll(c, *e);
            return Result<bool>::ok(true);
        }
        case wire::Type::event: {
            auto e = wire::Event::decode(body);
            if (!e)
                return Result<bool>::fail(e.error());
            event(*e);
            return Result<bool>::ok(true);
        }
        case wire::Type::fence_up: {
            auto f = wire::FenceUp::decode(body);
            if (!f || !tree)
                return Result<bool>::fail(f ? std::string("a fence before the step map") : f.error());
            fence_up(*f);
            return Result<bool>::ok(true);
        }
        case wire::Type::dmodex_req: {
            auto r = wire::DmodexReq::decode(body);
            if (!r)
                return Result<bool>::fail(r.error());
            route(r->to, r->encode());
            return Result<bool>::ok(true);
        }
        case wire::Type::dmodex_resp: {
            auto r = wire::DmodexResp::decode(body);
            if (!r)
                return Result<bool>::fail(r.error());
            route(r->to, r->encode());
            return Result<bool>::ok(true);
        }
        case wire::Type::abort: {
            auto a = wire::Abort::decode(body);
            if (!a)
                return Result<bool>::fail(a.error());
            bool first = false;
            {
                std::lock_guard lock(mu);
                first = aborts.empty();
                aborts.emplace(a->rank, Abort{a->status, a->message});
            }
            // An abort ends the step at once, recoverable or not.
            if (first)
                teardown(where(a->rank) + " called abort with status " + std::to_string(a->status));
            return Result<bool>::ok(true);
        }
        case wire::Type::notice: {
            auto n = wire::Notice::decode(body);
            if (!n)
                return Result<bool>::fail(n.error());
            // Straight to srun's stderr, as it happens. What a task logged
            // reads as the task wrote it, as its own stderr would (it is not
            // the plugin's to prefix: the report's lines stay the plugin's).
            // A daemon's notice names its node (it may come up the tree);
            // slurmstepd's comes on its own link.
            if (n->rank != wire::Notice::no_rank && c->role != wire::Role::stepd) {
                const bool newline = !n->text.empty() && n->text.back() == '\n';
                std::fprintf(stderr, "%s%s", n->text.c_str(), newline ? "" : "\n");
                return Result<bool>::ok(true);
            }
            const std::uint32_t from = c->role == wire::Role::stepd ? *c->node : n->node;
            const std::string node = from < node_names.size() ? node_names[from] : "?";
            std::fprintf(stderr, "exitpolicy: %s: %s\n", node.c_str(), n->text.c_str());
            return Result<bool>::ok(true);
        }
        case wire::Type::relay: {
            auto r = wire::Relay::decode(body);
            if (!r)
                return Result<bool>::fail(r.error());
            broadcast(r->encode());
            return Result<bool>::ok(true);
        }
        case wire::Type::terminate: {
            auto t = wire::Terminate::decode(body);
            if (!t)
                return Result<bool>::fail(t.error());
            teardown(t->reason);
            return Result<bool>::ok(true);
        }
        default:
            return Result<bool>::fail("unexpected " + std::string(wire::type_name(type)) + " frame");
        }
    }

    // A peer proved it holds the secret: who it is.
    void on_ready(Conn* c)
    {
        unpend(c);
        const wire::Hello& hello = c->channel->peer();
        if (hello.node_id >= setup.nnodes) {
            c->channel->close("node id " + std::to_string(hello.node_id) + " is outside the step's " +
                              std::to_string(setup.nnodes) + " nodes");
            return;
        }
        {
            std::lock_guard lock(mu);
            node_names[hello.node_id] = hello.hostname;
            node_seen[hello.node_id] = true;
            ++open_links;
            for (std::uint32_t rank : hello.ranks)
                if (rank < node_of_rank.size())
                    node_of_rank[rank] = hello.node_id;
        }
        c->node = hello.node_id;
        c->role = hello.role == wire::Role::orphan ? wire::Role::daemon : hello.role;
        if (hello.role == wire::Role::stepd) {
            ++stepd_links[hello.node_id];
            return;
        }
        if (hello.role == wire::Role::orphan) {
            // Every daemon between it and us left the tree; it may have
            // missed what we broadcast meanwhile.
            if (!tree) {
                c->channel->close("adoption asked before the step map");
                return;
            }
            for (auto a = tree->static_parent(hello.node_id); a; a = tree->static_parent(*a))
                node_left(*a);
            for (const auto& frame : history)
                send(c, frame);
        }
        tree_link[hello.node_id] = c;
    }

    Result<bool> on_frame(Conn* c, wire::Type type, std::span<const std::uint8_t> body)
    {
        if (type == wire::Type::notice)  // from a daemon or slurmstepd itself
            return daemon_frame(c, type, body);
        if (type == wire::Type::outcomes) {
            auto batch = wire::Outcomes::decode(body);
            if (!batch)
                return Result<bool>::fail(batch.error());
            wire::Acks acks;
            for (const auto& o : batch->list) {
                record(c, o);
                acks.list.push_back({o.rank, o.epoch});
            }
            send(c, acks.encode());
            return Result<bool>::ok(true);
        }
        if (type != wire::Type::outcome) {
            if (c->role == wire::Role::daemon)
                return daemon_frame(c, type, body);
            return Result<bool>::fail("unexpected " + std::string(wire::type_name(type)) + " frame");
        }
        auto o = wire::Outcome::decode(body);
        if (!o)
            return Result<bool>::fail(o.error());
        record(c, *o);
        send(c, wire::Ack{o->rank, o->epoch}.encode());
        return Result<bool>::ok(true);
    }

    // One task's end, from its node or relayed up the tree.
    void record(Conn* c, const wire::Outcome& o)
    {
        TaskOutcome t;
        t.rank = o.rank;
        t.epoch = o.epoch;
        t.node = *c->node;  // the sender: its own task, unless relayed up the tree
        {
            std::lock_guard lock(mu);
            if (o.rank < node_of_rank.size() && node_of_rank[o.rank] < setup.nnodes)
                t.node = node_of_rank[o.rank];
        }
        t.pid = o.pid;
        t.wait_status = o.wait_status;
        t.end_time_us = o.end_time_us;
        if (o.flags & wire::Outcome::flag_aborted)
            t.abort_status = o.abort_status;
        if (o.flags & wire::Outcome::flag_finalized_known)
            t.finalized = (o.flags & wire::Outcome::flag_finalized) != 0;
        t.collateral = (o.flags & wire::Outcome::flag_collateral) != 0;
        OutcomeSet::Recorded recorded;
        {
            std::lock_guard lock(mu);
            recorded = outcomes.record(t);
        }
        if (recorded == OutcomeSet::Recorded::out_of_range)
            problem("node " + std::to_string(*c->node) + " reported rank " + std::to_string(t.rank) +
                    ", which is not a task of this step");
        cv.notify_all();
        // A node whose daemon is gone cannot tell the others' clients of its
        // tasks' ends: the FE does, for what comes by the direct path.
        if (recorded == OutcomeSet::Recorded::added && c->role == wire::Role::stepd && map_sent &&
            t.node < setup.nnodes && daemon_gone[t.node])
            if (const auto e = wire::pmix::termination_event(o, t.node))
                event(*e);
    }

    static void on_accept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int, void* arg) noexcept
    {
        auto* fe = static_cast<Impl*>(arg);
        try {
            fe->accept_backoff->accepted();
            fe->make_room();
            auto c = std::make_unique<Conn>();
            Conn* raw = c.get();
            char text[INET6_ADDRSTRLEN] = {};
            if (addr && addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(addr)->sin_addr, text, sizeof(text));
            c->peer_address = text;
            wire::Channel::Handlers h;
            h.ready = [fe, raw](wire::Channel&) { fe->on_ready(raw); };
            h.frame = [fe, raw](wire::Channel&, wire::Type type, std::span<const std::uint8_t> body) {
                return fe->on_frame(raw, type, body);
            };
            h.closed = [fe, raw](wire::Channel&, wire::Channel::Reason reason, const std::string& why) {
                fe->drop(raw, reason, why);
            };
            c->channel = wire::Channel::accept(fe->base.get(), fd, fe->secret, fe->setup.job_id,
                                               fe->setup.step_id, std::move(h));
            if (!c->channel) {
                fe->problem("could not accept a connection");
                return;
            }
            wire::Channel* channel = c->channel.get();
            fe->conns.emplace(channel, std::move(c));
            fe->pending.push_back(raw);
            raw->pending_at = std::prev(fe->pending.end());
        } catch (...) {
            fe->problem("could not accept a connection");
        }
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
        accept_backoff = std::make_unique<wire::AcceptBackoff>(listener.get(), [](const std::string& line) {
            std::fprintf(stderr, "exitpolicy: front end: %s\n", line.c_str());
        });
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
        teardown_timer.reset();
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

const wire::Secret& FrontEnd::secret() const noexcept
{
    return impl_->secret;
}

Result<std::unique_ptr<FrontEnd>> FrontEnd::start(const FrontEndSetup& setup)
{
    using R = Result<std::unique_ptr<FrontEnd>>;
    static const int threads_ok = evthread_use_pthreads();
    if (threads_ok != 0)
        return R::fail("libevent has no thread support");

    auto impl = std::make_unique<Impl>();
    impl->setup = setup;
    impl->outcomes = OutcomeSet(setup.ntasks);
    impl->node_names.assign(setup.nnodes, "?");
    impl->node_seen.assign(setup.nnodes, false);
    impl->enrolled.assign(setup.nnodes, std::nullopt);
    impl->node_of_rank.assign(setup.ntasks, setup.nnodes);  // unknown until a node says
    impl->tree_link.assign(setup.nnodes, nullptr);
    impl->stepd_links.assign(setup.nnodes, 0);
    impl->daemon_gone.assign(setup.nnodes, false);
    impl->declared_down.assign(setup.nnodes, false);
    auto secret = wire::random_secret();
    if (!secret)
        return R::fail(secret.error());
    impl->secret = *secret;
    impl->base.reset(event_base_new());
    if (!impl->base)
        return R::fail("cannot create an event loop");
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
    Collected out;
    {
        const auto deadline = std::chrono::steady_clock::now() + grace;
        std::unique_lock lock(impl_->mu);
        impl_->cv.wait_until(lock, deadline, [this] { return impl_->done(); });
        // Every link closed with outcomes missing: a node daemon whose
        // parent in the tree has just stopped is on its way to us with
        // them. A moment more, within the grace.
        if (!impl_->outcomes.complete() && impl_->map_sent)
            impl_->cv.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + settle_after_close),
                                 [this] { return impl_->outcomes.complete(); });
    }
    impl_->stop();
    std::lock_guard lock(impl_->mu);
    out.nnodes = impl_->setup.nnodes;
    for (bool seen : impl_->node_seen)
        out.nodes_reporting += seen ? 1 : 0;
    out.missing = impl_->outcomes.missing();
    out.step.nodes = impl_->node_names;
    out.step.nodes.push_back("?");  // where ranks of unknown nodes are placed
    out.step.tasks = impl_->outcomes.finish(impl_->node_of_rank);
    // An abort the daemons reported stands even when the task's outcome
    // came by the direct path, which cannot know it.
    for (auto& t : out.step.tasks)
        if (auto a = impl_->aborts.find(t.rank); a != impl_->aborts.end()) {
            if (!t.abort_status)
                t.abort_status = a->second.status;
            t.abort_message = a->second.message;
        }
    out.problems = impl_->problems;
    return out;
}

}  // namespace exitpolicy::plugin
