// SPDX-License-Identifier: Apache-2.0
// auth.hpp - the per-step secret and the mutual challenge-response over it.
//
// srun's front end makes a random 32-byte secret per step and hands it to the
// nodes. A connection starts with the server's Challenge (a fresh nonce); the
// client answers with a Hello carrying its own nonce and
//   client_proof = HMAC-SHA256(secret, "exitpolicy client" | job | step |
//                               role | node | host | ranks | component | server nonce |
//                               client nonce)
// and the server answers with a Welcome carrying
//   server_proof = HMAC-SHA256(secret, "exitpolicy server" | server nonce | client nonce).
// Neither side sends another frame before it has checked the other's proof.
//
// After the handshake every frame carries a tag: the first 16 bytes of
//   HMAC-SHA256(session key, direction | sequence number | frame)
// with session key = HMAC-SHA256(secret, "exitpolicy frames" | server nonce
// | client nonce), a direction byte (to the server, to the client) and a
// 64-bit count of the frames sent that way before. Nobody on the path can
// inject, alter, replay, reorder or reflect a frame of an authenticated
// connection without the secret.
#pragma once

#include "exitpolicy/result.hpp"
#include "wire.hpp"

#include <array>
#include <string>
#include <string_view>

namespace exitpolicy::protocol {

using Secret = std::array<std::uint8_t, 32>;

// From the system's CSPRNG (OpenSSL RAND_bytes).
Result<Secret> random_secret();
Result<Nonce> random_nonce();

std::string to_hex(std::span<const std::uint8_t> bytes);
Result<Secret> secret_from_hex(std::string_view hex);

Mac client_proof(const Secret& secret, const Challenge& challenge, const Hello& hello);
Mac server_proof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce);

// Constant time.
bool proofs_equal(const Mac& a, const Mac& b) noexcept;

using SessionKey = std::array<std::uint8_t, 32>;
inline constexpr std::size_t tag_size = 16;
using Tag = std::array<std::uint8_t, tag_size>;
enum class Direction : std::uint8_t { to_server = 0, to_client = 1 };

SessionKey session_key(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce);
// A frame's tag is the HMAC of its direction, its number on the connection
// and the SHA-256 digest of the whole frame (header and body): a frame sent
// to many peers (a fence's result, an event) is hashed once, and each link
// adds only a short HMAC of its own.
using FrameDigest = std::array<std::uint8_t, 32>;
FrameDigest frame_digest(std::span<const std::uint8_t> frame);
Tag frame_tag(const SessionKey& key, Direction direction, std::uint64_t seq, const FrameDigest& digest);
Tag frame_tag(const SessionKey& key, Direction direction, std::uint64_t seq, std::span<const std::uint8_t> frame);
// Constant time.
bool tags_equal(std::span<const std::uint8_t> a, const Tag& b) noexcept;

// One direction of an authenticated connection: tags what is sent, checks
// what is received, each with its own count.
class FrameSeal {
public:
    FrameSeal() = default;
    FrameSeal(const SessionKey& key, bool server) : key_(key), sealed_(true), server_(server) {}
    bool sealed() const noexcept { return sealed_; }
    // The tag to send after `frame`, or after the frame with that digest.
    Tag seal(std::span<const std::uint8_t> frame);
    Tag seal(const FrameDigest& digest);
    // Whether `tag` is the one the peer's next frame must carry.
    bool open(std::span<const std::uint8_t> frame, std::span<const std::uint8_t> tag);

private:
    SessionKey key_{};
    bool sealed_ = false;
    bool server_ = false;
    std::uint64_t sent_ = 0;
    std::uint64_t received_ = 0;
};

}  // namespace exitpolicy::protocol
