// SPDX-License-Identifier: Apache-2.0
// standbys.cpp - node daemons that stand by until the step uses PMIx, as
// srun's front end wakes them (the node's side: pmix_server/detach.c).
//
// In a step whose tasks' PMIx environment slurmstepd planned, a node's
// daemon is not run until a task connects to its PMIx socket: its
// slurmstepd tells the FE (Standby, on its own link) the port of a socket
// on the node's address through which it is woken. The step's fences and
// data span every node, so the first daemon that enrolls, whichever node's
// task woke it, makes the FE wake every other one: it connects to each
// standby's port (the address is that of the node's link, as the FE sees
// it) and closes. A node that will never enroll is absent: its slurmstepd
// left first (its tasks are over), it cannot be woken, or its daemon could
// not start (its slurmstepd says port 0). The step map
// goes out once every node has enrolled or is absent; an absent node has
// port 0 in it and has left the tree on every side from the start (its
// children link to the next ancestor). See standbys.hpp; the FE thread.
#include "standbys.hpp"
#include "user_line.hpp"

#include "protocol/guard.hpp"
#include "protocol/timeouts.hpp"

#include <event2/bufferevent.h>
#include <event2/event.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>

namespace exitpolicy::spank_plugin {
namespace {

// How long the FE tries to reach a standby's port.
constexpr timeval wake_timeout{protocol::timeouts::standby_wake.count() / 1000,
                               protocol::timeouts::standby_wake.count() % 1000 * 1000};

}  // namespace

Standbys::Standbys(std::uint32_t nnodes, event_base* base, Roll& roll, OutcomeCollector& collector)
    : nnodes_(nnodes),
      base_(base),
      roll_(roll),
      collector_(collector),
      standbys_(nnodes, std::nullopt),
      absent_(nnodes, false)
{
}

void Standbys::standby(std::uint32_t node, const std::string& address, const protocol::Standby& s)
{
    if (node >= nnodes_ || s.port > 0xffff)
        return;
    if (s.port == 0) {  // its daemon could not start: none will come
        make_absent(node);
        return;
    }
    auto& slot = standbys_[node];
    if (slot)
        return;  // told once; a link opened again says it again
    slot = Standby{address, static_cast<std::uint16_t>(s.port), false};
    // A daemon has enrolled already: this one is late to the wake.
    if (roll_.any_enrolled() && !roll_.map_sent())
        wake(node);
}

void Standbys::wake_all()
{
    for (std::uint32_t node = 0; node < nnodes_; ++node)
        wake(node);
}

// A standby whose slurmstepd is gone will never be woken: its node is
// done with the step before any daemon of it enrolled.
void Standbys::slurmstepd_gone(std::uint32_t node)
{
    if (standbys_[node] && !roll_.has_enrolled(node))
        make_absent(node);
}

void Standbys::enrolled(std::uint32_t node)
{
    if (absent_[node]) {  // its slurmstepd left, yet it came
        absent_[node] = false;
        --absent_count_;
    }
}

void Standbys::wake(std::uint32_t node)
{
    auto& slot = standbys_[node];
    if (!slot || slot->woken || roll_.has_enrolled(node) || absent_[node])
        return;
    slot->woken = true;
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(slot->port);
    protocol::BufferEventHandle owned;
    if (inet_pton(AF_INET, slot->address.c_str(), &sin.sin_addr) != 1 ||
        !(owned = protocol::BufferEventHandle(bufferevent_socket_new(base_, -1, BEV_OPT_CLOSE_ON_FREE)))) {
        wake_failed(node, "no socket for " + slot->address);
        return;
    }
    bufferevent* bev = owned.get();
    auto* waking =
        wakes_.emplace(bev, std::make_unique<Waking>(Waking{this, node, std::move(owned)})).first->second.get();
    bufferevent_setcb(
        bev, nullptr, nullptr,
        [](bufferevent* b, short what, void* arg) {
            const auto* w = static_cast<Waking*>(arg);
            Standbys* standbys = w->standbys;
            const std::uint32_t n = w->node;
            const int error = EVUTIL_SOCKET_ERROR();
            standbys->wakes_.erase(b);  // frees w and b
            // Queued on the standby's socket: it starts the daemon. Refused:
            // it has closed that socket, as it does once a task of its own
            // woke it (its daemon enrolls) or at its node's end (its
            // slurmstepd's link closes: absent).
            if ((what & BEV_EVENT_CONNECTED) || (!(what & BEV_EVENT_TIMEOUT) && (error == ECONNREFUSED || error == ECONNRESET)))
                return;
            protocol::guarded(
                [&] { standbys->wake_failed(n, what & BEV_EVENT_TIMEOUT ? "no answer" : std::strerror(error)); },
                [standbys](const char*) { standbys->collector_.problem("a node daemon could not be woken"); });
        },
        waking);
    bufferevent_set_timeouts(bev, nullptr, &wake_timeout);
    if (bufferevent_socket_connect(bev, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
        wakes_.erase(bev);  // frees it
        wake_failed(node, "cannot connect");
    }
}

void Standbys::wake_failed(std::uint32_t node, const std::string& why)
{
    if (roll_.has_enrolled(node))
        return;  // a task of its own woke it meanwhile
    user_line("%s: srun cannot reach that node's PMIx service at %s:%u (%s; a firewall between srun's host and the "
              "node may block the port); its tasks get no PMIx service",
              collector_.node_name(node).c_str(), standbys_[node]->address.c_str(), standbys_[node]->port,
              why.c_str());
    make_absent(node);
}

void Standbys::make_absent(std::uint32_t node)
{
    if (absent_[node] || roll_.has_enrolled(node) || roll_.map_sent())
        return;
    absent_[node] = true;
    ++absent_count_;
    roll_.node_absent(node);
}

}  // namespace exitpolicy::spank_plugin
