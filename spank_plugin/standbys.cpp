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
// children link to the next ancestor). See overlay_root.hpp.
#include "overlay_root.hpp"
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

void OverlayRoot::standby(const Peer& from, const protocol::Standby& s)
{
    if (from.node >= setup.nnodes || s.port > 0xffff)
        return;
    if (s.port == 0) {  // its daemon could not start: none will come
        make_absent(from.node);
        return;
    }
    auto& slot = standbys[from.node];
    if (slot)
        return;  // told once; a link opened again says it again
    slot = Standby{from.address, static_cast<std::uint16_t>(s.port), false};
    // A daemon has enrolled already: this one is late to the wake.
    if (enrolled_count > 0 && !map_sent())
        wake(from.node);
}

void OverlayRoot::wake_all()
{
    for (std::uint32_t node = 0; node < setup.nnodes; ++node)
        wake(node);
}

void OverlayRoot::wake(std::uint32_t node)
{
    auto& slot = standbys[node];
    if (!slot || slot->woken || enrolled[node] || absent[node])
        return;
    slot->woken = true;
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(slot->port);
    protocol::BufferEventHandle owned;
    if (inet_pton(AF_INET, slot->address.c_str(), &sin.sin_addr) != 1 ||
        !(owned = protocol::BufferEventHandle(bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)))) {
        wake_failed(node, "no socket for " + slot->address);
        return;
    }
    bufferevent* bev = owned.get();
    auto* waking = wakes.emplace(bev, std::make_unique<Waking>(Waking{this, node, std::move(owned)})).first->second.get();
    bufferevent_setcb(
        bev, nullptr, nullptr,
        [](bufferevent* b, short what, void* arg) {
            const auto* w = static_cast<Waking*>(arg);
            OverlayRoot* root = w->root;
            const std::uint32_t n = w->node;
            const int error = EVUTIL_SOCKET_ERROR();
            root->wakes.erase(b);  // frees w and b
            // Queued on the standby's socket: it starts the daemon. Refused:
            // it has closed that socket, as it does once a task of its own
            // woke it (its daemon enrolls) or at its node's end (its
            // slurmstepd's link closes: absent).
            if ((what & BEV_EVENT_CONNECTED) || (!(what & BEV_EVENT_TIMEOUT) && (error == ECONNREFUSED || error == ECONNRESET)))
                return;
            protocol::guarded(
                [&] { root->wake_failed(n, what & BEV_EVENT_TIMEOUT ? "no answer" : std::strerror(error)); },
                [root](const char*) { root->collector.problem("a node daemon could not be woken"); });
        },
        waking);
    bufferevent_set_timeouts(bev, nullptr, &wake_timeout);
    if (bufferevent_socket_connect(bev, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
        wakes.erase(bev);  // frees it
        wake_failed(node, "cannot connect");
    }
}

void OverlayRoot::wake_failed(std::uint32_t node, const std::string& why)
{
    if (enrolled[node])
        return;  // a task of its own woke it meanwhile
    user_line("%s: srun cannot reach that node's PMIx service at %s:%u (%s; a firewall between srun's host and the "
              "node may block the port); its tasks get no PMIx service",
              collector.node_name(node).c_str(), standbys[node]->address.c_str(), standbys[node]->port,
              why.c_str());
    make_absent(node);
}

void OverlayRoot::make_absent(std::uint32_t node)
{
    if (absent[node] || enrolled[node] || map_sent())
        return;
    absent[node] = true;
    ++absent_count;
    send_map();
}

}  // namespace exitpolicy::spank_plugin
