// SPDX-License-Identifier: Apache-2.0
// socket_activation.cpp - the reserved listening socket, and the bind() and
// accept() the PMIx library reaches (socket_activation.hpp).
#include "socket_activation.hpp"

#include "pmix_server/log.hpp"
#include "protocol/fd.hpp"
#include "protocol/sockets.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <mutex>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <ctime>
#include <unistd.h>

namespace exitpolicy::pmix_server::activation {
namespace {

constexpr std::size_t max_held = 4096;

struct Held {
    protocol::Fd fd;
    sockaddr_storage addr{};
    socklen_t len = 0;
};

// Armed: the reserved socket and what accept() answers while the gate is
// closed. `library_fd` is the descriptor the library listens on once it
// adopted the socket: accept() on any other passes through.
struct State {
    std::mutex lock;
    int reserved_fd = -1;
    std::uint16_t port = 0;
    int error = EAGAIN;
    std::atomic<int> library_fd{-1};
    pid_t let_through = -1;
    bool open = false;
    bool stopping = false;
    protocol::Fd kick;  // open(): our own connection, to make the socket readable
    in_port_t kick_port = 0;  // its port, network order
    std::deque<Held> held;
    // Only this user's connections reach the library (-1: anyone's, until
    // serve_only()); `stranger_error` is what accept() answers for
    // another's when the gate is not armed.
    std::atomic<uid_t> owner{static_cast<uid_t>(-1)};
    std::atomic<int> stranger_error{EAGAIN};
    std::atomic<std::uint64_t> refused{0};
    std::atomic<std::int64_t> last_refusal_log{0};
};

State& state()
{
    static State s;
    return s;
}

int libc_bind(int fd, const sockaddr* addr, socklen_t len)
{
    return static_cast<int>(::syscall(SYS_bind, fd, addr, len));
}

int libc_accept(int fd, sockaddr* addr, socklen_t* len)
{
    return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, 0));
}

// Whether the connection accepted on `fd` was made by process `pid`: TCP
// has no SO_PEERCRED, so its peer's socket (by its port, in
// /proc/net/tcp) is looked for among pid's descriptors.
bool connected_from(int fd, pid_t pid) noexcept
{
    try {
        sockaddr_in peer{}, self{};
        socklen_t plen = sizeof peer, slen = sizeof self;
        if (pid <= 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &slen) != 0 || peer.sin_family != AF_INET)
            return false;
        // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
        char want_local[16], want_remote[16];
        std::snprintf(want_local, sizeof want_local, "%08X:%04X", peer.sin_addr.s_addr, ntohs(peer.sin_port));
        std::snprintf(want_remote, sizeof want_remote, "%08X:%04X", self.sin_addr.s_addr, ntohs(self.sin_port));
        std::ifstream tcp("/proc/net/tcp");
        std::string line, inode;
        std::getline(tcp, line);
        while (inode.empty() && std::getline(tcp, line)) {
            std::istringstream in(line);
            std::string sl, local, remote, skip;
            in >> sl >> local >> remote;
            if (local != want_local || remote != want_remote)
                continue;
            for (int i = 0; i < 6; ++i)
                in >> skip;
            in >> inode;
        }
        if (inode.empty())
            return false;
        const std::string target = "socket:[" + inode + "]";
        const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
        for (const auto& entry : std::filesystem::directory_iterator(dir)) {
            std::error_code ec;
            if (std::filesystem::read_symlink(entry.path(), ec).string() == target)
                return true;
        }
    } catch (...) {
    }
    return false;
}

// Whether the connection at `fd` is another user's: its peer's socket is
// not the step's user's (or the kernel does not say whose it is: a peer
// that is gone already). Such a connection is to be closed; a line in the
// log says so (at most one a second: another user must not fill it).
bool refused_stranger(State& s, int fd) noexcept
{
    const uid_t allowed = s.owner.load();
    if (allowed == static_cast<uid_t>(-1))
        return false;
    const auto owner = protocol::peer_owner(fd);
    if (owner && *owner == allowed)
        return false;
    const std::uint64_t count = ++s.refused;
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const std::int64_t second = now.tv_sec;
    std::int64_t last = s.last_refusal_log.load();
    if (second > last && s.last_refusal_log.compare_exchange_strong(last, second)) {
        if (owner)
            log::error("refused a PMIx connection from uid %u: only the step's user (uid %u) is served (%llu "
                       "refused so far)",
                       static_cast<unsigned>(*owner), static_cast<unsigned>(allowed),
                       static_cast<unsigned long long>(count));
        else
            log::info("refused a PMIx connection whose peer's owner is unknown (gone already?) (%llu refused so "
                      "far)",
                      static_cast<unsigned long long>(count));
    }
    return true;
}

// Makes room among held connections: those whose client has gone (it
// closed, or died) are closed. Whether there is room now.
bool room_to_hold(State& s) noexcept
{
    if (s.held.size() < max_held)
        return true;
    std::erase_if(s.held, [](const Held& h) {
        char c;
        const ssize_t n = ::recv(h.fd.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    });
    return s.held.size() < max_held;
}

void give(const Held& h, sockaddr* addr, socklen_t* len)
{
    if (addr && len) {
        std::memcpy(addr, &h.addr, std::min<socklen_t>(*len, h.len));
        *len = h.len;
    }
}

// The library's accept() on the adopted socket.
int gated_accept(State& s, int fd, sockaddr* addr, socklen_t* len)
{
    std::lock_guard guard(s.lock);
    if (s.stopping)
        return libc_accept(fd, addr, len);
    if (s.open && !s.held.empty()) {
        Held h = std::move(s.held.front());
        s.held.pop_front();
        give(h, addr, len);
        return h.fd.release();
    }
    Held h;
    h.len = sizeof h.addr;
    h.fd.reset(libc_accept(fd, reinterpret_cast<sockaddr*>(&h.addr), &h.len));
    if (!h.fd)
        return -1;
    // What is not handed to the library is closed on the way out (h.fd),
    // before errno says why.
    if (refused_stranger(s, h.fd.get())) {
        h.fd.reset();
        errno = s.error;
        return -1;
    }
    if (s.open) {
        if (s.kick_port == 0 || reinterpret_cast<const sockaddr_in&>(h.addr).sin_port != s.kick_port) {
            give(h, addr, len);
            return h.fd.release();
        }
        // Our own connection from open(): it did its work.
        h.fd.reset();
        s.kick.reset();
        s.kick_port = 0;
        errno = s.error;
        return -1;
    }
    if (connected_from(h.fd.get(), s.let_through)) {
        // One connection: the others are looked for no more (each look
        // reads /proc/net/tcp).
        s.let_through = -1;
        give(h, addr, len);
        return h.fd.release();
    }
    // Bounded: a node's own ranks are far fewer, and another user's never
    // get this far; the step's user's own flood is closed.
    if (room_to_hold(s))
        s.held.push_back(std::move(h));
    else
        h.fd.reset();
    errno = s.error;
    return -1;
}

}  // namespace

void arm(const Reserved& r, int error)
{
    State& s = state();
    std::lock_guard guard(s.lock);
    s.reserved_fd = r.fd.get();
    s.port = r.port;
    s.error = error;
}

void serve_only(uid_t uid, int error)
{
    State& s = state();
    s.stranger_error.store(error);
    s.owner.store(uid);
}

std::uint64_t refused()
{
    return state().refused.load();
}

namespace {

int ungated_accept(int fd, sockaddr* addr, socklen_t* len)
{
    State& s = state();
    const int accepted = libc_accept(fd, addr, len);
    if (accepted < 0 || !refused_stranger(s, accepted))
        return accepted;
    errno = s.stranger_error.load();
    return -1;
}

}  // namespace

void let_through(pid_t pid)
{
    State& s = state();
    std::lock_guard guard(s.lock);
    s.let_through = pid;
}

void open()
{
    State& s = state();
    std::lock_guard guard(s.lock);
    if (s.open)
        return;
    s.open = true;
    if (s.held.empty() || s.library_fd.load() < 0)
        return;
    // The held clients are already accepted: only a readable socket makes
    // the library ask for them.
    protocol::Fd kick(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    const int fd = kick.get();
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(s.port);
    sockaddr_in mine{};
    socklen_t len = sizeof mine;
    if (fd >= 0 && (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0 || errno == EINPROGRESS) &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
        s.kick = std::move(kick);
        s.kick_port = mine.sin_port;
    }
}

void close_held()
{
    State& s = state();
    std::lock_guard guard(s.lock);
    s.stopping = true;
    s.held.clear();
    s.kick.reset();
}

std::size_t held()
{
    State& s = state();
    std::lock_guard guard(s.lock);
    return s.held.size();
}

}  // namespace exitpolicy::pmix_server::activation


// The library's calls reach these before libc's (the executable's own
// definitions come first in symbol lookup). Anything but the armed port
// and the adopted socket goes to the kernel as libc would send it.
extern "C" int bind(int fd, const sockaddr* addr, socklen_t len)
{
    auto& s = exitpolicy::pmix_server::activation::state();
    if (addr && addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        std::lock_guard guard(s.lock);
        const auto* sin = reinterpret_cast<const sockaddr_in*>(addr);
        if (s.reserved_fd >= 0 && s.library_fd.load() < 0 && ntohs(sin->sin_port) == s.port) {
            // Keeps the library's descriptor number, now our socket, with
            // whatever is queued on it.
            if (::dup3(s.reserved_fd, fd, O_CLOEXEC) < 0)
                return -1;
            s.library_fd.store(fd);
            return 0;
        }
    }
    return exitpolicy::pmix_server::activation::libc_bind(fd, addr, len);
}

extern "C" int accept(int fd, sockaddr* addr, socklen_t* len)
{
    auto& s = exitpolicy::pmix_server::activation::state();
    // Any accept() reaches here from the PMIx library (the daemon's own
    // listeners accept through libevent, with accept4()): on every path,
    // only the step's user is served.
    if (fd < 0 || fd != s.library_fd.load())
        return exitpolicy::pmix_server::activation::ungated_accept(fd, addr, len);
    return exitpolicy::pmix_server::activation::gated_accept(s, fd, addr, len);
}
