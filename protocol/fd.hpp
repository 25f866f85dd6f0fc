// SPDX-License-Identifier: Apache-2.0
// fd.hpp - the owner of a descriptor: move-only, it closes what it holds
// exactly once, in its noexcept destructor or reset(); a descriptor given
// away with release() is the taker's to close. No libevent here: the
// slurmstepd side uses it too.
#pragma once

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

}  // namespace exitpolicy::protocol
