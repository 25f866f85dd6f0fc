// SPDX-License-Identifier: Apache-2.0
// pipe.hpp - a close-on-exec pipe whose ends are Fds (fd.hpp): what a
// process that starts another hands it, and keeps.
#pragma once

#include "protocol/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace exitpolicy::protocol {

// A pipe, close-on-exec, its ends held by read_end and write_end; false
// (errno set, nothing held) when the kernel gives none.
inline bool make_pipe(Fd& read_end, Fd& write_end) noexcept
{
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0)
        return false;
    read_end.reset(ends[0]);
    write_end.reset(ends[1]);
    return true;
}

}  // namespace exitpolicy::protocol
