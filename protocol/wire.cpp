// wire.cpp - frame header, body writer/reader and the messages. See wire.hpp.
#include "wire.hpp"

#include <algorithm>

namespace exitpolicy::wire {
namespace {

constexpr std::uint8_t magic0 = 'E';
constexpr std::uint8_t magic1 = 'P';

template <typename T>
Result<T> finish_decode(const Reader& r, T msg, Type type)
{
    if (!r.complete())
        return Result<T>::fail("malformed " + std::string(type_name(type)) + " frame");
    return Result<T>::ok(std::move(msg));
}

}  // namespace

std::string_view type_name(Type type) noexcept
{
    switch (type) {
    case Type::challenge: return "challenge";
    case Type::hello: return "hello";
    case Type::welcome: return "welcome";
    case Type::outcome: return "outcome";
    case Type::ack: return "ack";
    }
    return "unknown";
}

Result<Header> decode_header(std::span<const std::uint8_t, header_size> b)
{
    if (b[0] != magic0 || b[1] != magic1)
        return Result<Header>::fail("not an exitpolicy frame (bad magic)");
    if (b[2] != protocol_version)
        return Result<Header>::fail("unsupported protocol version " + std::to_string(b[2]) +
                                    " (this side speaks " + std::to_string(protocol_version) + ")");
    const auto type = static_cast<Type>(b[3]);
    if (type_name(type) == "unknown")
        return Result<Header>::fail("unknown frame type " + std::to_string(b[3]));
    const std::uint32_t length = (std::uint32_t{b[4]} << 24) | (std::uint32_t{b[5]} << 16) |
                                 (std::uint32_t{b[6]} << 8) | std::uint32_t{b[7]};
    if (length > max_body)
        return Result<Header>::fail("frame of " + std::to_string(length) + " bytes exceeds the bound of " +
                                    std::to_string(max_body));
    return Result<Header>::ok({type, length});
}

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

Writer& Writer::str(std::string_view v)
{
    const std::size_t n = std::min(v.size(), max_string);
    u32(static_cast<std::uint32_t>(n));
    buf_.insert(buf_.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
    return *this;
}

Writer& Writer::u32s(std::span<const std::uint32_t> v)
{
    const std::size_t n = std::min(v.size(), max_ranks);
    u32(static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i)
        u32(v[i]);
    return *this;
}

Bytes Writer::finish()
{
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

std::string Reader::str()
{
    const std::uint32_t n = u32();
    if (failed_ || n > max_string || body_.size() - pos_ < n) {
        failed_ = true;
        return {};
    }
    std::string s(reinterpret_cast<const char*>(body_.data() + pos_), n);
    pos_ += n;
    return s;
}

Bytes Challenge::encode() const
{
    return Writer(Type::challenge).bytes(nonce).u32(job_id).u32(step_id).finish();
}

Result<Challenge> Challenge::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Challenge m;
    m.nonce = r.array<32>();
    m.job_id = r.u32();
    m.step_id = r.u32();
    return finish_decode(r, m, Type::challenge);
}

Bytes Hello::encode() const
{
    return Writer(Type::hello)
        .u8(static_cast<std::uint8_t>(role))
        .u32(node_id)
        .str(hostname)
        .u32s(ranks)
        .bytes(nonce)
        .bytes(mac)
        .finish();
}

Result<Hello> Hello::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Hello m;
    const std::uint8_t role = r.u8();
    m.node_id = r.u32();
    m.hostname = r.str();
    m.ranks = r.u32s();
    m.nonce = r.array<32>();
    m.mac = r.array<32>();
    if (role != static_cast<std::uint8_t>(Role::stepd) && role != static_cast<std::uint8_t>(Role::daemon))
        return Result<Hello>::fail("hello with unknown role " + std::to_string(role));
    m.role = static_cast<Role>(role);
    return finish_decode(r, std::move(m), Type::hello);
}

Bytes Welcome::encode() const
{
    return Writer(Type::welcome).bytes(mac).finish();
}

Result<Welcome> Welcome::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Welcome m;
    m.mac = r.array<32>();
    return finish_decode(r, m, Type::welcome);
}

Bytes Outcome::encode() const
{
    return Writer(Type::outcome)
        .u32(rank)
        .u32(epoch)
        .i64(pid)
        .i32(wait_status)
        .i64(end_time_us)
        .u8(flags)
        .i32(abort_status)
        .finish();
}

Result<Outcome> Outcome::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Outcome m;
    m.rank = r.u32();
    m.epoch = r.u32();
    m.pid = r.i64();
    m.wait_status = r.i32();
    m.end_time_us = r.i64();
    m.flags = r.u8();
    m.abort_status = r.i32();
    return finish_decode(r, m, Type::outcome);
}

Bytes Ack::encode() const
{
    return Writer(Type::ack).u32(rank).u32(epoch).finish();
}

Result<Ack> Ack::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Ack m;
    m.rank = r.u32();
    m.epoch = r.u32();
    return finish_decode(r, m, Type::ack);
}

}  // namespace exitpolicy::wire
