// SPDX-License-Identifier: Apache-2.0
// socket_activation.cpp - the reserved listening socket, and the bind() and
// accept() the PMIx library reaches (socket_activation.hpp).
#include "socket_activation.hpp"

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
#include <unistd.h>

namespace exitpolicy::pmix_server::activation {
namespace {

constexpr std::size_t max_held = 4096;

struct Held {
    int fd = -1;
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
    int kick_fd = -1;  // open(): our own connection, to make the socket readable
    in_port_t kick_port = 0;  // its port, network order
    std::deque<Held> held;
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
        const Held h = s.held.front();
        s.held.pop_front();
        give(h, addr, len);
        return h.fd;
    }
    Held h;
    h.len = sizeof h.addr;
    h.fd = libc_accept(fd, reinterpret_cast<sockaddr*>(&h.addr), &h.len);
    if (h.fd < 0)
        return -1;
    if (s.open) {
        if (s.kick_port == 0 || reinterpret_cast<const sockaddr_in&>(h.addr).sin_port != s.kick_port) {
            give(h, addr, len);
            return h.fd;
        }
        // Our own connection from open(): it did its work.
        ::close(h.fd);
        if (s.kick_fd >= 0)
            ::close(std::exchange(s.kick_fd, -1));
        s.kick_port = 0;
        errno = s.error;
        return -1;
    }
    if (connected_from(h.fd, s.let_through)) {
        // One connection: the others are looked for no more (each look
        // reads /proc/net/tcp).
        s.let_through = -1;
        give(h, addr, len);
        return h.fd;
    }
    // Bounded: a node's own ranks are far fewer; a flood of strangers'
    // connections is closed.
    if (s.held.size() < max_held)
        s.held.push_back(h);
    else
        ::close(h.fd);
    errno = s.error;
    return -1;
}

}  // namespace

void arm(const Reserved& r, int error)
{
    State& s = state();
    std::lock_guard guard(s.lock);
    s.reserved_fd = r.fd;
    s.port = r.port;
    s.error = error;
}

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
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(s.port);
    sockaddr_in mine{};
    socklen_t len = sizeof mine;
    if (fd >= 0 && (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0 || errno == EINPROGRESS) &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
        s.kick_fd = fd;
        s.kick_port = mine.sin_port;
    } else if (fd >= 0) {
        ::close(fd);
    }
}

void close_held()
{
    State& s = state();
    std::lock_guard guard(s.lock);
    s.stopping = true;
    for (const Held& h : s.held)
        ::close(h.fd);
    s.held.clear();
    if (s.kick_fd >= 0)
        ::close(std::exchange(s.kick_fd, -1));
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
    if (fd < 0 || fd != s.library_fd.load())
        return exitpolicy::pmix_server::activation::libc_accept(fd, addr, len);
    return exitpolicy::pmix_server::activation::gated_accept(s, fd, addr, len);
}
