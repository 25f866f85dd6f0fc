// SPDX-License-Identifier: Apache-2.0
// event_loop.hpp - a libevent loop the unit tests drive themselves: turned
// without blocking until a condition holds, or a bound passes.
#pragma once

#include <event2/event.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <thread>

namespace exitpolicy::test {

// Turns `base` until done() holds (true) or `timeout` passed (false).
inline bool run_until(event_base* base, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5))
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        event_base_loop(base, EVLOOP_NONBLOCK);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// A TCP socket listening on 127.0.0.1 at a port the kernel chose; fd -1
// when it cannot. The caller closes it.
struct Listener {
    int fd = -1;
    sockaddr_in address{};
    std::uint16_t port() const { return ntohs(address.sin_port); }
};
inline Listener listen_on_loopback(int backlog)
{
    Listener l;
    l.address.sin_family = AF_INET;
    l.address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(l.address);
    l.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    auto* at = reinterpret_cast<sockaddr*>(&l.address);
    if (l.fd >= 0 && (::bind(l.fd, at, sizeof(l.address)) != 0 || ::listen(l.fd, backlog) != 0 ||
                      ::getsockname(l.fd, at, &len) != 0)) {
        ::close(l.fd);
        l.fd = -1;
    }
    return l;
}

// The TCP ports this process listens on, each once: what a component under
// test bound for itself is what appears here after it started.
inline std::set<std::uint16_t> listening_ports()
{
    std::set<std::uint16_t> ports;
    for (int fd = 0; fd < 4096; ++fd) {
        int listening = 0;
        socklen_t len = sizeof(listening);
        sockaddr_in at{};
        socklen_t at_len = sizeof(at);
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &at_len) == 0 && at.sin_family == AF_INET)
            ports.insert(ntohs(at.sin_port));
    }
    return ports;
}

// A loop of the test's own.
class Loop {
public:
    Loop() : base_(event_base_new()) {}
    ~Loop() { event_base_free(base_); }
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;
    event_base* base() const { return base_; }
    bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(5))
    {
        return test::run_until(base_, done, timeout);
    }

private:
    event_base* base_;
};

}  // namespace exitpolicy::test
