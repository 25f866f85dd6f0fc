// SPDX-License-Identifier: Apache-2.0
// process.hpp - a process seen through its pidfd and /proc, as slurmstepd
// sees its node daemon and the daemon its tasks: a pidfd pins the process
// (its pid cannot be reused while the pidfd is open), so a signal sent
// through it never reaches a stranger.
#pragma once

#include <cstdint>
#include <optional>
#include <sys/types.h>

namespace exitpolicy::protocol::process {

// The wall clock in microseconds since the epoch: the moments of tasks'
// ends and aborts, compared across a node's processes.
std::int64_t realtime_us() noexcept;
// A pidfd for `pid` (pidfd_open, Linux 5.3); -1 with errno set otherwise.
int open_pidfd(pid_t pid) noexcept;
// Sends `sig` through the pidfd; false with errno set (ESRCH: it is gone).
bool signal(int pidfd, int sig) noexcept;
// The process behind the pidfd has ended (its pidfd turned readable).
bool ended(int pidfd) noexcept;
// The process has begun to exit (PF_EXITING in /proc/PID/stat's flags): a
// signal can no longer change how it ends; its sockets may be closed and
// its peers told while its pidfd turns readable only once it is gone.
bool exiting(pid_t pid) noexcept;
// When the process started, in clock ticks since boot (/proc/PID/stat's
// 22nd field): with the pid, what names one process for all time.
std::optional<std::uint64_t> start_time(pid_t pid) noexcept;
// `fd` moved to a descriptor at or above `floor` (close-on-exec), the old
// one closed; `fd` itself where the limit leaves no room up there. A
// process that holds many descriptors of its own (a pidfd per task) keeps
// the low ones for libraries that select() on theirs: FD_SETSIZE is 1024,
// and a higher one overflows select()'s set (glibc aborts).
int move_above(int fd, int floor) noexcept;

// A pidfd for `pid` if it is still the process that started at `started`
// (and not one that got its pid after it ended); -1 otherwise.
int open_pidfd_of(pid_t pid, std::uint64_t started) noexcept;

}  // namespace exitpolicy::protocol::process
