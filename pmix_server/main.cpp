// SPDX-License-Identifier: Apache-2.0
// main.cpp - exitpolicy-pmixd: the per-node PMIx server and overlay agent of
// one Slurm job step. Started by the plugin in slurmstepd (see
// spank_plugin/daemon_link.cpp), never by hand; `--event-anchor` runs
// the event anchor (event_anchor.hpp), which the daemon starts itself.
#include "protocol/daemon_args.hpp"
#include "daemon.hpp"
#include "event_anchor.hpp"
#include "pmix_server/log.hpp"
#include "pmix_compat.hpp"

#include "protocol/auth.hpp"
#include "protocol/fd.hpp"

#include <csignal>
#include <cstdio>
#include <execinfo.h>
#include <fcntl.h>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

int crash_fd = -1;

// A crash leaves its stack in the log (the daemon has no terminal).
void on_crash(int sig)
{
    void* frames[64];
    const int n = backtrace(frames, 64);
    if (crash_fd >= 0) {
        const char* what = sig == SIGSEGV ? "exitpolicy-pmixd: crashed (SIGSEGV)\n" : "exitpolicy-pmixd: crashed\n";
        [[maybe_unused]] auto w = ::write(crash_fd, what, std::strlen(what));
        backtrace_symbols_fd(frames, n, crash_fd);
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace exitpolicy;
    if (argc == 2 && std::strcmp(argv[1], "--event-anchor") == 0)
        return pmix_server::run_event_anchor();
    std::vector<std::string> words(argv + 1, argv + argc);
    auto args = protocol::parse_daemon_args(words);
    if (!args) {
        std::fprintf(stderr, "exitpolicy-pmixd: %s\n", args.error().c_str());
        return 2;
    }
    const std::string tag = std::to_string(args->job_id) + "." + std::to_string(args->step_id) + " " +
                            args->hostname;
    pmix_server::log::open(tag.c_str(), args->log_dir.c_str(), args->debug);
    crash_fd = pmix_server::log::file_fd();
    if (crash_fd >= 0)
        for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL})
            std::signal(sig, on_crash);
    // A local peer that closes before its answer is written (slurmstepd's
    // sink gives up after its bound) must not end the node's PMIx server:
    // the write fails with EPIPE instead, and that connection closes.
    std::signal(SIGPIPE, SIG_IGN);
    pmix_server::compat::set_library_defaults();  // before any thread, before PMIx_server_init

    char hex[65] = {};
    std::size_t got = 0;
    {
        const protocol::Fd secret_fd(args->secret_fd);
        while (got < 64) {
            const ssize_t n = ::read(secret_fd.get(), hex + got, 64 - got);
            if (n <= 0)
                break;
            got += static_cast<std::size_t>(n);
        }
    }
    auto secret = protocol::secret_from_hex(std::string(hex, got));
    if (!secret) {
        pmix_server::log::error("bad secret on fd %d: %s", args->secret_fd, secret.error().c_str());
        return 2;
    }
    try {
        pmix_server::Daemon daemon(std::move(*args), *secret);
        return daemon.run();
    } catch (const std::exception& e) {
        pmix_server::log::error("fatal: %s", e.what());
        return 1;
    }
}
