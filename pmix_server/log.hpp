// log.hpp - the daemon's log: levelled lines tagged with job.step and node,
// to a file in log_dir when given, else syslog.
#pragma once

namespace exitpolicy::pmixd::log {

void open(const char* tag, const char* log_dir, int level) noexcept;
void error(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace exitpolicy::pmixd::log
