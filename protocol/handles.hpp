// SPDX-License-Identifier: Apache-2.0
// handles.hpp - owners of the C handles every part holds: a descriptor
// (Fd) and libevent's objects (EventHandle, BufferEventHandle,
// ListenerHandle, EventBaseHandle). Each is move-only and closes or frees
// what it holds exactly once, in its noexcept destructor or reset(); a
// handle given away with release() is the taker's to close.
#pragma once

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <memory>
#include <unistd.h>
#include <utility>

namespace exitpolicy::protocol {

class Fd {
public:
    Fd() noexcept = default;
    explicit Fd(int fd) noexcept : fd_(fd) {}
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept
    {
        if (this != &other)
            reset(other.release());
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    // The descriptor, no longer owned here.
    int release() noexcept { return std::exchange(fd_, -1); }
    // Closes what is held (an EINTR from close() still closed it on Linux)
    // and holds `fd` instead.
    void reset(int fd = -1) noexcept
    {
        if (fd_ >= 0 && fd_ != fd)
            ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

template <typename T, void (*Free)(T*)>
struct Freer {
    void operator()(T* p) const noexcept
    {
        if (p)
            Free(p);
    }
};
using EventHandle = std::unique_ptr<event, Freer<event, event_free>>;
using BufferEventHandle = std::unique_ptr<bufferevent, Freer<bufferevent, bufferevent_free>>;
using ListenerHandle = std::unique_ptr<evconnlistener, Freer<evconnlistener, evconnlistener_free>>;
using EventBaseHandle = std::unique_ptr<event_base, Freer<event_base, event_base_free>>;

}  // namespace exitpolicy::protocol
