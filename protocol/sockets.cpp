// SPDX-License-Identifier: Apache-2.0
// sockets.cpp - see sockets.hpp.
#include "sockets.hpp"

#include "timeouts.hpp"

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
#include <sys/un.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <unistd.h>
#include <utility>

namespace exitpolicy::protocol {

namespace {

// The kernel's socket diagnostics request for the exact TCP connection
// from `peer` to `self` (both of one family), as `ss` asks; none for
// another family.
struct DiagRequest {
    nlmsghdr header;
    inet_diag_req_v2 request;
};

std::optional<DiagRequest> diag_request(const sockaddr_storage& peer, const sockaddr_storage& self) noexcept
{
    DiagRequest ask{};
    ask.header.nlmsg_len = sizeof ask;
    ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    ask.header.nlmsg_flags = NLM_F_REQUEST;
    ask.header.nlmsg_seq = 1;
    inet_diag_req_v2& r = ask.request;
    r.sdiag_family = static_cast<std::uint8_t>(peer.ss_family);
    r.sdiag_protocol = IPPROTO_TCP;
    r.idiag_states = ~0u;
    r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (peer.ss_family == AF_INET) {
        const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
        const auto& s = reinterpret_cast<const sockaddr_in&>(self);
        r.id.idiag_sport = p.sin_port;
        r.id.idiag_dport = s.sin_port;
        std::memcpy(r.id.idiag_src, &p.sin_addr, sizeof p.sin_addr);
        std::memcpy(r.id.idiag_dst, &s.sin_addr, sizeof s.sin_addr);
    } else if (peer.ss_family == AF_INET6) {
        const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
        const auto& s = reinterpret_cast<const sockaddr_in6&>(self);
        r.id.idiag_sport = p.sin6_port;
        r.id.idiag_dport = s.sin6_port;
        std::memcpy(r.id.idiag_src, &p.sin6_addr, sizeof p.sin6_addr);
        std::memcpy(r.id.idiag_dst, &s.sin6_addr, sizeof s.sin6_addr);
    } else {
        return std::nullopt;
    }
    return ask;
}

// The owner of the TCP socket at `peer` connected to `self` (both of one
// family), asked of the kernel's socket diagnostics by the exact
// connection.
std::optional<uid_t> tcp_socket_owner(const sockaddr_storage& peer, const sockaddr_storage& self) noexcept
{
    const auto asked = diag_request(peer, self);
    if (!asked)
        return std::nullopt;
    const DiagRequest& ask = *asked;
    const inet_diag_req_v2& r = ask.request;
    const Fd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
    if (!nl)
        return std::nullopt;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    std::optional<uid_t> owner;
    // One answer: the socket, or an error (none such).
    alignas(nlmsghdr) char reply[8192];
    timeval bound{1, 0};  // the kernel answers at once; never hang a caller on it
    ::setsockopt(nl.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    if (::sendto(nl.get(), &ask, sizeof ask, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
        static_cast<ssize_t>(sizeof ask)) {
        ssize_t n;
        while ((n = ::recv(nl.get(), reply, sizeof reply, 0)) < 0 && errno == EINTR) {
        }
        const auto* h = reinterpret_cast<const nlmsghdr*>(reply);
        if (n >= static_cast<ssize_t>(sizeof(nlmsghdr)) && NLMSG_OK(h, static_cast<unsigned>(n)) &&
            h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
            h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
            const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
            // The very connection asked for, not another by any chance.
            if (m->id.idiag_sport == r.id.idiag_sport && m->id.idiag_dport == r.id.idiag_dport &&
                std::memcmp(m->id.idiag_src, r.id.idiag_src, sizeof r.id.idiag_src) == 0 &&
                std::memcmp(m->id.idiag_dst, r.id.idiag_dst, sizeof r.id.idiag_dst) == 0)
                owner = static_cast<uid_t>(m->idiag_uid);
        }
    }
    return owner;
}

}  // namespace

std::optional<uid_t> peer_owner(int fd) noexcept
{
    sockaddr_storage self{}, peer{};
    socklen_t slen = sizeof self, plen = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &slen) != 0)
        return std::nullopt;
    if (self.ss_family == AF_UNIX) {
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0)
            return std::nullopt;
        return cred.uid;
    }
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 || peer.ss_family != self.ss_family)
        return std::nullopt;
    return tcp_socket_owner(peer, self);
}

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
    timer_.reset(event_new(evconnlistener_get_base(listener_), -1, 0, on_timer, this));
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
    event_add(timer_.get(), &later);
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
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd)
        return R::fail(std::string("socket: ") + std::strerror(errno));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = address;
    socklen_t len = sizeof sin;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0 || ::listen(fd.get(), backlog) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
        const int e = errno;
        char text[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &address, text, sizeof text);
        return R::fail(std::string("listening on ") + text + ": " + std::strerror(e));
    }
    return R::ok(Listening{std::move(fd), ntohs(sin.sin_port)});
}

void set_no_delay(int fd) noexcept
{
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
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
    set_no_delay(fd);
    // A peer whose machine died sends no FIN: probe an idle link after 10 s,
    // every 5 s, 3 times; give up on data unacknowledged for 30 s. The link
    // then closes like any other, and the loss is handled as a departure.
    const int on = 1, idle = 10, interval = 5, count = 3;
    const auto user_timeout_ms = static_cast<unsigned>(timeouts::unacknowledged_data.count());
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

}  // namespace exitpolicy::protocol
