// SPDX-License-Identifier: Apache-2.0
// pmi_server.hpp - the PMI-1 and PMI-2 service of a node's MPICH-family
// tasks (MPICH, MVAPICH, Intel MPI's built-in client): each local task has
// its own socket, inherited as PMI_FD (slurmstepd made the pair), so a
// connection is its task's by construction and nobody else's. The step's
// key-value space spans every node: a barrier (PMI-1 barrier_in, PMI-2
// kvs-fence) is a fence of the whole step through the overlay
// (StepServices::fence) carrying what this node's tasks put since the last
// one; the replies all come from here. abort reaches the step as PMIx_Abort
// does, with its code; init and finalize mark the task as a client the way
// PMIx_Init and PMIx_Finalize do (teardown, collateral); the name service
// (publish, lookup, unpublish) is the step's, at srun's front end.
//
// Loop thread only. Requests wait in their sockets until serve(): the step
// map gives PMI_process_mapping and the fence its participants. Wire format:
// pmi_wire.hpp.
#pragma once

#include "pmi_wire.hpp"
#include "protocol/wire.hpp"
#include "step_services.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <set>
#include <string>
#include <utility>
#include <vector>

struct event_base;

namespace exitpolicy::pmix_server {


class PmiServer {
public:
    PmiServer(event_base* base, StepServices& step);
    ~PmiServer();
    PmiServer(const PmiServer&) = delete;
    PmiServer& operator=(const PmiServer&) = delete;

    // Takes the daemon's end of each local task's PMI socket: sockets[i] is
    // rank ranks[i]'s. Nothing is read before serve().
    void adopt(const std::vector<std::uint32_t>& ranks, const std::vector<int>& sockets);
    // The step map has come: requests are answered from now on.
    void serve(const protocol::StepMap& map);
    // Reads and handles, now, whatever the tasks have written (before a
    // task's exit is taken as its end, what it said before it is heard).
    void read_pending();
    // A rank of the step ended abnormally (here or elsewhere): MPICH's
    // PMI_dead_processes names it.
    void failed(std::uint32_t rank);
    // Tasks that said init and neither finalize nor hung up yet.
    std::size_t clients() const noexcept;

private:
    struct Conn;
    void on_read(Conn& c);
    // Bytes from task c's socket, in order: its requests handled.
    void take(Conn& c, const std::string& bytes);
    void on_closed(Conn& c);
    // One request; false: the connection is done (abort, a protocol error).
    bool handle(Conn& c, const pmi::Request& r);
    bool handle_v1(Conn& c, const pmi::Request& r);
    bool handle_v2(Conn& c, const pmi::Request& r);
    // A reply in the connection's framing; a PMI-2 reply echoes `thrid`.
    void send(Conn& c, std::string_view cmd, std::vector<std::pair<std::string, std::string>> args = {},
              const std::string& thrid = {});
    // A key's value: the step's space, then the job attributes.
    const std::string* lookup(const std::string& key);
    bool put(Conn& c, const pmi::Request& r, std::string_view reply);
    void enter_barrier(Conn& c);
    // Fences once every local task that may still come is in the barrier.
    void check_barrier();
    void barrier_done(int status, const protocol::Bytes& data);
    void put_node_attr(const std::string& key, const std::string& value);
    // The name service (MPI_Publish_name, MPI_Lookup_name,
    // MPI_Unpublish_name): the step's, kept at srun's front end as
    // PMIx_Publish's is, each service under a key of its own ("pmi:" and
    // its name). `answer` gets the front end's PMIx status and, for a
    // lookup found, the port.
    using NameAnswer = std::function<void(int status, const std::string* port)>;
    void name_request(Conn& c, protocol::DataRequest::Op op, const std::string& name, const std::string* port,
                      NameAnswer answer);

    event_base* base_;
    StepServices& step_;
    std::vector<std::unique_ptr<Conn>> conns_;
    bool serving_ = false;
    std::string kvsname_;
    std::map<std::string, std::string> attributes_;  // PMI_process_mapping, universeSize, ...
    std::map<std::string, std::string> kvs_;         // the step's space as of the last barrier, and own puts
    std::vector<std::pair<std::string, std::string>> unsent_;  // this node's puts since the last barrier
    std::set<Conn*> in_barrier_;
    bool barrier_pending_ = false;  // this node's part is on its way; the rest waits for the next
    std::map<std::string, std::string> node_attrs_;  // PMI-2 info-putnodeattr
    struct AttrWait {
        Conn* conn;
        std::string key;
        std::string thrid;
    };
    std::vector<AttrWait> attr_waiting_;  // info-getnodeattr wait=TRUE
    std::set<std::uint32_t> dead_;
    std::string dead_list_;  // dead_ as MPICH reads it: "3,5"
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // for answers that come after the server
};

}  // namespace exitpolicy::pmix_server
