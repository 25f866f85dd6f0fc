// SPDX-License-Identifier: Apache-2.0
// node_link.hpp - a node's connection to the step's front end, as used from
// slurmstepd: blocking, bounded by poll() timeouts, no threads, no
// libevent. One connection per node per step, opened in remote
// init_post_opt and used by every task_exit hook on that node.
//
// No Slurm headers here: unit-tested against the real front end.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/auth.hpp"
#include "protocol/fd.hpp"
#include "protocol/place.hpp"
#include "protocol/timeouts.hpp"
#include "protocol/wire.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {

struct LinkSetup : protocol::NodePlace {
    std::string host;  // the FE's address (srun's SLURM_SRUN_COMM_HOST)
    std::uint16_t port = 0;
    protocol::Secret secret{};
    // In a heterogeneous step: this node's component (node_id and ranks are
    // the component's own; job_id is the step's first component's).
    protocol::Component component;
};

class NodeLink {
public:
    NodeLink() = default;

    // Connects and authenticates both ways within timeout.
    static Result<NodeLink> connect(const LinkSetup& setup, std::chrono::milliseconds timeout);

    bool connected() const noexcept { return static_cast<bool>(fd_); }

    // A line for srun's stderr (not acknowledged).
    Result<bool> post_notice(const std::string& text, std::chrono::milliseconds timeout);
    // This node's daemon stands by, woken through `port` (not acknowledged).
    Result<bool> post_standby(std::uint16_t port, std::chrono::milliseconds timeout);
    // The IPv4 address (network order) this end of the link has: the
    // node's address toward srun. None when not connected.
    std::optional<std::uint32_t> local_address() const noexcept;

    // Pipelined: writes one outcome without waiting for its acknowledgement.
    Result<bool> post_outcome(const protocol::Outcome& outcome, std::chrono::milliseconds timeout);
    // The same for several, in one write.
    Result<bool> post_outcomes(std::span<const protocol::Outcome> outcomes, std::chrono::milliseconds timeout);
    // The acknowledgements that arrive until `wait` has passed or `want` of
    // them are in (wait 0: only those already here). Returns within
    // max(wait, frame_completion) whatever the peer sends. On error the
    // connection is closed.
    Result<std::vector<protocol::Ack>> read_acks(std::size_t want, std::chrono::milliseconds wait);
    // How long a frame that has begun to arrive may take to complete.
    static constexpr std::chrono::milliseconds frame_completion = protocol::timeouts::frame_completion;

    void close() noexcept;

private:
    explicit NodeLink(protocol::Fd fd) : fd_(std::move(fd)) {}
    Result<bool> post(const protocol::Bytes& frame, std::chrono::milliseconds timeout);
    protocol::Fd fd_;
    protocol::FrameSeal seal_;  // every frame after the handshake is tagged
};

}  // namespace exitpolicy::spank_plugin
