// SPDX-License-Identifier: Apache-2.0
// log.cpp - see log.hpp.
#include "spank_plugin/log.hpp"

#include "spank.hpp"

#include <cstdarg>
#include <cstdio>

namespace exitpolicy::spank_plugin::log {
namespace {

int level = 0;

}  // namespace

void set_level(int l) noexcept
{
    level = l;
}

#define EXITPOLICY_FORMAT(buf)                       \
    char buf[1024];                                  \
    do {                                             \
        va_list ap;                                  \
        va_start(ap, fmt);                           \
        std::vsnprintf(buf, sizeof(buf), fmt, ap);   \
        va_end(ap);                                  \
    } while (0)

void error(const char* fmt, ...) noexcept
{
    EXITPOLICY_FORMAT(buf);
    slurm_error("exitpolicy: %s", buf);
}

void info(const char* fmt, ...) noexcept
{
    EXITPOLICY_FORMAT(buf);
    slurm_info("exitpolicy: %s", buf);
}

void verbose(const char* fmt, ...) noexcept
{
    EXITPOLICY_FORMAT(buf);
    if (level >= 1)
        slurm_info("exitpolicy: %s", buf);
    else
        slurm_verbose("exitpolicy: %s", buf);
}

void debug(const char* fmt, ...) noexcept
{
    EXITPOLICY_FORMAT(buf);
    if (level >= 2)
        slurm_info("exitpolicy: %s", buf);
    else
        slurm_debug("exitpolicy: %s", buf);
}

}  // namespace exitpolicy::spank_plugin::log
