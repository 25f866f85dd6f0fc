// SPDX-License-Identifier: Apache-2.0
// channel_test.cpp - protocol/channel.hpp's lifetimes over a real loopback
// socket: handlers that close their channel, and owners that destroy it
// inside `closed`, in the middle of a burst of frames. Meant for the
// sanitizer build: a channel that touches itself once gone is a
// heap-use-after-free there.
#include "event_loop.hpp"
#include "protocol/channel.hpp"

#include <event2/event.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

namespace exitpolicy::protocol {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t job = 41;
constexpr std::uint32_t step = 2;
constexpr std::uint32_t burst = 64;  // frames in the peer's one write

// The server side of a channel on a loop of our own, and its peer: a plain
// socket that does the client's handshake by hand, so that its Hello and a
// whole burst of frames after it leave in one write and arrive together.
class ChannelBurstTest : public ::testing::Test {
protected:
    ChannelBurstTest() : base_(event_base_new()) { secret_ = *random_secret(); }
    ~ChannelBurstTest() override
    {
        channel.reset();
        if (peer_ >= 0)
            ::close(peer_);
        event_base_free(base_);
    }

    // Accepts the peer's connection into `channel`, with these handlers.
    void open(Channel::Handlers h)
    {
        const test::Listener listener = test::listen_on_loopback(1);
        ASSERT_GE(listener.fd, 0);
        peer_ = ::socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_EQ(::connect(peer_, reinterpret_cast<const sockaddr*>(&listener.address), sizeof(listener.address)), 0);
        const int fd = ::accept(listener.fd, nullptr, nullptr);
        ::close(listener.fd);
        ASSERT_GE(fd, 0);
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        ::fcntl(peer_, F_SETFL, ::fcntl(peer_, F_GETFL) | O_NONBLOCK);
        channel = Channel::accept(base_, fd, secret_, job, step, std::move(h));
        ASSERT_TRUE(channel);
    }

    bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s)
    {
        return test::run_until(base_, done, timeout);
    }

    // What a peer on the path does to the frames after the Hello.
    enum class Tamper { none, alter_fifth, replay_first, untagged };

    // The peer reads the channel's Challenge and answers it: its Hello (with
    // a wrong proof if `forged`), then `tail`, in one write.
    void handshake_and_send(const Bytes& tail, bool forged = false, Tamper tamper = Tamper::none)
    {
        Bytes in;
        std::uint8_t buf[256];
        ASSERT_TRUE(run_until([&] {
            const ssize_t n = ::recv(peer_, buf, sizeof(buf), 0);
            if (n > 0)
                in.insert(in.end(), buf, buf + n);
            if (in.size() < header_size)
                return false;
            const auto h = decode_header(std::span<const std::uint8_t, header_size>(in.data(), header_size));
            return h && in.size() >= header_size + h->length;
        }));
        auto challenge = Challenge::decode(std::span(in).subspan(header_size));
        ASSERT_TRUE(challenge) << challenge.error();
        Hello hello;
        hello.role = Role::stepd;
        hello.hostname = "peer";
        hello.nonce = *random_nonce();
        hello.mac = client_proof(secret_, *challenge, hello);
        if (forged)
            hello.mac[0] ^= 1;
        Bytes out = hello.encode();
        // After the Hello every frame carries its tag, as a real client's
        // would; from the first thing that is no frame on, bytes go as they are.
        FrameSeal seal(session_key(secret_, challenge->nonce, hello.nonce), false);
        std::size_t at = 0;
        while (at + header_size <= tail.size()) {
            const auto h = decode_header(std::span<const std::uint8_t, header_size>(tail.data() + at, header_size),
                                         max_body_trusted);
            if (!h || at + header_size + h->length > tail.size())
                break;
            const std::span<const std::uint8_t> frame(tail.data() + at, header_size + h->length);
            const Tag tag = seal.seal(frame);
            const std::size_t start = out.size();
            out.insert(out.end(), frame.begin(), frame.end());
            if (tamper != Tamper::untagged)
                out.insert(out.end(), tag.begin(), tag.end());
            if (tamper == Tamper::alter_fifth && at == 4 * frame.size())
                out[start + header_size] ^= 1;  // the body's first byte
            if (tamper == Tamper::replay_first && at == 0)
                out.insert(out.end(), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
            at += frame.size();
        }
        out.insert(out.end(), tail.begin() + static_cast<std::ptrdiff_t>(at), tail.end());
        ASSERT_EQ(::send(peer_, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    }

    // Acks for ranks [first, last): any frame will do once the channel is ready.
    static Bytes acks(std::uint32_t first, std::uint32_t last)
    {
        Bytes out;
        for (std::uint32_t r = first; r < last; ++r) {
            const Bytes f = Ack{r, 0}.encode();
            out.insert(out.end(), f.begin(), f.end());
        }
        return out;
    }

    // A frame handler that records each frame's rank, then does `at(rank)`.
    Channel::Handlers recording(std::function<Result<bool>(Channel&, std::uint32_t rank)> at)
    {
        Channel::Handlers h;
        h.frame = [this, at](Channel& c, Type type, std::span<const std::uint8_t> body) {
            EXPECT_EQ(closed, 0) << "a frame after close";
            auto ack = Ack::decode(body);
            EXPECT_EQ(type, Type::ack);
            if (!ack)
                return Result<bool>::fail(ack.error());
            frames.push_back(ack->rank);
            return at(c, ack->rank);
        };
        return h;
    }

    static std::vector<std::uint32_t> upto(std::uint32_t last)
    {
        std::vector<std::uint32_t> out;
        for (std::uint32_t r = 0; r <= last; ++r)
            out.push_back(r);
        return out;
    }

    event_base* base_;
    Secret secret_{};
    int peer_ = -1;
    std::unique_ptr<Channel> channel;
    std::vector<std::uint32_t> frames;  // what `frame` saw
    int closed = 0;
    Channel::Reason reason{};
    std::string why;
};

TEST_F(ChannelBurstTest, AFrameHandlerClosesAndTheOwnerDestroysTheChannelInClosed)
{
    auto h = recording([](Channel& c, std::uint32_t rank) {
        if (rank == 10)
            c.close("enough");
        return Result<bool>::ok(true);
    });
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
        channel.reset();
    };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);  // nothing more comes
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::local_close);
    EXPECT_EQ(why, "enough");
    EXPECT_FALSE(channel);
    EXPECT_EQ(frames, upto(10));
}

TEST_F(ChannelBurstTest, ABadFrameClosesAndTheOwnerDestroysTheChannelWithFramesBuffered)
{
    auto h = recording([](Channel&, std::uint32_t rank) {
        return rank == 10 ? Result<bool>::fail("rank 10 is refused") : Result<bool>::ok(true);
    });
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
        channel.reset();
    };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::bad_frame);
    EXPECT_EQ(why, "rank 10 is refused");
    EXPECT_FALSE(channel);
    EXPECT_EQ(frames, upto(10));
}

TEST_F(ChannelBurstTest, ABadHeaderClosesAndTheOwnerDestroysTheChannelWithFramesBuffered)
{
    auto h = recording([](Channel&, std::uint32_t) { return Result<bool>::ok(true); });
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
        channel.reset();
    };
    open(std::move(h));
    Bytes tail = acks(0, 10);
    Bytes junk = Ack{99, 0}.encode();
    junk[0] = 'X';  // bad magic
    tail.insert(tail.end(), junk.begin(), junk.end());
    const Bytes more = acks(10, burst);
    tail.insert(tail.end(), more.begin(), more.end());
    handshake_and_send(tail);
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::bad_frame);
    EXPECT_EQ(why, "not an exitpolicy frame (bad magic)");
    EXPECT_FALSE(channel);
    EXPECT_EQ(frames, upto(9));
}

TEST_F(ChannelBurstTest, AReadyHandlerClosesAndTheOwnerDestroysTheChannelBeforeAnyFrame)
{
    auto h = recording([](Channel&, std::uint32_t) { return Result<bool>::ok(true); });
    h.ready = [](Channel& c) { c.close("not you"); };
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
        channel.reset();
    };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::local_close);
    EXPECT_EQ(why, "not you");
    EXPECT_FALSE(channel);
    EXPECT_TRUE(frames.empty());
}

TEST_F(ChannelBurstTest, AnOwnerThatKeepsAClosedChannelHearsNothingMore)
{
    auto h = recording([](Channel& c, std::uint32_t rank) {
        if (rank == 10)
            c.close("enough");
        return Result<bool>::ok(true);
    });
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
    };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    ::close(peer_);  // no second `closed` for the peer's end
    peer_ = -1;
    run_until([] { return false; }, 100ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::local_close);
    EXPECT_EQ(why, "enough");
    ASSERT_TRUE(channel);
    EXPECT_EQ(frames, upto(10));
    channel->close("again");  // already closed: no second call
    EXPECT_EQ(closed, 1);
}

TEST_F(ChannelBurstTest, AnOwnerMayDestroyTheChannelInsideFrame)
{
    // Destroying is not closing: no `closed` then.
    auto h = recording([this](Channel&, std::uint32_t rank) {
        if (rank == 10)
            channel.reset();
        return Result<bool>::ok(true);
    });
    h.closed = [this](Channel&, Channel::Reason, const std::string&) { ++closed; };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return !channel; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 0);
    EXPECT_EQ(frames, upto(10));
}

TEST_F(ChannelBurstTest, AClosedHandlerThatThrowsOnceTheChannelIsGoneHarmsNothing)
{
    auto h = recording([](Channel& c, std::uint32_t rank) {
        if (rank == 10)
            c.close("enough");
        return Result<bool>::ok(true);
    });
    h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
        ++closed;
        reason = r;
        why = text;
        channel.reset();
        throw std::runtime_error("the owner's trouble");
    };
    open(std::move(h));
    handshake_and_send(acks(0, burst));
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::local_close);
    EXPECT_EQ(why, "enough");
    EXPECT_FALSE(channel);
    EXPECT_EQ(frames, upto(10));
}

// After the handshake every frame is tagged: one altered, replayed or sent
// without its tag (by someone on the path, who has no secret) closes the
// channel with auth_failed, and nothing from it on reaches the owner.
TEST_F(ChannelBurstTest, AFrameAlteredReplayedOrUntaggedAfterTheHandshakeIsRefused)
{
    const std::pair<Tamper, std::size_t> cases[] = {
        {Tamper::alter_fifth, 4}, {Tamper::replay_first, 1}, {Tamper::untagged, 0}};
    for (const auto& [tamper, delivered] : cases) {
        SCOPED_TRACE(static_cast<int>(tamper));
        frames.clear();
        closed = 0;
        if (peer_ >= 0)
            ::close(peer_);
        peer_ = -1;
        auto h = recording([](Channel&, std::uint32_t) { return Result<bool>::ok(true); });
        h.closed = [this](Channel&, Channel::Reason r, const std::string& text) {
            ++closed;
            reason = r;
            why = text;
            channel.reset();
        };
        open(std::move(h));
        handshake_and_send(acks(0, 8), false, tamper);
        ASSERT_TRUE(run_until([&] { return closed != 0; }));
        run_until([] { return false; }, 50ms);
        EXPECT_EQ(closed, 1);
        EXPECT_EQ(reason, Channel::Reason::auth_failed);
        EXPECT_EQ(why, "a frame failed its integrity check");
        std::vector<std::uint32_t> first;  // ranks 0 .. delivered - 1
        for (std::uint32_t r = 0; r < delivered; ++r)
            first.push_back(r);
        EXPECT_EQ(frames, first);
    }
}

TEST(FrameTagTest, TagsBindKeyDirectionSequenceAndEveryByte)
{
    const Secret secret{1, 2, 3};
    const Nonce a{4}, b{5};
    const SessionKey key = session_key(secret, a, b);
    EXPECT_NE(key, session_key(secret, b, a));
    const Bytes frame = Ack{3, 1}.encode();
    const Tag t = frame_tag(key, Direction::to_server, 0, frame);
    EXPECT_NE(t, frame_tag(key, Direction::to_client, 0, frame));
    EXPECT_NE(t, frame_tag(key, Direction::to_server, 1, frame));
    EXPECT_NE(t, frame_tag(session_key(Secret{9}, a, b), Direction::to_server, 0, frame));
    Bytes changed = frame;
    changed.back() ^= 0x80;
    EXPECT_NE(t, frame_tag(key, Direction::to_server, 0, changed));
    // The digest stands for the frame: hashed once, tagged per link.
    EXPECT_EQ(t, frame_tag(key, Direction::to_server, 0, frame_digest(frame)));
    EXPECT_NE(frame_digest(frame), frame_digest(changed));
    Bytes header_changed = frame;
    header_changed[3] ^= 1;
    EXPECT_NE(t, frame_tag(key, Direction::to_server, 0, header_changed));
    // A client's seal and a server's open agree, in order only.
    FrameSeal client(key, false), server(key, true);
    const Tag first = client.seal(frame);
    const Tag second = client.seal(frame);
    EXPECT_FALSE(server.open(frame, second));  // out of order: the server expected #0
    FrameSeal fresh(key, true);
    EXPECT_TRUE(fresh.open(frame, first));
    EXPECT_TRUE(fresh.open(frame, second));
    EXPECT_FALSE(fresh.open(frame, second));  // replayed
    // Sealed by its digest, the frame opens as any other; a digest of
    // another frame does not.
    FrameSeal by_digest(key, false), opens(key, true);
    EXPECT_TRUE(opens.open(frame, by_digest.seal(frame_digest(frame))));
    EXPECT_FALSE(opens.open(frame, by_digest.seal(frame_digest(changed))));
}

TEST_F(ChannelBurstTest, ThePeersCloseIsToldApartFromAFailedProof)
{
    auto h = recording([](Channel&, std::uint32_t) { return Result<bool>::ok(true); });
    h.closed = [this](Channel&, Channel::Reason r, const std::string&) {
        ++closed;
        reason = r;
        channel.reset();
    };
    open(h);
    handshake_and_send(acks(0, 3));
    ASSERT_TRUE(run_until([&] { return frames.size() == 3; }));
    ::shutdown(peer_, SHUT_WR);
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::peer_closed);
    EXPECT_FALSE(channel);

    ::close(peer_);
    peer_ = -1;
    closed = 0;
    frames.clear();
    bool ready = false;
    h.ready = [&ready](Channel&) { ready = true; };
    open(h);
    handshake_and_send(acks(0, burst), true);
    ASSERT_TRUE(run_until([&] { return closed != 0; }));
    run_until([] { return false; }, 50ms);
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(reason, Channel::Reason::auth_failed);
    EXPECT_FALSE(ready);
    EXPECT_TRUE(frames.empty());
}

// A peer that sends its Hello one byte every 200 ms is closed when the
// handshake's deadline passes, however often its bytes come: the deadline
// is counted from the accept, not from the last byte.
TEST_F(ChannelBurstTest, ASlowHelloIsClosedAtTheHandshakeDeadline)
{
    Channel::set_handshake_deadline(1s);
    struct Restore {
        ~Restore() { Channel::set_handshake_deadline(Channel::default_handshake_deadline); }
    } restore;
    Channel::Handlers h;
    bool ready = false;
    h.ready = [&ready](Channel&) { ready = true; };
    h.closed = [this](Channel&, Channel::Reason r, const std::string&) {
        ++closed;
        reason = r;
    };
    const auto opened = std::chrono::steady_clock::now();
    open(h);

    // The challenge, then the Hello it asks for, trickled.
    Bytes in;
    std::uint8_t buf[256];
    ASSERT_TRUE(run_until([&] {
        const ssize_t n = ::recv(peer_, buf, sizeof(buf), 0);
        if (n > 0)
            in.insert(in.end(), buf, buf + n);
        return in.size() >= header_size + 40;
    }));
    auto challenge = Challenge::decode(std::span(in).subspan(header_size));
    ASSERT_TRUE(challenge) << challenge.error();
    Hello hello;
    hello.role = Role::stepd;
    hello.hostname = "slow";
    hello.nonce = *random_nonce();
    hello.mac = client_proof(secret_, *challenge, hello);
    const Bytes out = hello.encode();
    ASSERT_GT(out.size(), 25u);  // more than 5 s of it at one byte per 200 ms
    std::size_t sent = 0;
    auto next_byte = opened;
    auto trickle = [&] {
        if (std::chrono::steady_clock::now() >= next_byte && sent + 1 < out.size()) {
            ::send(peer_, out.data() + sent, 1, MSG_NOSIGNAL);
            ++sent;
            next_byte += 200ms;
        }
    };
    EXPECT_TRUE(run_until([&] {
        trickle();
        return closed != 0;
    }, 4s));
    const auto took = std::chrono::steady_clock::now() - opened;
    EXPECT_EQ(reason, Channel::Reason::handshake_timeout);
    EXPECT_GE(took, 900ms);
    EXPECT_LT(took, 2500ms);
    // More bytes, and more time: no second `closed`.
    run_until([&] {
        trickle();
        return false;
    }, 1500ms);
    EXPECT_EQ(closed, 1);
    EXPECT_FALSE(ready);
}


// Two real channels, client and server, on one loop. Frames of many
// megabytes (beyond the socket's buffers, and beyond what one loop turn
// reads) mixed with small ones, in both directions, from the moment the
// client connects: every byte arrives, in order, each frame whole once.
TEST(ChannelTest, LargeAndSmallFramesArriveWholeAndInOrderBothWays)
{
    event_base* base = event_base_new();
    ASSERT_NE(base, nullptr);
    const Secret secret = *random_secret();
    const test::Listener listener = test::listen_on_loopback(1);
    ASSERT_GE(listener.fd, 0);

    // Sizes around the bounds: empty, tiny, the 64 KiB of a turn, 5 MiB.
    const std::vector<std::size_t> sizes{0, 1, 64 * 1024 - 9, 64 * 1024, 5 << 20, 3, 5 << 20, 7 << 20, 100};
    auto frame_of = [](std::size_t size, std::uint8_t seed) {
        Bytes body(size);
        for (std::size_t i = 0; i < size; ++i)
            body[i] = static_cast<std::uint8_t>(i * 31 + seed);
        return Writer(Type::fence_down).bytes(body).finish();
    };
    std::vector<Bytes> sent_up, sent_down, got_up, got_down;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        sent_up.push_back(frame_of(sizes[i], static_cast<std::uint8_t>(i)));
        sent_down.push_back(frame_of(sizes[sizes.size() - 1 - i], static_cast<std::uint8_t>(100 + i)));
    }
    auto keep = [](std::vector<Bytes>& into) {
        return [&into](Channel&, Type type, std::span<const std::uint8_t> body) {
            EXPECT_EQ(type, Type::fence_down);
            Bytes frame = Writer(type).bytes(body).finish();
            into.push_back(std::move(frame));
            return Result<bool>::ok(true);
        };
    };
    int closed = 0;
    std::unique_ptr<Channel> server;
    Channel::Handlers sh;
    sh.ready = [&](Channel& c) {
        for (const Bytes& f : sent_down)
            c.send(f);
    };
    sh.frame = keep(got_up);
    sh.closed = [&](Channel&, Channel::Reason, const std::string&) { ++closed; };
    Channel::Handlers ch;
    ch.frame = keep(got_down);
    ch.closed = sh.closed;
    Hello me;
    me.role = Role::daemon;
    me.hostname = "client";
    auto client = Channel::connect(base, "127.0.0.1", listener.port(), secret, job, step, me, std::move(ch));
    ASSERT_TRUE(client) << client.error();
    for (const Bytes& f : sent_up)
        (*client)->send(f);  // held until the handshake is done
    const int fd = ::accept(listener.fd, nullptr, nullptr);
    ::close(listener.fd);
    ASSERT_GE(fd, 0);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    server = Channel::accept(base, fd, secret, job, step, std::move(sh));
    ASSERT_TRUE(server);
    EXPECT_TRUE(test::run_until(
        base, [&] { return got_up.size() == sent_up.size() && got_down.size() == sent_down.size(); }, 20s));
    EXPECT_EQ(closed, 0);
    ASSERT_EQ(got_up.size(), sent_up.size());
    ASSERT_EQ(got_down.size(), sent_down.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_TRUE(got_up[i] == sent_up[i]) << "frame " << i << " up";
        EXPECT_TRUE(got_down[i] == sent_down[i]) << "frame " << i << " down";
    }
    server.reset();
    client->reset();
    event_base_free(base);
}

// What does not fit makes no frame (Writer gives none): sent on a link, it
// is nothing at all. Before, its tag went alone, the peer read it as the
// next frame's header, and the link broke.
TEST(ChannelTest, NoFrameIsNeverSentAndTheLinkGoesOn)
{
    event_base* base = event_base_new();
    ASSERT_NE(base, nullptr);
    const Secret secret = *random_secret();
    const test::Listener listener = test::listen_on_loopback(1);
    ASSERT_GE(listener.fd, 0);
    const Bytes first = Writer(Type::fence_down).bytes(Bytes{1, 2, 3}).finish();
    const Bytes second = Writer(Type::fence_down).bytes(Bytes{4, 5}).finish();
    std::vector<Bytes> got_up, got_down;
    auto keep = [](std::vector<Bytes>& into) {
        return [&into](Channel&, Type type, std::span<const std::uint8_t> body) {
            into.push_back(Writer(type).bytes(body).finish());
            return Result<bool>::ok(true);
        };
    };
    int closed = 0;
    Channel::Handlers sh;
    sh.ready = [&](Channel& c) {
        c.send(first);
        c.send(std::make_shared<const Bytes>(), frame_digest(Bytes{}));
        c.send(Bytes{}, frame_digest(Bytes{}));
        c.send(second);
    };
    sh.frame = keep(got_up);
    sh.closed = [&](Channel&, Channel::Reason, const std::string&) { ++closed; };
    Channel::Handlers ch;
    ch.frame = keep(got_down);
    ch.closed = sh.closed;
    Hello me;
    me.role = Role::daemon;
    me.hostname = "client";
    auto client = Channel::connect(base, "127.0.0.1", listener.port(), secret, job, step, me, std::move(ch));
    ASSERT_TRUE(client) << client.error();
    (*client)->send(first);
    (*client)->send(Bytes{});
    (*client)->send(second);
    const int fd = ::accept(listener.fd, nullptr, nullptr);
    ::close(listener.fd);
    ASSERT_GE(fd, 0);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto server = Channel::accept(base, fd, secret, job, step, std::move(sh));
    ASSERT_TRUE(server);
    EXPECT_TRUE(test::run_until(base, [&] { return got_up.size() == 2 && got_down.size() == 2; }, 10s));
    EXPECT_EQ(closed, 0);
    EXPECT_EQ(got_up, (std::vector<Bytes>{first, second}));
    EXPECT_EQ(got_down, (std::vector<Bytes>{first, second}));
    server.reset();
    client->reset();
    event_base_free(base);
}

// A large frame for many links (a fence's result at the FE or a relay) is
// held once: each channel's buffer refers to it, none copies it, and it is
// let go once written.
TEST(ChannelTest, AFrameForManyLinksIsHeldOnceAndLetGoWhenWritten)
{
    event_base* base = event_base_new();
    ASSERT_NE(base, nullptr);
    const Secret secret = *random_secret();
    constexpr int links = 3;
    Bytes body(8 << 20);
    for (std::size_t i = 0; i < body.size(); ++i)
        body[i] = static_cast<std::uint8_t>(i * 7);
    auto frame = std::make_shared<const Bytes>(Writer(Type::fence_down).bytes(body).finish());
    const FrameDigest digest = frame_digest(*frame);

    std::vector<std::unique_ptr<Channel>> servers, clients;
    std::vector<Bytes> got;
    long held_while_queued = 0;
    int ready = 0;
    for (int i = 0; i < links; ++i) {
        const test::Listener listener = test::listen_on_loopback(1);
        ASSERT_GE(listener.fd, 0);
        Channel::Handlers ch;
        ch.frame = [&got](Channel&, Type type, std::span<const std::uint8_t> b) {
            got.push_back(Writer(type).bytes(b).finish());
            return Result<bool>::ok(true);
        };
        ch.closed = [](Channel&, Channel::Reason, const std::string& why) { ADD_FAILURE() << why; };
        Hello me;
        me.role = Role::daemon;
        me.hostname = "client";
        auto client = Channel::connect(base, "127.0.0.1", listener.port(), secret, job, step, me, std::move(ch));
        ASSERT_TRUE(client) << client.error();
        clients.push_back(std::move(*client));
        const int fd = ::accept(listener.fd, nullptr, nullptr);
        ::close(listener.fd);
        ASSERT_GE(fd, 0);
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        Channel::Handlers sh;
        sh.ready = [&](Channel&) {
            if (++ready < links)
                return;
            for (auto& s : servers)
                s->send(frame, digest);
            held_while_queued = frame.use_count();
        };
        sh.frame = [](Channel&, Type, std::span<const std::uint8_t>) { return Result<bool>::ok(true); };
        sh.closed = ch.closed;
        servers.push_back(Channel::accept(base, fd, secret, job, step, std::move(sh)));
        ASSERT_TRUE(servers.back());
    }
    EXPECT_TRUE(test::run_until(base, [&] { return got.size() == links; }, 20s));
    // A bufferevent writes on a later turn of the loop: each buffer held
    // its reference, and no copy, when the last send returned.
    EXPECT_EQ(held_while_queued, 1 + links);
    EXPECT_EQ(frame.use_count(), 1);
    for (const Bytes& g : got)
        EXPECT_TRUE(g == *frame);
    servers.clear();
    clients.clear();
    event_base_free(base);
}

}  // namespace
}  // namespace exitpolicy::protocol
