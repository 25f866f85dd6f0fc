// pmix_host.cpp - the PMIx server module and the library calls.
//
// The module table is at the top; each upcall is a few lines that copy the
// request, post it to the daemon's loop and return PMIX_SUCCESS; the loop
// calls the upcall's cbfunc exactly once. Upcalls run on PMIx's progress
// thread and never block.
#include "pmix_host.hpp"

#include "protocol/events.hpp"

#include "daemon.hpp"
#include "event_anchor.hpp"
#include "info_array.hpp"
#include "log.hpp"

#include <hwloc.h>
#include <pmix.h>
#include <pmix_server.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <map>
#include <memory>
#include <optional>
#include <unistd.h>

namespace exitpolicy::pmixd {

// The overlay's copies of PMIx codes (protocol/events.hpp) are the library's.
static_assert(wire::pmix::proc_aborted == PMIX_ERR_PROC_ABORTED);
static_assert(wire::pmix::proc_requested_abort == PMIX_ERR_PROC_REQUESTED_ABORT);
static_assert(wire::pmix::timeout == PMIX_ERR_TIMEOUT);
static_assert(wire::pmix::unreach == PMIX_ERR_UNREACH);
static_assert(wire::pmix::not_found == PMIX_ERR_NOT_FOUND);
static_assert(wire::pmix::duplicate_key == PMIX_ERR_DUPLICATE_KEY);
static_assert(wire::pmix::proc_term_wo_sync == PMIX_ERR_PROC_TERM_WO_SYNC);
static_assert(wire::pmix::proc_terminated == PMIX_EVENT_PROC_TERMINATED);
static_assert(wire::pmix::proc_aborted_by_sig == PMIX_ERR_PROC_ABORTED_BY_SIG);
static_assert(wire::pmix::exit_nonzero_term == PMIX_ERR_EXIT_NONZERO_TERM);
static_assert(wire::pmix::node_down == PMIX_EVENT_NODE_DOWN);

namespace {

Daemon* the_daemon = nullptr;  // one daemon per process



// Data handed to PMIx's modex callbacks stays alive until PMIx releases it.
void release_bytes(void* cbdata)
{
    delete static_cast<wire::Bytes*>(cbdata);
}

void answer_modex(pmix_modex_cbfunc_t cbfunc, void* cbdata, int status, wire::Bytes data)
{
    if (!cbfunc)
        return;
    auto* keep = new wire::Bytes(std::move(data));
    cbfunc(status, reinterpret_cast<const char*>(keep->data()), keep->size(), cbdata, release_bytes, keep);
}

// ---- the upcalls ---------------------------------------------------------------

// The event anchor (event_anchor.hpp) is a client of ours too, in a
// namespace of its own: it is none of the step's tasks.
bool is_anchor(const pmix_proc_t* proc)
{
    const Args& args = the_daemon->args();
    return EventAnchor::nspace_of(args.job_id, args.step_id) == proc->nspace;
}

pmix_status_t on_client_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    const bool anchor = is_anchor(proc);
    const std::uint32_t rank = proc->rank;
    the_daemon->post([anchor, rank, cbfunc, cbdata] {
        if (!anchor)
            the_daemon->client_connected(rank);
        if (cbfunc)
            cbfunc(PMIX_SUCCESS, cbdata);
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_client_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    // The anchor finalizes while the daemon stops, when the loop may no
    // longer run: answered here, at once.
    if (is_anchor(proc))
        return PMIX_OPERATION_SUCCEEDED;
    const std::uint32_t rank = proc->rank;
    the_daemon->post([rank, cbfunc, cbdata] {
        the_daemon->client_finalized(rank);
        if (cbfunc)
            cbfunc(PMIX_SUCCESS, cbdata);
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[], size_t,
                       pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    const std::uint32_t rank = proc->rank;
    std::string message = msg ? msg : "";
    the_daemon->post([rank, status, message = std::move(message), cbfunc, cbdata]() mutable {
        the_daemon->abort(rank, status, std::move(message));
        if (cbfunc)
            cbfunc(PMIX_SUCCESS, cbdata);
    });
    return PMIX_SUCCESS;
}

// The caller's PMIX_TIMEOUT in seconds; 0 when it gave none.
int timeout_of(const pmix_info_t info[], size_t ninfo)
{
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_TIMEOUT) && info[i].value.type == PMIX_INT)
            return std::max(0, info[i].value.data.integer);
    return 0;
}

pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                       char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata)
{
    std::vector<std::uint32_t> ranks;
    for (size_t i = 0; i < nprocs; ++i) {
        if (procs[i].rank == PMIX_RANK_WILDCARD) {
            ranks.clear();
            break;
        }
        ranks.push_back(procs[i].rank);
    }
    wire::Bytes bytes(data, data + ndata);
    // No PMIX_TIMEOUT: no timer, the fence waits as long as it takes.
    const int timeout_s = timeout_of(info, ninfo);
    the_daemon->post([ranks = std::move(ranks), bytes = std::move(bytes), timeout_s, cbfunc, cbdata]() mutable {
        the_daemon->fence(std::move(ranks), std::move(bytes), timeout_s,
                          [cbfunc, cbdata](int status, wire::Bytes all) {
                              answer_modex(cbfunc, cbdata, status, std::move(all));
                          });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata)
{
    const std::uint32_t rank = proc->rank;
    const int timeout_s = timeout_of(info, ninfo);
    the_daemon->post([rank, timeout_s, cbfunc, cbdata] {
        the_daemon->direct_modex(rank, timeout_s, [cbfunc, cbdata](int status, wire::Bytes data) {
            answer_modex(cbfunc, cbdata, status, std::move(data));
        });
    });
    return PMIX_SUCCESS;
}

// ---- publish, lookup, unpublish: kept at the FE ----

bool is_directive(const char* key)
{
    return std::strncmp(key, "pmix.", 5) == 0;  // PMIX_RANGE, PMIX_PERSISTENCE, PMIX_TIMEOUT, ...
}

Result<wire::Bytes> pack_info(const pmix_info_t& info)
{
    pmix_data_buffer_t buf;
    PMIX_DATA_BUFFER_CONSTRUCT(&buf);
    pmix_status_t rc = PMIx_Data_pack(nullptr, &buf, const_cast<pmix_info_t*>(&info), 1, PMIX_INFO);
    pmix_byte_object_t payload{nullptr, 0};
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_unload(&buf, &payload);
    PMIX_DATA_BUFFER_DESTRUCT(&buf);
    if (rc != PMIX_SUCCESS)
        return Result<wire::Bytes>::fail(PMIx_Error_string(rc));
    wire::Bytes out(payload.bytes, payload.bytes + payload.size);
    PMIX_BYTE_OBJECT_DESTRUCT(&payload);
    return Result<wire::Bytes>::ok(std::move(out));
}

bool unpack_info(const wire::Bytes& bytes, pmix_info_t& info)
{
    pmix_data_buffer_t buf;
    PMIX_DATA_BUFFER_CONSTRUCT(&buf);
    pmix_byte_object_t payload;
    payload.bytes = static_cast<char*>(std::malloc(bytes.size() ? bytes.size() : 1));
    payload.size = bytes.size();
    std::memcpy(payload.bytes, bytes.data(), bytes.size());
    PMIx_Data_load(&buf, &payload);  // the buffer owns the bytes now
    std::int32_t n = 1;
    const pmix_status_t rc = PMIx_Data_unpack(nullptr, &buf, &info, &n, PMIX_INFO);
    PMIX_DATA_BUFFER_DESTRUCT(&buf);
    return rc == PMIX_SUCCESS;
}

std::vector<std::string> key_list(char** keys)
{
    std::vector<std::string> out;
    for (char** k = keys; k && *k; ++k)
        out.emplace_back(*k);
    return out;
}

pmix_status_t on_publish(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc,
                         void* cbdata)
{
    wire::DataRequest r;
    r.op = wire::DataRequest::Op::publish;
    r.rank = proc->rank;
    for (size_t i = 0; i < ninfo; ++i) {
        if (is_directive(info[i].key))
            continue;
        auto packed = pack_info(info[i]);
        if (!packed)
            return PMIX_ERR_BAD_PARAM;
        r.keys.emplace_back(info[i].key);
        r.values.push_back(std::move(*packed));
    }
    const int timeout_s = timeout_of(info, ninfo);
    the_daemon->post([r = std::move(r), timeout_s, cbfunc, cbdata]() mutable {
        the_daemon->data_request(std::move(r), timeout_s, [cbfunc, cbdata](const wire::DataReply& reply) {
            if (cbfunc)
                cbfunc(reply.status, cbdata);
        });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_lookup(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                        pmix_lookup_cbfunc_t cbfunc, void* cbdata)
{
    wire::DataRequest r;
    r.op = wire::DataRequest::Op::lookup;
    r.rank = proc->rank;
    r.keys = key_list(keys);
    // PMIX_WAIT is an int (0: wait for every key, N: for N of them); a
    // bool is taken as well. Either way its presence asks to wait.
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_WAIT) &&
            (info[i].value.type != PMIX_BOOL || PMIX_INFO_TRUE(&info[i])))
            r.wait = 1;
    const int timeout_s = timeout_of(info, ninfo);
    the_daemon->post([r = std::move(r), timeout_s, cbfunc, cbdata]() mutable {
        the_daemon->data_request(std::move(r), timeout_s, [cbfunc, cbdata](const wire::DataReply& reply) {
            if (!cbfunc)
                return;
            pmix_pdata_t* data = nullptr;
            size_t n = 0;
            if (!reply.keys.empty()) {
                PMIX_PDATA_CREATE(data, reply.keys.size());
                for (size_t i = 0; i < reply.keys.size(); ++i) {
                    pmix_info_t info;
                    PMIX_INFO_CONSTRUCT(&info);
                    if (!unpack_info(reply.values[i], info))
                        continue;
                    PMIX_PROC_LOAD(&data[n].proc, the_daemon->map().nspace.c_str(), reply.ranks[i]);
                    PMIX_LOAD_KEY(data[n].key, reply.keys[i].c_str());
                    PMIx_Value_xfer(&data[n].value, &info.value);
                    PMIX_INFO_DESTRUCT(&info);
                    ++n;
                }
            }
            cbfunc(reply.status, data, n, cbdata);
            if (data)
                PMIX_PDATA_FREE(data, reply.keys.size());
        });
    });
    return PMIX_SUCCESS;
}

pmix_status_t on_unpublish(const pmix_proc_t* proc, char** keys, const pmix_info_t info[], size_t ninfo,
                           pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    wire::DataRequest r;
    r.op = wire::DataRequest::Op::unpublish;
    r.rank = proc->rank;
    r.keys = key_list(keys);
    const int timeout_s = timeout_of(info, ninfo);
    the_daemon->post([r = std::move(r), timeout_s, cbfunc, cbdata]() mutable {
        the_daemon->data_request(std::move(r), timeout_s, [cbfunc, cbdata](const wire::DataReply& reply) {
            if (cbfunc)
                cbfunc(reply.status, cbdata);
        });
    });
    return PMIX_SUCCESS;
}

// ---- job control, log ----

// Terminating or killing the whole job (no targets, or the namespace's
// wildcard) ends the step on every node through the FE; single processes
// are not supported.
pmix_status_t on_job_control(const pmix_proc_t* requestor, const pmix_proc_t targets[], size_t ntargets,
                             const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc, void* cbdata)
{
    bool end = false;
    for (size_t i = 0; i < ndirs; ++i)
        if ((PMIX_CHECK_KEY(&directives[i], PMIX_JOB_CTRL_TERMINATE) ||
             PMIX_CHECK_KEY(&directives[i], PMIX_JOB_CTRL_KILL)) &&
            PMIX_INFO_TRUE(&directives[i]))
            end = true;
    if (!end)
        return PMIX_ERR_NOT_SUPPORTED;
    for (size_t i = 0; i < ntargets; ++i)
        if (targets[i].rank != PMIX_RANK_WILDCARD)
            return PMIX_ERR_NOT_SUPPORTED;
    const std::uint32_t rank = requestor->rank;
    the_daemon->post([rank, cbfunc, cbdata] {
        the_daemon->terminate_step("rank " + std::to_string(rank) + " asked to terminate the job");
        if (cbfunc)
            cbfunc(PMIX_SUCCESS, nullptr, 0, cbdata, nullptr, nullptr);
    });
    return PMIX_SUCCESS;
}

// PMIx_Log: stderr/stdout lines go to srun's stderr, the rest to our log.
void on_log(const pmix_proc_t* client, const pmix_info_t data[], size_t ndata, const pmix_info_t[], size_t,
            pmix_op_cbfunc_t cbfunc, void* cbdata)
{
    std::vector<std::string> lines;
    for (size_t i = 0; i < ndata; ++i) {
        if (data[i].value.type != PMIX_STRING || !data[i].value.data.string)
            continue;
        const std::string text = data[i].value.data.string;
        if (PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDERR) || PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDOUT))
            lines.push_back("rank " + std::to_string(client->rank) + ": " + text);
        else
            log::info("rank %u logs %s: %s", client->rank, data[i].key, text.c_str());
    }
    the_daemon->post([lines = std::move(lines), cbfunc, cbdata] {
        for (const auto& line : lines)
            the_daemon->notice(line);
        if (cbfunc)
            cbfunc(PMIX_SUCCESS, cbdata);
    });
}

// ---- events clients raise ----

// The library has delivered it to this node's clients already; the other
// nodes get it through the FE.
pmix_status_t on_notify_event(pmix_status_t code, const pmix_proc_t* source, pmix_data_range_t range,
                              pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t, void*)
{
    if (range == PMIX_RANGE_LOCAL || range == PMIX_RANGE_PROC_LOCAL)
        return PMIX_OPERATION_SUCCEEDED;
    // A copy crosses to the loop thread, which packs it.
    auto copy = std::make_shared<InfoArray>(ninfo);
    for (size_t i = 0; i < ninfo; ++i)
        PMIx_Info_xfer(&copy->info[i], &info[i]);
    const std::uint32_t rank = source ? source->rank : PMIX_RANK_UNDEF;
    the_daemon->post([code, rank, copy] {
        pmix_data_buffer_t buf;
        PMIX_DATA_BUFFER_CONSTRUCT(&buf);
        const std::int32_t n = static_cast<std::int32_t>(copy->n);
        pmix_status_t rc = PMIx_Data_pack(nullptr, &buf, const_cast<std::int32_t*>(&n), 1, PMIX_INT32);
        if (rc == PMIX_SUCCESS && n > 0)
            rc = PMIx_Data_pack(nullptr, &buf, copy->info, n, PMIX_INFO);
        pmix_byte_object_t payload{nullptr, 0};
        if (rc == PMIX_SUCCESS)
            rc = PMIx_Data_unload(&buf, &payload);
        PMIX_DATA_BUFFER_DESTRUCT(&buf);
        if (rc == PMIX_SUCCESS) {
            the_daemon->relay(code, rank, wire::Bytes(payload.bytes, payload.bytes + payload.size));
            PMIX_BYTE_OBJECT_DESTRUCT(&payload);
        } else {
            log::error("an event from rank %u could not be packed: %s", rank, PMIx_Error_string(rc));
        }
    });
    // Done as far as the library is concerned: its callback for this upcall
    // must not be called from another thread (OpenPMIx 4.2.2 does not
    // thread-shift it and corrupts its heap), so it is not called at all.
    return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t not_supported_spawn(const pmix_proc_t*, const pmix_info_t[], size_t, const pmix_app_t[], size_t,
                                  pmix_spawn_cbfunc_t, void*)
{
    return PMIX_ERR_NOT_SUPPORTED;
}

pmix_status_t not_supported_connect(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t,
                                    void*)
{
    return PMIX_ERR_NOT_SUPPORTED;
}

// Clients register for events we generate ourselves: nothing to set up.
pmix_status_t on_register_events(pmix_status_t*, size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t, void*)
{
    return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t on_deregister_events(pmix_status_t*, size_t, pmix_op_cbfunc_t, void*)
{
    return PMIX_OPERATION_SUCCEEDED;
}

pmix_server_module_t module = [] {
    pmix_server_module_t m;
    std::memset(&m, 0, sizeof(m));
    m.client_connected = on_client_connected;
    m.client_finalized = on_client_finalized;
    m.abort = on_abort;
    m.fence_nb = on_fence;
    m.direct_modex = on_direct_modex;
    m.spawn = not_supported_spawn;
    m.connect = not_supported_connect;
    m.publish = on_publish;
    m.lookup = on_lookup;
    m.unpublish = on_unpublish;
    m.notify_event = on_notify_event;
    m.job_control = on_job_control;
    m.log = on_log;
    m.register_events = on_register_events;
    m.deregister_events = on_deregister_events;
    return m;
}();

// ---- helpers ---------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts, const char* sep)
{
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += sep;
        out += p;
    }
    return out;
}

}  // namespace

PmixHost::PmixHost(Daemon& daemon) : daemon_(daemon)
{
    the_daemon = &daemon;
}

PmixHost::~PmixHost()
{
    if (topology_thread_.joinable())
        topology_thread_.join();
    if (initialized_)
        PMIx_server_finalize();
}

Result<bool> PmixHost::init(const std::string& tmpdir)
{
    // PMIX_HOSTNAME: clients look node-level data (local peers) up under
    // their server's host name, which must be the Slurm node's, not the
    // machine's (several nodes may share one machine).
    InfoArray info(4);
    PMIX_INFO_LOAD(&info.info[0], PMIX_SERVER_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info.info[1], PMIX_SYSTEM_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    const std::uint32_t node = daemon_.args().node_id;
    PMIX_INFO_LOAD(&info.info[2], PMIX_SERVER_RANK, &node, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info.info[3], PMIX_HOSTNAME, daemon_.args().hostname.c_str(), PMIX_STRING);
    const pmix_status_t rc = PMIx_server_init(&module, info.info, info.n);
    if (rc != PMIX_SUCCESS)
        return Result<bool>::fail(std::string("PMIx_server_init: ") + PMIx_Error_string(rc));
    initialized_ = true;
    return Result<bool>::ok(true);
}

void PmixHost::discover_topology()
{
    const std::string source = daemon_.args().topology;
    if (source == "none")
        return;
    try {
        topology_thread_ = std::thread([this, source] {
            if (source != "discover") {
                std::ifstream in(source);
                std::ostringstream xml;
                xml << in.rdbuf();
                if (in && xml.str().find("<topology") != std::string::npos) {
                    topology_xml_ = xml.str();
                    return;
                }
                log::info("cannot read an hwloc topology from %s: discovering it", source.c_str());
            }
            topology_xml_ = topology_xml();
        });
    } catch (const std::exception& e) {
        log::info("no hardware topology for the clients (%s): each discovers its own", e.what());
    }
}

// The node's hardware topology as hwloc XML, discovered once here: given to
// the clients with the job info (PMIX_HWLOC_XML_V2), it spares each of them
// its own discovery, which Open MPI otherwise does in every process (some
// 60 ms each on a small machine, 8 processes at once). I/O devices are kept
// as Open MPI keeps them. Empty when hwloc fails: clients then discover.
std::string PmixHost::topology_xml()
{
    hwloc_topology_t topology = nullptr;
    if (hwloc_topology_init(&topology) != 0)
        return {};
    std::string xml;
    char* buffer = nullptr;
    int length = 0;
    if (hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == 0 &&
        hwloc_topology_load(topology) == 0 &&
        hwloc_topology_export_xmlbuffer(topology, &buffer, &length, 0) == 0 && buffer && length > 0) {
        xml.assign(buffer, static_cast<std::size_t>(length - 1));  // without the final NUL
        hwloc_free_xmlbuffer(topology, buffer);
    } else {
        log::info("no hardware topology for the clients (hwloc failed): each discovers its own");
    }
    hwloc_topology_destroy(topology);
    return xml;
}

Result<bool> PmixHost::register_namespace(std::function<void(int status)> done)
{
    const wire::StepMap& map = daemon_.map();
    const Args& args = daemon_.args();
    nspace_ = map.nspace;
    const auto ntasks = static_cast<std::uint32_t>(map.rank_node.size());
    const auto nnodes = map.hostnames.size();

    // Ranks by node, in rank order: local and node ranks follow from it.
    std::vector<std::vector<std::uint32_t>> by_node(nnodes);
    for (std::uint32_t r = 0; r < ntasks; ++r)
        by_node[map.rank_node[r]].push_back(r);
    std::vector<std::uint16_t> local_rank(ntasks);
    for (const auto& ranks : by_node)
        for (std::size_t i = 0; i < ranks.size(); ++i)
            local_rank[ranks[i]] = static_cast<std::uint16_t>(i);

    char* node_regex = nullptr;
    char* proc_regex = nullptr;
    std::vector<std::string> per_node;
    for (const auto& ranks : by_node) {
        std::vector<std::string> r;
        for (auto x : ranks)
            r.push_back(std::to_string(x));
        per_node.push_back(join(r, ","));
    }
    if (PMIx_generate_regex(join(map.hostnames, ",").c_str(), &node_regex) != PMIX_SUCCESS ||
        PMIx_generate_ppn(join(per_node, ";").c_str(), &proc_regex) != PMIX_SUCCESS)
        return Result<bool>::fail("cannot generate the node and proc maps");

    const auto& mine = by_node[args.node_id];
    const std::uint32_t local_size = static_cast<std::uint32_t>(mine.size());
    const std::uint32_t leader = mine.empty() ? 0 : mine.front();
    const std::uint32_t appnum = 0;
    const std::uint32_t nodeid = args.node_id;
    std::vector<std::string> peers;
    for (auto r : mine)
        peers.push_back(std::to_string(r));
    const std::string local_peers = join(peers, ",");

    // Job info, then one PMIX_PROC_DATA array per rank (local and node rank
    // for every process: with any per-process data OpenPMIx derives nothing).
    if (topology_thread_.joinable())
        topology_thread_.join();
    const bool recoverable = map.recoverable;
    const std::size_t njob = 13 + (topology_xml_.empty() ? 0 : 1) + (recoverable ? 1 : 0);
    auto* info = new InfoArray(njob + ntasks);
    pmix_info_t* i = info->info;
    PMIX_INFO_LOAD(&i[0], PMIX_UNIV_SIZE, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[1], PMIX_JOB_SIZE, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[2], PMIX_MAX_PROCS, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[3], PMIX_LOCAL_SIZE, &local_size, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[4], PMIX_NODE_SIZE, &local_size, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[5], PMIX_NODE_MAP, node_regex, PMIX_STRING);
    PMIX_INFO_LOAD(&i[6], PMIX_PROC_MAP, proc_regex, PMIX_STRING);
    PMIX_INFO_LOAD(&i[7], PMIX_LOCAL_PEERS, local_peers.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&i[8], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&i[9], PMIX_APPNUM, &appnum, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[10], PMIX_NODEID, &nodeid, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[11], PMIX_HOSTNAME, args.hostname.c_str(), PMIX_STRING);
    const std::string jobid = std::to_string(args.job_id) + "." + std::to_string(args.step_id);
    PMIX_INFO_LOAD(&i[12], PMIX_JOBID, jobid.c_str(), PMIX_STRING);
    std::size_t next = 13;
    if (!topology_xml_.empty())
        PMIX_INFO_LOAD(&i[next++], PMIX_HWLOC_XML_V2, topology_xml_.c_str(), PMIX_STRING);
    // Run-through: the step goes on after a task fails (PRRTE's
    // --enable-recovery); clients can see it.
    if (recoverable)
        PMIX_INFO_LOAD(&i[next++], PMIX_JOB_RECOVERABLE, &recoverable, PMIX_BOOL);
    std::free(node_regex);
    std::free(proc_regex);
    for (std::uint32_t r = 0; r < ntasks; ++r) {
        pmix_data_array_t* arr = nullptr;
        PMIX_DATA_ARRAY_CREATE(arr, 5, PMIX_INFO);
        auto* p = static_cast<pmix_info_t*>(arr->array);
        const std::uint32_t node = map.rank_node[r];
        PMIX_INFO_LOAD(&p[0], PMIX_RANK, &r, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&p[1], PMIX_LOCAL_RANK, &local_rank[r], PMIX_UINT16);
        PMIX_INFO_LOAD(&p[2], PMIX_NODE_RANK, &local_rank[r], PMIX_UINT16);
        PMIX_INFO_LOAD(&p[3], PMIX_NODEID, &node, PMIX_UINT32);
        PMIX_INFO_LOAD(&p[4], PMIX_HOSTNAME, map.hostnames[node].c_str(), PMIX_STRING);
        PMIX_INFO_LOAD(&i[njob + r], PMIX_PROC_DATA, arr, PMIX_DATA_ARRAY);
        PMIX_DATA_ARRAY_FREE(arr);
    }

    struct Pending {
        InfoArray* info;
        std::function<void(int)> done;
        std::size_t clients_left;
        int status = PMIX_SUCCESS;
        // Loop thread: one client registered (or refused); true when that
        // was the last, `done` has run and the state is gone.
        static bool client_done(Pending* pending, pmix_status_t st)
        {
            if (st != PMIX_SUCCESS)
                pending->status = st;
            if (--pending->clients_left != 0)
                return false;
            pending->done(pending->status);
            delete pending;
            return true;
        }
    };
    // As many as are registered below: this node's ranks.
    auto* pending = new Pending{info, std::move(done), args.ranks.size()};
    // The namespace first; the clients once it is in.
    const pmix_status_t rc = PMIx_server_register_nspace(
        nspace_.c_str(), static_cast<int>(local_size), info->info, info->n,
        [](pmix_status_t status, void* cbdata) {
            auto* pending = static_cast<Pending*>(cbdata);
            the_daemon->post([pending, status] {
                delete pending->info;
                pending->info = nullptr;
                if (status != PMIX_SUCCESS || pending->clients_left == 0) {
                    pending->done(status);
                    delete pending;
                    return;
                }
                const Args& args = the_daemon->args();
                for (std::uint32_t rank : args.ranks) {
                    pmix_proc_t proc;
                    PMIX_PROC_LOAD(&proc, the_daemon->map().nspace.c_str(), rank);
                    const pmix_status_t rc = PMIx_server_register_client(
                        &proc, ::getuid(), ::getgid(), nullptr,
                        [](pmix_status_t st, void* cbdata) {
                            auto* pending = static_cast<Pending*>(cbdata);
                            the_daemon->post([pending, st] { Pending::client_done(pending, st); });
                        },
                        pending);
                    // Refused: no callback comes for this client.
                    if (rc != PMIX_SUCCESS && Pending::client_done(pending, rc))
                        return;
                }
            });
        },
        pending);
    if (rc != PMIX_SUCCESS) {
        delete pending->info;
        delete pending;
        return Result<bool>::fail(std::string("PMIx_server_register_nspace: ") + PMIx_Error_string(rc));
    }
    return Result<bool>::ok(true);
}

Result<std::vector<std::string>> PmixHost::environment(std::uint32_t rank)
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace_.c_str(), rank);
    char** env = nullptr;
    const pmix_status_t rc = PMIx_server_setup_fork(&proc, &env);
    if (rc != PMIX_SUCCESS)
        return Result<std::vector<std::string>>::fail(std::string("PMIx_server_setup_fork: ") +
                                                      PMIx_Error_string(rc));
    std::vector<std::string> out;
    for (char** e = env; e && *e; ++e) {
        out.emplace_back(*e);
        std::free(*e);
    }
    std::free(env);
    return Result<std::vector<std::string>>::ok(std::move(out));
}

void PmixHost::dmodex(std::uint32_t rank, std::function<void(int status, wire::Bytes data)> done)
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace_.c_str(), rank);
    auto* keep = new std::function<void(int, wire::Bytes)>(std::move(done));
    const pmix_status_t rc = PMIx_server_dmodex_request(
        &proc,
        [](pmix_status_t status, char* data, size_t size, void* cbdata) {
            auto* done = static_cast<std::function<void(int, wire::Bytes)>*>(cbdata);
            wire::Bytes bytes(data, data + size);
            the_daemon->post([done, status, bytes = std::move(bytes)]() mutable {
                (*done)(status, std::move(bytes));
                delete done;
            });
        },
        keep);
    if (rc != PMIX_SUCCESS) {
        (*keep)(rc, {});
        delete keep;
    }
}

void PmixHost::deliver_relayed(int code, std::uint32_t source_rank, const wire::Bytes& packed)
{
    pmix_data_buffer_t buf;
    PMIX_DATA_BUFFER_CONSTRUCT(&buf);
    pmix_byte_object_t payload;
    payload.bytes = static_cast<char*>(std::malloc(packed.size() ? packed.size() : 1));
    payload.size = packed.size();
    std::memcpy(payload.bytes, packed.data(), packed.size());
    PMIx_Data_load(&buf, &payload);
    std::int32_t n = 0, one = 1;
    InfoArray* info = nullptr;
    if (PMIx_Data_unpack(nullptr, &buf, &n, &one, PMIX_INT32) == PMIX_SUCCESS && n >= 0 && n < 1024) {
        info = new InfoArray(static_cast<size_t>(n));
        std::int32_t count = n;
        if (n > 0 && PMIx_Data_unpack(nullptr, &buf, info->info, &count, PMIX_INFO) != PMIX_SUCCESS) {
            delete info;
            info = nullptr;
        }
    }
    PMIX_DATA_BUFFER_DESTRUCT(&buf);
    if (!info) {
        log::error("a relayed event from rank %u could not be unpacked", source_rank);
        return;
    }
    pmix_proc_t source;
    PMIX_PROC_LOAD(&source, nspace_.c_str(), source_rank);
    const pmix_status_t rc = PMIx_Notify_event(
        code, &source, PMIX_RANGE_LOCAL, info->info, info->n,
        [](pmix_status_t, void* cbdata) { delete static_cast<InfoArray*>(cbdata); }, info);
    if (rc != PMIX_SUCCESS)
        delete info;
}

namespace {

// Hands `info` to PMIx_Notify_event, which frees it when done. The source
// is that rank of the step, or none: the server itself. (A wildcard source
// would match every client, and the library does not notify an event's
// own source.)
void notify(const std::string& nspace, int status, std::optional<std::uint32_t> source_rank, InfoArray* info)
{
    pmix_proc_t source;
    if (source_rank)
        PMIX_PROC_LOAD(&source, nspace.c_str(), *source_rank);
    const pmix_status_t rc =
        PMIx_Notify_event(status, source_rank ? &source : nullptr, PMIX_RANGE_LOCAL, info->info, info->n,
                          [](pmix_status_t, void* cbdata) { delete static_cast<InfoArray*>(cbdata); }, info);
    if (rc != PMIX_SUCCESS) {
        if (rc != PMIX_OPERATION_SUCCEEDED)
            log::error("PMIx_Notify_event(%s): %s", PMIx_Error_string(status), PMIx_Error_string(rc));
        delete info;
    }
}

}  // namespace

void PmixHost::notify_terminated(std::uint32_t rank, int code, int exit_code)
{
    // The standard event, the specific code, and always the legacy generic
    // PMIX_ERR_PROC_ABORTED: Open MPI 5's ULFM handler and OpenPMIx's own
    // examples/fault.c register that one, not the standard event.
    std::vector<int> statuses{PMIX_EVENT_PROC_TERMINATED, code};
    if (code != PMIX_ERR_PROC_ABORTED)
        statuses.push_back(PMIX_ERR_PROC_ABORTED);
    for (const int status : statuses) {
        auto* info = new InfoArray(3);
        pmix_proc_t affected;
        PMIX_PROC_LOAD(&affected, nspace_.c_str(), rank);
        PMIX_INFO_LOAD(&info->info[0], PMIX_EVENT_AFFECTED_PROC, &affected, PMIX_PROC);
        PMIX_INFO_LOAD(&info->info[1], PMIX_EXIT_CODE, &exit_code, PMIX_INT);
        const pmix_status_t term = code;
        PMIX_INFO_LOAD(&info->info[2], PMIX_PROC_TERM_STATUS, &term, PMIX_STATUS);
        notify(nspace_, status, rank, info);
    }
}

void PmixHost::notify_node_down(std::uint32_t node, const std::string& hostname,
                                const std::vector<std::uint32_t>& ranks, const std::vector<std::uint32_t>& terminated,
                                int exit_code)
{
    auto* info = new InfoArray(3);
    pmix_data_array_t* procs = nullptr;
    PMIX_DATA_ARRAY_CREATE(procs, ranks.size(), PMIX_PROC);
    auto* p = static_cast<pmix_proc_t*>(procs->array);
    for (std::size_t i = 0; i < ranks.size(); ++i)
        PMIX_PROC_LOAD(&p[i], nspace_.c_str(), ranks[i]);
    PMIX_INFO_LOAD(&info->info[0], PMIX_EVENT_AFFECTED_PROCS, procs, PMIX_DATA_ARRAY);
    PMIX_DATA_ARRAY_FREE(procs);
    PMIX_INFO_LOAD(&info->info[1], PMIX_HOSTNAME, hostname.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[2], PMIX_NODEID, &node, PMIX_UINT32);
    notify(nspace_, PMIX_EVENT_NODE_DOWN, std::nullopt, info);
    for (std::uint32_t rank : terminated)
        notify_terminated(rank, PMIX_ERR_PROC_ABORTED, exit_code);
}

}  // namespace exitpolicy::pmixd
