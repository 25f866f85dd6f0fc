// SPDX-License-Identifier: Apache-2.0
// event_anchor.cpp - see event_anchor.hpp.
#include "event_anchor.hpp"
#include "socket_activation.hpp"

#include "info_array.hpp"
#include "pmix_server/log.hpp"
#include "pmix_host.hpp"
#include "protocol/timeouts.hpp"
#include "protocol/pipe.hpp"

#include <event2/event.h>
#include <pmix.h>
#include <pmix_server.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace exitpolicy::pmix_server {
namespace {

// PMIX_MAX_ERR_CONSTANT, the code of the server's default-handler entry. It
// lives in OpenPMIx's private pmix_globals.h (INT_MIN in 4.2 and 5.0).
constexpr pmix_status_t default_handlers_code = INT_MIN;

constexpr auto settle_bound = protocol::timeouts::event_anchor_settle;
constexpr const char* registered_line = "registered\n";

long long now_us()
{
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<long long>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

}  // namespace

EventAnchor::EventAnchor(Services services) : services_(std::move(services)) {}

EventAnchor::~EventAnchor()
{
    release();
    reap();
    if (registered_)
        deregister_namespace(nspace_, {0}, std::chrono::milliseconds(200));
}

namespace {

// The anchor's namespace: one process on this node, its session files
// (OpenPMIx 5) where the step's go.
InfoArray* anchor_job_info(const protocol::DaemonArgs& args, const std::string& nsdir)
{
    const NamespaceMaps maps = namespace_maps({args.hostname}, {0});
    const std::uint32_t one = 1;
    const pmix_rank_t leader = 0;
    const std::uint32_t node = args.node_id;
    auto* info = new InfoArray(nsdir.empty() ? 10 : 11);
    PMIX_INFO_LOAD(&info->info[0], PMIX_UNIV_SIZE, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info->info[1], PMIX_JOB_SIZE, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info->info[2], PMIX_MAX_PROCS, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info->info[3], PMIX_LOCAL_SIZE, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info->info[4], PMIX_LOCAL_PEERS, "0", PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[5], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info->info[6], PMIX_NODE_MAP, maps.nodes.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[7], PMIX_PROC_MAP, maps.procs.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[8], PMIX_HOSTNAME, args.hostname.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[9], PMIX_NODEID, &node, PMIX_UINT32);
    if (!nsdir.empty())
        PMIX_INFO_LOAD(&info->info[10], PMIX_NSDIR, nsdir.c_str(), PMIX_STRING);
    return info;
}

// The daemon's environment with the client's PMIx variables (`added`,
// freed here) over it.
std::vector<std::string> client_environment(char** added)
{
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const std::string kv = *e;
        env[kv.substr(0, kv.find('='))] = kv;
    }
    for (char** e = added; e && *e; ++e) {
        const std::string kv = *e;
        env[kv.substr(0, kv.find('='))] = kv;
        std::free(*e);
    }
    std::free(added);
    std::vector<std::string> kept;
    for (auto& [key, kv] : env)
        kept.push_back(std::move(kv));
    return kept;
}

// The anchor, this program again, with `stdin` and `stdout` and nothing
// else of the daemon's: its links, its listeners, its clients' connections
// stay its own, and close when it closes them; no signal of the daemon's
// mask or dispositions is the anchor's. 0 or an errno.
int spawn_anchor(pid_t& pid, int stdin_fd, int stdout_fd, std::vector<std::string>& env)
{
    std::vector<char*> envp;
    for (auto& kv : env)
        envp.push_back(kv.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    if (const int rc = posix_spawn_file_actions_init(&actions); rc != 0)
        return rc;
    int rc = posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
    if (rc == 0)
        rc = posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    if (rc == 0)
        rc = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    posix_spawnattr_t attr;
    if (rc == 0 && (rc = posix_spawnattr_init(&attr)) == 0) {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        rc = posix_spawnattr_setsigmask(&attr, &none);
        if (rc == 0)
            rc = posix_spawnattr_setsigdefault(&attr, &all);
        if (rc == 0)
            rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        char self_exe[] = "/proc/self/exe";
        char name[] = "exitpolicy-pmixd";
        char flag[] = "--event-anchor";
        char* argv[] = {name, flag, nullptr};
        if (rc == 0)
            rc = posix_spawn(&pid, self_exe, &actions, &attr, argv, envp.data());
        posix_spawnattr_destroy(&attr);
    }
    posix_spawn_file_actions_destroy(&actions);
    return rc;
}

}  // namespace

void EventAnchor::start(std::function<void(bool)> settled)
{
    settled_ = std::move(settled);
    started_us_ = now_us();
    const protocol::DaemonArgs& args = services_.args;
    nspace_ = nspace_of(args.job_id, args.step_id);
    auto* info = anchor_job_info(args, make_namespace_dir(args.dir, nspace_));

    // Library callbacks run on PMIx's thread: each posts to the loop. No
    // exception into the library; a post that cannot be made (out of
    // memory) is logged and leaves the anchor unsettled.
    struct Call {
        EventAnchor* self;
        InfoArray* info;
    };
    auto* call = new Call{this, info};
    const pmix_status_t rc = PMIx_server_register_nspace(
        nspace_.c_str(), 1, info->info, info->n,
        [](pmix_status_t status, void* cbdata) {
            auto* call = static_cast<Call*>(cbdata);
            guarded("the event anchor's namespace", [call, status] {
                call->self->services_.post([call, status] {
                    EventAnchor* self = call->self;
                    delete call->info;
                    delete call;
                    self->namespace_in(status);
                });
            });
        },
        call);
    if (rc != PMIX_SUCCESS) {
        delete info;
        delete call;
        settle(false, "its namespace was refused");
        return;
    }
    registered_ = true;
}

void EventAnchor::namespace_in(int status)
{
    if (status != PMIX_SUCCESS) {
        settle(false, "its namespace was refused");
        return;
    }
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace_.c_str(), 0);
    const pmix_status_t rc = PMIx_server_register_client(
        &proc, ::getuid(), ::getgid(), nullptr,
        [](pmix_status_t st, void* cbdata) {
            auto* self = static_cast<EventAnchor*>(cbdata);
            guarded("the event anchor's client", [self, st] {
                self->services_.post([self, st] {
                    if (st != PMIX_SUCCESS)
                        self->settle(false, "its client was refused");
                    else
                        self->spawn();
                });
            });
        },
        this);
    if (rc != PMIX_SUCCESS)
        settle(false, "its client was refused");
}

void EventAnchor::spawn()
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace_.c_str(), 0);
    char** added = nullptr;
    if (PMIx_server_setup_fork(&proc, &added) != PMIX_SUCCESS) {
        settle(false, "no PMIx environment for it");
        return;
    }
    auto env = client_environment(added);
    protocol::Fd in[2], out[2];
    if (!protocol::make_pipe(in[0], in[1]) || !protocol::make_pipe(out[0], out[1])) {
        settle(false, std::strerror(errno));
        return;
    }
    const int rc = spawn_anchor(pid_, in[0].get(), out[1].get(), env);
    to_child_ = std::move(in[1]);
    from_child_ = std::move(out[0]);
    if (rc != 0) {
        pid_ = -1;
        settle(false, std::strerror(rc));
        return;
    }
    // Through the gate that holds the step's clients until it registered.
    activation::let_through(pid_);
    watch_word();
}

void EventAnchor::watch_word()
{
    reading_.reset(event_new(
        services_.base, from_child_.get(), EV_READ | EV_PERSIST,
        [](evutil_socket_t fd, short, void* arg) {
            auto* self = static_cast<EventAnchor*>(arg);
            char buf[64];
            const ssize_t n = ::read(fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                return;
            event_del(self->reading_.get());
            const bool registered =
                n > 0 && std::string_view(buf, static_cast<std::size_t>(n)).starts_with(registered_line);
            guarded("the event anchor's word", [self, registered] {
                self->settle(registered, registered ? nullptr : "it ended before it registered");
            });
        },
        this));
    event_add(reading_.get(), nullptr);
    services_.timers.after_ms(static_cast<std::uint32_t>(settle_bound.count()),
                              [this] { settle(false, "it did not register in time"); });
}

void EventAnchor::settle(bool ok, const char* why)
{
    if (!settled_)
        return;
    auto settled = std::move(settled_);
    settled_ = nullptr;
    if (ok)
        log::debug("event anchor registered for default handlers in %lld us", now_us() - started_us_);
    else
        log::info("no event anchor (%s): clients' default event handlers will hear nothing", why);
    settled(ok);
}

void EventAnchor::release()
{
    settled_ = nullptr;
    reading_.reset();
    to_child_.reset();  // the anchor finalizes and exits
    from_child_.reset();
}

void EventAnchor::reap()
{
    if (pid_ <= 0)
        return;
    // Bounded: it needs a moment to finalize against our server.
    for (int i = 0; i < 20; ++i) {
        if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
            pid_ = -1;
            return;
        }
        const timespec tick{0, 5'000'000};
        ::nanosleep(&tick, nullptr);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

// ---- the anchor process --------------------------------------------------------

int run_event_anchor()
{
    pmix_proc_t me;
    if (PMIx_Init(&me, nullptr, 0) != PMIX_SUCCESS)
        return 1;
    struct Registration {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        pmix_status_t status = PMIX_ERROR;
    } reg;
    pmix_status_t code = default_handlers_code;
    PMIx_Register_event_handler(
        &code, 1, nullptr, 0,
        [](size_t, pmix_status_t, const pmix_proc_t*, pmix_info_t[], size_t, pmix_info_t*, size_t,
           pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
            if (cbfunc)
                cbfunc(PMIX_SUCCESS, nullptr, 0, nullptr, nullptr, cbdata);
        },
        [](pmix_status_t status, size_t, void* cbdata) {
            auto* reg = static_cast<Registration*>(cbdata);
            std::lock_guard lock(reg->mu);
            reg->status = status;
            reg->done = true;
            reg->cv.notify_all();
        },
        &reg);
    bool registered = false;
    {
        std::unique_lock lock(reg.mu);
        registered = reg.cv.wait_for(lock, settle_bound, [&] { return reg.done; }) &&
                     reg.status == PMIX_SUCCESS;
    }
    if (registered) {
        [[maybe_unused]] auto w = ::write(1, registered_line, std::strlen(registered_line));
        // Until the daemon stops (its end of our stdin closes).
        char c;
        while (true) {
            const ssize_t n = ::read(0, &c, 1);
            if (n == 0 || (n < 0 && errno != EINTR))
                break;
        }
    }
    PMIx_Finalize(nullptr, 0);
    return registered ? 0 : 1;
}

}  // namespace exitpolicy::pmix_server
