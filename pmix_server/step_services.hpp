// SPDX-License-Identifier: Apache-2.0
// step_services.hpp - what the PMIx upcalls ask of the rest of the step: the
// node daemon (daemon.hpp) implements it; the upcalls' unit test gives its
// own (tests/unit/upcalls_test.cpp).
//
// Threads: post() is called on PMIx's progress thread; everything else on
// the daemon's loop thread, from posted work. Every `done` given here is
// called at most once, on the loop thread; one that is dropped uncalled
// (the daemon stops) is answered by the upcall's Completion
// (completion.hpp).
#pragma once

#include "protocol/place.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace exitpolicy::pmix_server {

// What the PMIx side knows of the step it serves: this node's place in it,
// the step's size, the step's private directory on the node (the server's
// rendezvous and the clients' session directories) and where the node's
// hardware topology comes from. Never the daemon's descriptors.
struct ServedStep : protocol::NodePlace {
    std::uint32_t ntasks = 0;
    std::string dir;
    std::string topology = "discover";  // discover, none, or an hwloc XML file
};

class StepServices {
public:
    virtual ~StepServices() = default;

    // Any thread: runs fn on the loop thread, or destroys it uncalled when
    // the loop no longer runs.
    virtual void post(std::function<void()> fn) = 0;

    // ---- loop thread ----
    using Done = std::function<void(int status, protocol::Bytes data)>;
    // A fence over `ranks` (empty: all) with this node's data: the next
    // instance over that set. It fails at once when a participant is known
    // dead; with timeout_s > 0 (the caller's PMIX_TIMEOUT) an instance still
    // pending here after that long fails everywhere with PMIX_ERR_TIMEOUT.
    virtual void fence(std::vector<std::uint32_t> ranks, protocol::Bytes data, int timeout_s, Done done) = 0;
    // The data `rank` committed, from the node that owns it.
    virtual void direct_modex(std::uint32_t rank, int timeout_s, Done done) = 0;
    // A local task called PMIx_Abort.
    virtual void abort(std::uint32_t rank, int status, std::string message) = 0;
    // PMIx_Publish / Lookup / Unpublish: to the FE and back. A lookup that
    // waits for the keys to be published (PMIX_WAIT) without a PMIX_TIMEOUT
    // waits as long as it takes, as the caller asked.
    using DataDone = std::function<void(const protocol::DataReply& reply)>;
    virtual void data_request(protocol::DataRequest request, int timeout_s, DataDone done) = 0;
    // An event a local client raised for more than this node.
    virtual void relay(int code, std::uint32_t source_rank, protocol::Bytes info) = 0;
    // The whole step ends (PMIx_Job_control terminate): through the FE.
    virtual void terminate_step(const std::string& why) = 0;
    // What task `rank` logged (PMIx_Log to stderr or stdout): srun's stderr
    // shows it as the task wrote it.
    virtual void task_log(std::uint32_t rank, const std::string& text) = 0;
    virtual void client_connected(std::uint32_t rank) = 0;
    virtual void client_finalized(std::uint32_t rank) = 0;

    // Any thread: fixed before the PMIx server starts.
    virtual const ServedStep& served() const noexcept = 0;
};

}  // namespace exitpolicy::pmix_server
