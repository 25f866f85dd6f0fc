// SPDX-License-Identifier: Apache-2.0
// socket_activation.hpp - the PMIx server's listening socket, made before
// the server and handed to it when the first client comes.
//
// A task learns where its PMIx server listens from its environment, which
// it must have before exec; the server costs ~20 ms of start-up, a helper
// process and ~20 MB per node, which a step whose tasks never use PMIx
// should not pay, and the tasks should not wait for. So slurmstepd listens
// first (protocol::listen_loopback: 127.0.0.1 on a port the kernel picks)
// and writes the tasks an environment that names that port
// (protocol/planned_environment.hpp); the daemon inherits the socket and
// starts the PMIx server only when a connection arrives. A
// client that connects meanwhile waits in the socket's backlog (an
// OpenPMIx client waits for its server's answer without a timeout; only a
// refused connect fails it at once).
//
// OpenPMIx has no way to be given a listening socket: PMIx_server_init
// makes its own (socket, bind to PMIX_TCP_IPV4_PORT, listen). The daemon's
// executable defines bind() and accept(), which the library's calls reach
// before libc's: bind() to the reserved port puts the reserved socket in
// the library's descriptor (dup3), with every connection already queued on
// it; accept() on it holds the step's clients back (the gate) until the
// namespace is registered and the event anchor has registered its
// handler, and the way up the overlay tree is open, as a task started
// after all that finds them. Held connections (at most 4 096; later ones
// are closed) are accepted (so that the anchor, queued behind them, gets
// through) and given to the library once open() is called, or closed when
// the daemon stops (close_held()); the library calls accept() only
// when the socket is readable, so open() makes it readable with a
// connection of its own, which accept() then discards.
//
// While the gate is closed, accept() answers as the library expects of a
// connection that went away: ECONNABORTED for OpenPMIx 4.2.0-4.2.5, whose
// listener thread ends on EAGAIN; EAGAIN for 4.2.6 and later and 5.0.1
// and later, which accept on their event thread and close the listener on
// any other error. compat::activation_errno() says which, or that the
// library is one the gate was not made for (then the daemon starts the
// server at once, as before).
//
// Threads: bind() and accept() run on the library's threads; the rest on
// the daemon's loop thread. Everything else any thread calls passes
// through to libc untouched.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/sockets.hpp"

#include <cstdint>
#include <sys/types.h>

namespace exitpolicy::pmix_server::activation {

// The reserved socket: slurmstepd's (protocol::listen_loopback), which the
// daemon inherits.
using Reserved = protocol::Listening;

// From now on the library's bind() to 127.0.0.1:`r.port` takes `r.fd`, and
// accept() on it holds clients until open(); `error` is what accept()
// answers meanwhile (ECONNABORTED or EAGAIN).
void arm(const Reserved& r, int error);
// From now on, on every path (armed or not), a connection the library
// accepts whose peer's socket is not `uid`'s (protocol::peer_owner: the
// kernel says, not the client) is closed before the library reads a byte
// of it, with a line in the log; accept() answers `error` for it when the
// gate is not armed (what the library takes for a connection that went
// away), the gate's own error when it is.
void serve_only(uid_t uid, int error);
// Connections refused so far (for the log and tests).
std::uint64_t refused();
// The one process (the event anchor) whose connection, its first, passes
// the closed gate.
void let_through(pid_t pid);
// Held connections, and all later ones, go to the library.
void open();
// Closes the held connections (their clients' PMIx_Init fails at once),
// and lets every later connection through: the daemon stops.
void close_held();
// Connections held now (for the log and tests).
std::size_t held();

}  // namespace exitpolicy::pmix_server::activation
