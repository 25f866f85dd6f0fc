// SPDX-License-Identifier: Apache-2.0
// pmi_server.cpp - the PMI-1 and PMI-2 commands MPICH's clients send, each
// answered once, in the framing its connection speaks. See pmi_server.hpp.
#include "pmi_server.hpp"

#include "pmi_encoding.hpp"

#include "pmix_server/log.hpp"
#include "protocol/events.hpp"
#include "protocol/handles.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <sys/socket.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {
namespace {

// What MPICH is told of its limits (PMI-1 get_maxes); PMI-2's are fixed at
// the same key and value sizes (pmi2.h).
constexpr std::size_t kvsname_max = 256;
constexpr std::size_t keylen_max = 64;
constexpr std::size_t vallen_max = 1024;

using Pairs = std::vector<std::pair<std::string, std::string>>;

std::optional<long> integer(const std::string* text)
{
    long v = 0;
    if (!text || text->empty())
        return std::nullopt;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc{} || end != text->data() + text->size())
        return std::nullopt;
    return v;
}

}  // namespace

struct PmiServer::Conn {
    PmiServer* server = nullptr;
    std::uint32_t rank = 0;
    protocol::BufferEventHandle bev;
    pmi::Parser parser;
    bool initialized = false;
    bool finalized = false;
    bool done = false;  // aborted, or broke the protocol: nothing more is read
    int spawn_blocks = 0;
    std::string barrier_thrid;  // PMI-2: what its kvs-fence's reply echoes
};

PmiServer::PmiServer(event_base* base, StepServices& step) : base_(base), step_(step) {}

PmiServer::~PmiServer() = default;

void PmiServer::adopt(const std::vector<std::uint32_t>& ranks, const std::vector<int>& sockets)
{
    for (std::size_t i = 0; i < sockets.size() && i < ranks.size(); ++i) {
        auto c = std::make_unique<Conn>();
        c->server = this;
        c->rank = ranks[i];
        evutil_make_socket_nonblocking(sockets[i]);
        c->bev.reset(bufferevent_socket_new(base_, sockets[i], BEV_OPT_CLOSE_ON_FREE));
        if (!c->bev) {
            ::close(sockets[i]);
            log::error("rank %u gets no PMI service: no memory for its connection", ranks[i]);
            continue;
        }
        bufferevent_setcb(
            c->bev.get(),
            [](bufferevent*, void* arg) noexcept {
                auto* conn = static_cast<Conn*>(arg);
                guarded("a PMI request", [conn] { conn->server->on_read(*conn); });
            },
            nullptr,
            [](bufferevent*, short what, void* arg) noexcept {
                if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
                    auto* conn = static_cast<Conn*>(arg);
                    guarded("a PMI connection's end", [conn] { conn->server->on_closed(*conn); });
                }
            },
            c.get());
        conns_.push_back(std::move(c));
    }
}

void PmiServer::serve(const protocol::StepMap& map)
{
    if (serving_)
        return;
    serving_ = true;
    const ServedStep& a = step_.served();
    kvsname_ = std::to_string(a.job_id) + "." + std::to_string(a.step_id);
    if (auto mapping = process_mapping(map.rank_node); !mapping.empty())
        attributes_["PMI_process_mapping"] = mapping;
    attributes_["universeSize"] = std::to_string(a.ntasks);
    for (auto& c : conns_)
        bufferevent_enable(c->bev.get(), EV_READ | EV_WRITE);
    log::debug("PMI: serving %zu local tasks of %s", conns_.size(), kvsname_.c_str());
}

void PmiServer::failed(std::uint32_t rank)
{
    if (!dead_.insert(rank).second)
        return;
    dead_list_.clear();
    for (std::uint32_t r : dead_)
        dead_list_ += (dead_list_.empty() ? "" : ",") + std::to_string(r);
}

std::size_t PmiServer::clients() const noexcept
{
    std::size_t n = 0;
    for (const auto& c : conns_)
        n += c->initialized && !c->finalized && !c->done;
    return n;
}

void PmiServer::read_pending()
{
    if (!serving_)
        return;
    for (auto& c : conns_) {
        // A socket bufferevent's input takes bytes only from its own reads:
        // these come straight from the socket, after what it holds.
        std::string bytes;
        char buf[4096];
        ssize_t n = 0;
        while (!c->done && (n = ::recv(bufferevent_getfd(c->bev.get()), buf, sizeof buf, MSG_DONTWAIT)) > 0)
            bytes.append(buf, static_cast<std::size_t>(n));
        if (!bytes.empty())
            take(*c, bytes);
    }
}

void PmiServer::on_read(Conn& c)
{
    evbuffer* in = bufferevent_get_input(c.bev.get());
    std::string bytes(evbuffer_get_length(in), '\0');
    evbuffer_remove(in, bytes.data(), bytes.size());
    take(c, bytes);
}

void PmiServer::take(Conn& c, const std::string& bytes)
{
    evbuffer* in = bufferevent_get_input(c.bev.get());
    if (evbuffer_get_length(in) > 0) {  // read by the bufferevent before: first
        std::string earlier(evbuffer_get_length(in), '\0');
        evbuffer_remove(in, earlier.data(), earlier.size());
        take(c, earlier);
    }
    if (c.done)
        return;  // what comes after an abort (MPICH's message may run on) is not read
    c.parser.feed(bytes);
    for (;;) {
        auto next = c.parser.next();
        if (!next) {
            log::error("PMI: rank %u: %s; its PMI connection is closed", c.rank, next.error().c_str());
            ::shutdown(bufferevent_getfd(c.bev.get()), SHUT_RDWR);
            on_closed(c);
            return;
        }
        if (!*next)
            return;
        if (!handle(c, **next)) {
            c.done = true;
            return;
        }
    }
}

void PmiServer::on_closed(Conn& c)
{
    // The task hung up: it ended, or finalized (MPICH 4.0 closes then). Its
    // end itself is the pidfd's and slurmstepd's news.
    if (c.initialized && !c.finalized && !c.done)
        log::debug("PMI: rank %u hung up without finalize", c.rank);
    c.done = true;
    in_barrier_.erase(&c);
    std::erase_if(attr_waiting_, [&](const auto& w) { return w.conn == &c; });
    bufferevent_disable(c.bev.get(), EV_READ | EV_WRITE);
    // The others' barrier may be complete without it (and then fails over it).
    check_barrier();
}

void PmiServer::send(Conn& c, std::string_view cmd, Pairs args, const std::string& thrid)
{
    // A threaded PMI-2 client matches replies to requests by thrid.
    if (!thrid.empty())
        args.emplace_back("thrid", thrid);
    const std::string text = pmi::reply(c.parser.version(), cmd, args);
    bufferevent_write(c.bev.get(), text.data(), text.size());
}

const std::string* PmiServer::lookup(const std::string& key)
{
    // The server's own keys are the server's: a task's put of one (any
    // task of the step may put anything) never replaces what every rank
    // reads of the step's layout or of who has died.
    if (auto it = attributes_.find(key); it != attributes_.end())
        return &it->second;
    if (key == "PMI_dead_processes")
        return dead_list_.empty() ? nullptr : &dead_list_;
    if (key == "PMI_process_mapping")
        return nullptr;  // left out: over the limit MPICH reads
    if (auto it = kvs_.find(key); it != kvs_.end())
        return &it->second;
    return nullptr;
}

bool PmiServer::handle(Conn& c, const pmi::Request& r)
{
    log::debug("PMI: rank %u: %s (PMI-%d)", c.rank, r.cmd.c_str(), r.version);
    if (r.cmd == "init") {
        const auto version = integer(r.get("pmi_version"));
        const auto sub = integer(r.get("pmi_subversion"));
        if (version != 1 && version != 2) {
            send(c, "response_to_init", {{"pmi_version", "1"}, {"pmi_subversion", "1"}, {"rc", "-1"}});
            log::error("PMI: rank %u asks for PMI version %s; this node serves 1.1 and 2.0", c.rank,
                       r.get("pmi_version") ? r.get("pmi_version")->c_str() : "(none)");
            return false;
        }
        // The reply is PMI-1 framed whatever the version: the parser
        // switches to PMI-2 frames only for what follows the init.
        const std::string text = pmi::reply(1, "response_to_init",
                                            {{"pmi_version", std::to_string(*version)},
                                             {"pmi_subversion", std::to_string(sub.value_or(0))},
                                             {"rc", "0"}});
        bufferevent_write(c.bev.get(), text.data(), text.size());
        if (!c.initialized) {
            c.initialized = true;
            step_.client_connected(c.rank);
        }
        return true;
    }
    if (r.cmd == "abort") {
        const std::string* message = r.get("message");
        if (!message)
            message = r.get("msg");  // MPICH 3's PMI-2
        const std::string text = message ? *message : "MPI_Abort through PMI-1 (MPICH 4.0 sends no message)";
        step_.abort(c.rank, abort_code(integer(r.get("exitcode")), text), text);
        return false;
    }
    return r.version == 2 ? handle_v2(c, r) : handle_v1(c, r);
}

bool PmiServer::put(Conn& c, const pmi::Request& r, std::string_view reply)
{
    const std::string* thrid = r.get("thrid");
    const std::string echo = thrid ? *thrid : std::string{};
    const std::string* key = r.get("key");
    const std::string* value = r.get("value");
    const char* wrong = !key || key->empty() ? "no key"
                        : key->size() > keylen_max ? "key longer than 64 characters"
                        : !value || value->empty() ? "no value"
                        : value->size() > vallen_max ? "value longer than 1024 characters"
                                                      : nullptr;
    if (wrong) {
        if (c.parser.version() == 2)
            send(c, reply, {{"rc", "-1"}, {"errmsg", wrong}}, echo);
        else
            send(c, reply, {{"rc", "-1"}, {"msg", "invalid_key_or_value"}});
        log::error("PMI: rank %u: put refused: %s", c.rank, wrong);
        return true;
    }
    kvs_[*key] = *value;
    unsent_.emplace_back(*key, *value);
    send(c, reply, {{"rc", "0"}}, echo);
    return true;
}

bool PmiServer::handle_v1(Conn& c, const pmi::Request& r)
{
    if (r.cmd == "get_maxes") {
        send(c, "maxes", {{"kvsname_max", std::to_string(kvsname_max)}, {"keylen_max", std::to_string(keylen_max)},
                          {"vallen_max", std::to_string(vallen_max)}, {"rc", "0"}});
    } else if (r.cmd == "get_appnum") {
        send(c, "appnum", {{"appnum", "0"}, {"rc", "0"}});
    } else if (r.cmd == "get_my_kvsname") {
        send(c, "my_kvsname", {{"kvsname", kvsname_}, {"rc", "0"}});
    } else if (r.cmd == "get_universe_size") {
        send(c, "universe_size", {{"size", std::to_string(step_.served().ntasks)}, {"rc", "0"}});
    } else if (r.cmd == "put") {
        return put(c, r, "put_result");
    } else if (r.cmd == "get") {
        const std::string* key = r.get("key");
        const std::string* value = key ? lookup(*key) : nullptr;
        if (value)
            send(c, "get_result", {{"rc", "0"}, {"value", *value}});
        else
            send(c, "get_result", {{"rc", "-1"}, {"msg", "key_not_found"}});
    } else if (r.cmd == "barrier_in") {
        enter_barrier(c);
    } else if (r.cmd == "finalize") {
        c.finalized = true;
        send(c, "finalize_ack", {{"rc", "0"}});
        step_.client_finalized(c.rank);
        check_barrier();  // the others' need not wait for it
    } else if (r.cmd == "spawn") {
        // One block per command; the answer follows the last.
        const auto total = integer(r.get("totspawns")).value_or(1);
        if (++c.spawn_blocks >= total) {
            c.spawn_blocks = 0;
            send(c, "spawn_result", {{"rc", "-1"}, {"msg", "spawn_is_not_supported_under_srun"}});
            log::error("PMI: rank %u asked to spawn processes; srun steps cannot grow", c.rank);
        }
    } else if (r.cmd == "publish_name" || r.cmd == "unpublish_name" || r.cmd == "lookup_name") {
        // MPICH reads `info`: "ok", or why not (PMI-1 values have no blanks).
        const std::string reply = r.cmd.substr(0, r.cmd.find('_')) + "_result";
        const std::string* service = r.get("service");
        const auto op = r.cmd == "publish_name"   ? protocol::DataRequest::Op::publish
                        : r.cmd == "lookup_name" ? protocol::DataRequest::Op::lookup
                                                 : protocol::DataRequest::Op::unpublish;
        if (!service || service->empty()) {
            send(c, reply, {{"rc", "-1"}, {"info", "no_service_name"}});
            return true;
        }
        name_request(c, op, *service, r.get("port"), [this, &c, reply](int status, const std::string* port) {
            if (status != 0)
                send(c, reply, {{"rc", "-1"}, {"info", status == protocol::pmix::not_found ? "unknown_service" : "failed"}});
            else if (port)
                send(c, reply, {{"rc", "0"}, {"info", "ok"}, {"port", *port}});
            else
                send(c, reply, {{"rc", "0"}, {"info", "ok"}});
        });
    } else {
        log::error("PMI: rank %u sent an unknown PMI-1 command %s", c.rank, r.cmd.c_str());
        send(c, r.cmd + "_result", {{"rc", "-1"}, {"msg", "unknown_command"}});
    }
    return true;
}

bool PmiServer::handle_v2(Conn& c, const pmi::Request& r)
{
    const std::string response = r.cmd + "-response";
    const std::string* given = r.get("thrid");
    const std::string thrid = given ? *given : std::string{};
    auto answer = [&](Pairs args) { send(c, response, std::move(args), thrid); };
    auto found = [&](const std::string* value) {
        if (value)
            answer({{"rc", "0"}, {"found", "TRUE"}, {"value", *value}});
        else
            answer({{"rc", "0"}, {"found", "FALSE"}});
    };
    if (r.cmd == "fullinit") {
        answer({{"rc", "0"}, {"rank", std::to_string(c.rank)}, {"size", std::to_string(step_.served().ntasks)},
                {"appnum", "0"}, {"pmiverbose", "0"}});
    } else if (r.cmd == "job-getid") {
        answer({{"rc", "0"}, {"jobid", kvsname_}});
    } else if (r.cmd == "kvs-put") {
        return put(c, r, response);
    } else if (r.cmd == "kvs-get") {
        const std::string* key = r.get("key");
        found(key ? lookup(*key) : nullptr);
    } else if (r.cmd == "info-getjobattr") {
        const std::string* key = r.get("key");
        const auto it = key ? attributes_.find(*key) : attributes_.end();
        found(it != attributes_.end() ? &it->second : nullptr);
    } else if (r.cmd == "kvs-fence") {
        c.barrier_thrid = thrid;
        enter_barrier(c);
    } else if (r.cmd == "info-putnodeattr") {
        const std::string* key = r.get("key");
        const std::string* value = r.get("value");
        if (!key || !value) {
            answer({{"rc", "-1"}, {"errmsg", "key and value required"}});
            return true;
        }
        answer({{"rc", "0"}});
        put_node_attr(*key, *value);
    } else if (r.cmd == "info-getnodeattr") {
        const std::string* key = r.get("key");
        const std::string* wait = r.get("wait");
        const auto it = key ? node_attrs_.find(*key) : node_attrs_.end();
        if (it == node_attrs_.end() && key && wait && *wait == "TRUE")
            attr_waiting_.push_back({&c, *key, thrid});  // answered when a local task puts it
        else
            found(it != node_attrs_.end() ? &it->second : nullptr);
    } else if (r.cmd == "finalize") {
        c.finalized = true;
        answer({{"rc", "0"}});
        step_.client_finalized(c.rank);
        check_barrier();  // the others' need not wait for it
    } else if (r.cmd == "name-publish" || r.cmd == "name-lookup" || r.cmd == "name-unpublish") {
        const std::string* name = r.get("name");
        const auto op = r.cmd == "name-publish"  ? protocol::DataRequest::Op::publish
                        : r.cmd == "name-lookup" ? protocol::DataRequest::Op::lookup
                                                 : protocol::DataRequest::Op::unpublish;
        if (!name || name->empty()) {
            answer({{"rc", "-1"}, {"errmsg", "no service name"}});
            return true;
        }
        name_request(c, op, *name, r.get("port"),
                     [this, &c, response, thrid](int status, const std::string* port) {
                         // MPICH 4.1 and later read the port as `port`, earlier ones as `value`.
                         if (status != 0)
                             send(c, response,
                                  {{"rc", "-1"}, {"found", "FALSE"},
                                   {"errmsg", status == protocol::pmix::not_found ? "the name is not published" : "failed"}},
                                  thrid);
                         else if (port)
                             send(c, response, {{"rc", "0"}, {"found", "TRUE"}, {"port", *port}, {"value", *port}},
                                  thrid);
                         else
                             send(c, response, {{"rc", "0"}}, thrid);
                     });
    } else {
        // spawn, job-connect: not under srun.
        log::error("PMI: rank %u sent a PMI-2 command this node does not serve: %s", c.rank, r.cmd.c_str());
        answer({{"rc", "-1"}, {"errmsg", r.cmd + " is not supported in srun steps"}});
    }
    return true;
}

void PmiServer::name_request(Conn& c, protocol::DataRequest::Op op, const std::string& name, const std::string* port,
                             NameAnswer answer)
{
    protocol::DataRequest r;
    r.op = op;
    r.rank = c.rank;
    r.keys.push_back("pmi:" + name);
    if (op == protocol::DataRequest::Op::publish) {
        if (!port || port->empty()) {
            answer(protocol::pmix::error, nullptr);
            return;
        }
        r.values.emplace_back(port->begin(), port->end());
    }
    // MPI_Lookup_name does not wait for a publisher: not found at once.
    step_.data_request(std::move(r), 0,
                       [alive = std::weak_ptr<int>(alive_), conn = &c, answer = std::move(answer)](
                           const protocol::DataReply& reply) {
                           if (!alive.lock() || conn->done)
                               return;  // the task or its server is gone
                           if (reply.status != 0 || reply.values.empty()) {
                               answer(reply.status, nullptr);
                               return;
                           }
                           const std::string found(reply.values.front().begin(), reply.values.front().end());
                           answer(0, &found);
                       });
}

void PmiServer::put_node_attr(const std::string& key, const std::string& value)
{
    node_attrs_[key] = value;
    auto waiting = std::exchange(attr_waiting_, {});
    for (auto& w : waiting) {
        if (w.key != key)
            attr_waiting_.push_back(std::move(w));
        else
            send(*w.conn, "info-getnodeattr-response", {{"rc", "0"}, {"found", "TRUE"}, {"value", value}}, w.thrid);
    }
}

void PmiServer::enter_barrier(Conn& c)
{
    if (!c.done)
        in_barrier_.insert(&c);
    check_barrier();
}

void PmiServer::check_barrier()
{
    if (barrier_pending_)
        return;
    for (const auto& conn : conns_)
        if (!conn->done && !conn->finalized && !in_barrier_.count(conn.get()))
            return;  // someone here has yet to come
    if (in_barrier_.empty())
        return;
    barrier_pending_ = true;
    step_.fence({}, encode_pairs(std::exchange(unsent_, {})), 0,
                [this](int status, protocol::Bytes all) { barrier_done(status, all); });
}

void PmiServer::barrier_done(int status, const protocol::Bytes& data)
{
    barrier_pending_ = false;
    bool ok = status == 0;
    if (!ok) {
        log::error("PMI: a barrier failed (status %d): a task of the step is gone", status);
    } else if (auto pairs = decode_pairs(data); !pairs) {
        log::error("PMI: a barrier's data is malformed: %s", pairs.error().c_str());
        ok = false;
    } else {
        for (auto& [key, value] : *pairs)
            kvs_[key] = std::move(value);
    }
    const std::string rc = ok ? "0" : "-1";  // PMI's, not a PMIx status
    for (Conn* c : std::exchange(in_barrier_, {})) {
        if (c->parser.version() == 2)
            send(*c, "kvs-fence-response", {{"rc", rc}}, std::exchange(c->barrier_thrid, {}));
        else
            send(*c, "barrier_out", {{"rc", rc}});
    }
}

}  // namespace exitpolicy::pmix_server
