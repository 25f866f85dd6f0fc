// SPDX-License-Identifier: Apache-2.0
// outcome.cpp - wait-status decoding and per-task facts. See outcome.hpp.
#include "outcome.hpp"

#include <csignal>
#include <sys/wait.h>

namespace exitpolicy {

WaitStatus WaitStatus::decode(int raw) noexcept
{
    WaitStatus s;
    if (WIFEXITED(raw)) {
        s.kind = Kind::exited;
        s.exit_code = WEXITSTATUS(raw);
    } else if (WIFSIGNALED(raw)) {
        s.kind = Kind::signaled;
        s.signal = WTERMSIG(raw);
        s.core_dumped = WCOREDUMP(raw);
    } else {
        // Stopped or continued: never a final status; report it as-is.
        s.kind = Kind::other;
        s.exit_code = raw;
    }
    return s;
}

WaitStatus WaitStatus::exited(int code) noexcept
{
    WaitStatus s;
    s.kind = Kind::exited;
    s.exit_code = code & 0xff;
    return s;
}

WaitStatus WaitStatus::signaled(int signal, bool core_dumped) noexcept
{
    WaitStatus s;
    s.kind = Kind::signaled;
    s.signal = signal & 0x7f;
    s.core_dumped = core_dumped;
    return s;
}

int WaitStatus::raw() const noexcept
{
    switch (kind) {
    case Kind::exited: return (exit_code & 0xff) << 8;
    case Kind::signaled: return (signal & 0x7f) | (core_dumped ? 0x80 : 0);
    case Kind::other: break;
    }
    return exit_code;
}

int task_code(const TaskOutcome& task, int lost_code) noexcept
{
    if (task.abort_status)
        return exit_code_of(*task.abort_status);
    return wait_code(task, lost_code);
}

int exit_code_of(int status) noexcept
{
    const int low = static_cast<int>(static_cast<unsigned>(status) & 0xffu);
    return low == 0 && status != 0 ? 1 : low;
}

int wait_code(const TaskOutcome& task, int lost_code) noexcept
{
    if (task.lost)
        return lost_code;
    const WaitStatus s = task.status();
    switch (s.kind) {
    case WaitStatus::Kind::exited: return s.exit_code;
    case WaitStatus::Kind::signaled: return 128 + s.signal;
    case WaitStatus::Kind::other: break;
    }
    return lost_code;
}

bool succeeded(const TaskOutcome& task) noexcept
{
    if (task.lost || task.abort_status)
        return false;
    const WaitStatus s = task.status();
    return s.kind == WaitStatus::Kind::exited && s.exit_code == 0;
}

bool killed_by_teardown(const TaskOutcome& task) noexcept
{
    if (task.lost || task.abort_status || task.oom_killed)
        return false;
    const WaitStatus s = task.status();
    return s.kind == WaitStatus::Kind::signaled && (s.signal == SIGTERM || s.signal == SIGKILL);
}

bool ended_by_itself(const TaskOutcome& task) noexcept
{
    return !task.lost && !task.abort_status && !killed_by_teardown(task);
}

std::string signal_name(int signal)
{
    switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
#ifdef SIGSTKFLT
    case SIGSTKFLT: return "SIGSTKFLT";
#endif
    case SIGCHLD: return "SIGCHLD";
    case SIGCONT: return "SIGCONT";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGURG: return "SIGURG";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    case SIGPROF: return "SIGPROF";
    case SIGWINCH: return "SIGWINCH";
    case SIGIO: return "SIGIO";
#ifdef SIGPWR
    case SIGPWR: return "SIGPWR";
#endif
    case SIGSYS: return "SIGSYS";
    default: break;
    }
    return "signal " + std::to_string(signal);
}

std::string memory_size(std::uint64_t bytes)
{
    constexpr std::pair<std::uint64_t, const char*> units[] = {
        {1ULL << 40, "T"}, {1ULL << 30, "G"}, {1ULL << 20, "M"}, {1ULL << 10, "K"}};
    for (const auto& [size, unit] : units)
        if (bytes >= size && bytes % size == 0)
            return std::to_string(bytes / size) + unit;
    return std::to_string(bytes) + "B";
}

std::string describe(const TaskOutcome& task, int lost_code)
{
    if (task.abort_status) {
        std::string text = "aborted with status " + std::to_string(*task.abort_status);
        if (const auto event = pmix_termination_name(*task.abort_status); !event.empty())
            text += " (" + std::string(event) + ": on hearing of another task's end)";
        return text;
    }
    if (task.lost)
        return "lost (no outcome reported; counted as code " + std::to_string(lost_code) + ")";
    const WaitStatus s = task.status();
    std::string text;
    switch (s.kind) {
    case WaitStatus::Kind::exited:
        text = "exited with code " + std::to_string(s.exit_code);
        if (task.finalized.has_value() && !*task.finalized)
            text += " without finalizing";
        if (task.oom_killed)
            text += " after the OOM killer ended a process of it";
        break;
    case WaitStatus::Kind::signaled:
        text = task.oom_killed && s.signal == SIGKILL ? "killed by the OOM killer (SIGKILL)"
                                                      : "killed by " + signal_name(s.signal);
        if (s.core_dumped)
            text += " (core dumped)";
        if (task.oom_killed && s.signal != SIGKILL)
            text += " after the OOM killer ended a process of it";
        break;
    case WaitStatus::Kind::other:
        text = "ended with wait status " + std::to_string(task.wait_status);
        break;
    }
    if (task.oom_killed && task.memory_limit)
        text += ", memory limit " + memory_size(task.memory_limit);
    return text;
}

}  // namespace exitpolicy
