// SPDX-License-Identifier: Apache-2.0
// standbys.hpp - the node daemons that stand by until the step uses PMIx,
// as srun's front end knows them: each one's wake port (the address its
// slurmstepd's link came from), whether it was woken, the connections of
// the wakes under way, and which nodes are absent (will never enroll).
//
// Only a standby's node turns absent: its slurmstepd left before any daemon
// of it enrolled, it cannot be woken, or its daemon could not start. A node
// stops being absent if its daemon enrolls after all, before the step map.
// The enrollment is the root's (overlay_root.hpp): this asks it through
// Roll, and tells it when a node turns absent (the map may go then).
//
// FE thread only, as the root. Its wakes' connections are on the FE's
// loop, which outlives it; freeing it frees them.
#pragma once

#include "outcome_collector.hpp"

#include "protocol/handles.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct bufferevent;
struct event_base;

namespace exitpolicy::spank_plugin {

class Standbys {
public:
    // What the standbys ask of the enrollment at the root.
    class Roll {
    public:
        // Node `node`'s daemon enrolled; some daemon did.
        virtual bool has_enrolled(std::uint32_t node) const = 0;
        virtual bool any_enrolled() const = 0;
        // The step map went out: nobody is woken or turns absent after.
        virtual bool map_sent() const noexcept = 0;
        // Node `node` turned absent: once every node has enrolled or is
        // absent, the step map goes.
        virtual void node_absent(std::uint32_t node) = 0;

    protected:
        ~Roll() = default;
    };

    Standbys(std::uint32_t nnodes, event_base* base, Roll& roll, OutcomeCollector& collector);
    Standbys(const Standbys&) = delete;
    Standbys& operator=(const Standbys&) = delete;

    // Node `node`'s slurmstepd told its standby's port (0: its daemon could
    // not start), from `address`, its link's.
    void standby(std::uint32_t node, const std::string& address, const protocol::Standby& s);
    // The first daemon enrolled: every other standby is woken.
    void wake_all();
    // Node `node`'s slurmstepd has no link to the FE left.
    void slurmstepd_gone(std::uint32_t node);
    // Node `node`'s daemon enrolled: it is not absent any more.
    void enrolled(std::uint32_t node);

    bool stands_by(std::uint32_t node) const { return standbys_[node].has_value(); }
    bool absent(std::uint32_t node) const { return absent_[node]; }
    std::uint32_t absent_count() const noexcept { return absent_count_; }

private:
    // A node's daemon that stands by, and where it is woken.
    struct Standby {
        std::string address;
        std::uint16_t port = 0;
        bool woken = false;
    };
    struct Waking {
        Standbys* standbys;
        std::uint32_t node;
        protocol::BufferEventHandle bev;  // its connection to the wake port
    };

    void wake(std::uint32_t node);
    void wake_failed(std::uint32_t node, const std::string& why);
    void make_absent(std::uint32_t node);

    const std::uint32_t nnodes_;
    event_base* base_;
    Roll& roll_;
    OutcomeCollector& collector_;
    std::vector<std::optional<Standby>> standbys_;
    // Will never enroll: its slurmstepd left first, or it cannot be woken.
    std::vector<bool> absent_;
    std::uint32_t absent_count_ = 0;
    std::map<bufferevent*, std::unique_ptr<Waking>> wakes_;  // connecting
};

}  // namespace exitpolicy::spank_plugin
