// pmix_host.hpp - the PMIx server of the node: OpenPMIx's server library
// with our module (upcalls), the namespace of the step, the tasks'
// environment, direct-modex answers and termination events.
//
// Threads: the PMIx_* calls here run on the daemon's loop thread. The
// upcalls (pmix_host.cpp) run on PMIx's progress thread; each copies what
// it needs, posts the work to the loop and returns; the loop ends it by
// calling the upcall's cbfunc exactly once.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace exitpolicy::pmixd {

class Daemon;

class PmixHost {
public:
    explicit PmixHost(Daemon& daemon);
    ~PmixHost();

    Result<bool> init(const std::string& tmpdir);
    // Starts discovering the node's hardware topology on a thread of its
    // own, so that it overlaps PMIx_server_init and the enrollment;
    // register_namespace() waits for it and gives it to the clients.
    void discover_topology();
    // Registers the step's namespace and this node's clients; `done` runs
    // on the loop once the library has them.
    Result<bool> register_namespace(std::function<void(int status)> done);
    Result<std::vector<std::string>> environment(std::uint32_t rank);
    // The data a local rank committed, for a peer node's direct modex.
    void dmodex(std::uint32_t rank, std::function<void(int status, wire::Bytes data)> done);
    // Tells every local client that `rank` ended abnormally: the standard
    // PMIX_EVENT_PROC_TERMINATED, the specific code, and the legacy
    // PMIX_ERR_PROC_ABORTED (unless that is the specific code).
    void notify_terminated(std::uint32_t rank, int code, int exit_code);
    // Tells every local client that a node is lost: PMIX_EVENT_NODE_DOWN
    // (its lost ranks as the affected procs, hostname, node id), then the
    // termination events (PMIX_ERR_PROC_ABORTED, `exit_code`) for each rank
    // of `terminated` (those the clients have not heard of yet).
    void notify_node_down(std::uint32_t node, const std::string& hostname, const std::vector<std::uint32_t>& ranks,
                          const std::vector<std::uint32_t>& terminated, int exit_code);
    // An event a client on another node raised: to our clients.
    void deliver_relayed(int code, std::uint32_t source_rank, const wire::Bytes& info);
    const std::string& nspace() const noexcept { return nspace_; }

private:
    static std::string topology_xml();

    Daemon& daemon_;
    std::thread topology_thread_;
    std::string topology_xml_;  // hwloc XML of this node, given to the clients
    std::string nspace_;
    bool initialized_ = false;
};

}  // namespace exitpolicy::pmixd
