// SPDX-License-Identifier: Apache-2.0
// overlay_root.hpp - the front end as the root of the node daemons' tree.
//
// In a step with the PMIx service every node's daemon enrolls with the FE
// (its address and the port it takes children on), a standing-by one once
// woken (standbys.hpp); once all have, each gets the step map, and the FE is
// the root of the k-ary tree over the step's nodes (protocol/tree.hpp). As
// the root it routes what comes up to the node it is for, completes fences
// (the data goes down to every node), keeps what is published for lookups
// (published_data.hpp), and tells every node of failures: a task that ended
// abnormally (an event), a node lost (its daemon left the tree and its
// slurmstepd's link is closed while some of its ranks never reported;
// lost_nodes.hpp). Events, losses and the teardown are kept in order and
// replayed to a daemon adopted later. Unless the step is recoverable, a
// failure tears the step down after teardown_grace; an abort at once.
//
// It owns the enrollment, the step map and the tree, the fences at the
// root, the dead ranks, the history and the teardown; the standbys, the
// nodes' liveness and the published data are each their own part's, which
// asks the root through a narrow interface (Standbys::Roll,
// LostNodes::Root, a reply callback). It reaches the daemons through Links,
// which the FE's connections give (front_end.cpp), and keeps what srun's
// main thread reads (the nodes, the outcomes, the aborts, problems) in the
// OutcomeCollector. Everything runs on the FE thread; the teardown's grace
// is a timer on its loop.
#pragma once

#include "front_end_setup.hpp"
#include "lost_nodes.hpp"
#include "outcome_collector.hpp"
#include "published_data.hpp"
#include "standbys.hpp"

#include "exitpolicy/result.hpp"
#include "protocol/fences.hpp"
#include "protocol/handles.hpp"
#include "protocol/tree.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

struct event_base;

namespace exitpolicy::spank_plugin {

class OverlayRoot final : private Standbys::Roll, private LostNodes::Root {
public:
    // What the root asks of the FE's connections.
    class Links {
    public:
        virtual ~Links() = default;
        // Node `node`'s daemon has a link to the FE open as its way up (the
        // link it enrolled on, or the one it was adopted on).
        virtual bool tree_linked(std::uint32_t node) const = 0;
        // `frame` on that link of each of `nodes` (hashed once for all).
        virtual void send_tree(const std::vector<std::uint32_t>& nodes, const protocol::Bytes& frame) = 0;
        // `frame` on every authenticated link of a daemon (the step map).
        virtual void send_daemons(const protocol::Bytes& frame) = 0;
    };

    // Who sent a frame: an authenticated link's node, its role (an adopted
    // orphan's is daemon) and its numeric address.
    struct Peer {
        std::uint32_t node = 0;
        protocol::Role role = protocol::Role::stepd;
        const std::string& address;
    };

    OverlayRoot(const FrontEndSetup& step, event_base* loop, Links& fe_links, OutcomeCollector& collected);
    OverlayRoot(const OverlayRoot&) = delete;
    OverlayRoot& operator=(const OverlayRoot&) = delete;

    // A frame from a daemon, or a notice from slurmstepd; fails on a frame
    // that does not decode, or that the root does not take.
    Result<bool> daemon_frame(const Peer& from, protocol::Type type, std::span<const std::uint8_t> body);

    // ---- what the links tell ----
    // Node `node`'s slurmstepd linked; its link closed.
    void stepd_opened(std::uint32_t node) { lost.stepd_opened(node); }
    void stepd_closed(std::uint32_t node);
    // Node `node`'s link to the FE closed (it is no longer tree_linked):
    // when that link was its way up (the node is below the FE as built, or
    // the FE `adopted` it on that link), it left the tree. A node below a
    // daemon enrolls on a link it drops once linked to that daemon; when
    // the daemon has just left, the FE may see that drop only after.
    void tree_link_closed(std::uint32_t node, bool adopted) { lost.tree_link_closed(node, adopted); }
    // An orphan of node `node` asks to be adopted: every daemon between it
    // and the root left the tree. False before the step map (no adoption);
    // else what it may have missed (history()) is to be sent on its link
    // before that link is its way up.
    bool adopt(std::uint32_t node) { return lost.adopt(node); }
    const std::vector<protocol::Bytes>& history() const noexcept { return history_; }
    // slurmstepd reported the end of one of node `node`'s tasks on its own
    // link, the first for that rank + epoch: when that node's daemon is
    // gone, the root tells the other nodes' clients.
    void direct_outcome(const protocol::Outcome& o, std::uint32_t node);
    // An outcome was recorded (by any path): once every task of the step
    // has ended, every daemon is told (once, kept in history()), and may
    // leave; until then each stays to answer direct-modex requests for its
    // tasks' data from tasks still running elsewhere.
    void outcome_recorded();

private:
    // ---- Standbys::Roll: what the standbys ask of the enrollment ----
    bool has_enrolled(std::uint32_t node) const override { return enrolled[node].has_value(); }
    bool any_enrolled() const override { return enrolled_count > 0; }
    bool map_sent() const noexcept override { return tree.has_value(); }
    void node_absent(std::uint32_t) override { send_map(); }

    // ---- LostNodes::Root: what a daemon's leaving and a node's loss do ----
    void left_tree(std::uint32_t node) override;
    void node_lost(const protocol::NodeDown& down) override;

    std::vector<std::uint32_t> children();
    void broadcast(const protocol::Bytes& frame);
    void teardown(const std::string& reason);
    void failure(const std::string& what);
    void teardown_after(const std::string& what);
    void route(std::uint32_t to, const protocol::Bytes& frame);
    Result<bool> enroll(const Peer& from, const protocol::Enroll& e);
    void send_map();
    void fence_up(const protocol::FenceUp& up);
    void fence_too_large(const std::string& key, const protocol::FenceKey& id);
    void fail_fence(const std::string& key, const protocol::FenceKey& id, int status);
    void event(const protocol::Event& e);
    void notice(const Peer& from, const protocol::Notice& n);
    void fail_fences(int status, const std::function<bool(const std::vector<std::uint32_t>&)>& hit);

    const FrontEndSetup setup;
    event_base* base;
    Links& links;
    OutcomeCollector& collector;

    std::vector<std::optional<std::pair<std::string, std::uint32_t>>> enrolled;  // address, port
    std::uint32_t enrolled_count = 0;
    std::optional<protocol::Tree> tree;  // made as the step map goes out
    // Fences at the root of the tree: in progress, and finished (a late
    // contribution to one is dropped).
    protocol::FenceTable<> fences;
    std::set<std::uint32_t> dead;  // ranks that ended abnormally or were lost
    // Events and node losses as broadcast, replayed to a daemon adopted later.
    std::vector<protocol::Bytes> history_;
    bool step_done_sent = false;
    // The parts, each the owner of its own state. Standbys' wake
    // connections are freed with it, while the loop is there.
    Standbys standbys;
    LostNodes lost;           // run-through and lost nodes
    PublishedData published;  // PMIx_Publish, and lookups waiting for it
    // Teardown: scheduled after a failure, sent once.
    bool teardown_scheduled = false;
    bool teardown_sent = false;
    std::string teardown_reason;
    protocol::EventHandle teardown_timer;  // the grace
};

}  // namespace exitpolicy::spank_plugin
