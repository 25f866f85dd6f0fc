// daemon_link.cpp - see daemon_link.hpp.
#include "daemon_link.hpp"

#include "blocking_io.hpp"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace exitpolicy::plugin {
namespace {

using namespace io;
constexpr const char* daemon_name = "the node daemon";

Result<int> connect_local(const std::string& dir)
{
    const std::string path = daemon_socket(dir);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path))
        return Result<int>::fail("socket path too long: " + path);
    std::strcpy(sun.sun_path, path.c_str());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return Result<int>::fail(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) != 0) {
        const int err = errno;
        ::close(fd);
        return Result<int>::fail("cannot reach the node daemon at " + path + ": " + std::strerror(err));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return Result<int>::ok(fd);
}

// Running: a zombie waiting for init to reap it counts as gone.
bool alive(pid_t pid)
{
    if (::kill(pid, 0) != 0 && errno != EPERM)
        return false;
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
    FILE* f = std::fopen(path, "re");
    if (!f)
        return false;
    char state = '?';
    // pid (comm) state ...: comm may hold spaces, so find its closing paren.
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = 0;
    if (const char* close = std::strrchr(buf, ')'); close && close[1] == ' ')
        state = close[2];
    return state != 'Z' && state != 'X';
}

}  // namespace

std::string daemon_socket(const std::string& dir)
{
    return dir + "/daemon.sock";
}

Result<pid_t> launch_daemon(const DaemonLaunch& launch)
{
    using R = Result<pid_t>;
    if (::access(launch.path.c_str(), X_OK) != 0)
        return R::fail("cannot execute " + launch.path + ": " + std::strerror(errno));
    int secret_pipe[2], ready_pipe[2];
    if (::pipe2(secret_pipe, O_CLOEXEC) != 0)
        return R::fail(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(ready_pipe, O_CLOEXEC) != 0) {
        ::close(secret_pipe[0]);
        ::close(secret_pipe[1]);
        return R::fail(std::string("pipe: ") + std::strerror(errno));
    }
    // The secret waits in the pipe: 64 bytes fit its buffer.
    [[maybe_unused]] auto w = ::write(secret_pipe[1], launch.secret_hex.data(), launch.secret_hex.size());
    ::close(secret_pipe[1]);

    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    std::vector<std::string> words;
    words.push_back(launch.path);
    words.insert(words.end(), launch.args.begin(), launch.args.end());
    for (const char* w2 : {"--secret-fd", "3", "--ready-fd", "4"})
        words.emplace_back(w2);
    std::vector<char*> argv;
    for (auto& word : words)
        argv.push_back(word.data());
    argv.push_back(nullptr);
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);

    const pid_t child = ::fork();
    if (child < 0) {
        const int err = errno;
        for (int fd : {secret_pipe[0], ready_pipe[0], ready_pipe[1], null_fd})
            ::close(fd);
        return R::fail(std::string("fork: ") + std::strerror(err));
    }
    if (child == 0) {
        ::setsid();
        if (::fork() != 0)
            ::_exit(0);
        ::dup2(secret_pipe[0], 3);
        ::dup2(ready_pipe[1], 4);
        ::dup2(null_fd, 0);
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
        ::close_range(5, ~0U, 0);
        if (::setgroups(launch.groups.size(), launch.groups.data()) != 0 || ::setgid(launch.gid) != 0 ||
            ::setuid(launch.uid) != 0)
            ::_exit(126);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        for (int sig = 1; sig < NSIG; ++sig)
            ::signal(sig, SIG_DFL);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    for (int fd : {secret_pipe[0], ready_pipe[1], null_fd})
        ::close(fd);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }

    // "ready PID\n", or EOF if it could not start.
    const auto deadline = Clock::now() + launch.ready_timeout;
    std::string line;
    char buf[64];
    while (line.find('\n') == std::string::npos) {
        if (!wait_fd(ready_pipe[0], POLLIN, deadline)) {
            ::close(ready_pipe[0]);
            return R::fail("the node daemon did not become ready in time");
        }
        const ssize_t n = ::read(ready_pipe[0], buf, sizeof(buf));
        if (n <= 0)
            break;
        line.append(buf, static_cast<std::size_t>(n));
    }
    ::close(ready_pipe[0]);
    if (line.rfind("ready ", 0) != 0)
        return R::fail("the node daemon exited before it was ready (see its log)");
    return parse_ready(line);
}

Result<pid_t> parse_ready(std::string_view line)
{
    using R = Result<pid_t>;
    const std::string_view prefix = "ready ";
    if (!line.starts_with(prefix))
        return R::fail("the node daemon's ready line is malformed");
    const auto eol = line.find('\n');
    pid_t pid = 0;
    const char* first = line.data() + prefix.size();
    const char* last = line.data() + (eol == std::string_view::npos ? line.size() : eol);
    const auto [end, ec] = std::from_chars(first, last, pid);
    if (first == last || ec != std::errc() || end != last || pid <= 0)
        return R::fail("the node daemon's ready line is malformed");
    return R::ok(pid);
}

Result<std::vector<std::string>> request_environment(const std::string& dir, std::uint32_t rank, pid_t pid,
                                                     std::chrono::milliseconds timeout)
{
    using R = Result<std::vector<std::string>>;
    const auto deadline = Clock::now() + timeout;
    auto fd = connect_local(dir);
    if (!fd)
        return R::fail(fd.error());
    auto done = [&](R r) {
        ::close(*fd);
        return r;
    };
    if (auto w = write_all(*fd, wire::EnvRequest{rank, pid}.encode(), deadline, daemon_name); !w)
        return done(R::fail(w.error()));
    auto body = read_frame(*fd, wire::Type::env_reply, deadline, daemon_name);
    if (!body)
        return done(R::fail(body.error()));
    auto reply = wire::EnvReply::decode(*body);
    if (!reply)
        return done(R::fail(reply.error()));
    if (reply->status != 0)
        return done(R::fail(reply->error));
    return done(R::ok(std::move(reply->env)));
}

void stop_daemon(const std::string& dir, pid_t pid, std::chrono::milliseconds timeout)
{
    const auto deadline = Clock::now() + timeout;
    if (auto fd = connect_local(dir)) {
        if (write_all(*fd, wire::Stop{}.encode(), deadline, daemon_name) &&
            read_frame(*fd, wire::Type::ack, deadline, daemon_name)) {
            // EOF: the daemon has closed everything on its way out.
            char byte;
            while (wait_fd(*fd, POLLIN, deadline) && ::recv(*fd, &byte, 1, 0) > 0) {
            }
        }
        ::close(*fd);
    }
    while (pid > 0 && alive(pid) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (pid > 0 && alive(pid))
        ::kill(pid, SIGKILL);
}

DaemonSink::DaemonSink(std::string dir, std::chrono::milliseconds timeout) : dir_(std::move(dir)), timeout_(timeout)
{
}

DaemonSink::~DaemonSink()
{
    if (fd_ >= 0)
        ::close(fd_);
}

Result<bool> DaemonSink::deliver(const wire::Outcome& outcome)
{
    using R = Result<bool>;
    if (gave_up_)
        return R::fail("the node daemon failed earlier in this step");
    const auto deadline = Clock::now() + timeout_;
    if (fd_ < 0) {
        auto fd = connect_local(dir_);
        if (!fd) {
            gave_up_ = true;
            return R::fail(fd.error());
        }
        fd_ = *fd;
    }
    auto fail = [this](const std::string& why) {
        ::close(fd_);
        fd_ = -1;
        gave_up_ = true;
        return R::fail(why);
    };
    if (auto w = write_all(fd_, outcome.encode(), deadline, daemon_name); !w)
        return fail(w.error());
    auto body = read_frame(fd_, wire::Type::ack, deadline, daemon_name);
    if (!body)
        return fail(body.error());
    // Only an acknowledgement of this very outcome counts.
    auto ack = wire::Ack::decode(*body);
    if (!ack)
        return fail(ack.error());
    if (ack->rank != outcome.rank || ack->epoch != outcome.epoch)
        return fail("the node daemon acknowledged rank " + std::to_string(ack->rank) + " epoch " +
                    std::to_string(ack->epoch) + ", not rank " + std::to_string(outcome.rank) + " epoch " +
                    std::to_string(outcome.epoch));
    return R::ok(true);
}

}  // namespace exitpolicy::plugin
