// SPDX-License-Identifier: Apache-2.0
// sockets.hpp - the overlay's TCP sockets and listeners, beside the
// channels on them (channel.hpp): how every socket is tuned, how many
// unauthenticated peers and descriptors an owner that accepts allows, and
// the back-off of a listener whose accept() fails.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/handles.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <sys/types.h>
#include <string>

namespace exitpolicy::protocol {

// A TCP socket listening on 127.0.0.1, on a port the kernel chose,
// close-on-exec: where a node's PMIx server takes its clients, reserved by
// slurmstepd before the server exists (planned_environment.hpp).
struct Listening {
    Fd fd;
    std::uint16_t port = 0;
};
Result<Listening> listen_loopback();
// The same on `address` (an IPv4 address in network order), with a
// backlog of `backlog`: where a node's unstarted daemon is woken.
Result<Listening> listen_on(std::uint32_t address, int backlog);

// Who owns the other end of the connected socket `fd`, as the kernel
// says, never the peer: for a Unix socket its credentials (SO_PEERCRED);
// for TCP over this host's addresses, the owner of the peer's socket (its
// creator's uid), found by the connection's addresses through the kernel's
// socket diagnostics (NETLINK_SOCK_DIAG; no privilege needed, same network
// namespace). None when the kernel does not say: a peer that is gone, one
// on another host, no such interface.
std::optional<uid_t> peer_owner(int fd) noexcept;

// Nagle's algorithm off on a TCP socket: a small frame or event must not
// wait up to 40 ms for a delayed ACK. Linux gives a listener's setting to
// every connection made to it from then on, not to those already waiting
// in its backlog. Nothing when fd is no TCP socket.
void set_no_delay(int fd) noexcept;

// Every overlay TCP socket: close-on-exec, no Nagle delay, and keepalive
// probes with a bound, so that a peer that vanished without a word is
// noticed.
void tune_socket(int fd) noexcept;

// The most accepted channels not yet ready that an owner keeps at once,
// unless it expects more peers than that at once (the front end of a step
// of many nodes, whose daemons and slurmstepds all connect as the step
// starts): then as many as it expects.
constexpr std::size_t max_unauthenticated_channels = 64;
inline std::size_t unauthenticated_cap(std::size_t expected_peers) noexcept
{
    return expected_peers > max_unauthenticated_channels ? expected_peers : max_unauthenticated_channels;
}

// Descriptors an owner leaves to the rest of its process (srun's own, the
// PMIx server's for its clients) after accepting a channel.
constexpr std::size_t descriptor_reserve = 64;
// How many of the oldest unauthenticated channels to close after accepting
// `fd` so that `reserve` descriptors stay free under RLIMIT_NOFILE: the
// kernel gives the lowest free descriptor, so every one below `fd` is in
// use and at most limit - 1 - fd are left. 0: none.
std::size_t descriptors_short(int fd, std::size_t reserve = descriptor_reserve) noexcept;

// A listener's failed accept() (evconnlistener_set_error_cb): the listener
// is disabled and enabled again after `pause`, and `log` is called once for
// the whole episode, which ends with the next accepted connection. Without
// it libevent retries at once and warns on stderr each time: with no
// descriptor left (EMFILE, ENFILE), or no memory (ENOBUFS, ENOMEM), that is
// a busy loop. Any other error is treated alike.
class AcceptBackoff {
public:
    static constexpr std::chrono::milliseconds pause{100};

    // Everything on the listener's loop; the listener outlives this.
    // relieve, when given, closes the oldest unauthenticated channel and
    // says whether there was one: with no descriptor left (EMFILE, ENFILE)
    // that makes room at once, and the listener is not paused.
    AcceptBackoff(evconnlistener* listener, std::function<void(const std::string&)> log,
                  std::function<bool()> relieve = {});
    AcceptBackoff(const AcceptBackoff&) = delete;
    AcceptBackoff& operator=(const AcceptBackoff&) = delete;

    // From the listener's error callback, with accept()'s errno.
    void failed(int error) noexcept;
    // From the listener's accept callback: an episode is over.
    void accepted() noexcept { failing_ = false; }

private:
    static void on_timer(int, short, void* arg) noexcept;
    evconnlistener* listener_;
    std::function<void(const std::string&)> log_;
    std::function<bool()> relieve_;
    EventHandle timer_;
    bool failing_ = false;
};

}  // namespace exitpolicy::protocol
