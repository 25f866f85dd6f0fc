// SPDX-License-Identifier: Apache-2.0
// node_link.cpp - the blocking node-side client. See node_link.hpp.
#include "node_link.hpp"

#include "protocol/channel.hpp"

#include "blocking_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace exitpolicy::spank_plugin {
namespace {

using namespace io;
constexpr const char* fe = "the front end";

Result<protocol::Fd> open_socket(const std::string& host, std::uint16_t port, Clock::time_point deadline)
{
    // An address, never a name: the host comes from the job's environment
    // (SLURM_SRUN_COMM_HOST, an address Slurm writes), which its user could
    // change, and a name lookup here, in slurmstepd, would have no bound.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
        return Result<protocol::Fd>::fail("cannot resolve the front end's host " + host + ": " + ::gai_strerror(rc));
    std::string error = "no address";
    protocol::Fd fd;
    for (addrinfo* a = found; a && !fd; a = a->ai_next) {
        fd.reset(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd) {
            error = std::strerror(errno);
            continue;
        }
        protocol::tune_socket(fd.get());
        if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS && wait_fd(fd.get(), POLLOUT, deadline)) {
            int err = 0;
            socklen_t len = sizeof(err);
            ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            if (err == 0)
                break;
            error = std::strerror(err);
        } else {
            error = errno == EINPROGRESS ? "timed out" : std::strerror(errno);
        }
        fd.reset();
    }
    ::freeaddrinfo(found);
    if (!fd)
        return Result<protocol::Fd>::fail("cannot connect to the front end at " + host + ":" + service + ": " + error);
    return Result<protocol::Fd>::ok(std::move(fd));
}

}  // namespace

void NodeLink::close() noexcept
{
    fd_.reset();
}

Result<NodeLink> NodeLink::connect(const LinkSetup& setup, std::chrono::milliseconds timeout)
{
    using R = Result<NodeLink>;
    const auto deadline = Clock::now() + timeout;
    auto fd = open_socket(setup.host, setup.port, deadline);
    if (!fd)
        return R::fail(fd.error());
    NodeLink link(std::move(*fd));

    auto body = read_frame(link.fd_.get(), protocol::Type::challenge, deadline, fe);
    if (!body)
        return R::fail(body.error());
    auto challenge = protocol::Challenge::decode(*body);
    if (!challenge)
        return R::fail(challenge.error());
    if (challenge->job_id != setup.job_id || challenge->step_id != setup.step_id)
        return R::fail("the front end serves step " + std::to_string(challenge->job_id) + "." +
                       std::to_string(challenge->step_id) + ", not this one");

    auto nonce = protocol::random_nonce();
    if (!nonce)
        return R::fail(nonce.error());
    protocol::Hello hello;
    hello.role = protocol::Role::stepd;
    hello.node_id = setup.node_id;
    hello.hostname = setup.hostname;
    hello.ranks = setup.ranks;
    hello.component = setup.component;
    hello.nonce = *nonce;
    hello.mac = protocol::client_proof(setup.secret, *challenge, hello);
    if (auto w = write_all(link.fd_.get(), hello.encode(), deadline, fe); !w)
        return R::fail(w.error());

    body = read_frame(link.fd_.get(), protocol::Type::welcome, deadline, fe);
    if (!body)
        return R::fail(body.error());
    auto welcome = protocol::Welcome::decode(*body);
    if (!welcome)
        return R::fail(welcome.error());
    if (!protocol::proofs_equal(welcome->mac, protocol::server_proof(setup.secret, challenge->nonce, hello.nonce)))
        return R::fail("the front end failed authentication");
    link.seal_ = protocol::FrameSeal(protocol::session_key(setup.secret, challenge->nonce, hello.nonce), false);
    return R::ok(std::move(link));
}

Result<bool> NodeLink::post(const protocol::Bytes& frame, std::chrono::milliseconds timeout)
{
    if (!fd_)
        return Result<bool>::fail("not connected to the front end");
    if (auto w = write_sealed(fd_.get(), frame, seal_, Clock::now() + timeout, fe); !w) {
        close();
        return w;
    }
    return Result<bool>::ok(true);
}

Result<bool> NodeLink::post_notice(const std::string& text, std::chrono::milliseconds timeout)
{
    // The FE knows the node from the handshake.
    return post(protocol::Notice{0, protocol::Notice::no_rank, text}.encode(), timeout);
}

Result<bool> NodeLink::post_standby(std::uint16_t port, std::chrono::milliseconds timeout)
{
    return post(protocol::Standby{port}.encode(), timeout);
}

std::optional<std::uint32_t> NodeLink::local_address() const noexcept
{
    sockaddr_in sin{};
    socklen_t len = sizeof sin;
    if (!fd_ || ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sin), &len) != 0 || sin.sin_family != AF_INET)
        return std::nullopt;
    return sin.sin_addr.s_addr;
}

Result<bool> NodeLink::post_outcome(const protocol::Outcome& outcome, std::chrono::milliseconds timeout)
{
    return post_outcomes(std::span(&outcome, 1), timeout);
}

Result<bool> NodeLink::post_outcomes(std::span<const protocol::Outcome> outcomes, std::chrono::milliseconds timeout)
{
    if (!fd_)
        return Result<bool>::fail("not connected to the front end");
    protocol::Bytes out;
    for (const auto& o : outcomes)
        append_sealed(out, o.encode(), seal_);
    if (auto w = write_all(fd_.get(), out, Clock::now() + timeout, fe); !w) {
        close();
        return w;
    }
    return Result<bool>::ok(true);
}

Result<std::vector<protocol::Ack>> NodeLink::read_acks(std::size_t want, std::chrono::milliseconds wait)
{
    using R = Result<std::vector<protocol::Ack>>;
    std::vector<protocol::Ack> acks;
    const auto start = Clock::now();
    const auto deadline = start + wait;
    // One bound for the whole call, whatever the peer sends: a frame that
    // has begun gets the rest of it (at least frame_completion from the
    // start) to arrive, never a fresh deadline per frame.
    const auto bound = std::max(deadline, start + frame_completion);
    while (fd_ && acks.size() < want && wait_fd(fd_.get(), POLLIN, deadline)) {
        auto body = read_frame(fd_.get(), protocol::Type::ack, bound, fe, &seal_);
        auto ack = body ? protocol::Ack::decode(*body) : Result<protocol::Ack>::fail(body.error());
        if (!ack) {
            close();
            return R::fail(ack.error());
        }
        acks.push_back(*ack);
    }
    return R::ok(std::move(acks));
}

}  // namespace exitpolicy::spank_plugin
