// SPDX-License-Identifier: Apache-2.0
// log.cpp - see log.hpp.
#include "pmix_server/log.hpp"

#include "protocol/fd.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctime>
#include <mutex>
#include <string>
#include <syslog.h>

namespace exitpolicy::pmix_server::log {
namespace {

std::mutex mu;
FILE* file = nullptr;
int level = 0;
std::string tag;
std::string ident;  // syslog keeps the pointer

void emit(int prio, const char* what, const char* fmt, va_list ap) noexcept
{
    char buf[2048];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    std::lock_guard lock(mu);
    if (file) {
        timespec now{};
        clock_gettime(CLOCK_REALTIME, &now);
        tm t{};
        localtime_r(&now.tv_sec, &t);
        char when[32];
        std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &t);
        std::fprintf(file, "%s.%06ld %s %s: %s\n", when, now.tv_nsec / 1000, tag.c_str(), what, buf);
        std::fflush(file);
    } else {
        syslog(prio, "%s: %s", what, buf);
    }
}

}  // namespace

int open_owned(const char* path) noexcept
{
    // The name is predictable and the directory may be shared: never
    // follow a link, and take only a plain file of this user's with no
    // other name (not one another user made, or a hard link to elsewhere).
    // Opened without blocking: a FIFO another user made under this name
    // would hold a blocking open() until someone reads it, for ever; so it
    // fails (no reader) or is refused below (not a plain file).
    protocol::Fd fd(
        ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0600));
    if (!fd)
        return -1;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1) {
        fd.reset();
        errno = EPERM;
        return -1;
    }
    if (const int flags = ::fcntl(fd.get(), F_GETFL); flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        return -1;
    return fd.release();
}

int file_fd() noexcept
{
    return file ? ::fileno(file) : -1;
}

void open(const char* t, const char* log_dir, int l) noexcept
{
    tag = t;
    level = l;
    if (log_dir && *log_dir) {
        const std::string path = std::string(log_dir) + "/exitpolicy-pmixd." + tag + ".log";
        if (const int fd = open_owned(path.c_str()); fd >= 0 && !(file = ::fdopen(fd, "a")))
            ::close(fd);
    }
    if (!file) {
        ident = "exitpolicy-pmixd[" + tag + "]";
        openlog(ident.c_str(), LOG_PID, LOG_USER);
    }
}

#define EXITPOLICY_EMIT(prio, what) \
    do {                            \
        va_list ap;                 \
        va_start(ap, fmt);          \
        emit(prio, what, fmt, ap);  \
        va_end(ap);                 \
    } while (0)

void error(const char* fmt, ...) noexcept
{
    EXITPOLICY_EMIT(LOG_ERR, "error");
}

void info(const char* fmt, ...) noexcept
{
    if (level >= 1)
        EXITPOLICY_EMIT(LOG_INFO, "info");
}

void debug(const char* fmt, ...) noexcept
{
    if (level >= 2)
        EXITPOLICY_EMIT(LOG_DEBUG, "debug");
}

}  // namespace exitpolicy::pmix_server::log
