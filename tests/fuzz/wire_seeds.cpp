// SPDX-License-Identifier: Apache-2.0
// wire_seeds.cpp - writes the fuzzer's seed corpus: one valid frame of every
// message type, each in a file of its own in DIR, plus a stream of several.
// usage: wire_seeds DIR
#include "protocol/wire.hpp"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace exitpolicy::protocol;

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: wire_seeds DIR\n");
        return 2;
    }
    Hello hello;
    hello.role = Role::daemon;
    hello.hostname = "node1";
    hello.ranks = {0, 1};
    Outcome outcome;
    outcome.rank = 3;
    outcome.wait_status = 11;
    outcome.flags = Outcome::flag_finalized_known;
    StepMap map;
    map.nspace = "exitpolicy.1.0";
    map.fanout = 2;
    map.hostnames = {"node1", "node2"};
    map.hosts = {"127.0.0.1", "127.0.0.1"};
    map.ports = {40000, 40001};
    map.rank_node = {0, 1};
    DataRequest publish;
    publish.op = DataRequest::Op::publish;
    publish.keys = {"key"};
    publish.values = {Bytes{1, 2}};
    const std::vector<std::pair<std::string, Bytes>> seeds = {
        {"challenge", Challenge{{}, 1, 0}.encode()},
        {"hello", hello.encode()},
        {"welcome", Welcome{}.encode()},
        {"outcome", outcome.encode()},
        {"ack", Ack{3, 0}.encode()},
        {"enroll", Enroll{"127.0.0.1", 40000}.encode()},
        {"step_map", map.encode()},
        {"event", Event{1, 3, -402, 139, 11}.encode()},
        {"fence_up", FenceUp{"0-1,#1", 0, 1, Bytes{9}}.encode()},
        {"fence_up_failed", FenceUp{"*#2", -24, 0, {}}.encode()},
        {"fence_down", FenceDown{"*#1", 0, Bytes{9, 9}}.encode()},
        {"dmodex_req", DmodexReq{1, 0, 1, 3}.encode()},
        {"dmodex_resp", DmodexResp{1, 1, 0, 0, Bytes{7}}.encode()},
        {"abort", Abort{3, 7, "bye"}.encode()},
        {"terminate", Terminate{"why"}.encode()},
        {"notice", Notice{1, Notice::no_rank, "text"}.encode()},
        {"task-log", Notice{1, 5, "MPI_ABORT was invoked"}.encode()},
        {"env_request", EnvRequest{3, 1234}.encode()},
        {"env_reply", EnvReply{0, "", {"PMIX_RANK=3"}}.encode()},
        {"stop", Stop{}.encode()},
        {"step_done", StepDone{}.encode()},
        {"task_started", TaskStarted{3, 1234, 987654321}.encode()},
        {"standby", Standby{40123}.encode()},
        {"data_request", publish.encode()},
        {"data_reply", DataReply{1, 0, 0, {"key"}, {3}, {Bytes{1}}}.encode()},
        {"relay", Relay{0, -500, 3, Bytes{1, 2, 3}}.encode()},
        {"gone", Gone{2}.encode()},
        {"node_down", NodeDown{2, "node3", {4, 5}, 1}.encode()},
    };
    Bytes stream;
    for (const auto& [name, frame] : seeds) {
        std::ofstream(std::string(argv[1]) + "/" + name, std::ios::binary)
            .write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
        stream.insert(stream.end(), frame.begin(), frame.end());
    }
    std::ofstream(std::string(argv[1]) + "/stream", std::ios::binary)
        .write(reinterpret_cast<const char*>(stream.data()), static_cast<std::streamsize>(stream.size()));
    return 0;
}
