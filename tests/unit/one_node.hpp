// SPDX-License-Identifier: Apache-2.0
// one_node.hpp - for tests whose process is a node's PMIx server (PmixHost,
// the daemon's own) with real client programs: the step behind the
// upcalls as a stand-in for a step of this one node (fences are local,
// nothing goes anywhere else), and the namespace's registration.
#pragma once

#include "pmix_host.hpp"
#include "work_queue.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace exitpolicy::pmix_server::one_node {

class OneNode final : public StepServices {
public:
    ServedStep args_;
    WorkQueue queue;
    std::vector<std::uint32_t> connected;  // client_connected's ranks, in order

    void post(std::function<void()> fn) override { queue.push(std::move(fn)); }
    void fence(std::vector<std::uint32_t>, protocol::Bytes data, int, Done done) override { done(0, std::move(data)); }
    void direct_modex(std::uint32_t, int, Done done) override { done(PMIX_ERR_NOT_FOUND, {}); }
    void abort(std::uint32_t, int, std::string) override {}
    void data_request(protocol::DataRequest, int, DataDone) override {}
    void relay(int, std::uint32_t, protocol::Bytes) override {}
    void terminate_step(const std::string&) override {}
    void task_log(std::uint32_t, const std::string&) override {}
    void client_connected(std::uint32_t rank) override { connected.push_back(rank); }
    void client_finalized(std::uint32_t) override {}
    const ServedStep& served() const noexcept override { return args_; }

    // Node 0 ("node0") of job 7, step 0, serving `ranks` from `dir`: the
    // place every such test gives its server.
    void as_node0(const std::string& dir, std::vector<std::uint32_t> ranks)
    {
        args_.job_id = 7;
        args_.step_id = 0;
        args_.node_id = 0;
        args_.hostname = "node0";
        args_.topology = "none";
        args_.ranks = std::move(ranks);
        args_.dir = dir;
    }
};

// The server process gives up: what went wrong on stderr, exit status 10.
[[noreturn]] inline void server_fails(const std::string& why)
{
    std::fprintf(stderr, "server: %s\n", why.c_str());
    std::_Exit(10);
}

// Registers namespace `nspace` of `ranks` ranks, all on this node, running
// the upcalls' work until the library has it (10 s at most).
inline void register_one_node(PmixHost& host, OneNode& step, const std::string& nspace, std::uint32_t ranks)
{
    protocol::StepMap map;
    map.nspace = nspace;
    map.hostnames = {step.args_.hostname};
    map.rank_node.assign(ranks, 0);
    int registered = 1;
    bool in = false;
    if (auto ok = host.register_namespace(map, [&](int status) {
            registered = status;
            in = true;
        });
        !ok)
        server_fails(ok.error());
    for (int i = 0; i < 1000 && !in; ++i) {
        step.queue.run();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!in || registered != 0)
        server_fails("namespace not registered");
}

}  // namespace exitpolicy::pmix_server::one_node
