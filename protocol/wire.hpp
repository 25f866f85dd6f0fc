// SPDX-License-Identifier: Apache-2.0
// wire.hpp - the frames exitpolicy's processes exchange: srun's front end,
// slurmstepd, the node daemons (overlay and local socket) and the tasks
// asking their daemon for a PMIx environment.
//
// One struct per message type with encode()/decode(), each made of
// codec.hpp's frame (header, Writer, Reader). Decoding never trusts its
// input: anything malformed is an error result, after which the caller
// closes the connection. Never throws.
#pragma once

#include "codec.hpp"
#include "exitpolicy/result.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace exitpolicy::protocol {

// A fence key names its participants (runs of ranks, as few as they come).
inline constexpr std::size_t max_fence_key = 1u << 20;
inline constexpr std::size_t max_fence_ranks = 1u << 22;

// Calls f with consecutive pieces of v of at most n elements each: a list
// cut into frames.
template <typename T, typename F>
void in_pieces(const std::vector<T>& v, std::size_t n, F f)
{
    for (std::size_t i = 0; i < v.size(); i += n)
        f(std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(i),
                         v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i + n))));
}

// Text a task chose (an abort's message, a reason) as a frame's string
// takes it: whole when it fits `limit`, else cut visibly (it ends in
// " [cut]"). Nothing else is ever cut.
std::string clipped(std::string_view text, std::size_t limit = max_string);

// ---- messages ---------------------------------------------------------------

struct Challenge {
    Nonce nonce{};
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    Bytes encode() const;
    static Result<Challenge> decode(std::span<const std::uint8_t> body);
};

// orphan: a daemon whose parent left the tree, asking the next live ancestor
// to adopt it (its Hello comes on a new link to that ancestor).
enum class Role : std::uint8_t { stepd = 1, daemon = 2, orphan = 3 };

// A component of a heterogeneous step (srun A : B) is a step of its own to
// its slurmstepd, whose node ids and ranks start at 0; srun's front end
// places it in the whole step once it knows every component's size.
struct Component {
    static constexpr std::uint32_t no_index = 0xffffffff;
    std::uint32_t job_id = 0;        // the component's job (a heterogeneous job's own)
    std::uint32_t index = no_index;  // Slurm's step_het_comp (a heterogeneous step of one job)
    std::uint32_t ntasks = 0;        // 0: not a component, a step of its own
    std::uint32_t nnodes = 0;
    friend bool operator==(const Component&, const Component&) = default;
};

struct Hello {
    Role role = Role::stepd;
    std::uint32_t node_id = 0;
    std::string hostname;
    std::vector<std::uint32_t> ranks;  // the node's tasks (global ranks; the component's own in one)
    Component component;
    Nonce nonce{};
    Mac mac{};  // auth.hpp: client_proof
    Bytes encode() const;
    static Result<Hello> decode(std::span<const std::uint8_t> body);
};

struct Welcome {
    Mac mac{};  // auth.hpp: server_proof
    Bytes encode() const;
    static Result<Welcome> decode(std::span<const std::uint8_t> body);
};

struct Outcome {
    static constexpr std::uint8_t flag_aborted = 1;
    static constexpr std::uint8_t flag_finalized_known = 2;
    static constexpr std::uint8_t flag_finalized = 4;
    // The node saw the task end (or call PMIx_Abort) after it had learned of
    // another task's abnormal end, or killed it itself in a teardown: not a
    // root cause.
    static constexpr std::uint8_t flag_collateral = 8;
    // The kernel's OOM killer ended the task or a process of it (its
    // cgroup's oom_kill count rose while it ran).
    static constexpr std::uint8_t flag_oom_killed = 16;
    std::uint32_t rank = 0;
    std::uint32_t epoch = 0;
    std::int64_t pid = -1;
    std::int32_t wait_status = 0;
    std::int64_t end_time_us = 0;
    std::uint8_t flags = 0;
    std::int32_t abort_status = 0;
    // With flag_oom_killed: the memory limit of the task's cgroups, in
    // bytes (0: none known).
    std::uint64_t memory_limit = 0;
    Bytes encode() const;
    static Result<Outcome> decode(std::span<const std::uint8_t> body);
};

struct Ack {
    std::uint32_t rank = 0;
    std::uint32_t epoch = 0;
    Bytes encode() const;
    static Result<Ack> decode(std::span<const std::uint8_t> body);
};

// At most max_ranks outcomes (or acks) a frame; a sender cuts longer lists.
struct Outcomes {
    std::vector<Outcome> list;
    Bytes encode() const;
    static Result<Outcomes> decode(std::span<const std::uint8_t> body);
};

struct Acks {
    std::vector<Ack> list;
    Bytes encode() const;
    static Result<Acks> decode(std::span<const std::uint8_t> body);
};
// The most acks one frame carries on an unauthenticated link (the control
// link): a count, then 8 bytes an ack, within max_body. The daemon cuts
// what it tells slurmstepd into frames of this many; slurmstepd reads no
// more frames than that makes.
inline constexpr std::size_t acks_per_frame = (max_body - 4) / 8;

// ---- overlay messages ---------------------------------------------------------

// An overlay node: the FE (none) or a node id. On the wire: 0xffffffff = FE.
inline constexpr std::uint32_t fe_node = 0xffffffffu;

struct Enroll {
    std::string host;
    std::uint32_t port = 0;
    Bytes encode() const;
    static Result<Enroll> decode(std::span<const std::uint8_t> body);
};

// The PMIx namespace of a step: the FE names it in the step map, and a
// node daemon knows it before the map comes.
inline std::string step_nspace(std::uint32_t job_id, std::uint32_t step_id)
{
    return "exitpolicy." + std::to_string(job_id) + "." + std::to_string(step_id);
}

struct StepMap {
    std::string nspace;
    std::uint32_t fanout = 0;
    std::vector<std::string> hostnames;  // by node id
    std::vector<std::string> hosts;      // listen addresses, by node id
    std::vector<std::uint32_t> ports;    // by node id
    std::vector<std::uint32_t> rank_node;  // by rank
    bool recoverable = false;  // run-through: no teardown after a failure (PMIX_JOB_RECOVERABLE)
    Bytes encode() const;
    static Result<StepMap> decode(std::span<const std::uint8_t> body);
};

// A task's abnormal end, broadcast so that every daemon notifies its clients.
struct Event {
    std::uint32_t origin = 0;      // node that saw it
    std::uint32_t rank = 0;
    std::int32_t code = 0;         // the specific PMIx status (PMIX_ERR_...)
    std::int32_t exit_code = 0;    // the task's code (128 + signal, abort status)
    std::int32_t wait_status = 0;
    // The task was a PMIx client of the service: its abnormal end tears a
    // step down unless the step is recoverable.
    bool client = false;
    Bytes encode() const;
    static Result<Event> decode(std::span<const std::uint8_t> body);
};

// A node's daemon left the tree: reported up by whoever held its link, after
// everything that came on it (so its outcomes reach the FE first).
struct Gone {
    std::uint32_t node = 0;
    Bytes encode() const;
    static Result<Gone> decode(std::span<const std::uint8_t> body);
};

// The FE declares a node lost: its daemon left the tree, its slurmstepd's
// link is closed, and these ranks of it never reported an end.
struct NodeDown {
    std::uint32_t node = 0;
    std::string hostname;
    std::vector<std::uint32_t> ranks;  // lost, sorted
    std::int32_t exit_code = 0;        // what the policy counts them as (lost_code)
    Bytes encode() const;
    static Result<NodeDown> decode(std::span<const std::uint8_t> body);
};

// A fence instance on the wire: its participant set, "*" for everyone, else
// the sorted ranks as runs, each followed by a comma ("0-3,7,"); then '#'
// and the instance's number over that set, from 1 ("0-3,7,#7", "*#7"). Fences over one
// set are ordered in PMIx, so the n-th over a set is the same instance on
// every node. One format for every node; a key is canonical (sorted, no
// repeats, runs as long as they go, no leading zeros), anything else is
// malformed.
struct FenceKey {
    std::vector<std::uint32_t> ranks;  // sorted; empty: everyone
    std::string set;                   // the participant set part ("0-3,7," or "*")
    std::uint64_t instance = 0;        // 1, 2, ... per participant set
};
// The participant set part: its ranks as runs, each "FIRST-LAST," or
// "RANK," ("0-3,7,"), or "*" for every rank. One spelling per set.
std::string fence_set(const std::vector<std::uint32_t>& sorted_ranks);
// The whole key of instance `instance` (>= 1) over a set.
std::string fence_key(const std::vector<std::uint32_t>& sorted_ranks, std::uint64_t instance);
// What a key names; none when malformed.
std::optional<FenceKey> parse_fence_key(std::string_view key);

// A subtree's contribution to a fence instance, or its failure there: a
// non-zero status (a PMIx status, e.g. the caller's PMIX_TIMEOUT expired)
// fails the instance for everyone, data or not.
struct FenceUp {
    std::string key;                 // the instance (fence_key)
    std::int32_t status = 0;         // 0: a contribution
    std::uint32_t contributors = 0;  // nodes whose data is in `data`
    Bytes data;
    Bytes encode() const;
    static Result<FenceUp> decode(std::span<const std::uint8_t> body);
};

struct FenceDown {
    std::string key;               // the instance (fence_key)
    std::int32_t status = 0;       // 0: success
    Bytes data;
    Bytes encode() const;
    static Result<FenceDown> decode(std::span<const std::uint8_t> body);
};

struct DmodexReq {
    std::uint64_t id = 0;
    std::uint32_t from = 0;        // requesting node
    std::uint32_t to = 0;          // owning node
    std::uint32_t rank = 0;
    Bytes encode() const;
    static Result<DmodexReq> decode(std::span<const std::uint8_t> body);
};

struct DmodexResp {
    std::uint64_t id = 0;
    std::uint32_t from = 0;
    std::uint32_t to = 0;
    std::int32_t status = 0;
    Bytes data;
    Bytes encode() const;
    static Result<DmodexResp> decode(std::span<const std::uint8_t> body);
};

struct Abort {
    std::uint32_t rank = 0;
    std::int32_t status = 0;
    std::string message;
    Bytes encode() const;
    static Result<Abort> decode(std::span<const std::uint8_t> body);
};

// FE -> every daemon: end every local task that is still running, SIGTERM
// first and SIGKILL after kill_after_ms.
struct Terminate {
    std::string reason;
    std::uint32_t kill_after_ms = 0;
    Bytes encode() const;
    static Result<Terminate> decode(std::span<const std::uint8_t> body);
};

// An event a client raised with PMIx_Notify_event beyond its own node: up to
// the FE, then down to every daemon, which delivers it to its clients. The
// info array travels packed by the PMIx library.
struct Relay {
    std::uint32_t origin = 0;   // node whose clients have it already
    std::int32_t code = 0;
    std::uint32_t source_rank = 0;
    Bytes info;
    Bytes encode() const;
    static Result<Relay> decode(std::span<const std::uint8_t> body);
};

// PMIx_Publish, PMIx_Lookup, PMIx_Unpublish of a task, on their way to the
// FE, which keeps the published data. Values travel as opaque blobs packed
// by the PMIx library (the FE never looks inside).
struct DataRequest {
    enum class Op : std::uint8_t { publish = 1, lookup = 2, unpublish = 3 };
    Op op = Op::lookup;
    std::uint64_t id = 0;
    std::uint32_t node = 0;   // requesting node
    std::uint32_t rank = 0;   // requesting task
    std::uint8_t wait = 0;    // lookup: wait until published
    std::vector<std::string> keys;
    std::vector<Bytes> values;  // publish: one per key
    Bytes encode() const;
    static Result<DataRequest> decode(std::span<const std::uint8_t> body);
};

struct DataReply {
    std::uint64_t id = 0;
    std::uint32_t node = 0;   // the requesting node, for routing
    std::int32_t status = 0;  // a PMIx status
    std::vector<std::string> keys;   // lookup: what was found
    std::vector<std::uint32_t> ranks;  // the publishers
    std::vector<Bytes> values;
    Bytes encode() const;
    static Result<DataReply> decode(std::span<const std::uint8_t> body);
};

struct EnvRequest {
    std::uint32_t rank = 0;
    std::int64_t pid = 0;
    Bytes encode() const;
    static Result<EnvRequest> decode(std::span<const std::uint8_t> body);
};

// The daemon opens a pidfd of `pid` and keeps it only if the process
// started at `start_time` (/proc/PID/stat's 22nd field): the task may have
// ended, and its pid gone to another process, before the daemon reads this.
struct TaskStarted {
    std::uint32_t rank = 0;
    std::int64_t pid = 0;
    std::uint64_t start_time = 0;
    Bytes encode() const;
    static Result<TaskStarted> decode(std::span<const std::uint8_t> body);
};

struct Standby {
    std::uint32_t port = 0;  // a TCP port: 1-65535; 0: no daemon will come
    Bytes encode() const;
    static Result<Standby> decode(std::span<const std::uint8_t> body);
};

struct EnvReply {
    std::int32_t status = 0;         // 0: ok, else the error below
    std::string error;
    std::vector<std::string> env;    // KEY=VALUE
    Bytes encode() const;
    static Result<EnvReply> decode(std::span<const std::uint8_t> body);
};

struct Stop {
    Bytes encode() const;
    static Result<Stop> decode(std::span<const std::uint8_t> body);
};

struct StepDone {
    Bytes encode() const;
    static Result<StepDone> decode(std::span<const std::uint8_t> body);
};

struct Notice {
    static constexpr std::uint32_t no_rank = 0xffffffffu;
    std::uint32_t node = 0;
    // no_rank: the plugin's own words, printed as "exitpolicy: NODE: TEXT";
    // else what task `rank` logged (PMIx_Log to stderr or stdout), printed
    // as the task wrote it.
    std::uint32_t rank = no_rank;
    std::string text;
    Bytes encode() const;
    static Result<Notice> decode(std::span<const std::uint8_t> body);
};

// ---- receiving frames -----------------------------------------------------

// Decodes `body` as message M and calls fn with it: fn returns nothing
// (then ok) or a Result<bool>. A malformed body fails with the decoder's
// error, and fn is not called.
template <class M, class Fn>
Result<bool> decoded(std::span<const std::uint8_t> body, Fn&& fn)
{
    auto m = M::decode(body);
    if (!m)
        return Result<bool>::fail(m.error());
    if constexpr (std::is_void_v<decltype(fn(*m))>) {
        fn(*m);
        return Result<bool>::ok(true);
    } else {
        return fn(*m);
    }
}

}  // namespace exitpolicy::protocol
