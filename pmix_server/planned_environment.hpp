// SPDX-License-Identifier: Apache-2.0
// planned_environment.hpp - the PMIx environment of a task whose server does
// not exist yet (socket_activation.hpp): what PMIx_server_setup_fork will
// give it, written before the server starts, and its check against the
// library's own once the server runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exitpolicy::pmix_server {

// Where a node's PMIx server listens when its socket was reserved before it
// started (socket_activation.hpp): 127.0.0.1:port, as server rank node_id
// of the namespace "pmix-server", with the running library's version
// (compat::running_version) and job data by gds/hash.
struct PlannedServer {
    std::uint16_t port = 0;
    std::uint32_t node_id = 0;
    std::string dir;
    std::string hostname;
    std::string version;
};
inline constexpr const char* server_nspace = "pmix-server";

// What PMIx_server_setup_fork gives `rank` of `nspace` from such a server,
// written before it exists: PMIX_NAMESPACE, PMIX_RANK, the server's URI
// under each name a client version reads (PMIX_SERVER_URI41 ... URI21),
// PMIX_SECURITY_MODE (native), PMIX_BFROP_BUFFER_TYPE, PMIX_GDS_MODULE
// (hash), PMIX_SERVER_TMPDIR and PMIX_SYSTEM_TMPDIR, PMIX_HOSTNAME,
// PMIX_VERSION; OpenPMIx 4.2 and 5.0 write these and nothing else for a
// namespace registered as the daemon registers it. The daemon checks it
// against the library's own once the server runs (environment_differences).
std::vector<std::string> planned_environment(const PlannedServer& server, const std::string& nspace,
                                             std::uint32_t rank);
// "NAME: planned X, the library's Y" for each variable that differs, or is
// in one of the two only.
std::vector<std::string> environment_differences(const std::vector<std::string>& planned,
                                                 const std::vector<std::string>& actual);

}  // namespace exitpolicy::pmix_server
