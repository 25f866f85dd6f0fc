// SPDX-License-Identifier: Apache-2.0
// channel.cpp - see channel.hpp.
#include "channel.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <utility>

namespace exitpolicy::protocol {
namespace {

std::atomic<std::int64_t> handshake_deadline_ms{Channel::default_handshake_deadline.count()};

// What one loop turn reads from a link: at least min_read, and a frame's
// rest up to max_per_turn, so that a large fence result arrives in a few
// reads without one link keeping the loop from the others for long. The
// bufferevent writes up to max_per_turn a turn as well (libevent's own
// bound is 16 KiB).
constexpr std::size_t min_read = 64 * 1024;
constexpr std::size_t max_per_turn = 4 << 20;
// Before the handshake a peer is nobody: a read takes only what the frame
// in progress still needs (its header first), so that a connection that
// sent a byte and waits costs srun a few hundred bytes, not min_read.
constexpr std::size_t handshake_read = 512;

}  // namespace

void Channel::set_handshake_deadline(std::chrono::milliseconds deadline) noexcept
{
    handshake_deadline_ms = deadline.count();
}

std::chrono::milliseconds Channel::handshake_deadline() noexcept
{
    return std::chrono::milliseconds(handshake_deadline_ms.load());
}

Channel::Channel(bufferevent* bev, const Secret& secret, Handlers handlers, bool server)
    : bev_(bev), secret_(secret), life_(std::make_shared<Life>(Life{std::move(handlers)})), server_(server)
{
    bufferevent_setcb(bev_.get(), nullptr, nullptr, on_event, this);
    bufferevent_set_max_single_write(bev_.get(), max_per_turn);
    bufferevent_enable(bev_.get(), EV_WRITE);
}

Channel::~Channel()
{
    life_->alive = false;  // for a callback in progress, which holds life_ too
    // Its members free the rest: the deadline, the buffer, the reader,
    // then the socket.
}

bool Channel::start_reading()
{
    in_.reset(evbuffer_new());
    reader_.reset(
        event_new(bufferevent_get_base(bev_.get()), bufferevent_getfd(bev_.get()), EV_READ | EV_PERSIST, on_readable, this));
    return in_ && reader_ && event_add(reader_.get(), nullptr) == 0;
}

bool Channel::arm_deadline()
{
    deadline_.reset(event_new(bufferevent_get_base(bev_.get()), -1, 0, on_deadline, this));
    if (!deadline_)
        return false;
    const std::int64_t ms = handshake_deadline_ms.load();
    const timeval after{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
    return event_add(deadline_.get(), &after) == 0;
}

std::unique_ptr<Channel> Channel::accept(event_base* base, int fd, const Secret& secret, std::uint32_t job_id,
                                         std::uint32_t step_id, Handlers handlers)
{
    bufferevent* bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        evutil_closesocket(fd);
        return nullptr;
    }
    tune_socket(fd);
    std::unique_ptr<Channel> c(new Channel(bev, secret, std::move(handlers), true));
    auto nonce = random_nonce();
    if (!nonce || !c->arm_deadline() || !c->start_reading())
        return nullptr;
    c->challenge_ = {*nonce, job_id, step_id};
    c->send_raw(c->challenge_.encode());
    return c;
}

Result<std::unique_ptr<Channel>> Channel::connect(event_base* base, const std::string& host, std::uint16_t port,
                                                  const Secret& secret, std::uint32_t job_id,
                                                  std::uint32_t step_id, Hello identity, Handlers handlers)
{
    using R = Result<std::unique_ptr<Channel>>;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
        return R::fail("cannot resolve " + host + ": " + ::gai_strerror(rc));
    BufferEventHandle bev(bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE));
    const int rc =
        bev ? bufferevent_socket_connect(bev.get(), found->ai_addr, static_cast<int>(found->ai_addrlen)) : -1;
    ::freeaddrinfo(found);
    if (rc != 0)
        return R::fail("cannot connect to " + host + ":" + service + ": " + std::strerror(errno));
    tune_socket(bufferevent_getfd(bev.get()));
    std::unique_ptr<Channel> c(new Channel(bev.release(), secret, std::move(handlers), false));
    if (!c->arm_deadline() || !c->start_reading())
        return R::fail("cannot connect to " + host + ":" + service + ": no memory for a timer or a buffer");
    c->challenge_.job_id = job_id;  // what we expect the server to serve
    c->challenge_.step_id = step_id;
    c->hello_ = std::move(identity);
    return R::ok(std::move(c));
}

void Channel::write(std::span<const std::uint8_t> first, std::span<const std::uint8_t> second)
{
    std::size_t sent = 0;
    if (evbuffer_get_length(bufferevent_get_output(bev_.get())) == 0) {
        iovec iov[2] = {{const_cast<std::uint8_t*>(first.data()), first.size()},
                        {const_cast<std::uint8_t*>(second.data()), second.size()}};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = second.empty() ? 1 : 2;
        // A failure is the bufferevent's to meet and report when it writes
        // the lot; not here, inside the owner's call.
        if (const ssize_t n = ::sendmsg(bufferevent_getfd(bev_.get()), &msg, MSG_NOSIGNAL | MSG_DONTWAIT); n > 0)
            sent = static_cast<std::size_t>(n);
    }
    if (sent < first.size())
        bufferevent_write(bev_.get(), first.data() + sent, first.size() - sent);
    sent = sent > first.size() ? sent - first.size() : 0;
    if (sent < second.size())
        bufferevent_write(bev_.get(), second.data() + sent, second.size() - sent);
}

void Channel::send_raw(const Bytes& frame)
{
    if (bev_ && !closing_)
        write(frame);
}

void Channel::send(const Bytes& frame)
{
    if (ready_ && bev_ && !closing_)
        send(frame, frame_digest(frame));
    else if (!ready_ && !closing_)
        held_.push_back(frame);
}

void Channel::send(const Bytes& frame, const FrameDigest& digest)
{
    // No frame (a Writer's answer to what does not fit) is never sent: its
    // tag alone would be read as the next frame's header.
    if (frame.empty())
        return;
    if (!ready_) {
        if (!closing_)
            held_.push_back(frame);
        return;
    }
    if (!bev_ || closing_)
        return;
    const Tag sealed = seal_.seal(digest);
    write(frame, sealed);
}

void Channel::send(const std::shared_ptr<const Bytes>& frame, const FrameDigest& digest)
{
    if (!frame || frame->empty())
        return;
    if (!ready_ || !bev_ || closing_) {
        send(*frame, digest);  // held as a copy, or dropped
        return;
    }
    auto* keep = new (std::nothrow) std::shared_ptr<const Bytes>(frame);
    const auto release = [](const void*, std::size_t, void* held) {
        delete static_cast<std::shared_ptr<const Bytes>*>(held);
    };
    if (!keep || evbuffer_add_reference(bufferevent_get_output(bev_.get()), frame->data(), frame->size(), release, keep) != 0) {
        delete keep;
        send(*frame, digest);
        return;
    }
    const Tag sealed = seal_.seal(digest);
    bufferevent_write(bev_.get(), sealed.data(), sealed.size());
}

void Channel::close(const std::string& why)
{
    close(Reason::local_close, why);
}

void Channel::close(Reason reason, const std::string& why)
{
    if (closing_)
        return;
    closing_ = true;
    bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
    if (reader_)
        event_del(reader_.get());
    if (deadline_)
        event_del(deadline_.get());
    // The owner may destroy us inside: nothing of ours is touched after it.
    const std::shared_ptr<Life> life = life_;
    if (life->handlers.closed)
        life->handlers.closed(*this, reason, why);
}

// A frame in: after the handshake, the owner's; before it, the
// handshake's next step on either side (hello, challenge, welcome), and
// then the channel is ready. Kept whole, over 60 lines: the authentication
// is read in one place, with the order of its checks (no peer is known,
// nothing is sealed and nothing held is sent before both proofs hold).
std::optional<Channel::Failure> Channel::handle(Type type, std::span<const std::uint8_t> body)
{
    auto bad = [](std::string why) { return Failure{Reason::bad_frame, std::move(why)}; };
    // A handler may destroy us: nothing of ours is touched after one (the
    // caller holds life_).
    if (ready_) {
        if (!life_->handlers.frame)
            return std::nullopt;
        auto handled = life_->handlers.frame(*this, type, body);
        if (!handled)
            return bad(handled.error());
        return std::nullopt;
    }
    if (server_) {
        if (type != Type::hello)
            return bad("expected hello, got " + std::string(type_name(type)));
        auto hello = Hello::decode(body);
        if (!hello)
            return bad(hello.error());
        if (!proofs_equal(hello->mac, client_proof(secret_, challenge_, *hello)))
            return Failure{Reason::auth_failed, "a peer failed authentication"};
        peer_ = std::move(*hello);
        // The Welcome leaves when the loop turn ends, after `ready`: an owner
        // that refuses the peer there (a node id outside the step) closes
        // first, and the peer is told by a closed connection, not a welcome.
        // Frames sent in `ready` queue behind it.
        const Bytes welcome = Welcome{server_proof(secret_, challenge_.nonce, peer_.nonce)}.encode();
        bufferevent_write(bev_.get(), welcome.data(), welcome.size());
    } else if (type == Type::challenge) {
        auto c = Challenge::decode(body);
        if (!c)
            return bad(c.error());
        if (c->job_id != challenge_.job_id || c->step_id != challenge_.step_id)
            return Failure{Reason::auth_failed, "the peer serves step " + std::to_string(c->job_id) + "." +
                                                    std::to_string(c->step_id) + ", not this one"};
        challenge_ = *c;
        auto nonce = random_nonce();
        if (!nonce)
            return Failure{Reason::internal_error, nonce.error()};
        hello_.nonce = *nonce;
        hello_.mac = client_proof(secret_, challenge_, hello_);
        send_raw(hello_.encode());
        return std::nullopt;
    } else {
        if (type != Type::welcome)
            return bad("expected welcome, got " + std::string(type_name(type)));
        auto w = Welcome::decode(body);
        if (!w)
            return bad(w.error());
        if (!proofs_equal(w->mac, server_proof(secret_, challenge_.nonce, hello_.nonce)))
            return Failure{Reason::auth_failed, "the peer failed authentication"};
    }
    ready_ = true;
    seal_ = FrameSeal(session_key(secret_, challenge_.nonce, server_ ? peer_.nonce : hello_.nonce), server_);
    for (const Bytes& frame : std::exchange(held_, {}))
        send(frame);
    event_del(deadline_.get());
    if (life_->handlers.ready)
        life_->handlers.ready(*this);
    return std::nullopt;
}

void Channel::on_readable(int fd, short, void* arg) noexcept
{
    auto* c = static_cast<Channel*>(arg);
    try {
        if (c->closing_)
            return;
        const std::size_t floor = c->ready_ ? min_read : 0;
        const std::size_t have = evbuffer_get_length(c->in_.get());
        std::size_t want = c->ready_ ? min_read : header_size - std::min(have, header_size);
        if (have >= header_size) {
            std::array<std::uint8_t, header_size> head{};
            evbuffer_copyout(c->in_.get(), head.data(), head.size());
            // A bad header was refused when it came: here it is a length.
            if (auto h = decode_header(head, c->ready_ ? max_body_trusted : max_body)) {
                const std::size_t whole = header_size + h->length + (c->ready_ ? tag_size : 0);
                if (whole > have)
                    want = std::clamp(whole - have, floor, max_per_turn);
            }
        }
        if (!c->ready_)
            want = std::clamp<std::size_t>(want, 1, handshake_read);
        evbuffer_iovec space[2];
        const int n = evbuffer_reserve_space(c->in_.get(), static_cast<ev_ssize_t>(want), space, 2);
        if (n <= 0) {
            c->close(Reason::internal_error, "no memory to read into");
            return;
        }
        iovec iov[2];
        for (int i = 0; i < n; ++i)
            iov[i] = {space[i].iov_base, space[i].iov_len};
        const ssize_t got = ::readv(fd, iov, n);
        if (got == 0) {
            c->close(Reason::peer_closed, "the peer closed the connection");
            return;
        }
        if (got < 0) {
            const int error = errno;
            if (error != EAGAIN && error != EWOULDBLOCK && error != EINTR)
                c->close(Reason::io_error, std::string("connection error: ") + std::strerror(error));
            return;
        }
        std::size_t left = static_cast<std::size_t>(got);
        int used = 0;
        for (; used < n && left > 0; ++used) {
            space[used].iov_len = std::min(space[used].iov_len, left);
            left -= space[used].iov_len;
        }
        evbuffer_commit_space(c->in_.get(), space, used);
    } catch (...) {
        return;
    }
    c->deliver();
}

void Channel::deliver()
{
    // Any handler may close the channel or destroy it (its owner, in
    // `closed`): after each one, this is used only if life says it still
    // exists, and no frame is handled once it is closed.
    const std::shared_ptr<Life> life = life_;
    std::string error;
    try {
        while (life->alive && !closing_ && evbuffer_get_length(in_.get()) >= header_size) {
            std::array<std::uint8_t, header_size> head{};
            evbuffer_copyout(in_.get(), head.data(), head.size());
            auto h = decode_header(head, ready_ ? max_body_trusted : max_body);
            if (!h) {
                close(Reason::bad_frame, h.error());
                return;
            }
            // After the handshake each frame is followed by its tag.
            const std::size_t tag_bytes = ready_ ? tag_size : 0;
            if (evbuffer_get_length(in_.get()) < header_size + h->length + tag_bytes)
                return;  // the rest is on its way
            // Not zeroed first: every byte is overwritten at once.
            const std::size_t size = header_size + h->length;
            const auto bytes = std::make_unique_for_overwrite<std::uint8_t[]>(size);
            const std::span<const std::uint8_t> frame(bytes.get(), size);
            evbuffer_remove(in_.get(), bytes.get(), size);
            if (tag_bytes) {
                Tag sealed{};
                evbuffer_remove(in_.get(), sealed.data(), sealed.size());
                if (!seal_.open(frame, sealed)) {
                    close(Reason::auth_failed, "a frame failed its integrity check");
                    return;
                }
            }
            const auto body = std::span<const std::uint8_t>(frame).subspan(header_size);
            auto failed = handle(h->type, body);
            if (!life->alive)
                return;
            if (failed) {
                close(failed->reason, failed->why);
                return;
            }
        }
        return;
    } catch (const std::exception& e) {
        error = e.what();
    } catch (...) {
    }
    // A handler threw (maybe after its channel was gone).
    try {
        if (life->alive)
            close(Reason::internal_error, error.empty() ? "internal error" : "internal error: " + error);
    } catch (...) {
    }
}

void Channel::on_event(bufferevent*, short events, void* arg) noexcept
{
    auto* c = static_cast<Channel*>(arg);
    try {
        if (events & BEV_EVENT_CONNECTED)
            return;
        if (events & BEV_EVENT_EOF)
            c->close(Reason::peer_closed, "the peer closed the connection");
        else if (events & BEV_EVENT_ERROR)
            c->close(Reason::io_error,
                     std::string("connection error: ") + evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    } catch (...) {
    }
}

void Channel::on_deadline(int, short, void* arg) noexcept
{
    auto* c = static_cast<Channel*>(arg);
    try {
        // `closed` may destroy c: nothing of it is touched after.
        if (!c->ready_ && !c->closing_)
            c->close(Reason::handshake_timeout, "the peer did not authenticate in time");
    } catch (...) {
    }
}

}  // namespace exitpolicy::protocol
