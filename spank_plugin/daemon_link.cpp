// SPDX-License-Identifier: Apache-2.0
// daemon_link.cpp - see daemon_link.hpp.
#include "daemon_link.hpp"

#include "blocking_io.hpp"
#include "protocol/fd.hpp"
#include "protocol/pipe.hpp"
#include "protocol/process.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>

namespace exitpolicy::spank_plugin {
namespace {

using namespace io;
constexpr const char* daemon_name = "the node daemon";

// Bounded like every call here: a daemon that is stopped (SIGSTOP) or
// swamped leaves a connect pending on a full backlog, and this is the
// task's or slurmstepd's own thread.
Result<protocol::Fd> connect_local(const std::string& dir, Clock::time_point deadline)
{
    const std::string path = daemon_socket(dir);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path))
        return Result<protocol::Fd>::fail("socket path too long: " + path);
    std::strcpy(sun.sun_path, path.c_str());
    protocol::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd)
        return Result<protocol::Fd>::fail(std::string("socket: ") + std::strerror(errno));
    auto fail = [&](int err) {
        return Result<protocol::Fd>::fail("cannot reach the node daemon at " + path + ": " + std::strerror(err));
    };
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN)
            return fail(errno);
        // A Unix socket's connect does not complete later: EAGAIN means a
        // full backlog. Try again until the deadline.
        while (true) {
            if (Clock::now() >= deadline)
                return fail(ETIMEDOUT);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) == 0 || errno == EISCONN)
                break;
            if (errno != EAGAIN && errno != EINPROGRESS && errno != EALREADY)
                return fail(errno);
        }
    }
    return Result<protocol::Fd>::ok(std::move(fd));
}

}  // namespace

std::vector<std::string> daemon_environment(char* const* env)
{
    std::vector<std::string> out;
    bool path = false;
    for (char* const* e = env; e && *e; ++e) {
        const std::string_view kv = *e;
        const bool keep = kv.starts_with("PATH=") || kv.starts_with("LD_LIBRARY_PATH=") || kv.starts_with("TZ=") ||
                          kv.starts_with("PMIX_MCA_");
        if (keep)
            out.emplace_back(kv);
        path = path || kv.starts_with("PATH=");
    }
    if (!path)
        out.emplace_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
    return out;
}

namespace {

std::string unsafe_below(const std::string& path, int links_left)
{
    if (path.empty() || path.front() != '/')
        return path + " is no absolute path";
    if (links_left == 0)
        return path + ": too many symbolic links";
    // Each part from the root down, as the kernel resolves it (lstat: a
    // link is judged where it is, its target as the rest of the path). Each
    // must be root's: then no one else can replace the next part, even in
    // a directory writable by all with the sticky bit (/tmp).
    std::size_t end = 0;
    struct stat above {};  // the part before `here`
    std::string above_path = "/";
    while (true) {
        end = path.find('/', end + 1);
        const std::string here = path.substr(0, end);
        struct stat st {};
        if (::lstat(here.empty() ? "/" : here.c_str(), &st) != 0) {
            // Not there (yet): only root may make it, so the directory it
            // would be made in must be writable by no one else, sticky or
            // not (anyone may make a new name in /tmp). The spawn comes
            // later than this check.
            if (errno == ENOENT && !here.empty() && (above.st_mode & (S_IWGRP | S_IWOTH)) == 0)
                return "";
            if (errno == ENOENT && !here.empty()) {
                char mode[8];
                std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(above.st_mode & 07777));
                return here + " is not there, and others than root may make it in " + above_path + " (mode " + mode +
                       ")";
            }
            return "cannot inspect " + here + ": " + std::strerror(errno);
        }
        above = st;
        above_path = here.empty() ? "/" : here;
        if (st.st_uid != 0)
            return here + " belongs to uid " + std::to_string(st.st_uid) + ", not root";
        if (S_ISLNK(st.st_mode)) {
            char target[4096];
            const ssize_t n = ::readlink(here.c_str(), target, sizeof target - 1);
            if (n <= 0)
                return "cannot read the link " + here;
            const std::string to(target, static_cast<std::size_t>(n));
            const std::string rest = end == std::string::npos ? "" : path.substr(end);
            return unsafe_below((to.front() == '/' ? to : here.substr(0, here.rfind('/') + 1) + to) + rest,
                                links_left - 1);
        }
        const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
            return here + " is writable by others than root (mode " + mode + ")";
        }
        if (end == std::string::npos || end + 1 >= path.size())
            return "";
    }
}

}  // namespace

std::string unsafe_for_root(const std::string& path)
{
    return unsafe_below(path, 16);
}

namespace {

// The descriptors a launch makes: each end the helper gets, and the ones
// slurmstepd keeps. Whatever is left when a launch fails closes with it.
struct LaunchEnds {
    protocol::Fd secret_read;  // the secret waits in it (3)
    protocol::Fd ready_read, ready_write;  // the daemon's "ready" (4)
    protocol::Fd null;  // stdin, stdout, stderr (0-2)
    protocol::Fd control_ours, control_its;  // the control link (5)
    protocol::Fd pid_read, pid_write;  // the helper hands up the daemon's pid (8)
    protocol::Fd go_read, go_write;  // the daemon waits for "go" (9)
};

Result<LaunchEnds> make_ends(const std::string& secret_hex)
{
    using R = Result<LaunchEnds>;
    LaunchEnds e;
    protocol::Fd secret_write;
    if (!protocol::make_pipe(e.secret_read, secret_write))
        return R::fail(std::string("pipe: ") + std::strerror(errno));
    // The secret waits in the pipe: 64 bytes fit its buffer.
    [[maybe_unused]] auto w = ::write(secret_write.get(), secret_hex.data(), secret_hex.size());
    secret_write.reset();
    for (auto [r, wr] : {std::pair{&e.ready_read, &e.ready_write}, std::pair{&e.pid_read, &e.pid_write},
                         std::pair{&e.go_read, &e.go_write}})
        if (!protocol::make_pipe(*r, *wr))
            return R::fail(std::string("pipe: ") + std::strerror(errno));
    e.null.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
    int control[2] = {-1, -1};
    if (!e.null || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0)
        return R::fail(std::string("pipe: ") + std::strerror(errno));
    e.control_ours.reset(control[0]);
    e.control_its.reset(control[1]);
    return R::ok(std::move(e));
}

// exitpolicy-detach's command line, then the daemon's: the descriptors at
// the places spawn_helper() puts them.
constexpr int first_pmi = 10;
std::vector<std::string> helper_words(const DaemonLaunch& launch, bool standby)
{
    std::vector<std::string> words{launch.helper, "--uid", std::to_string(launch.uid), "--gid",
                                   std::to_string(launch.gid)};
    if (!launch.groups.empty()) {
        std::string groups;
        for (gid_t g : launch.groups)
            groups += (groups.empty() ? "" : ",") + std::to_string(g);
        words.insert(words.end(), {"--groups", groups});
    }
    for (const SoftLimit& l : launch.limits)
        words.insert(words.end(), {"--limit", std::to_string(l.resource) + "=" + std::to_string(l.value)});
    const int npmi = static_cast<int>(launch.pmi_fds.size());
    if (standby)
        words.insert(words.end(), {"--start-on", "6", "--wake-fd", "7", "--unless-hangup", "5"});
    if (standby && npmi > 0)
        words.insert(words.end(), {"--pmi-fds", std::to_string(first_pmi) + "-" + std::to_string(first_pmi + npmi - 1)});
    words.insert(words.end(), {"--", launch.path});
    words.insert(words.end(), launch.args.begin(), launch.args.end());
    for (const char* w2 : {"--secret-fd", "3", "--ready-fd", "4", "--control-fd", "5"})
        words.emplace_back(w2);
    if (launch.reserved_fd >= 0)
        words.insert(words.end(), {"--reserved-fd", "6"});
    if (npmi > 0)
        words.insert(words.end(), {"--pmi-fd", std::to_string(first_pmi)});
    return words;
}

std::vector<char*> pointers(std::vector<std::string>& words)
{
    std::vector<char*> out;
    for (auto& word : words)
        out.push_back(word.data());
    out.push_back(nullptr);
    return out;
}

// Starts the helper in a session of its own, with each descriptor at its
// place and no other: 0 or an errno.
int spawn_helper(const DaemonLaunch& launch, const LaunchEnds& e, bool standby, pid_t& child)
{
    const int npmi = static_cast<int>(launch.pmi_fds.size());
    auto words = helper_words(launch, standby);
    auto argv = pointers(words);
    auto env = daemon_environment(environ);
    auto envp = pointers(env);
    // Each descriptor to its place through a copy above every source and
    // every place (a source may be another's place, and slurmstepd of many
    // tasks has sources high up); the rest are closed.
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    std::vector<std::pair<int, int>> places = {
        {e.null.get(), 0},         {e.null.get(), 1},        {e.null.get(), 2},
        {e.secret_read.get(), 3},  {e.ready_write.get(), 4}, {e.control_its.get(), 5},
        {launch.reserved_fd, 6},   {standby ? launch.wake_fd : -1, 7},
        {e.pid_write.get(), 8},    {e.go_read.get(), 9}};
    for (int i = 0; i < npmi; ++i)
        places.emplace_back(launch.pmi_fds[static_cast<std::size_t>(i)], first_pmi + i);
    int high = first_pmi + npmi;
    for (const auto& [from, to] : places)
        high = std::max(high, from + 1);
    // Every action must be in place: a launch with one missing could hand
    // the user a descriptor of root's.
    int planned = 0;
    for (const auto& [from, to] : places)
        if (from >= 0)
            planned |= posix_spawn_file_actions_adddup2(&actions, from, high + to);
    for (const auto& [from, to] : places)
        if (from >= 0)
            planned |= posix_spawn_file_actions_adddup2(&actions, high + to, to);
        else
            planned |= posix_spawn_file_actions_addclose(&actions, to);  // slurmstepd's own, if open: never the user's
    planned |= posix_spawn_file_actions_addclosefrom_np(&actions, first_pmi + npmi);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    planned |= posix_spawnattr_setsigmask(&attr, &none);
    planned |= posix_spawnattr_setsigdefault(&attr, &all);
    planned |= posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int spawned =
        planned != 0 ? ENOMEM
                     : ::posix_spawn(&child, launch.helper.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return spawned;
}

// The helper has exited: the daemon's pid is in the pipe, or nothing is
// (never a wait: the daemon's process holds the pipe's other end).
Result<pid_t> daemon_pid(const DaemonLaunch& launch, const protocol::Fd& pid_read, int helper_status)
{
    ::fcntl(pid_read.get(), F_SETFL, O_NONBLOCK);
    pid_t pid = -1;
    if (::read(pid_read.get(), &pid, sizeof(pid)) == sizeof(pid) && pid > 0)
        return Result<pid_t>::ok(pid);
    if (WIFEXITED(helper_status) && WEXITSTATUS(helper_status) == 126)
        return Result<pid_t>::fail(launch.helper + " refused to start the node daemon (its arguments: the job's uid, " +
                                   std::to_string(launch.groups.size()) + " groups, limits)");
    return Result<pid_t>::fail("the node daemon could not be started (fork failed)");
}

// "ready ...\n" (what follows "ready" is not read), or EOF if it could not
// start: at most 64 bytes, within the bound.
Result<bool> await_ready(const protocol::Fd& ready_read, Clock::time_point deadline)
{
    std::string line;
    char buf[64];
    while (line.find('\n') == std::string::npos && line.size() < sizeof(buf)) {
        if (!wait_fd(ready_read.get(), POLLIN, deadline))
            return Result<bool>::fail("the node daemon did not become ready in time");
        const ssize_t n = ::read(ready_read.get(), buf, sizeof(buf) - line.size());
        if (n <= 0)
            break;
        line.append(buf, static_cast<std::size_t>(n));
    }
    if (line.rfind("ready", 0) == 0 && line.find('\n') != std::string::npos)
        return Result<bool>::ok(true);
    return Result<bool>::fail("the node daemon exited before it was ready (its messages are in this node's syslog "
                              "as exitpolicy-pmixd, or in plugstack.conf's log_dir)");
}

void set_nonblocking(int fd)
{
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

Result<LaunchedDaemon> launch_daemon(const DaemonLaunch& launch)
{
    using R = Result<LaunchedDaemon>;
    for (const std::string* exe : {&launch.path, &launch.helper})
        if (::access(exe->c_str(), X_OK) != 0)
            return R::fail("cannot execute " + *exe + ": " + std::strerror(errno));
    auto ends = make_ends(launch.secret_hex);
    if (!ends)
        return R::fail(ends.error());
    LaunchEnds& e = *ends;
    // exitpolicy-detach (pmix_server/detach.c) takes the daemon's place in
    // a session of its own, with its descriptors; it forks the daemon,
    // hands up its pid and exits, and the daemon waits for "go".
    const bool standby = launch.reserved_fd >= 0 && launch.wake_fd >= 0;
    pid_t child = -1;
    if (const int spawned = spawn_helper(launch, e, standby, child); spawned != 0)
        return R::fail("cannot start " + launch.helper + ": " + std::strerror(spawned));
    for (auto* its : {&e.secret_read, &e.ready_write, &e.null, &e.pid_write, &e.go_read, &e.control_its})
        its->reset();
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    auto pid = daemon_pid(launch, e.pid_read, status);
    if (!pid)
        return R::fail(pid.error());
    // The daemon waits for "go" before it becomes the job's user: its pid
    // is still its own. Without it (go_write closed) it reads EOF and exits
    // without running anything.
    protocol::Fd pidfd(protocol::process::open_pidfd(*pid));
    if (!pidfd)
        return R::fail(std::string("no node daemon without pidfds (pidfd_open: ") + std::strerror(errno) +
                       "; Linux 5.3 or newer has them): root never signals a bare pid, which may be reused");
    if (::write(e.go_write.get(), "g", 1) != 1)
        return R::fail(std::string("cannot let the node daemon start: ") + std::strerror(errno));
    e.go_write.reset();
    LaunchedDaemon launched;
    launched.pid = *pid;
    launched.pidfd = std::move(pidfd);
    launched.control = std::move(e.control_ours);
    set_nonblocking(launched.control.get());
    if (launch.reserved_fd >= 0) {
        // The tasks start at once: whatever the daemon has to say on its
        // way up goes to its log; if it never comes up, its control link
        // closes (outcomes go the direct way) and so does the socket the
        // tasks were told of (their PMIx_Init fails at once). A standby's
        // "ready" says when it has become the daemon.
        if (standby) {
            launched.standby = true;
            launched.ready = std::move(e.ready_read);
            set_nonblocking(launched.ready.get());
        }
        return R::ok(std::move(launched));
    }
    if (auto ready = await_ready(e.ready_read, Clock::now() + launch.ready_timeout); !ready) {
        launched.control.reset();  // no Stop to a daemon that is not ready
        stop_daemon(launched, std::chrono::milliseconds(0));
        return R::fail(ready.error());
    }
    return R::ok(std::move(launched));
}

Result<bool> send_backlog(int control, protocol::Bytes& backlog, std::optional<Clock::time_point> deadline)
{
    std::size_t sent = 0;
    auto done = [&](Result<bool> r) {
        backlog.erase(backlog.begin(), backlog.begin() + static_cast<std::ptrdiff_t>(sent));
        return r;
    };
    while (sent < backlog.size()) {
        const ssize_t n = ::send(control, backlog.data() + sent, backlog.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!deadline)
                return done(Result<bool>::ok(true));  // the rest when there is room
            if (wait_fd(control, POLLOUT, *deadline))
                continue;
            return done(Result<bool>::fail(std::string("timed out writing to ") + daemon_name));
        }
        return done(Result<bool>::fail(std::string("cannot write to ") + daemon_name + ": " + std::strerror(errno)));
    }
    return done(Result<bool>::ok(true));
}

Result<bool> tell_daemon(LaunchedDaemon& daemon, const protocol::TaskStarted& started, bool send_now)
{
    if (!daemon.control)
        return Result<bool>::fail(std::string(daemon_name) + " has no control link");
    const protocol::Bytes frame = started.encode();
    daemon.backlog.insert(daemon.backlog.end(), frame.begin(), frame.end());
    if (!send_now)
        return Result<bool>::ok(true);
    return send_backlog(daemon.control.get(), daemon.backlog, std::nullopt);
}

Result<std::vector<std::string>> request_environment(const std::string& dir, std::uint32_t rank, pid_t pid,
                                                     std::chrono::milliseconds timeout)
{
    using R = Result<std::vector<std::string>>;
    const auto deadline = Clock::now() + timeout;
    const auto link = connect_local(dir, deadline);
    if (!link)
        return R::fail(link.error());
    const int fd = link->get();
    if (auto w = write_all(fd, protocol::EnvRequest{rank, pid}.encode(), deadline, daemon_name); !w)
        return R::fail(w.error());
    auto body = read_frame(fd, protocol::Type::env_reply, deadline, daemon_name);
    if (!body)
        return R::fail(body.error());
    auto reply = protocol::EnvReply::decode(*body);
    if (!reply)
        return R::fail(reply.error());
    if (reply->status != 0)
        return R::fail(reply->error);
    return R::ok(std::move(reply->env));
}

bool daemon_serving(LaunchedDaemon& daemon)
{
    if (!daemon.standby || daemon.serving)
        return daemon.pid > 0;
    if (!daemon.ready)
        return false;
    // One write of at most 64 bytes (Daemon::ready), whole in the pipe.
    char buf[64];
    const ssize_t n = ::read(daemon.ready.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    daemon.serving = n > 0 && std::string_view(buf, static_cast<std::size_t>(n)).starts_with("ready");
    daemon.ready.reset();  // said ready, or never will
    return daemon.serving;
}

namespace {

// Closes the control link for both ends whoever else holds a copy of it:
// where Slurm runs task_exit in a clone of slurmstepd's (CONTAIN_SPANK),
// slurmstepd's own descriptor would keep the link open, and a standby
// waits for the link's hang-up.
void hang_up(protocol::Fd& control)
{
    if (control)
        ::shutdown(control.get(), SHUT_RDWR);
    control.reset();
}

}  // namespace

std::vector<protocol::Ack> stop_daemon(LaunchedDaemon& daemon, std::chrono::milliseconds timeout, std::size_t max_acks)
{
    const auto deadline = Clock::now() + timeout;
    std::vector<protocol::Ack> confirmed;
    std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
    if (daemon.standby && !daemon_serving(daemon))
        hang_up(daemon.control);  // a standby's hang-up: it exits unstarted
    daemon.ready.reset();
    if (const int fd = daemon.control.get(); fd >= 0) {
        // The ack may not make it out before the daemon closes: EOF, once
        // it has closed everything on its way out, is the answer that counts.
        // Before it, the daemon says which outcomes srun has.
        if (send_backlog(fd, daemon.backlog, deadline) && write_all(fd, protocol::Stop{}.encode(), deadline, daemon_name)) {
            protocol::Type type{};
            // What a daemon may say: its Ack of the Stop, and the outcomes
            // srun has in frames of at most max_body bytes.
            const std::size_t most_frames = 2 + max_acks / protocol::acks_per_frame + 1;
            std::size_t frames = 0;
            while (frames++ < most_frames) {
                auto body = read_frame_of(fd, {protocol::Type::ack, protocol::Type::acks}, type, deadline, daemon_name);
                if (!body)
                    break;
                if (type != protocol::Type::acks)
                    continue;
                auto acks = protocol::Acks::decode(*body);
                if (!acks)
                    break;
                for (const auto& a : acks->list)
                    if (confirmed.size() < max_acks && seen.insert({a.rank, a.epoch}).second)
                        confirmed.push_back(a);
            }
            // Then EOF: whatever else comes is read and dropped, up to a
            // budget (the daemon is the job's user's; it may say anything).
            char sink[4096];
            std::size_t budget = std::size_t{1} << 20;
            while (budget > 0 && wait_fd(fd, POLLIN, deadline)) {
                const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
                if (n <= 0)
                    break;
                budget -= std::min(budget, static_cast<std::size_t>(n));
            }
        }
        hang_up(daemon.control);
    }
    // Every daemon launch_daemon gives has a pidfd: no signal ever goes
    // to a bare pid.
    if (const int pidfd = daemon.pidfd.get(); pidfd >= 0) {
        // A pidfd turns readable when its process ends.
        if (!protocol::process::ended(pidfd))
            wait_fd(pidfd, POLLIN, deadline);
        if (!protocol::process::ended(pidfd))
            protocol::process::signal(pidfd, SIGKILL);
    }
    daemon = LaunchedDaemon{};  // closes what it held
    return confirmed;
}

DaemonSink::DaemonSink(int control, std::chrono::milliseconds timeout, protocol::Bytes* backlog)
    : fd_(control), backlog_(backlog), timeout_(timeout)
{
}

Result<bool> DaemonSink::deliver(const protocol::Outcome& outcome, Send)
{
    using R = Result<bool>;
    if (gave_up_)
        return R::fail("the node daemon failed earlier in this step");
    if (fd_ < 0)
        return R::fail("the node daemon has no control link");
    const auto deadline = Clock::now() + timeout_;
    // The link stays open for stop_daemon, which ends on EOF whatever is
    // still in it.
    auto fail = [this](const std::string& why) {
        gave_up_ = true;
        return R::fail(why);
    };
    // What the daemon has not been told of its tasks yet comes first.
    if (backlog_)
        if (auto w = send_backlog(fd_, *backlog_, deadline); !w)
            return fail(w.error());
    if (auto w = write_all(fd_, outcome.encode(), deadline, daemon_name); !w)
        return fail(w.error());
    auto body = read_frame(fd_, protocol::Type::ack, deadline, daemon_name);
    if (!body)
        return fail(body.error());
    // Only an acknowledgement of this very outcome counts.
    auto ack = protocol::Ack::decode(*body);
    if (!ack)
        return fail(ack.error());
    if (ack->rank != outcome.rank || ack->epoch != outcome.epoch)
        return fail("the node daemon acknowledged rank " + std::to_string(ack->rank) + " epoch " +
                    std::to_string(ack->epoch) + ", not rank " + std::to_string(outcome.rank) + " epoch " +
                    std::to_string(outcome.epoch));
    taken_.push_back(outcome);
    return R::ok(true);
}

std::vector<protocol::Outcome> DaemonSink::unconfirmed(const std::vector<protocol::Ack>& confirmed) const
{
    std::set<std::pair<std::uint32_t, std::uint32_t>> has;
    for (const auto& a : confirmed)
        has.insert({a.rank, a.epoch});
    std::vector<protocol::Outcome> out;
    for (const auto& o : taken_)
        if (!has.count({o.rank, o.epoch}))
            out.push_back(o);
    return out;
}

}  // namespace exitpolicy::spank_plugin
