// SPDX-License-Identifier: Apache-2.0
// codec.hpp - the frame format every exitpolicy link speaks: an 8-byte
// header {magic 'E' 'P', version, type, body length (u32, big endian)} and a
// body of at most max_body bytes (max_body_trusted once the link is
// authenticated). Bodies are fixed sequences of big-endian integers, byte
// arrays and length-prefixed strings, written by Writer and read by Reader
// (codec.cpp); the messages made of them are in wire.hpp. Never throws.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/messages.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::protocol {


inline constexpr std::uint8_t protocol_version = 6;  // 2: fence keys name runs of ranks; 3: outcomes in bulk, tags over a digest; 4: step done; 5: an OOM-killed task's memory limit; 6: a heterogeneous step's component in the hello
inline constexpr std::size_t header_size = 8;  // magic, version, type, u32 body length
inline constexpr std::uint8_t magic0 = 'E';
inline constexpr std::uint8_t magic1 = 'P';
inline constexpr std::uint32_t max_body = 64 * 1024;           // before authentication
inline constexpr std::uint32_t max_body_trusted = 256u << 20;  // after: fence data can be large
inline constexpr std::size_t max_string = 4096;
// Tasks on one node; also the bound of a u32 list (Reader::u32s).
inline constexpr std::size_t max_ranks = 8192;
// A frame this large that goes to several links is held once for all.
inline constexpr std::size_t shared_frame_size = 1u << 20;

enum class Type : std::uint8_t {
#define EXITPOLICY_TYPE(type, number, name, Message) type = number,
    EXITPOLICY_MESSAGES(EXITPOLICY_TYPE)
#undef EXITPOLICY_TYPE
};
std::string_view type_name(Type type) noexcept;

struct Header {
    Type type;
    std::uint32_t length;
};
// Checks magic, version, type and the size bound.
Result<Header> decode_header(std::span<const std::uint8_t, header_size> bytes, std::uint32_t bound = max_body);

using Bytes = std::vector<std::uint8_t>;
using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// Builds one frame: header + body. Nothing is ever cut to fit: a string
// over its limit, or a body over max_body_trusted, makes finish() return no
// frame at all (empty), and senders whose sizes a task chooses (fences,
// environments, published data) check fits() first and fail that request
// with a clear status instead.
class Writer {
public:
    explicit Writer(Type type);
    Writer& u8(std::uint8_t v);
    Writer& u32(std::uint32_t v);
    Writer& u64(std::uint64_t v);
    Writer& i32(std::int32_t v) { return u32(static_cast<std::uint32_t>(v)); }
    Writer& i64(std::int64_t v) { return u64(static_cast<std::uint64_t>(v)); }
    Writer& bytes(std::span<const std::uint8_t> v);
    Writer& str(std::string_view v, std::size_t limit = max_string);  // u32 length + bytes (limit: the reader's)
    Writer& u32s(std::span<const std::uint32_t> v);  // u32 count + values
    Writer& blob(std::span<const std::uint8_t> v);    // u32 length + bytes, unbounded but by the frame
    Writer& strs(const std::vector<std::string>& v, std::size_t limit = max_string);  // u32 count + strings
    Writer& blobs(const std::vector<Bytes>& v);       // u32 count + blobs
    // Whether what was written so far makes a frame of at most `bound` body
    // bytes with every string within its limit.
    bool fits(std::uint32_t bound = max_body_trusted) const noexcept
    {
        return !oversized_ && buf_.size() - header_size <= bound;
    }
    // The frame, with the body length filled in; empty unless fits().
    Bytes finish();

private:
    Bytes buf_;
    bool oversized_ = false;
};

// Reads a body; any overrun or oversized string sets failed() and yields 0s.
class Reader {
public:
    explicit Reader(std::span<const std::uint8_t> body) : body_(body) {}
    std::uint8_t u8();
    std::uint32_t u32();
    std::uint64_t u64();
    std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
    std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
    template <std::size_t N>
    std::array<std::uint8_t, N> array()
    {
        std::array<std::uint8_t, N> a{};
        take(a.data(), N);
        return a;
    }
    std::string str(std::size_t limit = max_string);
    std::vector<std::uint32_t> u32s();
    Bytes blob();
    std::vector<std::string> strs(std::size_t limit = max_string);
    std::vector<Bytes> blobs();
    bool failed() const noexcept { return failed_; }
    // Bytes not yet read.
    std::size_t left() const noexcept { return body_.size() - pos_; }
    // A message's own check failed (a count beyond its bound, ...).
    void fail() noexcept { failed_ = true; }
    // Everything read, nothing left over, nothing failed.
    bool complete() const noexcept { return !failed_ && pos_ == body_.size(); }

private:
    void take(std::uint8_t* out, std::size_t n);
    std::span<const std::uint8_t> body_;
    std::size_t pos_ = 0;
    bool failed_ = false;
};

// The frame again from its type and body, undecoded: what a relay passes on
// without reading it (its final receiver decodes it).
Bytes reframe(Type type, std::span<const std::uint8_t> body);

}  // namespace exitpolicy::protocol
