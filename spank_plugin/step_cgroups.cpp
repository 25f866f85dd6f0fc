// SPDX-License-Identifier: Apache-2.0
// step_cgroups.cpp - see step_cgroups.hpp.
#include "step_cgroups.hpp"

#include "protocol/fd.hpp"
#include "protocol/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace exitpolicy::spank_plugin {
namespace {

std::vector<std::string_view> split(std::string_view text, char by)
{
    std::vector<std::string_view> parts;
    for (std::size_t at = 0;;) {
        const auto next = text.find(by, at);
        parts.push_back(text.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
        if (next == std::string_view::npos)
            return parts;
        at = next + 1;
    }
}

// /proc/PID/cgroup's lines of v1 hierarchies with controllers.
std::vector<V1Cgroup> v1_cgroups(std::string_view text)
{
    std::vector<V1Cgroup> out;
    for (std::string_view line : split(text, '\n')) {
        // "ID:CONTROLLERS:PATH"; the path may hold ':'.
        const auto first = line.find(':');
        const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
        if (second == std::string_view::npos)
            continue;
        const std::string_view controllers = line.substr(first + 1, second - first - 1);
        if (controllers.empty() || controllers.find('=') != std::string_view::npos)
            continue;  // cgroup v2's "0::", or a named hierarchy (name=systemd)
        out.push_back({std::string(controllers), std::string(line.substr(second + 1))});
    }
    return out;
}

// The path up to and with its step_* component; none without one, or
// with a component that is not a plain name.
std::optional<std::string> step_part(std::string_view path)
{
    if (path.empty() || path.front() != '/')
        return std::nullopt;
    std::string out;
    for (std::string_view part : split(path.substr(1), '/')) {
        if (part.empty() || part == "." || part == "..")
            return std::nullopt;
        out += '/';
        out += part;
        if (part.starts_with("step_"))
            return out;
    }
    return std::nullopt;
}

// Whether `prefix` is `path` or one of the directories above it.
bool is_under(std::string_view path, std::string_view prefix)
{
    if (prefix == "/")
        return true;
    return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view field)
{
    std::string out;
    for (std::size_t i = 0; i < field.size(); ++i) {
        if (field[i] == '\\' && i + 3 < field.size()) {
            const std::string_view digits = field.substr(i + 1, 3);
            if (digits.size() == 3 && digits.find_first_not_of("01234567") == std::string_view::npos) {
                out += static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
                i += 3;
                continue;
            }
        }
        out += field[i];
    }
    return out;
}

std::string read_all(const std::string& path)
{
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Writes `pid` into `dir`'s cgroup.procs: 0 or an errno.
int move_into(const std::string& dir, pid_t pid)
{
    const protocol::Fd fd(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd)
        return errno;
    const std::string text = std::to_string(pid) + "\n";
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        return errno ? errno : EIO;
    return 0;
}

// The parent pid in /proc/PID/stat; -1 if it is gone.
pid_t parent_of(pid_t pid)
{
    const std::string stat = read_all("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos)
        return -1;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    return ppid;
}

// The daemon's children (its event anchor), from every thread's children
// file, each still its child and pinned by a pidfd of its own.
std::vector<std::pair<pid_t, protocol::Fd>> children_of(pid_t daemon)
{
    std::vector<std::pair<pid_t, protocol::Fd>> out;
    std::set<pid_t> seen;
    const std::string tasks = "/proc/" + std::to_string(daemon) + "/task";
    DIR* dir = ::opendir(tasks.c_str());
    if (!dir)
        return out;
    while (const dirent* e = ::readdir(dir)) {
        if (e->d_name[0] == '.')
            continue;
        std::istringstream pids(read_all(tasks + "/" + e->d_name + "/children"));
        for (pid_t pid = 0; pids >> pid;) {
            if (!seen.insert(pid).second)
                continue;
            const auto started = protocol::process::start_time(pid);
            protocol::Fd pidfd(started ? protocol::process::open_pidfd_of(pid, *started) : -1);
            if (pidfd && parent_of(pid) == daemon)
                out.emplace_back(pid, std::move(pidfd));
        }
    }
    ::closedir(dir);
    return out;
}

}  // namespace

std::vector<V1Cgroup> step_cgroups_to_join(std::string_view task_cgroups, std::string_view daemon_cgroups)
{
    std::vector<V1Cgroup> join;
    const auto daemons = v1_cgroups(daemon_cgroups);
    for (const V1Cgroup& task : v1_cgroups(task_cgroups)) {
        // The freezer is proctrack/cgroup's: what it counts, it waits for.
        if (split(task.controllers, ',') == std::vector<std::string_view>{"freezer"})
            continue;
        const auto step = step_part(task.path);
        if (!step)
            continue;
        bool there = false;
        for (const V1Cgroup& d : daemons)
            there = there || (d.controllers == task.controllers && d.path == *step);
        if (!there)
            join.push_back({task.controllers, *step});
    }
    return join;
}

namespace {

// Where `path` of a cgroup file system of type `fstype` ("cgroup" with
// `controllers`, or "cgroup2") is on this node, from mountinfo's text.
std::optional<std::string> cgroup_dir(std::string_view mountinfo, std::string_view fstype,
                                      std::string_view controllers, const std::string& path)
{
    const auto wanted = split(controllers, ',');
    for (std::string_view line : split(mountinfo, '\n')) {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
        const auto fields = split(line, ' ');
        std::size_t dash = 6;
        while (dash < fields.size() && fields[dash] != "-")
            ++dash;
        if (dash + 3 >= fields.size() || fields[dash + 1] != fstype)
            continue;
        const auto super = split(fields[dash + 3], ',');
        bool all = true;
        for (std::string_view c : wanted)
            all = all && (c.empty() || std::find(super.begin(), super.end(), c) != super.end());
        if (!all)
            continue;
        const std::string root = unescape(fields[3]);
        if (!is_under(path, root))
            continue;
        const std::string below = root == "/" ? path : path.substr(root.size());
        std::string dir = unescape(fields[4]);
        if (dir == "/")
            dir.clear();
        return dir + below;
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> v1_cgroup_dir(std::string_view mountinfo, const V1Cgroup& cgroup)
{
    return cgroup_dir(mountinfo, "cgroup", cgroup.controllers, cgroup.path);
}

std::optional<std::string> oom_counter_file(std::string_view task_cgroups, std::string_view mountinfo)
{
    // Its own: a plain path whose last part is task_*.
    const auto own = [](const std::string& path) {
        const auto slash = path.rfind('/');
        return slash != std::string::npos && std::string_view(path).substr(slash + 1).starts_with("task_") &&
               path.find("/..") == std::string::npos && path.find("/./") == std::string::npos;
    };
    for (const V1Cgroup& c : v1_cgroups(task_cgroups))
        if (const auto names = split(c.controllers, ','); std::find(names.begin(), names.end(), "memory") != names.end()) {
            if (!own(c.path))
                return std::nullopt;
            const auto dir = v1_cgroup_dir(mountinfo, c);
            return dir ? std::optional(*dir + "/memory.oom_control") : std::nullopt;
        }
    // cgroup v2: the "0::" line, where there is no v1 memory hierarchy.
    for (std::string_view line : split(task_cgroups, '\n'))
        if (line.starts_with("0::")) {
            const std::string path(line.substr(3));
            if (!own(path))
                return std::nullopt;
            const auto dir = cgroup_dir(mountinfo, "cgroup2", "", path);
            return dir ? std::optional(*dir + "/memory.events") : std::nullopt;
        }
    return std::nullopt;
}

std::optional<std::uint64_t> oom_kills_in(std::string_view text)
{
    for (std::string_view line : split(text, '\n'))
        if (line.starts_with("oom_kill ")) {
            const std::string number(line.substr(9));
            char* end = nullptr;
            errno = 0;
            const unsigned long long n = std::strtoull(number.c_str(), &end, 10);
            if (end == number.c_str() || *end != '\0' || errno)
                return std::nullopt;
            return n;
        }
    return std::nullopt;
}

std::string own_mountinfo()
{
    return read_all("/proc/self/mountinfo");
}

std::optional<OomCounter> oom_counter_of(pid_t task, const std::string& mountinfo)
{
    auto file = oom_counter_file(read_all("/proc/" + std::to_string(task) + "/cgroup"), mountinfo);
    if (!file)
        return std::nullopt;
    const auto now = oom_kills_in(read_all(*file));
    if (!now)
        return std::nullopt;  // no such file (no memory controller there), or no count in it
    return OomCounter{std::move(*file), *now};
}

bool oom_killed_since(const OomCounter& counter)
{
    const auto now = oom_kills_in(read_all(counter.file));
    return now && *now > counter.at_start;
}

std::optional<std::uint64_t> memory_limit_in(std::string_view text)
{
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.remove_suffix(1);
    const std::string number(text);
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(number.c_str(), &end, 10);
    // v1 says no limit with its page counter's maximum, near 2^63.
    if (number.empty() || end == number.c_str() || *end != '\0' || errno || n == 0 || n >= (1ULL << 62))
        return std::nullopt;
    return n;
}

std::optional<std::uint64_t> memory_limit_of(const OomCounter& counter)
{
    // v2 counts in memory.events beside memory.max, v1 in memory.oom_control
    // beside memory.limit_in_bytes.
    const bool v2 = counter.file.ends_with("/memory.events");
    const std::string limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
    std::string dir = counter.file.substr(0, counter.file.rfind('/'));
    std::optional<std::uint64_t> lowest;
    // Up the hierarchy while it has the file (its root in v2 has none); a
    // few levels (task, step, job, user, the node's) and no more.
    for (int level = 0; level < 8 && !dir.empty(); ++level) {
        const std::string path = dir + "/" + limit_file;
        if (::access(path.c_str(), R_OK) != 0)
            break;
        if (auto limit = memory_limit_in(read_all(path)); limit && (!lowest || *limit < *lowest))
            lowest = limit;
        dir = dir.substr(0, dir.rfind('/'));
    }
    return lowest;
}

Result<std::vector<std::string>> join_step_cgroups(pid_t task, pid_t daemon, int pidfd)
{
    using R = Result<std::vector<std::string>>;
    const auto join = step_cgroups_to_join(read_all("/proc/" + std::to_string(task) + "/cgroup"),
                                           read_all("/proc/" + std::to_string(daemon) + "/cgroup"));
    std::vector<std::string> joined;
    if (join.empty())
        return R::ok(std::move(joined));
    // Never a pid that is no longer the daemon's.
    if (protocol::process::ended(pidfd))
        return R::ok(std::move(joined));
    const std::string mountinfo = read_all("/proc/self/mountinfo");
    const auto children = children_of(daemon);
    std::string failed;
    for (const V1Cgroup& cgroup : join) {
        const auto dir = v1_cgroup_dir(mountinfo, cgroup);
        int err = dir ? move_into(*dir, daemon) : ENOENT;
        for (const auto& [child, child_fd] : children)
            if (!err && !protocol::process::ended(child_fd.get()))
                err = move_into(*dir, child);
        if (err)
            failed += (failed.empty() ? "" : "; ") + cgroup.controllers + " " + (dir ? *dir : cgroup.path) + ": " +
                      std::strerror(err);
        else
            joined.push_back(cgroup.controllers);
    }
    if (!failed.empty())
        return R::fail("cannot move the node daemon into its step's cgroups (" + failed + ")");
    return R::ok(std::move(joined));
}

}  // namespace exitpolicy::spank_plugin
