// SPDX-License-Identifier: Apache-2.0
// blocking_io.hpp - framed I/O on a non-blocking socket with poll()
// deadlines, for the plugin's blocking sides (slurmstepd, tasks). `peer`
// names the other side in error messages ("the front end").
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"

#include <chrono>
#include <initializer_list>

namespace exitpolicy::spank_plugin::io {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline);
bool wait_fd(int fd, short events, Clock::time_point deadline);
Result<bool> write_all(int fd, const protocol::Bytes& data, Clock::time_point deadline, const char* peer);
Result<bool> read_exact(int fd, std::uint8_t* out, std::size_t size, Clock::time_point deadline, const char* peer);
// One frame of the expected type; with a seal (an authenticated
// connection), followed by its tag, which must be the one expected.
Result<protocol::Bytes> read_frame(int fd, protocol::Type expected, Clock::time_point deadline, const char* peer,
                               protocol::FrameSeal* seal = nullptr);
// One frame of any of the accepted types (not empty); its type in `type`.
Result<protocol::Bytes> read_frame_of(int fd, std::initializer_list<protocol::Type> accepted, protocol::Type& type,
                                  Clock::time_point deadline, const char* peer, protocol::FrameSeal* seal = nullptr);
// Appends a frame and its tag to `out` (frames sealed in the order they are
// written).
void append_sealed(protocol::Bytes& out, const protocol::Bytes& frame, protocol::FrameSeal& seal);
// A frame and its tag.
Result<bool> write_sealed(int fd, const protocol::Bytes& frame, protocol::FrameSeal& seal, Clock::time_point deadline,
                          const char* peer);

}  // namespace exitpolicy::spank_plugin::io
