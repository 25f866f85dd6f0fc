// SPDX-License-Identifier: Apache-2.0
// pmi_encoding.hpp - what the PMI service writes for MPICH and reads from
// it, and carries between nodes: the step's layout as MPICH's
// PMI_process_mapping, an abort's code, a node's puts as a fence's data.
// Pure: no sockets, no loop.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exitpolicy::pmix_server {

// MPICH's process mapping ("(vector,(first node,nodes,ranks per node),...)")
// of a step whose rank r runs on node rank_node[r]: consecutive ranks on a
// node make a block, consecutive blocks of one size on consecutive nodes
// one triple, and a layout that repeats (cyclic) is written once: MPICH
// repeats it until every rank has a node. Empty when no ranks, or when it
// would not fit in `limit` characters: MPICH's PMI-1 client then asks each
// rank's host; its PMI-2 client fails MPI_Init.
std::string process_mapping(const std::vector<std::uint32_t>& rank_node, std::size_t limit = 1024);

// An abort's code: `exitcode` as the client sent it, except MPICH's PMI-2
// client's, which is -1 whatever MPI_Abort was given; its message then
// says it ("application called MPI_Abort(MPI_COMM_WORLD, 7) - process 5").
// No code at all: 1.
int abort_code(std::optional<long> exitcode, std::string_view message);

// Whether an abort's message is MPICH's for the application's own call of
// MPI_Abort ("application called MPI_Abort(...)"), not for an error MPICH
// itself found fatal (a dead peer's connection, say), whose message is
// "Fatal error in ...". Over PMI or PMIx alike: the wording is MPICH's.
bool application_abort(std::string_view message);

// A node's puts as its part of a fence: each key and value a 4-byte
// big-endian length and its bytes; the fence's result is every node's part
// one after the other, read back by decode_pairs (an error when cut short).
protocol::Bytes encode_pairs(const std::vector<std::pair<std::string, std::string>>& pairs);
Result<std::vector<std::pair<std::string, std::string>>> decode_pairs(const protocol::Bytes& data);

}  // namespace exitpolicy::pmix_server
