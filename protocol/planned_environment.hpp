// SPDX-License-Identifier: Apache-2.0
// planned_environment.hpp - the PMIx environment of a task whose server does
// not exist yet (pmix_server/socket_activation.hpp): what
// PMIx_server_setup_fork will give it, written by slurmstepd before the node
// daemon runs, and its check against the library's own once the server runs.
// Pure: no PMIx here (slurmstepd does not load the library).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::protocol {

// An OpenPMIx library's version as PMIx_server_setup_fork gives it to its
// clients in PMIX_VERSION: PMIx_Get_version() says "OpenPMIx 4.2.2rc2
// (PMIx Standard: 4.2, ...)", PMIX_VERSION is "4.2.2rc2".
struct LibraryVersion {
    int major = 0, minor = 0, release = 0;
    std::string text;
};
// From PMIx_Get_version()'s text ("OpenPMIx 4.2.2rc2 (...)") or
// PMIX_VERSION's ("4.2.2rc2"); nothing for anything else.
std::optional<LibraryVersion> library_version(std::string_view text);
// The library the project was built with (EXITPOLICY_PMIX_LIBRARY_VERSION,
// from PMIx_Get_version() at configure time), which slurmstepd plans for;
// nothing if the build could not run it.
std::optional<LibraryVersion> built_library_version();

// What the node daemon's gate answers the library's accept() with
// (pmix_server/socket_activation.hpp), or 0 for a library it was not made
// for (before 4.2, and 6.0, whose clients' environment was never seen),
// whose server then starts before the tasks. OpenPMIx
// 4.2.0-4.2.5 and 5.0.0 accept on a listener thread of their own, which
// goes on after ECONNABORTED and ends after EAGAIN (ptl_base_listener.c:
// "errno != EAGAIN || errno != EWOULDBLOCK" is always true); 4.2.6 and
// later, 5.0.1 and later, 6.x and 7.x (the same connection_event_handler
// to this day) accept on the library's event thread, which returns quietly
// on EAGAIN and closes the listener on anything else. What the clients'
// environment must hold is checked against the library's own by the
// daemon on every version (Daemon::check_planned_environment).
int activation_errno(const LibraryVersion& v);

// Why the tasks' environment cannot be planned in a process environment
// `env` (the node daemon's is slurmstepd's PATH, TZ and PMIX_MCA_*), or ""
// if it can: a site's PMIX_MCA_* (other than gds=hash, which the plan
// sets) may change what the library gives its clients, and then the
// library writes it, as it always did.
std::string unplannable_because(char* const* env);

// Where a node's PMIx server listens when its socket was reserved before it
// started (socket_activation.hpp): 127.0.0.1:port, as server rank node_id
// of the namespace "pmix-server", with the library's version and job data
// by gds/hash.
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
// under each name a client version reads (PMIX_SERVER_URI41 ... URI21;
// from 6.1 those of its buffer formats: URI61 ... URI21, not URI2),
// PMIX_SECURITY_MODE (native), PMIX_BFROP_BUFFER_TYPE, PMIX_GDS_MODULE
// (hash), PMIX_SERVER_TMPDIR and PMIX_SYSTEM_TMPDIR, PMIX_HOSTNAME,
// PMIX_VERSION; OpenPMIx 4.2, 5.0 and 7.0 write these and nothing else for
// a namespace registered as the daemon registers it. The daemon checks it
// against the library's own once the server runs (environment_differences).
std::vector<std::string> planned_environment(const PlannedServer& server, const std::string& nspace,
                                             std::uint32_t rank);
// The same but PMIX_RANK (rank_variable): what every task of the node has
// alike.
std::vector<std::string> planned_step_environment(const PlannedServer& server, const std::string& nspace);
inline constexpr const char* rank_variable = "PMIX_RANK";
// "NAME: planned X, the library's Y" for each variable that differs, or is
// in one of the two only.
std::vector<std::string> environment_differences(const std::vector<std::string>& planned,
                                                 const std::vector<std::string>& actual);

}  // namespace exitpolicy::protocol
