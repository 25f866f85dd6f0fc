// SPDX-License-Identifier: Apache-2.0
// process.cpp - pidfds and /proc/PID/stat. See process.hpp.
#include "protocol/process.hpp"

#include "protocol/fd.hpp"

#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>

namespace exitpolicy::protocol::process {

std::int64_t realtime_us() noexcept
{
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
}

int open_pidfd(pid_t pid) noexcept
{
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

bool signal(int pidfd, int sig) noexcept
{
    return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
}

bool ended(int pidfd) noexcept
{
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

namespace {

// /proc/PID/stat after the command name (which may hold anything): from
// the state on, fields 3 onwards; false if there is no such process.
bool stat_fields(pid_t pid, char (&buf)[1024], const char*& after_name) noexcept
{
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    std::FILE* f = std::fopen(path, "re");
    if (!f)
        return false;
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* paren = std::strrchr(buf, ')');
    if (!paren)
        return false;
    after_name = paren + 1;
    return true;
}

}  // namespace

bool exiting(pid_t pid) noexcept
{
    constexpr unsigned long pf_exiting = 0x4;
    char stat[1024];
    const char* fields = nullptr;
    if (!stat_fields(pid, stat, fields))
        return false;
    // state ppid pgrp session tty_nr tpgid flags.
    char state = 0;
    long skip = 0;
    unsigned long flags = 0;
    return std::sscanf(fields, " %c %ld %ld %ld %ld %ld %lu", &state, &skip, &skip, &skip, &skip, &skip, &flags) == 7 &&
           (flags & pf_exiting) != 0;
}

std::optional<std::uint64_t> start_time(pid_t pid) noexcept
{
    char stat[1024];
    const char* fields = nullptr;
    if (!stat_fields(pid, stat, fields))
        return std::nullopt;
    // state (3), then fields 4 to 21, then starttime (22).
    const char* p = fields;
    for (int field = 3; field < 22; ++field) {
        while (*p == ' ')
            ++p;
        while (*p && *p != ' ')
            ++p;
    }
    unsigned long long started = 0;
    if (std::sscanf(p, " %llu", &started) != 1)
        return std::nullopt;
    return started;
}

int move_above(int fd, int floor) noexcept
{
    if (fd < 0 || fd >= floor)
        return fd;
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0)
        return fd;
    ::close(fd);
    return high;
}

int open_pidfd_of(pid_t pid, std::uint64_t started) noexcept
{
    Fd fd(open_pidfd(pid));
    if (!fd)
        return -1;
    // Checked after the pidfd pins the pid: what it names now stays.
    if (start_time(pid) != started) {
        fd.reset();
        errno = ESRCH;
        return -1;
    }
    return fd.release();
}

}  // namespace exitpolicy::protocol::process
