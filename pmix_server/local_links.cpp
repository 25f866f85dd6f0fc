// SPDX-License-Identifier: Apache-2.0
// local_links.cpp - the node daemon's local socket and slurmstepd's
// control link. See local_links.hpp.
#include "local_links.hpp"

#include "pmix_server/log.hpp"
#include "protocol/fd.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {

struct LocalLinks::Link {
    LocalLinks* links = nullptr;
    protocol::BufferEventHandle bev;
    uid_t uid = static_cast<uid_t>(-1);
    pid_t pid = -1;        // the peer, as the kernel says
    bool control = false;  // slurmstepd's control link
    std::function<void()> written;  // the last word's, once it is out
};

LocalLinks::LocalLinks(event_base* base, uid_t user, std::vector<std::uint32_t> ranks, Node& node)
    : base_(base), user_(user), ranks_(std::move(ranks)), node_(node)
{
}

LocalLinks::~LocalLinks()
{
    links_.clear();
    if (listener_) {
        listener_.reset();
        // An empty directory is all slurmstepd has to remove (rmdir) when
        // no client used the PMIx server.
        ::unlink(path_.c_str());
    }
}

bool LocalLinks::local_rank(std::uint32_t rank) const
{
    return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end();
}

bool LocalLinks::listen(const std::string& path)
{
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path)) {
        log::error("socket path too long: %s", path.c_str());
        return false;
    }
    std::strcpy(sun.sun_path, path.c_str());
    ::unlink(path.c_str());
    listener_.reset(evconnlistener_new_bind(
        base_,
        [](evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
            auto* links = static_cast<LocalLinks*>(arg);
            protocol::Fd conn(fd);  // closed unless a link took it
            ucred cred{};
            socklen_t len = sizeof(cred);
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                (cred.uid != 0 && cred.uid != links->user_))
                return;
            if (guarded("a local connection", [&] { links->add(fd, cred.uid, cred.pid, false); }))
                conn.release();
        },
        this, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 64, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)));
    if (!listener_) {
        log::error("cannot listen on %s: %s", path.c_str(), std::strerror(errno));
        return false;
    }
    path_ = path;
    return true;
}

void LocalLinks::adopt_control(int fd, int backlog_fd)
{
    const protocol::Fd backlog(backlog_fd);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    evutil_make_socket_nonblocking(fd);
    add(fd, 0, -1, true);
    if (!backlog)
        return;
    Link& control = *links_.back();
    evbuffer* in = bufferevent_get_input(control.bev.get());
    std::size_t total = 0;
    // A bufferevent's input takes data only from its socket (its end is
    // frozen): opened for this once.
    evbuffer_unfreeze(in, 0);
    if (::lseek(backlog.get(), 0, SEEK_SET) == 0) {
        char buf[4096];
        ssize_t n;
        while ((n = ::read(backlog.get(), buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
            if (n > 0 && evbuffer_add(in, buf, static_cast<std::size_t>(n)) == 0)
                total += static_cast<std::size_t>(n);
    }
    evbuffer_freeze(in, 0);
    log::debug("read %zu bytes the standby kept of slurmstepd's control link", total);
    read_frames(control);
}

// A local connection: a task's or root's by the socket's path (pid and
// uid as the kernel says), or slurmstepd's control link.
void LocalLinks::add(int fd, uid_t uid, pid_t pid, bool control)
{
    auto link = std::make_unique<Link>();
    link->links = this;
    link->uid = uid;
    link->pid = pid;
    link->control = control;
    link->bev.reset(bufferevent_socket_new(base_, fd, BEV_OPT_CLOSE_ON_FREE));
    bufferevent_setcb(
        link->bev.get(),
        [](bufferevent*, void* arg) noexcept {
            auto* l = static_cast<Link*>(arg);
            l->links->read_frames(*l);
        },
        nullptr,
        [](bufferevent*, short, void* arg) noexcept {
            auto* l = static_cast<Link*>(arg);
            LocalLinks* links = l->links;
            const bool control = l->control;
            links->drop(*l);
            if (control) {
                log::info("slurmstepd's control link closed: stopping");
                guarded("stopping", [links] { links->node_.slurmstepd_gone(); });
            }
        },
        link.get());
    bufferevent_enable(link->bev.get(), EV_READ | EV_WRITE);
    links_.push_back(std::move(link));
}

void LocalLinks::drop(const Link& link)
{
    const Link* self = &link;
    std::erase_if(waiting_, [self](const auto& w) { return w.first == self; });
    std::erase_if(links_, [self](const auto& l) { return l.get() == self; });
}

void LocalLinks::read_frames(Link& link) noexcept
{
    if (!guarded("a local connection", [&] { serve_frames(link); })) {
        log::error("closed a local connection of pid %d: internal error", static_cast<int>(link.pid));
        drop(link);
    }
}

void LocalLinks::serve_frames(Link& link)
{
    evbuffer* in = bufferevent_get_input(link.bev.get());
    while (evbuffer_get_length(in) >= protocol::header_size) {
        std::array<std::uint8_t, protocol::header_size> head{};
        evbuffer_copyout(in, head.data(), head.size());
        auto h = protocol::decode_header(head);
        if (!h || (h->type != protocol::Type::env_request && h->type != protocol::Type::outcome &&
                   h->type != protocol::Type::stop && h->type != protocol::Type::task_started)) {
            // Bad magic, version, type or length: nothing more of it is read.
            const std::string why =
                h ? "a " + std::string(protocol::type_name(h->type)) + " frame is no local request" : h.error();
            log::info("closed a local connection of pid %d: %s", static_cast<int>(link.pid), why.c_str());
            drop(link);
            return;
        }
        if (evbuffer_get_length(in) < protocol::header_size + h->length)
            return;  // the rest is on its way
        evbuffer_drain(in, protocol::header_size);
        protocol::Bytes body(h->length);
        evbuffer_remove(in, body.data(), body.size());
        guarded("a local request", [&] { on_frame(link, h->type, body); });
    }
}

void LocalLinks::on_frame(Link& link, protocol::Type type, std::span<const std::uint8_t> body)
{
    auto reply = [&](const protocol::Bytes& frame) { bufferevent_write(link.bev.get(), frame.data(), frame.size()); };
    if (type == protocol::Type::env_request) {
        if (!node_.environment_ready()) {
            waiting_.emplace_back(&link, protocol::Bytes(body.begin(), body.end()));
            return;
        }
        environment_request(link, body);
        return;
    }
    if (!link.control)
        return;  // the rest is slurmstepd's to say, on its control link
    switch (type) {
    case protocol::Type::task_started: {
        // The tasks' environment was planned in slurmstepd: it says which
        // process each task is, as the task itself does when it asks.
        auto t = protocol::TaskStarted::decode(body);
        if (!t || !local_rank(t->rank)) {
            log::error("slurmstepd's word of a task start is no task of this node: %s",
                       t ? ("rank " + std::to_string(t->rank)).c_str() : t.error().c_str());
            return;
        }
        node_.task_started(*t);
        return;
    }
    case protocol::Type::outcome: {
        auto o = protocol::Outcome::decode(body);
        if (!o)
            return;
        if (!local_rank(o->rank)) {
            log::error("an outcome for rank %u, which is not a task of this node, is ignored", o->rank);
            return;
        }
        node_.task_outcome(*o);
        reply(protocol::Ack{o->rank, o->epoch}.encode());
        return;
    }
    case protocol::Type::stop:
        reply(protocol::Ack{}.encode());
        node_.step_ends();
        return;
    default:
        return;
    }
}

void LocalLinks::environment_request(Link& link, std::span<const std::uint8_t> body)
{
    auto r = protocol::EnvRequest::decode(body);
    protocol::EnvReply out;
    if (!r || !local_rank(r->rank)) {
        out.status = 1;
        out.error = r ? "rank " + std::to_string(r->rank) + " is not a task of this node" : r.error();
    } else if (auto env = node_.task_environment(r->rank, link.pid); !env) {
        out.status = 1;
        out.error = env.error();
    } else {
        out.env = std::move(*env);
    }
    auto frame = out.encode();
    if (frame.empty() || frame.size() - protocol::header_size > protocol::max_body) {
        protocol::EnvReply too_long;
        too_long.status = 1;
        too_long.error = "the PMIx environment of rank " + std::to_string(r->rank) + " is over the " +
                         std::to_string(protocol::max_body / 1024) +
                         " KiB its reply carries (are PMIX_MCA_* settings that long?)";
        frame = too_long.encode();
    }
    bufferevent_write(link.bev.get(), frame.data(), frame.size());
}

void LocalLinks::release_waiting()
{
    // A link that closed meanwhile took its requests with it (drop).
    for (auto& [link, body] : std::exchange(waiting_, {}))
        environment_request(*link, body);
}

bool LocalLinks::tell_slurmstepd(const std::vector<protocol::Ack>& confirmed, std::function<void()> written)
{
    const auto control = std::find_if(links_.begin(), links_.end(), [](const auto& l) { return l->control; });
    if (control == links_.end()) {
        log::debug("no control link to tell slurmstepd that srun has %zu of its outcomes", confirmed.size());
        return false;
    }
    log::debug("telling slurmstepd that srun has %zu of its outcomes", confirmed.size());
    if (confirmed.empty())
        return false;  // its silence says as much
    Link& link = **control;
    // Frames on the control link are read as unauthenticated ones.
    protocol::in_pieces(confirmed, protocol::acks_per_frame, [&](std::vector<protocol::Ack> part) {
        const protocol::Bytes frame = protocol::Acks{std::move(part)}.encode();
        bufferevent_write(link.bev.get(), frame.data(), frame.size());
    });
    // Nothing more is read: what is written is all that is left to do.
    link.written = std::move(written);
    bufferevent_setcb(
        link.bev.get(), nullptr,
        [](bufferevent* bev, void* arg) noexcept {
            if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
                guarded("the last word", [arg] { static_cast<Link*>(arg)->written(); });
        },
        [](bufferevent*, short, void* arg) noexcept {
            guarded("the last word", [arg] { static_cast<Link*>(arg)->written(); });
        },
        &link);
    bufferevent_enable(link.bev.get(), EV_WRITE);
    return true;
}

}  // namespace exitpolicy::pmix_server
