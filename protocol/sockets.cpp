// SPDX-License-Identifier: Apache-2.0
// sockets.cpp - see sockets.hpp.
#include "sockets.hpp"

#include <event2/event.h>
#include <event2/listener.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace exitpolicy::protocol {

std::size_t descriptors_short(int fd, std::size_t reserve) noexcept
{
    rlimit lim{};
    if (fd < 0 || ::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
        return 0;
    const rlim_t used_up_to = static_cast<rlim_t>(fd) + 1;
    const rlim_t left = lim.rlim_cur > used_up_to ? lim.rlim_cur - used_up_to : 0;
    return left >= reserve ? 0 : static_cast<std::size_t>(reserve - left);
}

AcceptBackoff::AcceptBackoff(evconnlistener* listener, std::function<void(const std::string&)> log,
                             std::function<bool()> relieve)
    : listener_(listener), log_(std::move(log)), relieve_(std::move(relieve))
{
    timer_ = event_new(evconnlistener_get_base(listener_), -1, 0, on_timer, this);
}

AcceptBackoff::~AcceptBackoff()
{
    if (timer_)
        event_free(timer_);
}

void AcceptBackoff::failed(int error) noexcept
{
    // Out of descriptors with idle peers holding some: room at once.
    try {
        if ((error == EMFILE || error == ENFILE) && relieve_ && relieve_())
            return;
    } catch (...) {
    }
    if (!failing_) {
        failing_ = true;
        try {
            if (log_)
                log_(std::string("cannot accept connections: ") + evutil_socket_error_to_string(error) +
                     "; trying again every " + std::to_string(pause.count()) + " ms");
        } catch (...) {
        }
    }
    // Without a timer to enable it again, the listener stays enabled: libevent
    // retries at once, but still without a line per attempt.
    if (!timer_)
        return;
    const timeval later{0, static_cast<suseconds_t>(pause.count() * 1000)};
    evconnlistener_disable(listener_);
    event_add(timer_, &later);
}

void AcceptBackoff::on_timer(int, short, void* arg) noexcept
{
    auto* self = static_cast<AcceptBackoff*>(arg);
    evconnlistener_enable(self->listener_);
}

Result<Listening> listen_loopback()
{
    return listen_on(htonl(INADDR_LOOPBACK), SOMAXCONN);
}

Result<Listening> listen_on(std::uint32_t address, int backlog)
{
    using R = Result<Listening>;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return R::fail(std::string("socket: ") + std::strerror(errno));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = address;
    socklen_t len = sizeof sin;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0 || ::listen(fd, backlog) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
        const int e = errno;
        ::close(fd);
        char text[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &address, text, sizeof text);
        return R::fail(std::string("listening on ") + text + ": " + std::strerror(e));
    }
    return R::ok(Listening{fd, ntohs(sin.sin_port)});
}

void tune_socket(int fd) noexcept
{
    if (fd < 0)
        return;
    // libevent makes the sockets it connects without close-on-exec: a child
    // would hold the link open (no FIN when it closes) until the child ends.
    ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    // Small frames (events, fence results) must not wait for Nagle's
    // algorithm and a delayed ACK: that is 40 ms per hop.
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    // A peer whose machine died sends no FIN: probe an idle link after 10 s,
    // every 5 s, 3 times; give up on data unacknowledged for 30 s. The link
    // then closes like any other, and the loss is handled as a departure.
    const int idle = 10, interval = 5, count = 3;
    const unsigned user_timeout_ms = 30000;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

}  // namespace exitpolicy::protocol
