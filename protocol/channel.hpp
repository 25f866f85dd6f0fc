// channel.hpp - one authenticated, framed overlay connection on a libevent
// loop: srun's front end and the node daemons use it for all their links
// (slurmstepd's blocking side, spank_plugin/node_link.cpp, speaks the same
// handshake without it).
//
// A server-side channel (accept) sends the Challenge, checks the peer's
// Hello and answers with its Welcome; a client-side channel (connect)
// answers the Challenge and checks the Welcome. Only then is `ready` called,
// and every later frame goes to `frame`. Anything malformed, a failed proof
// or a handshake that takes longer than the timeout closes the channel and
// calls `closed` once with the reason: a code to decide on, and a text for
// people (never matched by code).
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
#include "wire.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

struct event_base;
struct bufferevent;

namespace exitpolicy::wire {

// Every overlay TCP socket: no Nagle delay, and keepalive probes with a
// bound, so that a peer that vanished without a word is noticed.
void tune_socket(int fd) noexcept;

class Channel {
public:
    // Why a channel closed.
    enum class Reason {
        peer_closed,        // the peer closed the connection (EOF)
        io_error,           // the socket failed: reset, refused, keepalive gave up, ...
        handshake_timeout,  // the peer did not authenticate in time
        auth_failed,        // a failed proof, or a peer serving another step
        bad_frame,          // malformed or unexpected, or refused by `frame`
        local_close,        // close(), by the owner
        internal_error,     // a handler threw, or no randomness for a nonce
    };

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

    void send(const Bytes& frame);
    bool is_ready() const noexcept { return ready_; }
    // Server side: who the peer proved to be.
    const Hello& peer() const noexcept { return peer_; }
    // Closes now; `closed` is called with Reason::local_close and why.
    void close(const std::string& why);

    // Any owner data (a node daemon keeps a child's node id here).
    std::uint32_t tag = fe_node;

private:
    Channel(bufferevent* bev, const Secret& secret, Handlers handlers, bool server);
    static void on_read(bufferevent* bev, void* arg) noexcept;
    static void on_event(bufferevent* bev, short events, void* arg) noexcept;
    void close(Reason reason, const std::string& why);
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

    bufferevent* bev_;
    Secret secret_;
    std::shared_ptr<Life> life_;
    bool server_;
    bool ready_ = false;
    bool closing_ = false;
    Challenge challenge_;  // server: the one sent; client: the one received
    Hello hello_;          // client: our identity
    Hello peer_;           // server: the peer's identity
};

}  // namespace exitpolicy::wire
