// SPDX-License-Identifier: Apache-2.0
// overlay_root.cpp - the root of the node daemons' tree, on the FE thread.
// See overlay_root.hpp.
#include "overlay_root.hpp"
#include "user_line.hpp"

#include "option_table.hpp"

#include "exitpolicy/report.hpp"
#include "protocol/events.hpp"
#include "protocol/guard.hpp"

#include <event2/bufferevent.h>
#include <event2/event.h>

#include <algorithm>
#include <cstdio>

namespace exitpolicy::spank_plugin {
namespace {

// "was killed by SIGSEGV", "exited with code 3", ... for srun's user.
std::string how_it_ended(const protocol::Event& e)
{
    if (e.code == protocol::pmix::proc_requested_abort)
        return "called abort with status " + std::to_string(e.exit_code);
    const WaitStatus s = WaitStatus::decode(e.wait_status);
    if (s.kind == WaitStatus::Kind::signaled)
        return "was killed by " + signal_name(s.signal);
    if (s.kind == WaitStatus::Kind::exited && s.exit_code != 0)
        return "exited with code " + std::to_string(s.exit_code);
    return "exited without finalizing";
}

}  // namespace

OverlayRoot::OverlayRoot(const FrontEndSetup& step, event_base* loop, Links& fe_links, OutcomeCollector& collected)
    : setup(step),
      base(loop),
      links(fe_links),
      collector(collected),
      enrolled(step.nnodes, std::nullopt),
      standbys(step.nnodes, loop, *this, collected),
      lost(step.nnodes, step.lost_code, tree, *this, collected),
      published([this](std::uint32_t node, const protocol::Bytes& frame) { route(node, frame); })
{
}

// ---- what the links tell ----

void OverlayRoot::stepd_closed(std::uint32_t node)
{
    if (lost.stepd_closed(node) == 0)
        standbys.slurmstepd_gone(node);
    lost.check_lost(node);
}

void OverlayRoot::direct_outcome(const protocol::Outcome& o, std::uint32_t node)
{
    // A node whose daemon is gone, or has not started yet (it stands by,
    // or was starting when the task ended), cannot tell the others'
    // clients of its tasks' ends: the FE does, for what comes by the
    // direct path and no daemon told. Before the step map the event waits
    // in the history, which every node hears after its map.
    if (node >= setup.nnodes || dead.count(o.rank))
        return;
    if ((map_sent() && lost.daemon_gone(node)) || standbys.stands_by(node))
        if (const auto e = protocol::pmix::termination_event(o, node))
            event(*e);
}

// Every task has ended, or is on a node declared lost (whose outcomes may
// never come, and whose data nobody can serve any more).
void OverlayRoot::outcome_recorded()
{
    const auto& lost_ranks = lost.lost_ranks();
    if (step_done_sent || !map_sent() || !(collector.complete() || (!lost_ranks.empty() && collector.missing_only(lost_ranks))))
        return;
    step_done_sent = true;
    const protocol::Bytes frame = protocol::StepDone{}.encode();
    history_.push_back(frame);
    broadcast(frame);
}

// The daemons linked to the FE that are its children in the tree now.
std::vector<std::uint32_t> OverlayRoot::children()
{
    std::vector<std::uint32_t> out;
    if (!tree)
        return out;
    for (std::uint32_t node : tree->children(std::nullopt))
        if (links.tree_linked(node))
            out.push_back(node);
    return out;
}

void OverlayRoot::broadcast(const protocol::Bytes& frame)
{
    links.send_tree(children(), frame);
}

// ---- teardown: failures end a step that is not recoverable ----

// Every daemon ends its node's tasks that still run. Kept in the
// history: a daemon adopted later must hear it too.
void OverlayRoot::teardown(const std::string& reason)
{
    if (teardown_sent)
        return;
    teardown_sent = true;
    protocol::Terminate t;
    t.reason = reason;
    t.kill_after_ms = static_cast<std::uint32_t>(setup.kill_after.count());
    const protocol::Bytes frame = t.encode();
    history_.push_back(frame);
    broadcast(frame);
}

// A failure that ends the step unless it is recoverable: the survivors
// have been told; they get teardown_grace to act on it first.
void OverlayRoot::failure(const std::string& what)
{
    if (setup.recoverable || teardown_scheduled || teardown_sent)
        return;
    teardown_scheduled = true;
    teardown_reason = what;
    teardown_timer.reset(evtimer_new(
        base,
        [](evutil_socket_t, short, void* arg) {
            auto* root = static_cast<OverlayRoot*>(arg);
            protocol::guarded([root] { root->teardown_after(root->teardown_reason); },
                              [root](const char*) { root->collector.problem("the teardown could not be sent"); });
        },
        this));
    const auto ms = setup.teardown_grace.count();
    const timeval grace{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
    if (!teardown_timer || evtimer_add(teardown_timer.get(), &grace) != 0)
        teardown_after(what);
}

// The grace is over: unless every task has ended meanwhile, the rest go.
void OverlayRoot::teardown_after(const std::string& what)
{
    if (collector.complete())
        return;
    user_line("%s: ending the step (srun --%s lets the others run on)", what.c_str(), opt_recoverable.option);
    teardown(what);
}

// ---- the tree's traffic: enrollment, routing, fences, events, data ----

void OverlayRoot::route(std::uint32_t to, const protocol::Bytes& frame)
{
    const auto hop = tree ? tree->next_hop(std::nullopt, to) : std::nullopt;
    const auto linked = children();
    if (hop && std::find(linked.begin(), linked.end(), *hop) != linked.end())
        links.send_tree({*hop}, frame);
}

Result<bool> OverlayRoot::enroll(const Peer& from, const protocol::Enroll& e)
{
    if (standbys.absent(from.node) && map_sent()) {
        user_line("%s: that node's PMIx service reached srun too late, after the other nodes had been wired up "
                  "without it (a slow or overloaded node); its tasks get no PMIx service",
                  collector.node_name(from.node).c_str());
        return Result<bool>::fail("enrolled after the step map");
    }
    auto& slot = enrolled[from.node];
    if (!slot)
        ++enrolled_count;
    slot = std::make_pair(from.address, e.port);
    standbys.enrolled(from.node);
    // The first daemon: the others that stand by start now.
    if (enrolled_count == 1 && !map_sent())
        standbys.wake_all();
    send_map();
    return Result<bool>::ok(true);
}

// Once every node has enrolled, or is absent, and one has: the map.
void OverlayRoot::send_map()
{
    if (map_sent() || enrolled_count == 0 || enrolled_count + standbys.absent_count() < setup.nnodes)
        return;
    protocol::StepMap map;
    map.nspace = protocol::step_nspace(setup.job_id, setup.step_id);
    map.fanout = setup.fanout;
    map.hostnames = collector.hostnames();
    map.rank_node = collector.rank_nodes();
    map.recoverable = setup.recoverable;
    for (std::uint32_t node = 0; node < setup.nnodes; ++node) {
        const auto& slot_of = enrolled[node];
        map.hosts.push_back(slot_of ? slot_of->first : std::string());
        map.ports.push_back(slot_of ? slot_of->second : 0);  // absent
    }
    tree.emplace(setup.nnodes, setup.fanout);
    for (std::uint32_t node = 0; node < setup.nnodes; ++node)
        if (standbys.absent(node)) {
            tree->leave(node);
            lost.gone_from_start(node);
        }
    collector.step_map_sent();  // finish() waits a moment more for the tree
    links.send_daemons(map.encode());
    // What came before there was a tree went to nobody: a task that ended
    // before the map (the tasks start before the daemons have it, their
    // PMIx server starting with its first client), a node lost before it.
    // Each node hears it now, after its map.
    for (const auto& frame : history_)
        broadcast(frame);
    for (std::uint32_t node = 0; node < setup.nnodes; ++node)
        if (standbys.absent(node))
            lost.check_lost(node);
}

void OverlayRoot::fence_up(const protocol::FenceUp& up)
{
    const auto id = *protocol::parse_fence_key(up.key);  // checked by decode
    if (fences.finished(id))
        return;  // late: that instance is over
    // A subtree that failed it (a timeout), or a participant known
    // dead: it fails for everyone at once.
    if (up.status == protocol::pmix::out_of_resource) {
        fence_too_large(up.key, id);  // a subtree's data alone
        return;
    }
    if (up.status != protocol::pmix::success || protocol::names_dead(id.ranks, dead)) {
        fail_fence(up.key, id, up.status != protocol::pmix::success ? up.status : protocol::pmix::proc_term_wo_sync);
        return;
    }
    auto& f = fences.open(up.key, id, [&] {
        return collector.with_rank_nodes([&](const std::vector<std::uint32_t>& node_of_rank) {
            return protocol::fence_expected(*tree, node_of_rank, std::nullopt, id.ranks);
        });
    });
    if (!protocol::FenceTable<>::add(f, up.data))
        return;
    protocol::Bytes all = std::move(f.data);
    auto result = protocol::FenceDown{up.key, protocol::pmix::success, std::move(all)}.encode();
    if (result.empty()) {
        fence_too_large(up.key, id);
        return;
    }
    fences.finish(up.key, id);
    broadcast(result);
}

// What every participant contributed is more than a frame carries: the
// instance fails on every node with PMIX_ERR_OUT_OF_RESOURCE, srun's user
// is told why, and every link stays.
void OverlayRoot::fence_too_large(const std::string& key, const protocol::FenceKey& id)
{
    user_line("a fence over %s: the data its participants put is over the %u MiB a message between nodes carries; "
              "PMIx_Fence fails with PMIX_ERR_OUT_OF_RESOURCE (collect less, or fetch it with PMIx_Get on demand)",
              id.ranks.empty() ? "every rank" : ("ranks " + compress_ranks(id.ranks)).c_str(),
              protocol::max_body_trusted >> 20);
    fail_fence(key, id, protocol::pmix::out_of_resource);
}

// Fails an instance on every node (they drop what they already ended).
void OverlayRoot::fail_fence(const std::string& key, const protocol::FenceKey& id, int status)
{
    broadcast(protocol::FenceDown{key, status, {}}.encode());
    fences.finish(key, id);
}

void OverlayRoot::event(const protocol::Event& e)
{
    dead.insert(e.rank);
    const protocol::Bytes frame = e.encode();
    history_.push_back(frame);
    broadcast(frame);
    // Tasks that never used our PMIx keep Slurm's own rules (-K, ...).
    if (e.client)
        failure(collector.where(e.rank) + " " + how_it_ended(e));
    // A fence that loses a participant fails everywhere.
    fail_fences(protocol::pmix::proc_term_wo_sync, [&](const std::vector<std::uint32_t>& ranks) {
        return std::binary_search(ranks.begin(), ranks.end(), e.rank);
    });
}

// ---- LostNodes::Root ----

void OverlayRoot::left_tree(std::uint32_t node)
{
    if (tree->leave(node)) {
        // Fences whose contributions may have been on their way through it.
        fail_fences(protocol::pmix::unreach, [&](const std::vector<std::uint32_t>& ranks) {
            return collector.with_rank_nodes([&](const std::vector<std::uint32_t>& node_of_rank) {
                return std::any_of(ranks.begin(), ranks.end(), [&](std::uint32_t r) {
                    return r < node_of_rank.size() && tree->in_static_subtree(node_of_rank[r], node);
                });
            });
        });
    }
}

void OverlayRoot::node_lost(const protocol::NodeDown& down)
{
    dead.insert(down.ranks.begin(), down.ranks.end());
    fail_fences(protocol::pmix::proc_term_wo_sync, [&](const std::vector<std::uint32_t>& ranks) {
        return std::any_of(down.ranks.begin(), down.ranks.end(),
                           [&](std::uint32_t r) { return std::binary_search(ranks.begin(), ranks.end(), r); });
    });
    const protocol::Bytes frame = down.encode();
    history_.push_back(frame);
    broadcast(frame);
    failure(down.hostname + " was lost");
    outcome_recorded();  // the others may be over already
}

// Fails, on every node, each fence in progress at the root whose
// participants (sorted ranks; every rank when empty) `hit` says are
// affected.
void OverlayRoot::fail_fences(int status, const std::function<bool(const std::vector<std::uint32_t>&)>& hit)
{
    const auto failed =
        fences.affected([&](const std::vector<std::uint32_t>& ranks) { return ranks.empty() || hit(ranks); });
    for (const auto& key : failed)
        fail_fence(key, *protocol::parse_fence_key(key), status);
}

// What each frame from a daemon or slurmstepd does here; a frame with no
// route is a peer's error and closes its link. One table, one row per
// route, kept whole (as Agent::dispatch's): it is as long as the frames
// the root takes.
Result<bool> OverlayRoot::daemon_frame(const Peer& from, protocol::Type type, std::span<const std::uint8_t> body)
{
    using protocol::decoded;
    using T = protocol::Type;
    struct In {
        OverlayRoot& root;
        const Peer& from;
        protocol::Type type;
        std::span<const std::uint8_t> body;
    };
    struct Route {
        T type;
        Result<bool> (*handle)(const In&);
    };
    static const Route routes[] = {
        {T::data_request, [](const In& in) {
             return decoded<protocol::DataRequest>(in.body, [&](const auto& r) { in.root.published.request(r); });
         }},
        {T::gone, [](const In& in) {
             return decoded<protocol::Gone>(in.body, [&](const auto& g) { in.root.lost.node_left(g.node); });
         }},
        {T::enroll, [](const In& in) {
             return decoded<protocol::Enroll>(in.body, [&](const auto& e) { return in.root.enroll(in.from, e); });
         }},
        {T::standby, [](const In& in) {
             return decoded<protocol::Standby>(in.body, [&](const auto& s) {
                 if (in.from.role != protocol::Role::stepd)
                     return Result<bool>::fail("a standby's port from a daemon");
                 in.root.standbys.standby(in.from.node, in.from.address, s);
                 return Result<bool>::ok(true);
             });
         }},
        {T::event, [](const In& in) {
             return decoded<protocol::Event>(in.body, [&](const auto& e) { in.root.event(e); });
         }},
        {T::fence_up, [](const In& in) {
             return decoded<protocol::FenceUp>(in.body, [&](const auto& f) {
                 if (!in.root.tree)
                     return Result<bool>::fail("a fence before the step map");
                 in.root.fence_up(f);
                 return Result<bool>::ok(true);
             });
         }},
        {T::dmodex_req, [](const In& in) {
             return decoded<protocol::DmodexReq>(in.body, [&](const auto& r) {
                 in.root.route(r.to, protocol::reframe(in.type, in.body));
             });
         }},
        {T::dmodex_resp, [](const In& in) {
             return decoded<protocol::DmodexResp>(in.body, [&](const auto& r) {
                 in.root.route(r.to, protocol::reframe(in.type, in.body));
             });
         }},
        {T::abort, [](const In& in) {
             return decoded<protocol::Abort>(in.body, [&](const auto& a) {
                 // An abort ends the step at once, recoverable or not.
                 if (in.root.collector.record_abort(a.rank, a.status, a.message))
                     in.root.teardown(in.root.collector.where(a.rank) + " called abort with status " +
                                      std::to_string(a.status));
             });
         }},
        {T::notice, [](const In& in) {
             return decoded<protocol::Notice>(in.body, [&](const auto& n) { in.root.notice(in.from, n); });
         }},
        {T::relay, [](const In& in) {
             return decoded<protocol::Relay>(in.body, [&](const auto&) {
                 in.root.broadcast(protocol::reframe(in.type, in.body));
             });
         }},
        {T::terminate, [](const In& in) {
             return decoded<protocol::Terminate>(in.body, [&](const auto& t) { in.root.teardown(t.reason); });
         }},
    };
    for (const Route& r : routes)
        if (r.type == type)
            return r.handle(In{*this, from, type, body});
    return Result<bool>::fail("unexpected " + std::string(protocol::type_name(type)) + " frame");
}

// Straight to srun's stderr, as it happens. What a task logged reads as the
// task wrote it, as its own stderr would (it is not the plugin's to prefix:
// the report's lines stay the plugin's). A daemon's notice names its node
// (it may come up the tree); slurmstepd's comes on its own link.
void OverlayRoot::notice(const Peer& from, const protocol::Notice& n)
{
    if (n.rank != protocol::Notice::no_rank && from.role != protocol::Role::stepd) {
        const bool newline = !n.text.empty() && n.text.back() == '\n';
        std::fprintf(stderr, "%s%s", n.text.c_str(), newline ? "" : "\n");
        return;
    }
    const std::uint32_t node = from.role == protocol::Role::stepd ? from.node : n.node;
    user_line("%s: %s", collector.node_name(node).c_str(), n.text.c_str());
}

}  // namespace exitpolicy::spank_plugin
