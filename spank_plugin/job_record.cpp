// SPDX-License-Identifier: Apache-2.0
#include "job_record.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace exitpolicy::spank_plugin {

using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view marker = "exitpolicy ";
constexpr std::string_view separator = "; ";
// How often srun asks slurmdbd whether it has the job's end yet.
constexpr auto poll_every = std::chrono::milliseconds(100);

int ms_left(Clock::time_point deadline)
{
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// The first line of what program `name` said, for an error message,
// beginning with its name once.
std::string said(std::string_view name, const std::string& text)
{
    const auto end = text.find('\n');
    std::string line = text.substr(0, end);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
        line.erase(0, 1);
    if (line.empty())
        line = "no output";
    const std::string prefix = std::string(name) + ": ";
    return line.rfind(prefix, 0) == 0 ? line : prefix + line;
}

// Stops and reaps a child that outlived its deadline.
void end_child(pid_t child)
{
    ::kill(child, SIGKILL);
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
}

}  // namespace

std::string verdict_comment(std::string_view policy, int code, std::string_view why)
{
    std::string out = std::string(marker) + std::string(policy) + " " + std::to_string(code) + ": ";
    for (char c : why) {
        if (c == '\'' || c == '"' || c == '`' || c == '\\')
            continue;
        out += (c >= 0x20 && c < 0x7f) ? c : ' ';
    }
    if (out.size() > comment_limit)
        out = out.substr(0, comment_limit - 3) + "...";
    return out;
}

std::string merged_comment(std::string_view had, std::string_view verdict)
{
    // An earlier verdict of ours starts the comment or follows a separator.
    const std::size_t cut =
        had.rfind(marker, 0) == 0 ? 0 : had.find(std::string(separator) + std::string(marker));
    const std::string_view kept = cut == std::string_view::npos ? had : had.substr(0, cut);
    if (kept.empty())
        return std::string(verdict);
    return std::string(kept) + std::string(separator) + std::string(verdict);
}

Result<ProgramRun> run_program(const std::vector<std::string>& argv, Clock::time_point deadline)
{
    using R = Result<ProgramRun>;
    if (argv.empty())
        return R::fail("no program");
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
        return R::fail(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    ::posix_spawn_file_actions_adddup2(&actions, out[1], 2);
    // None of srun's own descriptors (its sockets to the step) goes along.
    ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t child = -1;
    const int spawned = ::posix_spawn(&child, argv[0].c_str(), &actions, nullptr, args.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (spawned != 0) {
        ::close(out[0]);
        return R::fail(argv[0] + ": " + std::strerror(spawned));
    }
    ProgramRun run;
    char buf[4096];
    for (;;) {
        pollfd p{out[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, ms_left(deadline));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            ::close(out[0]);
            end_child(child);
            return R::fail(argv[0] + " did not end in time");
        }
        const ssize_t n = ::read(out[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (run.output.size() < 65536)
            run.output.append(buf, static_cast<std::size_t>(n));
    }
    ::close(out[0]);
    // Its output is closed: it ends now, or is ended at the deadline.
    for (;;) {
        const pid_t done = ::waitpid(child, &run.status, WNOHANG);
        if (done == child)
            return R::ok(std::move(run));
        if (done < 0 && errno != EINTR)
            return R::fail(std::string("waitpid: ") + std::strerror(errno));
        if (ms_left(deadline) == 0) {
            end_child(child);
            return R::fail(argv[0] + " did not end in time");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

Result<bool> record_verdict(const VerdictRecord& r, std::chrono::milliseconds timeout)
{
    using R = Result<bool>;
    const auto deadline = Clock::now() + timeout;
    const std::string job = std::to_string(r.job_id);
    const auto ok = [](const ProgramRun& run) { return WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0; };
    // What slurmdbd has of the job: its End (Unknown while it runs) and
    // Comment; for a job srun has ended, once slurmdbd has that end.
    std::string had;
    for (;;) {
        const auto waited_out = [&] {
            return R::fail(r.job_ended ? "slurmdbd had not recorded the job's end in time"
                                       : "slurmdbd had no record of the job in time");
        };
        auto run = run_program({r.bin_dir + "/sacct", "-n", "-X", "-P", "-j", job, "-o", "End,Comment"}, deadline);
        if (!run)
            return Clock::now() >= deadline ? waited_out() : R::fail(run.error());
        if (!ok(*run))
            return R::fail(said("sacct", run->output));
        const std::string line = run->output.substr(0, run->output.find('\n'));
        const auto bar = line.find('|');
        if (bar != std::string::npos) {
            const std::string end = line.substr(0, bar);
            if (!r.job_ended || (end != "Unknown" && end != "None" && !end.empty())) {
                had = line.substr(bar + 1);
                break;
            }
        }
        if (Clock::now() + poll_every >= deadline)
            return waited_out();
        std::this_thread::sleep_for(poll_every);
    }
    std::vector<std::string> modify = {r.bin_dir + "/sacctmgr", "-i", "modify", "job", "where", "jobid=" + job, "set"};
    // A wait status, as slurmctld records it: the code in the high byte.
    if (r.job_ended)
        modify.push_back("DerivedExitCode=" + std::to_string(static_cast<unsigned>(r.code & 0xff) << 8));
    modify.push_back("Comment=" + merged_comment(had, r.comment));
    auto run = run_program(modify, deadline);
    if (!run)
        return R::fail(run.error());
    if (!ok(*run) || run->output.find("Nothing modified") != std::string::npos)
        return R::fail(said("sacctmgr", run->output));
    return R::ok(true);
}

}  // namespace exitpolicy::spank_plugin
