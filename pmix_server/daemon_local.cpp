// SPDX-License-Identifier: Apache-2.0
// daemon_local.cpp - the node daemon's local socket: who may connect (the
// job's user, slurmstepd as root), the tasks' environment requests, and
// slurmstepd's control link (outcomes in, the stop). See daemon.hpp.
#include "daemon_local.hpp"

#include "event_anchor.hpp"
#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "pmix_server/log.hpp"
#include "pmix_host.hpp"
#include "protocol/process.hpp"
#include "protocol/events.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include <pmix_common.h>

#include <algorithm>
#include <utility>
#include <charconv>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {

Daemon::Local* Daemon::confirm_to_slurmstepd()
{
    const auto control = std::find_if(locals_.begin(), locals_.end(), [](const auto& l) { return l->control; });
    const auto& confirmed = agent_->confirmed();
    if (control == locals_.end()) {
        log::debug("no control link to tell slurmstepd that srun has %zu of its outcomes", confirmed.size());
        return nullptr;
    }
    log::debug("telling slurmstepd that srun has %zu of its outcomes", confirmed.size());
    if (confirmed.empty())
        return nullptr;  // its silence says as much
    // Frames on the control link are read as unauthenticated ones.
    protocol::in_pieces(
        confirmed, protocol::acks_per_frame,
        [&](std::vector<protocol::Ack> part) {
            const protocol::Bytes frame = protocol::Acks{std::move(part)}.encode();
            bufferevent_write((*control)->bev.get(), frame.data(), frame.size());
        });
    return control->get();
}

// ---- local socket --------------------------------------------------------------------

void Daemon::Local::read_frames() noexcept
{
    Local* l = this;
    if (!guarded("a local connection", [l] { l->serve_frames(); })) {
        log::error("closed a local connection of pid %d: internal error", static_cast<int>(l->pid));
        l->drop();
    }
}

void Daemon::Local::serve_frames()
{
    Local* l = this;
    evbuffer* in = bufferevent_get_input(bev.get());
    while (evbuffer_get_length(in) >= protocol::header_size) {
        std::array<std::uint8_t, protocol::header_size> head{};
        evbuffer_copyout(in, head.data(), head.size());
        auto h = protocol::decode_header(head);
        if (!h || (h->type != protocol::Type::env_request && h->type != protocol::Type::outcome &&
                   h->type != protocol::Type::stop && h->type != protocol::Type::task_started)) {
            // Bad magic, version, type or length: nothing more of it is read.
            const std::string why = h ? "a " + std::string(protocol::type_name(h->type)) +
                                            " frame is no local request"
                                      : h.error();
            log::info("closed a local connection of pid %d: %s", static_cast<int>(l->pid),
                      why.c_str());
            l->drop();
            return;
        }
        if (evbuffer_get_length(in) < protocol::header_size + h->length)
            return;  // the rest is on its way
        evbuffer_drain(in, protocol::header_size);
        protocol::Bytes body(h->length);
        evbuffer_remove(in, body.data(), body.size());
        guarded("a local request", [&] { l->d->on_local_frame(*l, h->type, body); });
    }
}

// A local connection: a task's or root's by the socket's path (pid and
// uid as the kernel says), or slurmstepd's control link.
void Daemon::add_local(int fd, uid_t uid, pid_t pid, bool control)
{
    auto l = std::make_unique<Local>();
    l->d = this;
    l->uid = uid;
    l->pid = pid;
    l->control = control;
    l->bev.reset(bufferevent_socket_new(base_.get(), fd, BEV_OPT_CLOSE_ON_FREE));
    bufferevent_setcb(
        l->bev.get(), [](bufferevent*, void* arg) noexcept { static_cast<Local*>(arg)->read_frames(); },
        nullptr,
        [](bufferevent*, short, void* arg) {
            auto* l = static_cast<Local*>(arg);
            Daemon* d = l->d;
            const bool control = l->control;
            l->drop();
            // slurmstepd is gone (killed, crashed): nobody is left to stop
            // this daemon at the step's end, so it stops now, as at that
            // end (drained within its bound). It never outlives root.
            if (control) {
                log::info("slurmstepd's control link closed: stopping");
                guarded("stopping", [d] { d->agent_->drain(); });
            }
        },
        l.get());
    bufferevent_enable(l->bev.get(), EV_READ | EV_WRITE);
    locals_.push_back(std::move(l));
}

void Daemon::listen_local()
{
    const std::string path = args_.dir + "/daemon.sock";
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path)) {
        log::error("socket path too long: %s", path.c_str());
        return;
    }
    std::strcpy(sun.sun_path, path.c_str());
    ::unlink(path.c_str());
    local_listener_.reset(evconnlistener_new_bind(
        base_.get(),
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* d = static_cast<Daemon*>(arg);
            ucred cred{};
            socklen_t len = sizeof(cred);
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                (cred.uid != 0 && cred.uid != d->args_.uid)) {
                ::close(fd);
                return;
            }
            if (!guarded("a local connection", [&] { d->add_local(fd, cred.uid, cred.pid, false); }))
                ::close(fd);
        },
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 64, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)));
    if (!local_listener_)
        log::error("cannot listen on %s: %s", path.c_str(), std::strerror(errno));
    // slurmstepd's control link, which no other process holds.
    if (args_.control_fd >= 0) {
        ::fcntl(args_.control_fd, F_SETFD, FD_CLOEXEC);
        evutil_make_socket_nonblocking(args_.control_fd);
        add_local(std::exchange(args_.control_fd, -1), 0, -1, true);
        if (args_.control_backlog_fd >= 0)
            read_control_backlog(*locals_.back());
    }
}

// What the standby read of the control link comes first, as if the link
// had carried it now: the link's own bytes follow it.
void Daemon::read_control_backlog(Local& control)
{
    const int fd = std::exchange(args_.control_backlog_fd, -1);
    evbuffer* in = bufferevent_get_input(control.bev.get());
    std::size_t total = 0;
    // A bufferevent's input takes data only from its socket (its end is
    // frozen): opened for this once.
    evbuffer_unfreeze(in, 0);
    if (::lseek(fd, 0, SEEK_SET) == 0) {
        char buf[4096];
        ssize_t n;
        while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
            if (n > 0 && evbuffer_add(in, buf, static_cast<std::size_t>(n)) == 0)
                total += static_cast<std::size_t>(n);
    }
    evbuffer_freeze(in, 0);
    ::close(fd);
    log::debug("read %zu bytes the standby kept of slurmstepd's control link", total);
    control.read_frames();
}

void Daemon::on_local_frame(Local& l, protocol::Type type, std::span<const std::uint8_t> body)
{
    auto reply = [&](const protocol::Bytes& frame) { bufferevent_write(l.bev.get(), frame.data(), frame.size()); };
    switch (type) {
    case protocol::Type::env_request: {
        // A task starts once the event anchor is in place: its default
        // event handler must find the anchor's registration. A planned
        // server's clients wait for it at the gate instead: the task has
        // its environment at once.
        if (!planned_ && !anchor_settled_) {
            env_waiting_.emplace_back(&l, protocol::Bytes(body.begin(), body.end()));
            return;
        }
        auto r = protocol::EnvRequest::decode(body);
        protocol::EnvReply out;
        if (!r || std::find(args_.ranks.begin(), args_.ranks.end(), r->rank) == args_.ranks.end()) {
            out.status = 1;
            out.error = r ? "rank " + std::to_string(r->rank) + " is not a task of this node" : r.error();
        } else if (auto env = planned_ ? Result<std::vector<std::string>>::ok(planned_environment(
                                             *planned_, protocol::step_nspace(args_.job_id, args_.step_id), r->rank))
                                       : pmix_->environment(r->rank);
                   !env) {
            out.status = 1;
            out.error = env.error();
        } else {
            // The task itself asks, before exec: its pid is the peer's.
            tasks_->add(r->rank, l.pid,
                        protocol::Fd(protocol::process::move_above(protocol::process::open_pidfd(l.pid), FD_SETSIZE)));
            out.env = std::move(*env);
        }
        auto frame = out.encode();
        if (frame.empty() || frame.size() - protocol::header_size > protocol::max_body) {
            protocol::EnvReply too_long;
            too_long.status = 1;
            too_long.error = "the PMIx environment of rank " + std::to_string(r->rank) +
                             " is over the " + std::to_string(protocol::max_body / 1024) +
                             " KiB its reply carries (are PMIX_MCA_* settings that long?)";
            frame = too_long.encode();
        }
        reply(frame);
        return;
    }
    case protocol::Type::task_started: {
        // The tasks' environment was planned in slurmstepd: it says which
        // process each task is, as the task itself does when it asks.
        if (!l.control)
            return;
        auto t = protocol::TaskStarted::decode(body);
        if (!t || std::find(args_.ranks.begin(), args_.ranks.end(), t->rank) == args_.ranks.end()) {
            log::error("slurmstepd's word of a task start is no task of this node: %s",
                       t ? ("rank " + std::to_string(t->rank)).c_str() : t.error().c_str());
            return;
        }
        if (tasks_->known(t->rank))
            return;
        const pid_t pid = static_cast<pid_t>(t->pid);
        // Above the descriptors the PMIx library select()s on (a node of
        // a thousand tasks holds a thousand pidfds).
        protocol::Fd pidfd(protocol::process::move_above(protocol::process::open_pidfd_of(pid, t->start_time), FD_SETSIZE));
        if (!pidfd && errno == ESRCH) {
            log::debug("rank %u (pid %d) ended before this daemon heard it start", t->rank, static_cast<int>(pid));
            return;  // nothing to signal: its pid may be another's now
        }
        tasks_->add(t->rank, pid, std::move(pidfd));
        return;
    }
    case protocol::Type::outcome: {
        if (!l.control)
            return;  // only slurmstepd reports exits, on its control link
        auto o = protocol::Outcome::decode(body);
        if (!o)
            return;
        if (std::find(args_.ranks.begin(), args_.ranks.end(), o->rank) == args_.ranks.end()) {
            log::error("an outcome for rank %u, which is not a task of this node, is ignored", o->rank);
            return;
        }
        outcome(*o);
        reply(protocol::Ack{o->rank, o->epoch}.encode());
        return;
    }
    case protocol::Type::stop:
        if (!l.control)
            return;
        log::debug("stopping at the step's end (%zu outcomes to flush)", agent_->unacked());
        reply(protocol::Ack{}.encode());
        agent_->drain();
        return;
    default:
        return;
    }
}

}  // namespace exitpolicy::pmix_server
