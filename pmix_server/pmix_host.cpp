// SPDX-License-Identifier: Apache-2.0
// pmix_host.cpp - the daemon's calls into the PMIx server library: init
// and finalize, the namespace, the tasks' environment, direct-modex
// requests and the events this server raises. The upcalls are in the
// *_upcalls.cpp files (upcalls.hpp).
#include "pmix_host.hpp"

#include "protocol/events.hpp"

#include "convert.hpp"
#include "info_array.hpp"
#include "pmix_server/log.hpp"
#include "upcalls.hpp"

#include <pmix.h>
#include <pmix_server.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace exitpolicy::pmix_server {

// The overlay's copies of PMIx codes (protocol/events.hpp) are the library's.
static_assert(protocol::pmix::success == PMIX_SUCCESS);
static_assert(protocol::pmix::error == PMIX_ERROR);
static_assert(protocol::pmix::proc_aborted == PMIX_ERR_PROC_ABORTED);
static_assert(protocol::pmix::proc_requested_abort == PMIX_ERR_PROC_REQUESTED_ABORT);
static_assert(protocol::pmix::timeout == PMIX_ERR_TIMEOUT);
static_assert(protocol::pmix::unreach == PMIX_ERR_UNREACH);
static_assert(protocol::pmix::not_found == PMIX_ERR_NOT_FOUND);
static_assert(protocol::pmix::duplicate_key == PMIX_ERR_DUPLICATE_KEY);
static_assert(protocol::pmix::proc_term_wo_sync == PMIX_ERR_PROC_TERM_WO_SYNC);
static_assert(protocol::pmix::proc_terminated == PMIX_EVENT_PROC_TERMINATED);
static_assert(protocol::pmix::proc_aborted_by_sig == PMIX_ERR_PROC_ABORTED_BY_SIG);
static_assert(protocol::pmix::exit_nonzero_term == PMIX_ERR_EXIT_NONZERO_TERM);
static_assert(protocol::pmix::node_down == PMIX_EVENT_NODE_DOWN);

namespace {

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

// Library calls whose callbacks the caller waits for, bounded. A callback
// that comes after the wait gave up finds its state still alive.
class Pending {
public:
    // cbdata for one call; `done` below is its callback.
    void* expect()
    {
        std::lock_guard lock(state_->mu);
        ++state_->waiting;
        return lend(std::make_unique<std::shared_ptr<State>>(state_));
    }
    static void done(pmix_status_t, void* cbdata) noexcept
    {
        auto state = *reclaim<std::shared_ptr<State>>(cbdata);
        std::lock_guard lock(state->mu);
        --state->waiting;
        state->cv.notify_all();
    }
    // True if every callback came by `deadline`.
    bool wait_until(std::chrono::steady_clock::time_point deadline)
    {
        std::unique_lock lock(state_->mu);
        return state_->cv.wait_until(lock, deadline, [&] { return state_->waiting == 0; });
    }

private:
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        std::size_t waiting = 0;
    };
    std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

void deregister_namespace(const std::string& nspace, const std::vector<std::uint32_t>& ranks,
                          std::chrono::milliseconds bound)
{
    const auto started = std::chrono::steady_clock::now();
    Pending clients;
    for (std::uint32_t rank : ranks) {
        pmix_proc_t proc;
        PMIX_PROC_LOAD(&proc, nspace.c_str(), rank);
        // The library answers every call through the callback, a refusal too.
        PMIx_server_deregister_client(&proc, &Pending::done, clients.expect());
    }
    if (!clients.wait_until(std::chrono::steady_clock::now() + bound))
        log::error("deregistering the clients of %s: no answer within %lld ms", nspace.c_str(),
                   static_cast<long long>(bound.count()));
    Pending space;
    PMIx_server_deregister_nspace(nspace.c_str(), &Pending::done, space.expect());
    if (!space.wait_until(std::chrono::steady_clock::now() + bound))
        log::error("deregistering %s: no answer within %lld ms", nspace.c_str(),
                   static_cast<long long>(bound.count()));
    else
        log::debug("deregistered %s and %zu clients in %lld us", nspace.c_str(), ranks.size(),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - started)
                                              .count()));
}

std::string namespace_dir(const std::string& server_dir, const std::string& nspace)
{
    return server_dir + "/" + nspace;
}

std::string make_namespace_dir(const std::string& server_dir, const std::string& nspace)
{
    if (server_dir.empty())
        return {};
    std::string dir = namespace_dir(server_dir, nspace);
    if (::mkdir(dir.c_str(), 0700) == 0)
        return dir;
    log::error("cannot create %s (%s): the clients use /tmp for their session files", dir.c_str(),
               std::strerror(errno));
    return {};
}

PmixHost::PmixHost(StepServices& step) : step_(step)
{
    set_step(&step);
}

PmixHost::~PmixHost()
{
    if (topology_thread_.joinable())
        topology_thread_.join();
    if (registered_)
        deregister_namespace(nspace_, step_.served().ranks, std::chrono::milliseconds(500));
    if (initialized_)
        PMIx_server_finalize();
    set_step(nullptr);
}

NamespaceMaps namespace_maps(const std::vector<std::string>& hostnames, const std::vector<std::uint32_t>& rank_node)
{
    std::vector<std::string> ranks(hostnames.size());
    for (std::uint32_t r = 0; r < rank_node.size(); ++r) {
        auto& list = ranks.at(rank_node[r]);
        list += (list.empty() ? "" : ",") + std::to_string(r);
    }
    return NamespaceMaps{join(hostnames, ","), join(ranks, ";")};
}

Result<bool> PmixHost::init(const std::string& tmpdir, const PlannedServer* planned)
{
    // PMIX_HOSTNAME: clients look node-level data (local peers) up under
    // their server's host name, which must be the Slurm node's, not the
    // machine's (several nodes may share one machine).
    InfoArray info(planned ? 6 : 4);
    PMIX_INFO_LOAD(&info.info[0], PMIX_SERVER_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info.info[1], PMIX_SYSTEM_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    const std::uint32_t node = step_.served().node_id;
    PMIX_INFO_LOAD(&info.info[2], PMIX_SERVER_RANK, &node, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info.info[3], PMIX_HOSTNAME, step_.served().hostname.c_str(), PMIX_STRING);
    if (planned) {
        const int port = planned->port;
        PMIX_INFO_LOAD(&info.info[4], PMIX_TCP_IPV4_PORT, &port, PMIX_INT);
        PMIX_INFO_LOAD(&info.info[5], PMIX_SERVER_NSPACE, server_nspace, PMIX_STRING);
    }
    const pmix_status_t rc = PMIx_server_init(server_module(), info.info, info.n);
    if (rc != PMIX_SUCCESS)
        return Result<bool>::fail(std::string("PMIx_server_init: ") + PMIx_Error_string(rc));
    initialized_ = true;
    return Result<bool>::ok(true);
}

namespace {

// The step's ranks by node, in rank order, and each rank's local (and node)
// rank: its place among its node's.
struct RankLayout {
    std::vector<std::vector<std::uint32_t>> by_node;
    std::vector<std::uint16_t> local_rank;
};

RankLayout rank_layout(const protocol::StepMap& map)
{
    RankLayout layout{std::vector<std::vector<std::uint32_t>>(map.hostnames.size()),
                      std::vector<std::uint16_t>(map.rank_node.size())};
    for (std::uint32_t r = 0; r < map.rank_node.size(); ++r)
        layout.by_node[map.rank_node[r]].push_back(r);
    for (const auto& ranks : layout.by_node)
        for (std::size_t i = 0; i < ranks.size(); ++i)
            layout.local_rank[ranks[i]] = static_cast<std::uint16_t>(i);
    return layout;
}

// What a namespace's job info says beside its sizes and maps.
struct JobExtras {
    const std::string& topology_xml;  // none when empty
    bool recoverable;
    const std::string& tmpdir;
    const std::string& nsdir;  // the namespace's session directory; none when empty
    std::size_t count() const
    {
        return (topology_xml.empty() ? 0 : 1) + (recoverable ? 1 : 0) + (nsdir.empty() ? 0 : 3);
    }
};
constexpr std::size_t job_info_base = 13;

// The job info: job_info_base + extras.count() entries from `i` on.
void load_job_info(pmix_info_t* i, const ServedStep& args, const protocol::StepMap& map,
                   const std::vector<std::uint32_t>& mine, const JobExtras& extras)
{
    const auto ntasks = static_cast<std::uint32_t>(map.rank_node.size());
    const auto local_size = static_cast<std::uint32_t>(mine.size());
    const std::uint32_t leader = mine.empty() ? 0 : mine.front();
    const std::uint32_t appnum = 0;
    const std::uint32_t nodeid = args.node_id;
    std::vector<std::string> peers;
    for (auto r : mine)
        peers.push_back(std::to_string(r));
    const std::string local_peers = join(peers, ",");
    const NamespaceMaps maps = namespace_maps(map.hostnames, map.rank_node);
    PMIX_INFO_LOAD(&i[0], PMIX_UNIV_SIZE, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[1], PMIX_JOB_SIZE, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[2], PMIX_MAX_PROCS, &ntasks, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[3], PMIX_LOCAL_SIZE, &local_size, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[4], PMIX_NODE_SIZE, &local_size, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[5], PMIX_NODE_MAP, maps.nodes.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&i[6], PMIX_PROC_MAP, maps.procs.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&i[7], PMIX_LOCAL_PEERS, local_peers.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&i[8], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&i[9], PMIX_APPNUM, &appnum, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[10], PMIX_NODEID, &nodeid, PMIX_UINT32);
    PMIX_INFO_LOAD(&i[11], PMIX_HOSTNAME, args.hostname.c_str(), PMIX_STRING);
    const std::string jobid = std::to_string(args.job_id) + "." + std::to_string(args.step_id);
    PMIX_INFO_LOAD(&i[12], PMIX_JOBID, jobid.c_str(), PMIX_STRING);
    std::size_t next = job_info_base;
    if (!extras.topology_xml.empty())
        PMIX_INFO_LOAD(&i[next++], PMIX_HWLOC_XML_V2, extras.topology_xml.c_str(), PMIX_STRING);
    // Run-through: the step goes on after a task fails (PRRTE's
    // --enable-recovery); clients can see it.
    if (extras.recoverable)
        PMIX_INFO_LOAD(&i[next++], PMIX_JOB_RECOVERABLE, &extras.recoverable, PMIX_BOOL);
    if (!extras.nsdir.empty()) {
        const bool rm_clean = true;
        PMIX_INFO_LOAD(&i[next++], PMIX_TMPDIR, extras.tmpdir.c_str(), PMIX_STRING);
        PMIX_INFO_LOAD(&i[next++], PMIX_NSDIR, extras.nsdir.c_str(), PMIX_STRING);
        PMIX_INFO_LOAD(&i[next++], PMIX_TDIR_RMCLEAN, &rm_clean, PMIX_BOOL);
    }
}

// One PMIX_PROC_DATA array per rank from `i` on: local and node rank for
// every process (with any per-process data OpenPMIx derives nothing).
void load_proc_data(pmix_info_t* i, const protocol::StepMap& map, const std::vector<std::uint16_t>& local_rank)
{
    for (std::uint32_t r = 0; r < map.rank_node.size(); ++r) {
        pmix_data_array_t* arr = nullptr;
        PMIX_DATA_ARRAY_CREATE(arr, 5, PMIX_INFO);
        auto* p = static_cast<pmix_info_t*>(arr->array);
        const std::uint32_t node = map.rank_node[r];
        PMIX_INFO_LOAD(&p[0], PMIX_RANK, &r, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&p[1], PMIX_LOCAL_RANK, &local_rank[r], PMIX_UINT16);
        PMIX_INFO_LOAD(&p[2], PMIX_NODE_RANK, &local_rank[r], PMIX_UINT16);
        PMIX_INFO_LOAD(&p[3], PMIX_NODEID, &node, PMIX_UINT32);
        PMIX_INFO_LOAD(&p[4], PMIX_HOSTNAME, map.hostnames[node].c_str(), PMIX_STRING);
        PMIX_INFO_LOAD(&i[r], PMIX_PROC_DATA, arr, PMIX_DATA_ARRAY);
        PMIX_DATA_ARRAY_FREE(arr);
    }
}

}  // namespace

Result<bool> PmixHost::register_namespace(const protocol::StepMap& map, std::function<void(int status)> done)
{
    const ServedStep& args = step_.served();
    nspace_ = map.nspace;
    const RankLayout layout = rank_layout(map);
    const auto& mine = layout.by_node[args.node_id];

    // Job info, then one PMIX_PROC_DATA array per rank.
    if (topology_thread_.joinable())
        topology_thread_.join();
    // The namespace's session directory (namespace_dir): without it the
    // clients fall back to /tmp, where nobody removes what a failed step
    // leaves.
    const std::string nsdir = make_namespace_dir(args.dir, nspace_);
    const JobExtras extras{topology_xml_, map.recoverable, args.dir, nsdir};
    const std::size_t njob = job_info_base + extras.count();
    auto info = std::make_unique<InfoArray>(njob + map.rank_node.size());
    load_job_info(info->info, args, map, mine, extras);
    load_proc_data(info->info + njob, map, layout.local_rank);

    // The registration in progress: the library holds it as cbdata, the
    // loop takes it back. The namespace first; the clients once it is in.
    auto pending = std::make_unique<Registration>();
    pending->step = &step_;
    pending->info = std::move(info);
    pending->done = std::move(done);
    pending->nspace = nspace_;
    pending->ranks = args.ranks;
    Registration* raw = pending.get();
    const pmix_status_t rc = PMIx_server_register_nspace(nspace_.c_str(), static_cast<int>(mine.size()),
                                                         raw->info->info, raw->info->n, &Registration::nspace_in,
                                                         lend(std::move(pending)));
    if (rc != PMIX_SUCCESS) {
        reclaim<Registration>(raw);
        return Result<bool>::fail(std::string("PMIx_server_register_nspace: ") + PMIx_Error_string(rc));
    }
    registered_ = true;
    return Result<bool>::ok(true);
}

// Library thread: the namespace is in (or refused); the loop registers the
// clients.
void PmixHost::Registration::nspace_in(pmix_status_t status, void* cbdata) noexcept
{
    std::shared_ptr<Registration> self = reclaim<Registration>(cbdata);
    StepServices* step = self->step;
    guarded("namespace registration", [&] { step->post([self, status] { self->register_clients(status); }); });
}

// Loop thread. Every client registered is counted, and only those: one the
// library refused gets no callback, so `done` would otherwise never run.
void PmixHost::Registration::register_clients(pmix_status_t nspace_status)
{
    info.reset();
    if (nspace_status != PMIX_SUCCESS || ranks.empty()) {
        finish(nspace_status);
        return;
    }
    auto self = shared_from_this();
    registering = true;
    for (std::uint32_t rank : ranks) {
        pmix_proc_t proc;
        PMIX_PROC_LOAD(&proc, nspace.c_str(), rank);
        auto token = std::make_unique<std::shared_ptr<Registration>>(self);
        std::shared_ptr<Registration>* raw = token.get();
        ++waiting;
        const pmix_status_t rc =
            PMIx_server_register_client(&proc, ::getuid(), ::getgid(), nullptr, &Registration::client_in,
                                        lend(std::move(token)));
        if (rc != PMIX_SUCCESS) {
            reclaim<std::shared_ptr<Registration>>(raw);
            log::error("PMIx_server_register_client(rank %u): %s", rank, PMIx_Error_string(rc));
            client_done(rc);
        }
    }
    registering = false;
    if (waiting == 0)
        finish(status);
}

void PmixHost::Registration::client_in(pmix_status_t status, void* cbdata) noexcept
{
    auto self = reclaim<std::shared_ptr<Registration>>(cbdata);
    guarded("client registration", [&] {
        StepServices* step = (*self)->step;
        step->post([self = *self, status] { self->client_done(status); });
    });
}

void PmixHost::Registration::client_done(pmix_status_t status)
{
    if (status != PMIX_SUCCESS)
        this->status = status;
    if (--waiting == 0 && !registering)
        finish(this->status);
}

void PmixHost::Registration::finish(pmix_status_t status)
{
    if (auto fn = std::exchange(done, nullptr))
        fn(status);
}

Result<std::vector<std::string>> PmixHost::environment(std::uint32_t rank, const std::string& nspace)
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, (nspace.empty() ? nspace_ : nspace).c_str(), rank);
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

void PmixHost::dmodex(std::uint32_t rank, std::function<void(int status, protocol::Bytes data)> done)
{
    struct Request {
        StepServices* step;
        std::function<void(int, protocol::Bytes)> done;
    };
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace_.c_str(), rank);
    auto request = std::make_unique<Request>(Request{&step_, std::move(done)});
    Request* raw = request.get();
    const pmix_status_t rc = PMIx_server_dmodex_request(
        &proc,
        [](pmix_status_t status, char* data, size_t size, void* cbdata) {
            std::shared_ptr<Request> request = reclaim<Request>(cbdata);
            guarded("direct modex for a peer", [&] {
                protocol::Bytes bytes(data, data + size);
                request->step->post([request, status, bytes = std::move(bytes)]() mutable {
                    request->done(status, std::move(bytes));
                });
            });
        },
        lend(std::move(request)));
    if (rc != PMIX_SUCCESS)
        reclaim<Request>(raw)->done(rc, {});
}

void PmixHost::deliver_relayed(int code, std::uint32_t source_rank, const protocol::Bytes& packed)
{
    auto info = unpack_infos(packed);
    if (!info) {
        log::error("a relayed event from rank %u could not be unpacked: %s", source_rank, info.error().c_str());
        return;
    }
    notify(code, source_rank, std::move(*info));
}

// The source is that rank of the step, or none: the server itself. (A
// wildcard source would match every client, and the library does not
// notify an event's own source.) From OpenPMIx 6.1 on the library reads
// the source and the infos on its own thread after the call has returned:
// both live until its callback, which frees them.
void PmixHost::notify(int status, std::optional<std::uint32_t> source_rank, std::unique_ptr<InfoArray> info)
{
    struct Call {
        std::unique_ptr<InfoArray> info;
        pmix_proc_t source{};
    };
    auto call = std::make_unique<Call>();
    call->info = std::move(info);
    if (source_rank)
        PMIX_PROC_LOAD(&call->source, nspace_.c_str(), *source_rank);
    Call* raw = call.get();
    const pmix_status_t rc =
        PMIx_Notify_event(status, source_rank ? &raw->source : nullptr, PMIX_RANGE_LOCAL, raw->info->info,
                          raw->info->n, [](pmix_status_t, void* cbdata) { reclaim<Call>(cbdata); },
                          lend(std::move(call)));
    if (rc != PMIX_SUCCESS) {
        if (rc != PMIX_OPERATION_SUCCEEDED)
            log::error("PMIx_Notify_event(%s): %s", PMIx_Error_string(status), PMIx_Error_string(rc));
        reclaim<Call>(raw);
    }
}

std::vector<PmixEvent> termination_events(const std::string& nspace, std::uint32_t rank, int code, int exit_code)
{
    const std::pair<int, bool> kinds[] = {
        {code, false}, {PMIX_EVENT_PROC_TERMINATED, true}, {PMIX_ERR_PROC_ABORTED, true}};
    std::vector<PmixEvent> events;
    for (const auto& [status, non_default] : kinds) {
        if (non_default && status == code)
            continue;
        auto info = std::make_unique<InfoArray>(non_default ? 4 : 3);
        pmix_proc_t affected;
        PMIX_PROC_LOAD(&affected, nspace.c_str(), rank);
        PMIX_INFO_LOAD(&info->info[0], PMIX_EVENT_AFFECTED_PROC, &affected, PMIX_PROC);
        PMIX_INFO_LOAD(&info->info[1], PMIX_EXIT_CODE, &exit_code, PMIX_INT);
        const pmix_status_t term = code;
        PMIX_INFO_LOAD(&info->info[2], PMIX_PROC_TERM_STATUS, &term, PMIX_STATUS);
        if (non_default) {
            const bool yes = true;
            PMIX_INFO_LOAD(&info->info[3], PMIX_EVENT_NON_DEFAULT, &yes, PMIX_BOOL);
        }
        events.push_back({status, std::move(info)});
    }
    return events;
}

void PmixHost::notify_terminated(std::uint32_t rank, int code, int exit_code)
{
    for (auto& e : termination_events(nspace_, rank, code, exit_code))
        notify(e.status, rank, std::move(e.info));
}

void PmixHost::notify_node_down(std::uint32_t node, const std::string& hostname,
                                const std::vector<std::uint32_t>& ranks, const std::vector<std::uint32_t>& terminated,
                                int exit_code)
{
    auto info = std::make_unique<InfoArray>(4);
    pmix_data_array_t* procs = nullptr;
    PMIX_DATA_ARRAY_CREATE(procs, ranks.size(), PMIX_PROC);
    auto* p = static_cast<pmix_proc_t*>(procs->array);
    for (std::size_t i = 0; i < ranks.size(); ++i)
        PMIX_PROC_LOAD(&p[i], nspace_.c_str(), ranks[i]);
    PMIX_INFO_LOAD(&info->info[0], PMIX_EVENT_AFFECTED_PROCS, procs, PMIX_DATA_ARRAY);
    PMIX_DATA_ARRAY_FREE(procs);
    PMIX_INFO_LOAD(&info->info[1], PMIX_HOSTNAME, hostname.c_str(), PMIX_STRING);
    PMIX_INFO_LOAD(&info->info[2], PMIX_NODEID, &node, PMIX_UINT32);
    // For handlers of it alone: a default handler hears of each of the
    // node's ranks, below (Open MPI 5's would abort on this code).
    const bool yes = true;
    PMIX_INFO_LOAD(&info->info[3], PMIX_EVENT_NON_DEFAULT, &yes, PMIX_BOOL);
    notify(PMIX_EVENT_NODE_DOWN, std::nullopt, std::move(info));
    for (std::uint32_t rank : terminated)
        notify_terminated(rank, PMIX_ERR_PROC_TERM_WO_SYNC, exit_code);
}

}  // namespace exitpolicy::pmix_server
