// SPDX-License-Identifier: Apache-2.0
// wire.cpp - the frame header, fence keys and the messages, each one's fields
// listed once and walked by both the writer and the reader; their types,
// names and encode()/decode() come from the one list of messages
// (messages.hpp). See wire.hpp; the body writer and reader are in codec.cpp.
#include "wire.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <tuple>
#include <type_traits>

namespace exitpolicy::protocol {
namespace {

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
#define EXITPOLICY_NAME(type, number, name, Message) \
    case Type::type: return name;
        EXITPOLICY_MESSAGES(EXITPOLICY_NAME)
#undef EXITPOLICY_NAME
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

namespace {

// ---- the messages: each one's fields, once ------------------------------------
//
// Fields<M>::of(m) lists a message's fields in wire order; the writer
// (Put) and the reader (Get) both walk that one list, so the two can never
// disagree on order or type. A field is written by its C++ type:
//   u8, u32, u64, i32, i64     big-endian, as Writer
//   bool, enum                 one byte (a bool must read 0 or 1)
//   std::array<u8, N>          N bytes
//   std::string                u32 length + bytes, at most max_string
//   vector<u32>                u32 count + values, at most max_ranks (a node's)
//   vector<string>, Bytes, vector<Bytes>   as Writer::strs, blob, blobs
// and by a wrapper where it differs: limited() (another bound on a string or
// strings), many() (a list of u32 bounded by the frame alone), records() (a
// list of messages of a fixed wire size). What a field list cannot say
// (a value's range, lists that must agree) is checked by check(), on a body
// that read whole.

template <class S>
struct Limited {
    S& value;
    std::size_t limit;
};
template <class S>
Limited<S> limited(S& value, std::size_t limit)
{
    return {value, limit};
}

template <class V>
struct Many {
    V& list;
};
template <class V>
Many<V> many(V& list)
{
    return {list};
}

template <class V>
struct Records {
    V& list;
    std::size_t wire_size;  // of one record
};
template <class V>
Records<V> records(V& list, std::size_t wire_size)
{
    return {list, wire_size};
}

// A field list: references to the message's fields, wrappers by value.
template <class... F>
std::tuple<F...> list(F&&... f)
{
    return std::tuple<F...>(std::forward<F>(f)...);
}

template <class M>
struct Fields;

// Each message's frame type, from the one list (messages.hpp).
template <class M>
struct TypeOf;
#define EXITPOLICY_TYPE_OF(type, number, name, Message)  \
    template <>                                         \
    struct TypeOf<Message> {                            \
        static constexpr Type value = Type::type;       \
    };
EXITPOLICY_MESSAGES(EXITPOLICY_TYPE_OF)
#undef EXITPOLICY_TYPE_OF
template <class M>
constexpr Type type_of = TypeOf<M>::value;

constexpr std::size_t outcome_size = 41;  // Fields<Outcome>'s bytes
constexpr std::size_t ack_size = 8;

#define EXITPOLICY_FIELDS(Message, ...)                                    \
    template <>                                                            \
    struct Fields<Message> {                                               \
        static auto of([[maybe_unused]] auto& m) { return list(__VA_ARGS__); } \
    };

EXITPOLICY_FIELDS(Challenge, m.nonce, m.job_id, m.step_id)
EXITPOLICY_FIELDS(Hello, m.role, m.node_id, m.hostname, m.ranks, m.component.job_id, m.component.index,
                  m.component.ntasks, m.component.nnodes, m.nonce, m.mac)
EXITPOLICY_FIELDS(Welcome, m.mac)
EXITPOLICY_FIELDS(Outcome, m.rank, m.epoch, m.pid, m.wait_status, m.end_time_us, m.flags, m.abort_status,
                  m.memory_limit)
EXITPOLICY_FIELDS(Ack, m.rank, m.epoch)
EXITPOLICY_FIELDS(Outcomes, records(m.list, outcome_size))
EXITPOLICY_FIELDS(Acks, records(m.list, ack_size))
EXITPOLICY_FIELDS(Enroll, m.host, m.port)
EXITPOLICY_FIELDS(StepMap, m.nspace, m.fanout, m.hostnames, m.hosts, many(m.ports), many(m.rank_node),
                  m.recoverable)
EXITPOLICY_FIELDS(Event, m.origin, m.rank, m.code, m.exit_code, m.wait_status, m.client)
EXITPOLICY_FIELDS(Gone, m.node)
EXITPOLICY_FIELDS(NodeDown, m.node, m.hostname, m.ranks, m.exit_code)
EXITPOLICY_FIELDS(FenceUp, limited(m.key, max_fence_key), m.status, m.contributors, m.data)
EXITPOLICY_FIELDS(FenceDown, limited(m.key, max_fence_key), m.status, m.data)
EXITPOLICY_FIELDS(DmodexReq, m.id, m.from, m.to, m.rank)
EXITPOLICY_FIELDS(DmodexResp, m.id, m.from, m.to, m.status, m.data)
EXITPOLICY_FIELDS(Abort, m.rank, m.status, m.message)
EXITPOLICY_FIELDS(Terminate, m.reason, m.kill_after_ms)
EXITPOLICY_FIELDS(Relay, m.origin, m.code, m.source_rank, m.info)
EXITPOLICY_FIELDS(DataRequest, m.op, m.id, m.node, m.rank, m.wait, m.keys, m.values)
EXITPOLICY_FIELDS(DataReply, m.id, m.node, m.status, m.keys, m.ranks, m.values)
EXITPOLICY_FIELDS(EnvRequest, m.rank, m.pid)
EXITPOLICY_FIELDS(TaskStarted, m.rank, m.pid, m.start_time)
EXITPOLICY_FIELDS(Standby, m.port)
// An entry as long as the frame allows (PMIx's own can be long).
EXITPOLICY_FIELDS(EnvReply, m.status, m.error, limited(m.env, max_body))
EXITPOLICY_FIELDS(Stop)
EXITPOLICY_FIELDS(StepDone)
EXITPOLICY_FIELDS(Notice, m.node, m.rank, m.text)

#undef EXITPOLICY_FIELDS

template <class M>
void put_fields(Writer& w, const M& m);

// Writes one field.
struct Put {
    Writer& w;
    void operator()(std::uint8_t v) { w.u8(v); }
    void operator()(std::uint32_t v) { w.u32(v); }
    void operator()(std::uint64_t v) { w.u64(v); }
    void operator()(std::int32_t v) { w.i32(v); }
    void operator()(std::int64_t v) { w.i64(v); }
    void operator()(bool v) { w.u8(v ? 1 : 0); }
    template <class E>
        requires std::is_enum_v<E>
    void operator()(E v)
    {
        w.u8(static_cast<std::uint8_t>(v));
    }
    template <std::size_t N>
    void operator()(const std::array<std::uint8_t, N>& v)
    {
        w.bytes(v);
    }
    void operator()(const std::string& v) { w.str(v); }
    void operator()(const std::vector<std::uint32_t>& v) { w.u32s(v); }
    void operator()(const std::vector<std::string>& v) { w.strs(v); }
    void operator()(const Bytes& v) { w.blob(v); }
    void operator()(const std::vector<Bytes>& v) { w.blobs(v); }
    void operator()(Limited<const std::string> v) { w.str(v.value, v.limit); }
    void operator()(Limited<const std::vector<std::string>> v) { w.strs(v.value, v.limit); }
    void operator()(Many<const std::vector<std::uint32_t>> v) { w.u32s(v.list); }
    template <class V>
    void operator()(Records<V> v)
    {
        w.u32(static_cast<std::uint32_t>(v.list.size()));
        for (const auto& record : v.list)
            put_fields(w, record);
    }
};

template <class M>
void put_fields(Writer& w, const M& m)
{
    std::apply([&w](auto&&... f) { (Put{w}(f), ...); }, Fields<M>::of(m));
}

template <class M>
void get_fields(Reader& r, M& m);

// Reads one field.
struct Get {
    Reader& r;
    void operator()(std::uint8_t& v) { v = r.u8(); }
    void operator()(std::uint32_t& v) { v = r.u32(); }
    void operator()(std::uint64_t& v) { v = r.u64(); }
    void operator()(std::int32_t& v) { v = r.i32(); }
    void operator()(std::int64_t& v) { v = r.i64(); }
    void operator()(bool& v)
    {
        const std::uint8_t b = r.u8();
        if (b > 1)
            r.fail();
        v = b == 1;
    }
    // Any byte (the enums' underlying type is u8); check() says which are known.
    template <class E>
        requires std::is_enum_v<E>
    void operator()(E& v)
    {
        v = static_cast<E>(r.u8());
    }
    template <std::size_t N>
    void operator()(std::array<std::uint8_t, N>& v)
    {
        v = r.array<N>();
    }
    void operator()(std::string& v) { v = r.str(); }
    void operator()(std::vector<std::uint32_t>& v) { v = r.u32s(); }
    void operator()(std::vector<std::string>& v) { v = r.strs(); }
    void operator()(Bytes& v) { v = r.blob(); }
    void operator()(std::vector<Bytes>& v) { v = r.blobs(); }
    void operator()(Limited<std::string> v) { v.value = r.str(v.limit); }
    void operator()(Limited<std::vector<std::string>> v) { v.value = r.strs(v.limit); }
    void operator()(Many<std::vector<std::uint32_t>> v)
    {
        const std::uint32_t n = r.u32();
        if (r.failed() || r.left() / 4 < n) {
            r.fail();
            return;
        }
        v.list.resize(n);
        for (auto& x : v.list)
            x = r.u32();
    }
    template <class V>
    void operator()(Records<V> v)
    {
        const std::uint32_t n = r.u32();
        if (r.failed() || n > max_ranks || r.left() / v.wire_size < n) {
            r.fail();
            return;
        }
        v.list.resize(n);
        for (auto& record : v.list)
            get_fields(r, record);
    }
};

template <class M>
void get_fields(Reader& r, M& m)
{
    std::apply([&r](auto&&... f) { (Get{r}(f), ...); }, Fields<M>::of(m));
}

// What a field list cannot say; none by default.
template <class M>
std::optional<std::string> check(const M&)
{
    return std::nullopt;
}

std::optional<std::string> check(const Hello& m)
{
    const auto role = static_cast<std::uint8_t>(m.role);
    if (role < static_cast<std::uint8_t>(Role::stepd) || role > static_cast<std::uint8_t>(Role::orphan))
        return "hello with unknown role " + std::to_string(role);
    if (m.component.ntasks != 0 && m.role != Role::stepd)
        return "hello of a heterogeneous step's component from a node daemon";
    return std::nullopt;
}

std::optional<std::string> check(const StepMap& m)
{
    if (m.hosts.size() != m.hostnames.size() || m.ports.size() != m.hostnames.size())
        return "malformed step map frame: node lists differ in length";
    for (auto n : m.rank_node)
        if (n >= m.hostnames.size())
            return "malformed step map frame: a rank on an unknown node";
    return std::nullopt;
}

std::optional<std::string> check(const FenceUp& m)
{
    if (!parse_fence_key(m.key))
        return "fence up frame with a malformed fence key";
    return std::nullopt;
}

std::optional<std::string> check(const FenceDown& m)
{
    if (!parse_fence_key(m.key))
        return "fence down frame with a malformed fence key";
    return std::nullopt;
}

std::optional<std::string> check(const DataRequest& m)
{
    const auto op = static_cast<std::uint8_t>(m.op);
    if (op < 1 || op > 3)
        return "data request with unknown operation " + std::to_string(op);
    if (m.op == DataRequest::Op::publish && m.values.size() != m.keys.size())
        return "publish request with " + std::to_string(m.keys.size()) + " keys and " +
               std::to_string(m.values.size()) + " values";
    return std::nullopt;
}

std::optional<std::string> check(const DataReply& m)
{
    if (m.ranks.size() != m.keys.size() || m.values.size() != m.keys.size())
        return "malformed data reply frame";
    return std::nullopt;
}

template <class M>
Bytes encode_message(const M& m)
{
    Writer w(type_of<M>);
    put_fields(w, m);
    return w.finish();
}

template <class M>
Result<M> decode_message(std::span<const std::uint8_t> body)
{
    Reader r(body);
    M m;
    get_fields(r, m);
    if (!r.failed())
        if (auto bad = check(m))
            return Result<M>::fail(*bad);
    return finish_decode(r, std::move(m), type_of<M>);
}

}  // namespace

#define EXITPOLICY_CODEC(type, number, name, Message)                      \
    Bytes Message::encode() const                                          \
    {                                                                      \
        return encode_message(*this);                                      \
    }                                                                      \
    Result<Message> Message::decode(std::span<const std::uint8_t> body)    \
    {                                                                      \
        return decode_message<Message>(body);                              \
    }

EXITPOLICY_MESSAGES(EXITPOLICY_CODEC)

#undef EXITPOLICY_CODEC

}  // namespace exitpolicy::protocol
