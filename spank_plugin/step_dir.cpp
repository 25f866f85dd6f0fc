// SPDX-License-Identifier: Apache-2.0
// step_dir.cpp - the step's private directory on a node: made by root,
// removed as its owner, and what dead steps left removed at the next
// step's start. See step_dir.hpp.
#include "step_dir.hpp"

#include "daemon_link.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <grp.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace exitpolicy::spank_plugin {

using Clock = std::chrono::steady_clock;

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

}  // namespace

std::vector<std::string> remove_stale_step_dirs(const std::string& node, std::chrono::seconds older_than,
                                                std::chrono::milliseconds timeout)
{
    std::vector<std::string> removed;
    DIR* tmp = ::opendir("/tmp");
    if (!tmp)
        return removed;
    const std::string prefix = "exitpolicy.";
    const std::string mark = "." + node + ".";
    std::vector<std::string> candidates;
    while (const dirent* e = ::readdir(tmp)) {
        const std::string name = e->d_name;
        // exitpolicy.<job>.<step>.<node>.XXXXXX, this node's
        const auto at = name.rfind(mark);
        if (name.rfind(prefix, 0) == 0 && at != std::string::npos && at + mark.size() + 6 == name.size() &&
            name.find('/') == std::string::npos)
            candidates.push_back("/tmp/" + name);
    }
    ::closedir(tmp);
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
    for (const auto& dir : candidates) {
        struct stat st {};
        // A directory as make_step_dir leaves one (never a link), untouched
        // for a while, whose daemon no longer listens, of a step that is over.
        if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 07777) != 0700)
            continue;
        const auto changed = std::chrono::system_clock::from_time_t(st.st_mtime);
        if (now - changed < older_than || listening.count(daemon_socket(dir)) || step_runs(dir))
            continue;
        if (remove_step_dir(dir, st.st_uid, st.st_gid, timeout))
            removed.push_back(dir);
        if (removed.size() >= max_stale_removed)
            break;  // the rest at the next step's start
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
    if (::rmdir(dir.c_str()) == 0)
        return R::ok(true);
    const char* argv[] = {"/bin/rm", "-rf", "--one-file-system", "--", dir.c_str(), nullptr};
    const pid_t child = ::fork();
    if (child < 0)
        return R::fail("cannot remove " + dir + ": fork: " + std::strerror(errno));
    if (child == 0) {
        const int devnull = ::open("/dev/null", O_RDWR);
        if (devnull >= 0)
            for (int fd : {0, 1, 2})
                ::dup2(devnull, fd);
        // None of root's descriptors goes with it to the user: a process
        // of the user's could take one (pidfd_getfd) while rm runs.
        ::close_range(3, ~0U, 0);
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
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (true) {
        const pid_t r = ::waitpid(child, &status, WNOHANG);
        if (r == child) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return R::ok(true);
            return R::fail("cannot remove " + dir + ": rm -rf as uid " + std::to_string(uid) + " ended with wait status " +
                           std::to_string(status));
        }
        if (r < 0 && errno != EINTR)
            return R::fail("cannot remove " + dir + ": waitpid: " + std::strerror(errno));
        if (Clock::now() >= deadline) {
            ::kill(child, SIGKILL);  // our own child, not yet reaped: its pid is still ours
            while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
            }
            return R::fail("cannot remove " + dir + ": rm -rf took longer than " +
                           std::to_string(timeout.count()) + " ms");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

}  // namespace exitpolicy::spank_plugin
