// SPDX-License-Identifier: Apache-2.0
// blocking_io.cpp - see blocking_io.hpp.
#include "blocking_io.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>

namespace exitpolicy::spank_plugin::io {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline)
{
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

bool wait_fd(int fd, short events, Clock::time_point deadline)
{
    pollfd p{fd, events, 0};
    while (true) {
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0)
            return true;
        if (n == 0 || errno != EINTR)
            return false;
    }
}

Result<bool> write_all(int fd, const protocol::Bytes& data, Clock::time_point deadline, const char* peer)
{
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(fd, POLLOUT, deadline))
                return Result<bool>::fail(std::string("timed out writing to ") + peer);
            continue;
        }
        return Result<bool>::fail(std::string("cannot write to ") + peer + ": " + std::strerror(errno));
    }
    return Result<bool>::ok(true);
}

Result<bool> read_exact(int fd, std::uint8_t* out, std::size_t size, Clock::time_point deadline, const char* peer)
{
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::recv(fd, out + done, size - done, 0);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            continue;
        }
        if (n == 0)
            return Result<bool>::fail(std::string(peer) + " closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_fd(fd, POLLIN, deadline))
                return Result<bool>::fail(std::string("timed out waiting for ") + peer);
            continue;
        }
        return Result<bool>::fail(std::string("cannot read from ") + peer + ": " + std::strerror(errno));
    }
    return Result<bool>::ok(true);
}

Result<protocol::Bytes> read_frame(int fd, protocol::Type expected, Clock::time_point deadline, const char* peer,
                               protocol::FrameSeal* seal)
{
    protocol::Type type{};
    return read_frame_of(fd, {expected}, type, deadline, peer, seal);
}

Result<protocol::Bytes> read_frame_of(int fd, std::initializer_list<protocol::Type> accepted, protocol::Type& type,
                                  Clock::time_point deadline, const char* peer, protocol::FrameSeal* seal)
{
    std::array<std::uint8_t, protocol::header_size> head{};
    if (auto r = read_exact(fd, head.data(), head.size(), deadline, peer); !r)
        return Result<protocol::Bytes>::fail(r.error());
    auto h = protocol::decode_header(head);
    if (!h)
        return Result<protocol::Bytes>::fail(h.error());
    if (std::find(accepted.begin(), accepted.end(), h->type) == accepted.end())
        return Result<protocol::Bytes>::fail("expected a " + std::string(protocol::type_name(*accepted.begin())) +
                                         " frame, got " + std::string(protocol::type_name(h->type)));
    type = h->type;
    protocol::Bytes body(h->length);
    if (auto r = read_exact(fd, body.data(), body.size(), deadline, peer); !r)
        return Result<protocol::Bytes>::fail(r.error());
    if (seal) {
        protocol::Tag tag{};
        if (auto r = read_exact(fd, tag.data(), tag.size(), deadline, peer); !r)
            return Result<protocol::Bytes>::fail(r.error());
        protocol::Bytes frame(head.begin(), head.end());
        frame.insert(frame.end(), body.begin(), body.end());
        if (!seal->open(frame, tag))
            return Result<protocol::Bytes>::fail(std::string("a frame from ") + peer + " failed its integrity check");
    }
    return Result<protocol::Bytes>::ok(std::move(body));
}

void append_sealed(protocol::Bytes& out, const protocol::Bytes& frame, protocol::FrameSeal& seal)
{
    const protocol::Tag tag = seal.seal(frame);
    out.insert(out.end(), frame.begin(), frame.end());
    out.insert(out.end(), tag.begin(), tag.end());
}

Result<bool> write_sealed(int fd, const protocol::Bytes& frame, protocol::FrameSeal& seal, Clock::time_point deadline,
                          const char* peer)
{
    protocol::Bytes out;
    append_sealed(out, frame, seal);
    return write_all(fd, out, deadline, peer);
}

}  // namespace exitpolicy::spank_plugin::io
