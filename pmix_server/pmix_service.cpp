// SPDX-License-Identifier: Apache-2.0
// pmix_service.cpp - the node's PMIx server from its plan to its service.
// See pmix_service.hpp.
#include "pmix_service.hpp"

#include "pmix_compat.hpp"
#include "pmix_server/log.hpp"
#include "protocol/sockets.hpp"

#include <event2/event.h>

#include <pmix_common.h>

#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <utility>

namespace exitpolicy::pmix_server {

namespace {

// OpenPMIx talks to its clients over loopback TCP without TCP_NODELAY: an
// event sent while the client still owes a delayed ACK (right after a
// fence, say) waits up to 40 ms. The sockets are the library's, but they
// live in this process: once its server listens, Nagle goes off on every
// TCP socket here, its listeners included, and Linux gives every
// connection made from then on its listener's setting. Once per step, not
// once per client: a walk of every descriptor at each of n clients'
// connection is n squared. (A connection made before, still in the
// backlog, is not there to find: the socket slurmstepd reserves for a
// planned server has Nagle off from the start, daemon_start.cpp.)
void no_delay_on_tcp_sockets()
{
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        int fd = -1;
        const std::string name = entry.path().filename();
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc())
            continue;
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
            (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) ||
            ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
            continue;
        protocol::set_no_delay(fd);
    }
}

}  // namespace

PmixService::PmixService(const protocol::DaemonArgs& args, event_base* base, Timers& timers, StepServices& services,
                         Step& step)
    : args_(args), base_(base), services_(services), step_(step), host_(services),
      anchor_(std::make_unique<EventAnchor>(EventAnchor::Services{
          args, base, timers, [this](std::function<void()> fn) { services_.post(std::move(fn)); }}))
{
}

PmixService::~PmixService()
{
    join();
}

void PmixService::join()
{
    if (init_.joinable())
        init_.join();
}

void PmixService::drop_anchor()
{
    anchor_.reset();
}

void PmixService::plan(int reserved_fd)
{
    if (reserved_fd < 0) {
        log::debug("the PMIx server starts before the tasks: slurmstepd planned no environment for them");
        return;
    }
    reserved_.fd.reset(reserved_fd);
    ::fcntl(reserved_fd, F_SETFD, FD_CLOEXEC);
    sockaddr_in sin{};
    socklen_t len = sizeof sin;
    if (::getsockname(reserved_fd, reinterpret_cast<sockaddr*>(&sin), &len) == 0 && sin.sin_family == AF_INET)
        reserved_.port = ntohs(sin.sin_port);
    // slurmstepd planned the tasks' environment for the library the project
    // was built with. Another release of the same minor version serves it
    // alike (PMIX_VERSION tells a client its server's major and minor); any
    // other library cannot adopt the socket the tasks were told of: they
    // fail at once rather than wait for a server that never answers.
    const auto version = compat::running_version();
    const auto planned = protocol::library_version(args_.planned_version);
    const int gate = version ? compat::activation_errno(*version) : 0;
    if (!version || !planned || version->major != planned->major || version->minor != planned->minor || !gate ||
        reserved_.port == 0) {
        log::error("the tasks' PMIx environment names OpenPMIx %s, this node runs %s: their PMIx_Init fails "
                   "(rebuild exitpolicy for the installed OpenPMIx)",
                   args_.planned_version.c_str(), version ? version->text.c_str() : "an unknown version");
        reserved_.fd.reset();
        return;
    }
    if (version->text != planned->text)
        log::info("the tasks' PMIx environment names OpenPMIx %s, this node runs %s", planned->text.c_str(),
                  version->text.c_str());
    planned_ = PlannedServer{reserved_.port, args_.node_id, args_.dir, args_.hostname, planned->text};
    // Before any thread of ours: the clients' job data comes over the socket
    // (planned_environment), not from a shared-memory store that would have
    // to exist before the server does.
    ::setenv("PMIX_MCA_gds", "hash", 1);
    activation::arm(reserved_, gate);
    log::debug("the PMIx server will listen on 127.0.0.1:%u once a client connects", reserved_.port);
}

void PmixService::start_when_asked()
{
    if (!planned_) {
        start();
        return;
    }
    first_client_.reset(event_new(
        base_, reserved_.fd.get(), EV_READ,
        [](evutil_socket_t, short, void* arg) {
            log::debug("a PMIx client connects: the PMIx server starts");
            guarded("starting the PMIx server", [arg] { static_cast<PmixService*>(arg)->start(); });
        },
        this));
    if (!first_client_ || event_add(first_client_.get(), nullptr) != 0)
        start();
}

void PmixService::start()
{
    if (started_ || stopping_)
        return;
    started_ = true;
    first_client_.reset();
    host_.discover_topology();
    // Before the library listens: another user's process never gets a
    // byte of it, whatever uid its client claims (OpenPMIx's native
    // security over TCP takes the one it says).
    const auto running = compat::running_version();
    const int went_away = running && compat::activation_errno(*running) ? compat::activation_errno(*running) : EAGAIN;
    activation::serve_only(static_cast<uid_t>(args_.uid), went_away);
    init_ = std::thread([this] {
        auto started = host_.init(args_.dir, planned_ ? &*planned_ : nullptr);
        services_.post([this, started = std::move(started)] {
            init_result_ = started;
            if (started)
                no_delay_on_tcp_sockets();
            if (started && anchor_)
                anchor_->start([this](bool) {
                    anchor_settled_ = true;
                    step_.environment_released();
                    check_served();
                });
            step_.initialized();
        });
    });
}

bool PmixService::register_namespace(const protocol::StepMap& map)
{
    if (!init_result_ || registering_ || stopping_)
        return false;
    registering_ = true;
    if (!*init_result_) {
        log::error("PMIx server: %s", init_result_->error().c_str());
        step_.failed();
        return false;
    }
    auto registered = host_.register_namespace(map, [this](int status) {
        if (status != PMIX_SUCCESS) {
            log::error("registering the namespace failed: %d", status);
            step_.failed();
            return;
        }
        namespace_ready_ = true;
        step_.registered();
        check_served();
    });
    if (!registered) {
        log::error("%s", registered.error().c_str());
        step_.failed();
        return false;
    }
    return true;
}

void PmixService::when_served(std::function<void()> fn)
{
    if (serving_)
        fn();
    else if (!stopping_)
        until_served_.push_back(std::move(fn));
}

void PmixService::check_served()
{
    if (serving_ || !namespace_ready_ || !anchor_settled_ || !step_.way_up_open() || stopping_)
        return;
    begin_serving();
}

void PmixService::begin_serving()
{
    serving_ = true;
    for (auto& fn : std::exchange(until_served_, {}))
        fn();
    if (planned_) {
        check_planned_environment();
        log::info("serving %zu local ranks of %s (%zu clients waited)", args_.ranks.size(), host_.nspace().c_str(),
                  activation::held());
        activation::open();
    }
}

void PmixService::stop()
{
    stopping_ = true;
    // Clients held at the gate hear at once that there is no server.
    activation::close_held();
    if (anchor_)
        anchor_->release();
}

Result<std::vector<std::string>> PmixService::environment(std::uint32_t rank)
{
    if (planned_)
        return Result<std::vector<std::string>>::ok(
            planned_environment(*planned_, protocol::step_nspace(args_.job_id, args_.step_id), rank));
    return host_.environment(rank);
}

void PmixService::check_planned_environment()
{
    if (args_.ranks.empty())
        return;
    const std::uint32_t rank = args_.ranks.front();
    auto actual = host_.environment(rank);
    if (!actual) {
        log::error("cannot check the tasks' PMIx environment: %s", actual.error().c_str());
        return;
    }
    const auto differences = environment_differences(planned_environment(*planned_, host_.nspace(), rank), *actual);
    for (const auto& d : differences)
        log::error("the tasks' PMIx environment is not the library's: %s", d.c_str());
    if (differences.empty())
        log::debug("the tasks' PMIx environment is the library's");
}

}  // namespace exitpolicy::pmix_server
