// SPDX-License-Identifier: Apache-2.0
// auth.cpp - secrets, nonces and HMAC proofs (OpenSSL). See auth.hpp.
#include "auth.hpp"

#include <algorithm>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace exitpolicy::protocol {
namespace {

// We live in other programs (srun, slurmstepd) as a plugin: OpenSSL must
// not register its atexit cleanup. srun runs the plugin's exit hook from an
// atexit handler registered before OpenSSL's, so OpenSSL would be torn down
// while the front end's thread still uses it (a crash seen under load).
bool init_openssl() noexcept
{
    static const bool ok = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
    return ok;
}

template <std::size_t N>
Result<std::array<std::uint8_t, N>> random_bytes()
{
    std::array<std::uint8_t, N> out{};
    if (!init_openssl() || RAND_bytes(out.data(), static_cast<int>(out.size())) != 1)
        return Result<std::array<std::uint8_t, N>>::fail("no random bytes from OpenSSL");
    return Result<std::array<std::uint8_t, N>>::ok(out);
}

Mac hmac(const Secret& secret, const Bytes& message)
{
    Mac mac{};
    unsigned int len = 0;
    init_openssl();
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(), message.size(),
         mac.data(), &len);
    return mac;
}

// The bytes a proof covers: reuse the frame writer for an unambiguous
// encoding, then drop its header.
Bytes covered(Writer& w)
{
    Bytes b = w.finish();
    b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(header_size));
    return b;
}

}  // namespace

Result<Secret> random_secret()
{
    return random_bytes<32>();
}

Result<Nonce> random_nonce()
{
    return random_bytes<32>();
}

std::string to_hex(std::span<const std::uint8_t> bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    s.reserve(bytes.size() * 2);
    for (std::uint8_t b : bytes) {
        s += digits[b >> 4];
        s += digits[b & 0xf];
    }
    return s;
}

Result<Secret> secret_from_hex(std::string_view hex)
{
    Secret s{};
    if (hex.size() != s.size() * 2)
        return Result<Secret>::fail("secret must be " + std::to_string(s.size() * 2) + " hex digits");
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        const int hi = nibble(hex[2 * i]);
        const int lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return Result<Secret>::fail("secret is not hexadecimal");
        s[i] = static_cast<std::uint8_t>(hi << 4 | lo);
    }
    return Result<Secret>::ok(s);
}

Mac client_proof(const Secret& secret, const Challenge& challenge, const Hello& hello)
{
    return hmac(secret, covered(Writer(Type::hello)
                                    .str("exitpolicy client")
                                    .u32(challenge.job_id)
                                    .u32(challenge.step_id)
                                    .u8(static_cast<std::uint8_t>(hello.role))
                                    .u32(hello.node_id)
                                    .str(hello.hostname)
                                    .u32s(hello.ranks)
                                    .u32(hello.component.job_id)
                                    .u32(hello.component.index)
                                    .u32(hello.component.ntasks)
                                    .u32(hello.component.nnodes)
                                    .bytes(challenge.nonce)
                                    .bytes(hello.nonce)));
}

Mac server_proof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce)
{
    return hmac(secret,
                covered(Writer(Type::welcome).str("exitpolicy server").bytes(server_nonce).bytes(client_nonce)));
}

bool proofs_equal(const Mac& a, const Mac& b) noexcept
{
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

SessionKey session_key(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce)
{
    return hmac(secret, covered(Writer(Type::welcome).str("exitpolicy frames").bytes(server_nonce).bytes(client_nonce)));
}

FrameDigest frame_digest(std::span<const std::uint8_t> frame)
{
    FrameDigest d{};
    init_openssl();
    EVP_Digest(frame.data(), frame.size(), d.data(), nullptr, EVP_sha256(), nullptr);
    return d;
}

Tag frame_tag(const SessionKey& key, Direction direction, std::uint64_t seq, const FrameDigest& digest)
{
    Bytes message;
    message.reserve(9 + digest.size());
    message.push_back(static_cast<std::uint8_t>(direction));
    for (int shift = 56; shift >= 0; shift -= 8)
        message.push_back(static_cast<std::uint8_t>(seq >> shift));
    message.insert(message.end(), digest.begin(), digest.end());
    const Mac mac = hmac(key, message);
    Tag tag{};
    std::copy_n(mac.begin(), tag_size, tag.begin());
    return tag;
}

Tag frame_tag(const SessionKey& key, Direction direction, std::uint64_t seq, std::span<const std::uint8_t> frame)
{
    return frame_tag(key, direction, seq, frame_digest(frame));
}

bool tags_equal(std::span<const std::uint8_t> a, const Tag& b) noexcept
{
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
}

Tag FrameSeal::seal(std::span<const std::uint8_t> frame)
{
    return seal(frame_digest(frame));
}

Tag FrameSeal::seal(const FrameDigest& digest)
{
    return frame_tag(key_, server_ ? Direction::to_client : Direction::to_server, sent_++, digest);
}

bool FrameSeal::open(std::span<const std::uint8_t> frame, std::span<const std::uint8_t> tag)
{
    return tags_equal(tag, frame_tag(key_, server_ ? Direction::to_server : Direction::to_client, received_++, frame));
}

}  // namespace exitpolicy::protocol
