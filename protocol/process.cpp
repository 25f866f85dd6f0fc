// SPDX-License-Identifier: Apache-2.0
// process.cpp - pidfds and /proc/PID/stat. See process.hpp.
#include "protocol/process.hpp"

#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace exitpolicy::protocol::process {

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

bool exiting(pid_t pid) noexcept
{
    constexpr unsigned long pf_exiting = 0x4;
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    std::FILE* f = std::fopen(path, "re");
    if (!f)
        return false;
    char stat[1024];
    const std::size_t n = std::fread(stat, 1, sizeof stat - 1, f);
    std::fclose(f);
    stat[n] = '\0';
    const char* paren = std::strrchr(stat, ')');  // the name may hold anything
    if (!paren)
        return false;
    // After the name: state ppid pgrp session tty_nr tpgid flags.
    char state = 0;
    long skip = 0;
    unsigned long flags = 0;
    return std::sscanf(paren + 1, " %c %ld %ld %ld %ld %ld %lu", &state, &skip, &skip, &skip, &skip, &skip, &flags) == 7 &&
           (flags & pf_exiting) != 0;
}

}  // namespace exitpolicy::protocol::process
