// SPDX-License-Identifier: Apache-2.0
// step_dir.cpp - the step's private directory on a node: made by root,
// removed as its owner, and what dead steps left removed at the next
// step's start. See step_dir.hpp.
#include "step_dir.hpp"

#include "protocol/fd.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <grp.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace exitpolicy::spank_plugin {

using Clock = std::chrono::steady_clock;

namespace {

// Root's record of the step directories it made on this machine
// (step_dir_registry): one file each, named as the directory, holding its
// owner's "uid gid". Only what is recorded here is ever removed as stale:
// anyone can make a directory in /tmp named as a step's, and root must not
// work for them. On disk, not in /run: what a node that crashed left in a
// /tmp on disk is still there after its reboot, and so must its record be.
constexpr const char* registry = step_dir_registry;

// The registry, made if missing: a real directory of root's, 0700, in one
// of root's that no one else may write to; false if it is anything else.
bool registry_ready()
{
    const std::string parent = std::string(registry).substr(0, std::string(registry).rfind('/'));
    ::mkdir(parent.c_str(), 0755);
    ::mkdir(registry, 0700);
    struct stat up {}, st {};
    return ::lstat(parent.c_str(), &up) == 0 && S_ISDIR(up.st_mode) && up.st_uid == 0 && (up.st_mode & 022) == 0 &&
           ::lstat(registry, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && (st.st_mode & 077) == 0;
}

std::string record_of(const std::string& dir)
{
    return std::string(registry) + "/" + dir.substr(dir.rfind('/') + 1);
}

void record(const std::string& dir, uid_t uid, gid_t gid)
{
    if (!registry_ready())
        return;  // then nothing of it is ever removed as stale
    const protocol::Fd fd(::open(record_of(dir).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd)
        return;
    const std::string owner = std::to_string(uid) + " " + std::to_string(gid) + "\n";
    [[maybe_unused]] auto n = ::write(fd.get(), owner.data(), owner.size());
}

// The owner recorded for `name` (a step directory's basename), if any.
std::optional<std::pair<uid_t, gid_t>> recorded_owner(const std::string& name)
{
    std::ifstream in(std::string(registry) + "/" + name);
    unsigned long uid = 0, gid = 0;
    if (!(in >> uid >> gid))
        return std::nullopt;
    return std::pair{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
}

}  // namespace

Result<std::string> make_step_dir(std::uint32_t job_id, std::uint32_t step_id, const std::string& node, uid_t uid,
                                  gid_t gid)
{
    using R = Result<std::string>;
    std::string path = "/tmp/exitpolicy." + std::to_string(job_id) + "." + std::to_string(step_id) + "." + node +
                       ".XXXXXX";
    if (!::mkdtemp(path.data()))
        return R::fail("cannot create a directory in /tmp: " + std::string(std::strerror(errno)));
    if (::chown(path.c_str(), uid, gid) != 0) {
        const int err = errno;
        ::rmdir(path.c_str());
        return R::fail("cannot give " + path + " to the job's user: " + std::strerror(err));
    }
    record(path, uid, gid);
    return R::ok(std::move(path));
}

namespace {

// The paths of the Unix sockets someone listens on (/proc/net/unix: flags
// __SO_ACCEPTCON), read without connecting to any of them.
std::set<std::string> listening_unix_sockets()
{
    std::set<std::string> out;
    std::ifstream in("/proc/net/unix");
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
        // Num RefCount Protocol Flags Type St Inode Path
        std::istringstream fields(line);
        std::string num, refs, proto, flags, type, state, inode, path;
        if (!(fields >> num >> refs >> proto >> flags >> type >> state >> inode >> path))
            continue;
        if (std::strtoul(flags.c_str(), nullptr, 16) & 0x10000)
            out.insert(path);
    }
    return out;
}

// The step directories of this node (`mark`: ".<node>.") root made and
// recorded: root's own record, never /tmp's listing, so that what someone
// else planted there is no candidate, however many there are.
std::vector<std::string> recorded_step_dirs(const std::string& prefix, const std::string& mark)
{
    std::vector<std::string> found;
    DIR* made = registry_ready() ? ::opendir(registry) : nullptr;
    if (!made)
        return found;
    while (const dirent* e = ::readdir(made)) {
        const std::string name = e->d_name;
        // exitpolicy.<job>.<step>.<node>.XXXXXX, this node's
        const auto at = name.rfind(mark);
        if (name.rfind(prefix, 0) == 0 && at != std::string::npos && at + mark.size() + 6 == name.size() &&
            name.find('/') == std::string::npos)
            found.push_back("/tmp/" + name);
    }
    ::closedir(made);
    return found;
}

// `rm -rf` of `dir` as uid:gid, in a child with none of root's descriptors
// and deaf to the step's SIGTERM; its pid, or -1 (errno) if it cannot fork.
pid_t spawn_removal(const std::string& dir, uid_t uid, gid_t gid)
{
    const char* argv[] = {"/bin/rm", "-rf", "--one-file-system", "--", dir.c_str(), nullptr};
    const pid_t child = ::fork();
    if (child != 0)
        return child;
    const int devnull = ::open("/dev/null", O_RDWR);
    if (devnull >= 0)
        for (int fd : {0, 1, 2})
            ::dup2(devnull, fd);
    // None of root's descriptors goes with it to the user: a process
    // of the user's could take one (pidfd_getfd) while rm runs. glibc's
    // closefrom uses close_range (Linux 5.9) and, on an older kernel,
    // closes what /proc/self/fd lists; it never returns with one open (it
    // ends this process instead).
    ::closefrom(3);
    // Slurm 24.11's slurmstepd SIGTERMs the step's processes, this one
    // too, while its SPANK exit hooks run: rm finishes first.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGTERM, &ignore, nullptr);
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)
        ::_exit(126);
    ::execv(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
}

}  // namespace

std::string daemon_socket(const std::string& dir)
{
    return dir + "/daemon.sock";
}

std::vector<std::string> remove_stale_step_dirs(const std::string& node, uid_t uid, std::chrono::seconds older_than,
                                                std::chrono::milliseconds timeout)
{
    std::vector<std::string> removed;
    const std::string prefix = "exitpolicy.";
    const std::string mark = "." + node + ".";
    const auto candidates = recorded_step_dirs(prefix, mark);
    if (candidates.empty())
        return removed;
    const auto listening = listening_unix_sockets();
    // Its step's slurmstepd listens on SPOOL/NODE_JOB.STEP (slurmd_spool.hpp):
    // a step whose daemon stands by (no socket of its own) may run for long.
    const auto step_runs = [&](const std::string& dir) {
        const std::string job_step = dir.substr(5 + prefix.size(), dir.rfind(mark) - 5 - prefix.size());
        const std::string socket = "/" + node + "_" + job_step;
        return std::any_of(listening.begin(), listening.end(), [&](const std::string& path) {
            const auto at = path.rfind(socket);
            return at != std::string::npos &&
                   (at + socket.size() == path.size() || path[at + socket.size()] == '.');  // a hetjob's component
        });
    };
    const auto now = std::chrono::system_clock::now();
    // Bounded per step, whatever is there: in tries (a removal that fails
    // counts), and in time (one removal's bound in all).
    const auto deadline = Clock::now() + timeout;
    std::size_t tries = 0;
    for (const auto& dir : candidates) {
        const std::string name = dir.substr(5);
        const auto owner = recorded_owner(name);
        struct stat st {};
        if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
            ::unlink(record_of(dir).c_str());  // removed by someone else: nothing left to do
            continue;
        }
        // A directory as make_step_dir left it (never a link), its owner
        // the one recorded, untouched for a while, whose daemon no longer
        // listens, of a step that is over.
        if (!owner || owner->first != uid || !S_ISDIR(st.st_mode) || (st.st_mode & 07777) != 0700 ||
            st.st_uid != owner->first)
            continue;
        const auto changed = std::chrono::system_clock::from_time_t(st.st_mtime);
        if (now - changed < older_than || listening.count(daemon_socket(dir)) || step_runs(dir))
            continue;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (tries++ >= max_stale_removed || left.count() <= 0)
            break;  // the rest at the next step's start
        if (remove_step_dir(dir, owner->first, owner->second, left))
            removed.push_back(dir);
    }
    return removed;
}

Result<bool> remove_step_dir(const std::string& dir, uid_t uid, gid_t gid, std::chrono::milliseconds timeout)
{
    using R = Result<bool>;
    if (dir.rfind("/tmp/exitpolicy.", 0) != 0 || dir.find("/..") != std::string::npos)
        return R::fail("refusing to remove " + dir + ": not a step directory");  // never anything else
    // Empty, as a step whose tasks never used PMIx leaves it (the daemon
    // removes its socket): rmdir follows no link and removes nothing else.
    if (::rmdir(dir.c_str()) == 0) {
        ::unlink(record_of(dir).c_str());
        return R::ok(true);
    }
    const pid_t child = spawn_removal(dir, uid, gid);
    if (child < 0)
        return R::fail("cannot remove " + dir + ": fork: " + std::strerror(errno));
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (true) {
        const pid_t r = ::waitpid(child, &status, WNOHANG);
        if (r == child) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                ::unlink(record_of(dir).c_str());
                return R::ok(true);
            }
            return R::fail("cannot remove " + dir + ": rm -rf as uid " + std::to_string(uid) + " ended with wait status " +
                           std::to_string(status));
        }
        if (r < 0 && errno != EINTR)
            return R::fail("cannot remove " + dir + ": waitpid: " + std::strerror(errno));
        if (Clock::now() >= deadline) {
            ::kill(child, SIGKILL);  // our own child, not yet reaped: its pid is still ours
            // Never a blocking wait: a tracer of the user's (ptrace) is
            // told of its death first and may hold it from us as long as
            // it likes. Reaped now if it can be, else left to slurmstepd,
            // which reaps what it does not know at the step's end.
            for (int i = 0; i < 50 && ::waitpid(child, &status, WNOHANG) == 0; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            return R::fail("cannot remove " + dir + ": rm -rf took longer than " +
                           std::to_string(timeout.count()) + " ms");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

}  // namespace exitpolicy::spank_plugin
