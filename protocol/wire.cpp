// SPDX-License-Identifier: Apache-2.0
// wire.cpp - frame header, body writer/reader and the messages. See wire.hpp.
#include "wire.hpp"

#include <algorithm>
#include <charconv>

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
    case Type::enroll: return "enroll";
    case Type::step_map: return "step map";
    case Type::event: return "event";
    case Type::fence_up: return "fence up";
    case Type::fence_down: return "fence down";
    case Type::dmodex_req: return "dmodex request";
    case Type::dmodex_resp: return "dmodex response";
    case Type::abort: return "abort";
    case Type::terminate: return "terminate";
    case Type::notice: return "notice";
    case Type::env_request: return "environment request";
    case Type::env_reply: return "environment reply";
    case Type::stop: return "stop";
    case Type::data_request: return "data request";
    case Type::data_reply: return "data reply";
    case Type::relay: return "relay";
    case Type::gone: return "gone";
    case Type::node_down: return "node down";
    case Type::outcomes: return "outcomes";
    case Type::acks: return "acks";
    case Type::step_done: return "step done";
    }
    return "unknown";
}

Result<Header> decode_header(std::span<const std::uint8_t, header_size> b, std::uint32_t bound)
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
    if (length > bound)
        return Result<Header>::fail("frame of " + std::to_string(length) + " bytes exceeds the bound of " +
                                    std::to_string(bound));
    return Result<Header>::ok({type, length});
}

std::string clipped(std::string_view text, std::size_t limit)
{
    static constexpr std::string_view mark = " [cut]";
    if (text.size() <= limit)
        return std::string(text);
    return std::string(text.substr(0, limit > mark.size() ? limit - mark.size() : 0)) + std::string(mark.substr(0, limit));
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
    if (role < static_cast<std::uint8_t>(Role::stepd) || role > static_cast<std::uint8_t>(Role::orphan))
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

namespace {

// An outcome's fields, alone or in a list.
void put(Writer& w, const Outcome& m)
{
    w.u32(m.rank).u32(m.epoch).i64(m.pid).i32(m.wait_status).i64(m.end_time_us).u8(m.flags).i32(m.abort_status);
}

Outcome get_outcome(Reader& r)
{
    Outcome m;
    m.rank = r.u32();
    m.epoch = r.u32();
    m.pid = r.i64();
    m.wait_status = r.i32();
    m.end_time_us = r.i64();
    m.flags = r.u8();
    m.abort_status = r.i32();
    return m;
}

constexpr std::size_t outcome_size = 33;
constexpr std::size_t ack_size = 8;

// A list's count, checked against the bound and what is left of the body.
std::uint32_t list_count(Reader& r, std::size_t left, std::size_t item)
{
    const std::uint32_t n = r.u32();
    if (!r.failed() && n <= max_ranks && (left - 4) / item >= n)
        return n;
    r.fail();
    return 0;
}

}  // namespace

Bytes Outcome::encode() const
{
    Writer w(Type::outcome);
    put(w, *this);
    return w.finish();
}

Result<Outcome> Outcome::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    return finish_decode(r, get_outcome(r), Type::outcome);
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

Bytes Outcomes::encode() const
{
    Writer w(Type::outcomes);
    w.u32(static_cast<std::uint32_t>(list.size()));
    for (const auto& o : list)
        put(w, o);
    return w.finish();
}

Result<Outcomes> Outcomes::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Outcomes m;
    const std::uint32_t n = list_count(r, body.size(), outcome_size);
    m.list.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i)
        m.list.push_back(get_outcome(r));
    return finish_decode(r, std::move(m), Type::outcomes);
}

Bytes Acks::encode() const
{
    Writer w(Type::acks);
    w.u32(static_cast<std::uint32_t>(list.size()));
    for (const auto& a : list)
        w.u32(a.rank).u32(a.epoch);
    return w.finish();
}

Result<Acks> Acks::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Acks m;
    const std::uint32_t n = list_count(r, body.size(), ack_size);
    m.list.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
        Ack a;
        a.rank = r.u32();
        a.epoch = r.u32();
        m.list.push_back(a);
    }
    return finish_decode(r, std::move(m), Type::acks);
}

// ---- overlay messages ---------------------------------------------------------

Bytes Enroll::encode() const
{
    return Writer(Type::enroll).str(host).u32(port).finish();
}

Result<Enroll> Enroll::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Enroll m;
    m.host = r.str();
    m.port = r.u32();
    return finish_decode(r, std::move(m), Type::enroll);
}

Bytes StepMap::encode() const
{
    Writer w(Type::step_map);
    w.str(nspace).u32(fanout).strs(hostnames).strs(hosts);
    w.u32(static_cast<std::uint32_t>(ports.size()));
    for (auto p : ports)
        w.u32(p);
    w.u32(static_cast<std::uint32_t>(rank_node.size()));
    for (auto n : rank_node)
        w.u32(n);
    w.u8(recoverable ? 1 : 0);
    return w.finish();
}

Result<StepMap> StepMap::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    StepMap m;
    m.nspace = r.str();
    m.fanout = r.u32();
    m.hostnames = r.strs();
    m.hosts = r.strs();
    for (auto* v : {&m.ports, &m.rank_node}) {
        const std::uint32_t n = r.u32();
        if (r.failed() || n > body.size() / 4)
            return Result<StepMap>::fail("malformed step map frame");
        v->resize(n);
        for (auto& x : *v)
            x = r.u32();
    }
    const std::uint8_t recoverable = r.u8();
    if (recoverable > 1)
        return Result<StepMap>::fail("malformed step map frame: recoverable is neither 0 nor 1");
    m.recoverable = recoverable == 1;
    if (m.hosts.size() != m.hostnames.size() || m.ports.size() != m.hostnames.size())
        return Result<StepMap>::fail("malformed step map frame: node lists differ in length");
    for (auto n : m.rank_node)
        if (n >= m.hostnames.size())
            return Result<StepMap>::fail("malformed step map frame: a rank on an unknown node");
    return finish_decode(r, std::move(m), Type::step_map);
}

Bytes Event::encode() const
{
    return Writer(Type::event)
        .u32(origin)
        .u32(rank)
        .i32(code)
        .i32(exit_code)
        .i32(wait_status)
        .u8(client ? 1 : 0)
        .finish();
}

Result<Event> Event::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Event m;
    m.origin = r.u32();
    m.rank = r.u32();
    m.code = r.i32();
    m.exit_code = r.i32();
    m.wait_status = r.i32();
    const std::uint8_t flags = r.u8();
    if (flags > 1)
        return Result<Event>::fail("malformed event frame: unknown flags");
    m.client = flags == 1;
    return finish_decode(r, m, Type::event);
}

Bytes Gone::encode() const
{
    return Writer(Type::gone).u32(node).finish();
}

Result<Gone> Gone::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Gone m;
    m.node = r.u32();
    return finish_decode(r, m, Type::gone);
}

Bytes NodeDown::encode() const
{
    return Writer(Type::node_down).u32(node).str(hostname).u32s(ranks).i32(exit_code).finish();
}

Result<NodeDown> NodeDown::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    NodeDown m;
    m.node = r.u32();
    m.hostname = r.str();
    m.ranks = r.u32s();
    m.exit_code = r.i32();
    return finish_decode(r, std::move(m), Type::node_down);
}

std::string fence_set(const std::vector<std::uint32_t>& sorted_ranks)
{
    if (sorted_ranks.empty())
        return "*";
    std::string set;
    for (std::size_t i = 0; i < sorted_ranks.size();) {
        std::size_t last = i;
        while (last + 1 < sorted_ranks.size() && sorted_ranks[last + 1] == sorted_ranks[last] + 1)
            ++last;
        set += std::to_string(sorted_ranks[i]);
        if (last > i)
            set += "-" + std::to_string(sorted_ranks[last]);
        set += ",";
        i = last + 1;
    }
    return set;
}

std::string fence_key(const std::vector<std::uint32_t>& sorted_ranks, std::uint64_t instance)
{
    return fence_set(sorted_ranks) + "#" + std::to_string(instance);
}

std::optional<FenceKey> parse_fence_key(std::string_view key)
{
    const auto hash = key.rfind('#');
    if (hash == std::string_view::npos)
        return std::nullopt;
    const std::string_view set = key.substr(0, hash);
    const std::string_view number = key.substr(hash + 1);
    FenceKey id;
    id.set = set;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), id.instance);
    if (ec != std::errc() || end != number.data() + number.size() || id.instance == 0)
        return std::nullopt;
    if (set != "*") {
        if (set.empty() || set.back() != ',')
            return std::nullopt;
        for (std::size_t pos = 0; pos < set.size();) {
            const auto comma = set.find(',', pos);
            const char* at = set.data() + pos;
            const char* end_of_run = set.data() + comma;
            std::uint32_t first = 0;
            auto [ptr, err] = std::from_chars(at, end_of_run, first);
            if (err != std::errc())
                return std::nullopt;
            std::uint32_t last = first;
            if (ptr != end_of_run) {
                if (*ptr != '-')
                    return std::nullopt;
                const auto [ptr2, err2] = std::from_chars(ptr + 1, end_of_run, last);
                if (err2 != std::errc() || ptr2 != end_of_run || last <= first)
                    return std::nullopt;
            }
            if (!id.ranks.empty() && first <= id.ranks.back())
                return std::nullopt;  // unsorted, or a repeat
            if (last - first >= max_fence_ranks - id.ranks.size())
                return std::nullopt;  // more ranks than any step has
            for (std::uint64_t r = first; r <= last; ++r)
                id.ranks.push_back(static_cast<std::uint32_t>(r));
            pos = comma + 1;
        }
    }
    // One spelling per instance: no leading zeros either.
    if (fence_key(id.ranks, id.instance) != key)
        return std::nullopt;
    return id;
}

Bytes FenceUp::encode() const
{
    return Writer(Type::fence_up).str(key, max_fence_key).i32(status).u32(contributors).blob(data).finish();
}

Result<FenceUp> FenceUp::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    FenceUp m;
    m.key = r.str(max_fence_key);
    m.status = r.i32();
    m.contributors = r.u32();
    m.data = r.blob();
    if (!r.failed() && !parse_fence_key(m.key))
        return Result<FenceUp>::fail("fence up frame with a malformed fence key");
    return finish_decode(r, std::move(m), Type::fence_up);
}

Bytes FenceDown::encode() const
{
    return Writer(Type::fence_down).str(key, max_fence_key).i32(status).blob(data).finish();
}

Result<FenceDown> FenceDown::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    FenceDown m;
    m.key = r.str(max_fence_key);
    m.status = r.i32();
    m.data = r.blob();
    if (!r.failed() && !parse_fence_key(m.key))
        return Result<FenceDown>::fail("fence down frame with a malformed fence key");
    return finish_decode(r, std::move(m), Type::fence_down);
}

Bytes DmodexReq::encode() const
{
    return Writer(Type::dmodex_req).u64(id).u32(from).u32(to).u32(rank).finish();
}

Result<DmodexReq> DmodexReq::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    DmodexReq m;
    m.id = r.u64();
    m.from = r.u32();
    m.to = r.u32();
    m.rank = r.u32();
    return finish_decode(r, m, Type::dmodex_req);
}

Bytes DmodexResp::encode() const
{
    return Writer(Type::dmodex_resp).u64(id).u32(from).u32(to).i32(status).blob(data).finish();
}

Result<DmodexResp> DmodexResp::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    DmodexResp m;
    m.id = r.u64();
    m.from = r.u32();
    m.to = r.u32();
    m.status = r.i32();
    m.data = r.blob();
    return finish_decode(r, std::move(m), Type::dmodex_resp);
}

Bytes Abort::encode() const
{
    return Writer(Type::abort).u32(rank).i32(status).str(message).finish();
}

Result<Abort> Abort::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Abort m;
    m.rank = r.u32();
    m.status = r.i32();
    m.message = r.str();
    return finish_decode(r, std::move(m), Type::abort);
}

Bytes Terminate::encode() const
{
    return Writer(Type::terminate).str(reason).u32(kill_after_ms).finish();
}

Result<Terminate> Terminate::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Terminate m;
    m.reason = r.str();
    m.kill_after_ms = r.u32();
    return finish_decode(r, std::move(m), Type::terminate);
}

Bytes Relay::encode() const
{
    return Writer(Type::relay).u32(origin).i32(code).u32(source_rank).blob(info).finish();
}

Result<Relay> Relay::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Relay m;
    m.origin = r.u32();
    m.code = r.i32();
    m.source_rank = r.u32();
    m.info = r.blob();
    return finish_decode(r, std::move(m), Type::relay);
}

Bytes DataRequest::encode() const
{
    Writer w(Type::data_request);
    w.u8(static_cast<std::uint8_t>(op)).u64(id).u32(node).u32(rank).u8(wait).strs(keys);
    w.blobs(values);
    return w.finish();
}

Result<DataRequest> DataRequest::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    DataRequest m;
    const std::uint8_t op = r.u8();
    m.id = r.u64();
    m.node = r.u32();
    m.rank = r.u32();
    m.wait = r.u8();
    m.keys = r.strs();
    m.values = r.blobs();
    if (op < 1 || op > 3)
        return Result<DataRequest>::fail("data request with unknown operation " + std::to_string(op));
    m.op = static_cast<Op>(op);
    if (m.op == Op::publish && m.values.size() != m.keys.size())
        return Result<DataRequest>::fail("publish request with " + std::to_string(m.keys.size()) + " keys and " +
                                         std::to_string(m.values.size()) + " values");
    return finish_decode(r, std::move(m), Type::data_request);
}

Bytes DataReply::encode() const
{
    Writer w(Type::data_reply);
    w.u64(id).u32(node).i32(status).strs(keys).u32s(ranks);
    w.blobs(values);
    return w.finish();
}

Result<DataReply> DataReply::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    DataReply m;
    m.id = r.u64();
    m.node = r.u32();
    m.status = r.i32();
    m.keys = r.strs();
    m.ranks = r.u32s();
    m.values = r.blobs();
    if (m.ranks.size() != m.keys.size() || m.values.size() != m.keys.size())
        return Result<DataReply>::fail("malformed data reply frame");
    return finish_decode(r, std::move(m), Type::data_reply);
}

Bytes EnvRequest::encode() const
{
    return Writer(Type::env_request).u32(rank).i64(pid).finish();
}

Result<EnvRequest> EnvRequest::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    EnvRequest m;
    m.rank = r.u32();
    m.pid = r.i64();
    return finish_decode(r, m, Type::env_request);
}

Bytes EnvReply::encode() const
{
    // An entry as long as the frame allows (PMIx's own can be long).
    return Writer(Type::env_reply).i32(status).str(error).strs(env, max_body).finish();
}

Result<EnvReply> EnvReply::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    EnvReply m;
    m.status = r.i32();
    m.error = r.str();
    m.env = r.strs(max_body);
    return finish_decode(r, std::move(m), Type::env_reply);
}

Bytes Stop::encode() const
{
    return Writer(Type::stop).finish();
}

Result<Stop> Stop::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    return finish_decode(r, Stop{}, Type::stop);
}

Bytes StepDone::encode() const
{
    return Writer(Type::step_done).finish();
}

Result<StepDone> StepDone::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    return finish_decode(r, StepDone{}, Type::step_done);
}

Bytes Notice::encode() const
{
    return Writer(Type::notice).u32(node).u32(rank).str(text).finish();
}

Result<Notice> Notice::decode(std::span<const std::uint8_t> body)
{
    Reader r(body);
    Notice m;
    m.node = r.u32();
    m.rank = r.u32();
    m.text = r.str();
    return finish_decode(r, std::move(m), Type::notice);
}

}  // namespace exitpolicy::wire
