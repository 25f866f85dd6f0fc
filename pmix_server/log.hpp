// SPDX-License-Identifier: Apache-2.0
// log.hpp - the daemon's log: levelled lines tagged with job.step and node,
// to a file in log_dir when given, else syslog.
#pragma once

#include "protocol/guard.hpp"

#include <utility>

namespace exitpolicy::pmix_server::log {

// To <log_dir>/exitpolicy-pmixd.<tag>.log when log_dir is given and that
// file can be had safely (open_owned), else to syslog.
void open(const char* tag, const char* log_dir, int level) noexcept;
// Opens `path` for appending, creating it (0600) if missing, only if it is
// a plain file of this user's with one name and not a symbolic link; -1
// (errno set) otherwise.
int open_owned(const char* path) noexcept;
// The log file's descriptor, for a crash's stack; -1 with syslog.
int file_fd() noexcept;
void error(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace exitpolicy::pmix_server::log

namespace exitpolicy::pmix_server {

// Every libevent callback's body runs through this guard
// (protocol/guard.hpp): an exception is logged as "internal error in
// WHAT: why" and goes no further. false when the body threw.
template <typename Body>
bool guarded(const char* what, Body&& body) noexcept
{
    return protocol::guarded(std::forward<Body>(body),
                             [what](const char* why) { log::error("internal error in %s: %s", what, why); });
}

}  // namespace exitpolicy::pmix_server
