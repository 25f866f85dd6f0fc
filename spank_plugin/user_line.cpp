// SPDX-License-Identifier: Apache-2.0
// user_line.cpp - see user_line.hpp.
#include "user_line.hpp"

#include <cstdarg>
#include <cstdio>

namespace exitpolicy::spank_plugin {

void user_line(const char* fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    ::flockfile(stderr);
    std::fputs("exitpolicy: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    ::funlockfile(stderr);
    va_end(ap);
}

}  // namespace exitpolicy::spank_plugin
