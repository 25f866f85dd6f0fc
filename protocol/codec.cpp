// SPDX-License-Identifier: Apache-2.0
// codec.cpp - the body writer and reader every message is made of (Writer,
// Reader in codec.hpp): big-endian integers, length-prefixed strings, lists
// and blobs, each bounded so that a hostile length never allocates.
#include "codec.hpp"

#include <algorithm>

namespace exitpolicy::protocol {

Writer::Writer(Type type)
{
    buf_.reserve(64);
    buf_.insert(buf_.end(), {magic0, magic1, protocol_version, static_cast<std::uint8_t>(type), 0, 0, 0, 0});
}

Writer& Writer::u8(std::uint8_t v)
{
    buf_.push_back(v);
    return *this;
}

Writer& Writer::u32(std::uint32_t v)
{
    for (int shift = 24; shift >= 0; shift -= 8)
        buf_.push_back(static_cast<std::uint8_t>(v >> shift));
    return *this;
}

Writer& Writer::u64(std::uint64_t v)
{
    for (int shift = 56; shift >= 0; shift -= 8)
        buf_.push_back(static_cast<std::uint8_t>(v >> shift));
    return *this;
}

Writer& Writer::bytes(std::span<const std::uint8_t> v)
{
    buf_.insert(buf_.end(), v.begin(), v.end());
    return *this;
}

Writer& Writer::str(std::string_view v, std::size_t limit)
{
    if (v.size() > limit) {
        oversized_ = true;  // the reader would refuse it: no frame
        return *this;
    }
    u32(static_cast<std::uint32_t>(v.size()));
    buf_.insert(buf_.end(), v.begin(), v.end());
    return *this;
}

Writer& Writer::u32s(std::span<const std::uint32_t> v)
{
    // Whole, like every other list: a receiver's bound refuses the frame
    // rather than a writer cutting it short unseen.
    u32(static_cast<std::uint32_t>(v.size()));
    for (const std::uint32_t x : v)
        u32(x);
    return *this;
}

Writer& Writer::blob(std::span<const std::uint8_t> v)
{
    if (v.size() > max_body_trusted) {
        oversized_ = true;  // could not be a frame's: never copied
        return *this;
    }
    u32(static_cast<std::uint32_t>(v.size()));
    return bytes(v);
}

Writer& Writer::strs(const std::vector<std::string>& v, std::size_t limit)
{
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& x : v)
        str(x, limit);
    return *this;
}

Writer& Writer::blobs(const std::vector<Bytes>& v)
{
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& x : v)
        blob(x);
    return *this;
}

Bytes reframe(Type type, std::span<const std::uint8_t> body)
{
    return Writer(type).bytes(body).finish();
}

Bytes Writer::finish()
{
    if (!fits())
        return {};
    const auto length = static_cast<std::uint32_t>(buf_.size() - header_size);
    for (int i = 0; i < 4; ++i)
        buf_[4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(length >> (24 - 8 * i));
    return std::move(buf_);
}

void Reader::take(std::uint8_t* out, std::size_t n)
{
    if (failed_ || body_.size() - pos_ < n) {
        failed_ = true;
        std::fill(out, out + n, std::uint8_t{0});
        return;
    }
    std::copy_n(body_.begin() + static_cast<std::ptrdiff_t>(pos_), n, out);
    pos_ += n;
}

std::uint8_t Reader::u8()
{
    std::uint8_t v = 0;
    take(&v, 1);
    return v;
}

std::uint32_t Reader::u32()
{
    std::array<std::uint8_t, 4> b{};
    take(b.data(), b.size());
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

std::uint64_t Reader::u64()
{
    const std::uint64_t hi = u32();
    return (hi << 32) | u32();
}

std::vector<std::uint32_t> Reader::u32s()
{
    const std::uint32_t n = u32();
    if (failed_ || n > max_ranks || (body_.size() - pos_) / 4 < n) {
        failed_ = true;
        return {};
    }
    std::vector<std::uint32_t> v(n);
    for (auto& x : v)
        x = u32();
    return v;
}

Bytes Reader::blob()
{
    const std::uint32_t n = u32();
    if (failed_ || body_.size() - pos_ < n) {
        failed_ = true;
        return {};
    }
    Bytes b(body_.begin() + static_cast<std::ptrdiff_t>(pos_), body_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return b;
}

// A count read off the wire reserves at most this many elements up front:
// an element in memory (a string, a vector) is 6 to 8 times its 4 wire
// bytes, so a frame full of empty ones would otherwise cost that many times
// its size before a single element is read.
constexpr std::size_t reserve_bound = 1024;

std::vector<std::string> Reader::strs(std::size_t limit)
{
    const std::uint32_t n = u32();
    // Every string takes at least its 4-byte length.
    if (failed_ || (body_.size() - pos_) / 4 < n) {
        failed_ = true;
        return {};
    }
    std::vector<std::string> v;
    v.reserve(std::min<std::size_t>(n, reserve_bound));
    for (std::uint32_t i = 0; i < n && !failed_; ++i)
        v.push_back(str(limit));
    return v;
}

std::vector<Bytes> Reader::blobs()
{
    const std::uint32_t n = u32();
    // Every blob takes at least its 4-byte length.
    if (failed_ || (body_.size() - pos_) / 4 < n) {
        failed_ = true;
        return {};
    }
    std::vector<Bytes> v;
    v.reserve(std::min<std::size_t>(n, reserve_bound));
    for (std::uint32_t i = 0; i < n && !failed_; ++i)
        v.push_back(blob());
    return v;
}

std::string Reader::str(std::size_t limit)
{
    const std::uint32_t n = u32();
    if (failed_ || n > limit || body_.size() - pos_ < n) {
        failed_ = true;
        return {};
    }
    std::string s(reinterpret_cast<const char*>(body_.data() + pos_), n);
    pos_ += n;
    return s;
}

}  // namespace exitpolicy::protocol
