// SPDX-License-Identifier: Apache-2.0
// channel.hpp - one authenticated, framed overlay connection on a libevent
// loop: srun's front end and the node daemons use it for all their links
// (slurmstepd's blocking side, spank_plugin/node_link.cpp, speaks the same
// handshake without it).
//
// A server-side channel (accept) sends the Challenge, checks the peer's
// Hello and answers with its Welcome; a client-side channel (connect)
// answers the Challenge and checks the Welcome. Only then is `ready` called,
// and every later frame goes to `frame`. Anything malformed, a failed proof
// or a handshake not done by its deadline closes the channel and calls
// `closed` once with the reason: a code to decide on, and a text for people
// (never matched by code).
//
// Deadline: the handshake has handshake_deadline() (10 s) from accept() or
// connect(), one absolute deadline armed once and cancelled when the
// channel becomes ready; a peer's bytes never extend it (a peer that sends
// one byte at a time is closed as one that sends nothing). A ready channel
// has no deadline.
//
// Caps, kept by each owner that accepts (the front end, and each node
// daemon for its children): at most unauthenticated_cap() accepted
// channels not yet ready at once; a connection beyond that closes at once
// the oldest of them, so that a flood of idle connections cannot lock out a
// peer that authenticates promptly (sockets.hpp: the caps, the descriptor
// reserve, and the AcceptBackoff that keeps a failed accept() from spinning
// the loop).
//
// Thread: everything runs on the loop's thread.
//
// Lifetime: the owner holds the unique_ptr and may destroy the channel inside
// any of its handlers, typically in `closed`, its last callback (a `frame`
// or `ready` handler that calls close() may thus find the channel gone when
// close() returns). After every handler the channel checks that it still
// exists before it touches itself again, and once it is closed it delivers
// no further frame, even of a burst already read. A handler whose channel
// was destroyed inside it must not use its Channel& after that; its own
// captures stay valid until it returns. Destroying is not closing: `closed`
// is not called for a channel its owner destroyed.
#pragma once

#include "auth.hpp"
#include "handles.hpp"
#include "sockets.hpp"
#include "timeouts.hpp"
#include "wire.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>
#include <string>

struct event;
struct event_base;
struct evbuffer;
struct bufferevent;
struct evconnlistener;

namespace exitpolicy::protocol {

class Channel {
public:
    // Why a channel closed.
    enum class Reason {
        peer_closed,        // the peer closed the connection (EOF)
        io_error,           // the socket failed: reset, refused, keepalive gave up, ...
        handshake_timeout,  // the peer did not authenticate in time
        auth_failed,        // a failed proof or frame tag, or a peer serving another step
        bad_frame,          // malformed or unexpected, or refused by `frame`
        local_close,        // close(), by the owner
        internal_error,     // a handler threw, or no randomness for a nonce
    };

    // How long a channel has from accept() or connect() to become ready.
    static constexpr std::chrono::milliseconds default_handshake_deadline = timeouts::handshake;
    // For tests: the deadline of the channels made from now on (any thread).
    static void set_handshake_deadline(std::chrono::milliseconds deadline) noexcept;
    static std::chrono::milliseconds handshake_deadline() noexcept;

    struct Handlers {
        std::function<void(Channel&)> ready;
        // A failure: the frame was bad; the channel closes with
        // Reason::bad_frame and that text.
        std::function<Result<bool>(Channel&, Type, std::span<const std::uint8_t>)> frame;
        std::function<void(Channel&, Reason reason, const std::string& why)> closed;
    };

    // The server side of an accepted socket (takes the fd).
    static std::unique_ptr<Channel> accept(event_base* base, int fd, const Secret& secret, std::uint32_t job_id,
                                           std::uint32_t step_id, Handlers handlers);
    // The client side: connects to host:port and proves `identity` (its
    // nonce and mac are filled in here).
    static Result<std::unique_ptr<Channel>> connect(event_base* base, const std::string& host, std::uint16_t port,
                                                    const Secret& secret, std::uint32_t job_id,
                                                    std::uint32_t step_id, Hello identity, Handlers handlers);
    ~Channel();
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    // Once ready, each frame goes with its tag (auth.hpp); a frame the
    // owner sends before is held until then.
    void send(const Bytes& frame);
    // The same frame to many channels: its digest (frame_digest) once.
    void send(const Bytes& frame, const FrameDigest& digest);
    // A large frame to many channels (a fence's result, at least
    // shared_frame_size bytes): held once, each channel's buffer refers to
    // it until it is written.
    void send(const std::shared_ptr<const Bytes>& frame, const FrameDigest& digest);
    bool is_ready() const noexcept { return ready_; }
    bool is_closed() const noexcept { return closing_; }
    // Server side: who the peer proved to be.
    const Hello& peer() const noexcept { return peer_; }
    // Closes now; `closed` is called with Reason::local_close and why.
    void close(const std::string& why);

    // Any owner data (a node daemon keeps a child's node id here).
    std::uint32_t tag = fe_node;

private:
    Channel(bufferevent* bev, const Secret& secret, Handlers handlers, bool server);
    // Reading is the channel's own, not the bufferevent's: libevent 2.1 reads
    // at most 4 KiB per call, 32 system calls and loop turns for a 128 KiB
    // fence result. Each turn reads what the frame in progress still needs.
    bool start_reading();
    static void on_readable(int fd, short, void* arg) noexcept;
    // The frames whole in in_.
    void deliver();
    static void on_event(bufferevent* bev, short events, void* arg) noexcept;
    static void on_deadline(int, short, void* arg) noexcept;
    // Arms the handshake's deadline; false without memory for it.
    bool arm_deadline();
    void close(Reason reason, const std::string& why);
    // The handshake's own frames, untagged.
    void send_raw(const Bytes& frame);
    // Bytes to the peer, in order: written at once when nothing waits before
    // them (a frame leaves in this loop turn, without a turn of its own for
    // the socket to become writable), the rest left to the bufferevent.
    void write(std::span<const std::uint8_t> first, std::span<const std::uint8_t> second = {});
    struct Failure {
        Reason reason;
        std::string why;
    };
    // One frame; nullopt when it was fine.
    std::optional<Failure> handle(Type type, std::span<const std::uint8_t> body);

    // Shared with the callback in progress: the handlers outlive a channel
    // destroyed inside one of them, and `alive` tells the callback so.
    struct Life {
        Handlers handlers;
        bool alive = true;
    };

    BufferEventHandle bev_;  // the socket, and what is written to it
    EventHandle reader_;
    EvbufferHandle in_;     // read, not yet delivered
    EventHandle deadline_;  // the handshake's, until ready or closed
    Secret secret_;
    std::shared_ptr<Life> life_;
    bool server_;
    bool ready_ = false;
    bool closing_ = false;
    Challenge challenge_;  // server: the one sent; client: the one received
    Hello hello_;          // client: our identity
    Hello peer_;           // server: the peer's identity
    FrameSeal seal_;       // from ready on: every frame's tag, both ways
    std::vector<Bytes> held_;  // sent by the owner before ready
};

}  // namespace exitpolicy::protocol
