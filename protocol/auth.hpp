// auth.hpp - the per-step secret and the mutual challenge-response over it.
//
// srun's front end makes a random 32-byte secret per step and hands it to the
// nodes. A connection starts with the server's Challenge (a fresh nonce); the
// client answers with a Hello carrying its own nonce and
//   client_proof = HMAC-SHA256(secret, "exitpolicy client" | job | step |
//                               role | node | host | ranks | server nonce | client nonce)
// and the server answers with a Welcome carrying
//   server_proof = HMAC-SHA256(secret, "exitpolicy server" | server nonce | client nonce).
// Neither side sends another frame before it has checked the other's proof.
#pragma once

#include "exitpolicy/result.hpp"
#include "wire.hpp"

#include <array>
#include <string>
#include <string_view>

namespace exitpolicy::wire {

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

}  // namespace exitpolicy::wire
