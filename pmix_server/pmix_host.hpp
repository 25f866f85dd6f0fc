// SPDX-License-Identifier: Apache-2.0
// pmix_host.hpp - the PMIx server of the node: OpenPMIx's server library
// with our module (upcalls.hpp), the namespace of the step, the tasks'
// environment, direct-modex answers and termination events.
//
// Threads: init() runs on a thread of its own while the loop starts (the
// daemon joins it before anything else here); discover_topology() starts a
// thread that register_namespace() joins; every other call is made on the
// daemon's loop thread, and the library's callbacks post their results
// there. The upcalls run on PMIx's progress thread (upcalls.hpp).
#pragma once

#include "info_array.hpp"
#include "step_services.hpp"
#include "protocol/planned_environment.hpp"

#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <pmix_common.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::pmix_server {

using protocol::environment_differences;
using protocol::planned_environment;
using protocol::PlannedServer;
using protocol::server_nspace;

// One PMIx event as PMIx_Notify_event takes it.
struct PmixEvent {
    int status = 0;
    std::unique_ptr<InfoArray> info;
};

// What the clients hear of one abnormal end: rank `rank` of `nspace` ended
// with the specific `code` (PMIX_ERR_PROC_REQUESTED_ABORT,
// PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_PROC_TERM_WO_SYNC or
// PMIX_ERR_EXIT_NONZERO_TERM: protocol::pmix::termination_event) and the task's
// code `exit_code`. Each event, in order:
//   1. `code`, for every handler of it and every default (code-less) one:
//      once per failure. Open MPI 5's fault tolerance (ULFM) registers
//      PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG and
//      PMIX_ERR_PROC_ABORTED and marks the process failed; Open MPI's
//      default handler (4.1 and 5) ends the process on any code.
//   2. PMIX_EVENT_PROC_TERMINATED, the standard's event of any end, and
//   3. PMIX_ERR_PROC_ABORTED, the legacy generic code (OpenPMIx's
//      examples/fault.c), unless it is `code`: both for handlers registered
//      for them alone (PMIX_EVENT_NON_DEFAULT), since Open MPI 5's default
//      handler aborts on them. (ULFM's handler hears 3 too, and ignores a
//      process it has marked failed already.)
// The infos of each:
//   PMIX_EVENT_AFFECTED_PROC  the process that ended (PMIX_PROC): the only
//                             info of that type, since Open MPI 5.0's ULFM
//                             takes every PMIX_PROC info as a failed process
//   PMIX_EXIT_CODE            `exit_code` (PMIX_INT)
//   PMIX_PROC_TERM_STATUS     `code` (PMIX_STATUS)
//   PMIX_EVENT_NON_DEFAULT    true, on 2 and 3 (PMIX_BOOL)
// The event's source is the process that ended (PmixHost::notify).
std::vector<PmixEvent> termination_events(const std::string& nspace, std::uint32_t rank, int code, int exit_code);

// Deregisters `ranks` of `nspace`, then `nspace` itself, each call bounded
// by `bound`: the cleanup its clients asked for through job control
// (PMIX_REGISTER_CLEANUP, PMIX_REGISTER_CLEANUP_DIR) runs now, and the
// library lets the namespace's files go (OpenPMIx 5's shared-memory
// segments). Any thread but the library's; the daemon's loop need not run.
void deregister_namespace(const std::string& nspace, const std::vector<std::uint32_t>& ranks,
                          std::chrono::milliseconds bound);

// The session directory of the step's namespace on this node, given to the
// clients as PMIX_NSDIR under the server's own directory (PMIX_TMPDIR),
// which slurmstepd removes at the step's end (PMIX_TDIR_RMCLEAN): Open MPI
// puts its session directory there instead of /tmp/ompi.*, OpenPMIx 5 its
// shared-memory segments.
std::string namespace_dir(const std::string& server_dir, const std::string& nspace);

// Creates namespace_dir() (0700) and returns it, or "" when the server has
// no directory or it cannot be made (logged): the clients then fall back to
// /tmp, as before (fail open).
std::string make_namespace_dir(const std::string& server_dir, const std::string& nspace);

// PMIX_NODE_MAP and PMIX_PROC_MAP of a step: its node names in node order,
// comma-separated, and each node's ranks, comma-separated, node by node,
// separated by ';'. Plain lists, which every OpenPMIx reads as they are:
// PMIx_generate_regex and PMIx_generate_ppn may instead return a
// compressed blob with NULs inside (OpenPMIx 7 does for a few thousand
// bytes, e.g. 1 024 ranks on a node), which a PMIX_STRING cuts at its first
// NUL, and the library then refuses the namespace (PMIX_ERR_BAD_PARAM).
struct NamespaceMaps {
    std::string nodes;
    std::string procs;
};
NamespaceMaps namespace_maps(const std::vector<std::string>& hostnames, const std::vector<std::uint32_t>& rank_node);

class PmixHost {
public:
    // The upcalls serve `step` from now until this is destroyed: the
    // step's namespace and clients deregistered, then PMIx_server_finalize.
    explicit PmixHost(StepServices& step);
    ~PmixHost();
    PmixHost(const PmixHost&) = delete;
    PmixHost& operator=(const PmixHost&) = delete;

    // `planned`: the server listens where planned_environment() says (its
    // socket reserved and armed: socket_activation.hpp).
    Result<bool> init(const std::string& tmpdir, const PlannedServer* planned = nullptr);
    // Starts discovering the node's hardware topology on a thread of its
    // own, so that it overlaps PMIx_server_init and the enrollment;
    // register_namespace() waits for it and gives it to the clients.
    void discover_topology();
    // Registers the step's namespace and this node's clients (the ranks of
    // served()); `done` runs once on the loop when the library has them all,
    // or has refused one (its status).
    Result<bool> register_namespace(const protocol::StepMap& map, std::function<void(int status)> done);
    // PMIx_server_setup_fork's environment for `rank` of `nspace` (the
    // step's, once registered, by default).
    Result<std::vector<std::string>> environment(std::uint32_t rank, const std::string& nspace = {});
    // The data a local rank committed, for a peer node's direct modex.
    void dmodex(std::uint32_t rank, std::function<void(int status, protocol::Bytes data)> done);
    // Tells every local client that `rank` ended abnormally with the
    // specific `code`: termination_events().
    void notify_terminated(std::uint32_t rank, int code, int exit_code);
    // Tells every local client that a node is lost: PMIX_EVENT_NODE_DOWN
    // (its lost ranks as the affected procs, hostname, node id; for handlers
    // of that code alone), then the termination events of
    // PMIX_ERR_PROC_TERM_WO_SYNC with `exit_code` for each rank of
    // `terminated` (those the clients have not heard of yet).
    void notify_node_down(std::uint32_t node, const std::string& hostname, const std::vector<std::uint32_t>& ranks,
                          const std::vector<std::uint32_t>& terminated, int exit_code);
    // An event a client on another node raised: to our clients.
    void deliver_relayed(int code, std::uint32_t source_rank, const protocol::Bytes& info);
    const std::string& nspace() const noexcept { return nspace_; }

private:
    // A namespace registration in progress (pmix_host.cpp).
    struct Registration : std::enable_shared_from_this<Registration> {
        StepServices* step = nullptr;
        std::unique_ptr<InfoArray> info;  // the library reads it until the namespace is in
        std::function<void(int)> done;
        std::string nspace;
        std::vector<std::uint32_t> ranks;
        std::size_t waiting = 0;   // clients registered, not yet called back
        bool registering = false;  // the loop over the clients runs
        pmix_status_t status = 0;  // the first error
        static void nspace_in(pmix_status_t status, void* cbdata) noexcept;
        static void client_in(pmix_status_t status, void* cbdata) noexcept;
        void register_clients(pmix_status_t nspace_status);
        void client_done(pmix_status_t status);
        void finish(pmix_status_t status);
    };

    static std::string topology_xml();
    void notify(int status, std::optional<std::uint32_t> source_rank, std::unique_ptr<InfoArray> info);

    StepServices& step_;
    std::thread topology_thread_;
    std::string topology_xml_;  // hwloc XML of this node, given to the clients
    std::string nspace_;
    bool initialized_ = false;
    bool registered_ = false;  // the namespace was handed to the library
};

}  // namespace exitpolicy::pmix_server
