// SPDX-License-Identifier: Apache-2.0
// planned_environment.cpp - a task's PMIx environment before its server
// exists. See planned_environment.hpp.
#include "protocol/planned_environment.hpp"

#include <cerrno>
#include <cstdio>
#include <map>
#include <vector>

namespace exitpolicy::protocol {

std::optional<LibraryVersion> library_version(std::string_view text)
{
    if (text.starts_with("OpenPMIx "))
        text.remove_prefix(9);
    LibraryVersion v;
    v.text = std::string(text.substr(0, text.find_first_of(" ,(")));
    if (v.text.empty() || std::sscanf(v.text.c_str(), "%d.%d.%d", &v.major, &v.minor, &v.release) != 3)
        return std::nullopt;
    return v;
}

std::optional<LibraryVersion> built_library_version()
{
#ifdef EXITPOLICY_PMIX_LIBRARY_VERSION
    return library_version(EXITPOLICY_PMIX_LIBRARY_VERSION);
#else
    return std::nullopt;
#endif
}

int activation_errno(const LibraryVersion& v)
{
    // 6.0's clients' environment is neither 5.0's nor 6.1's, and has not
    // been seen: its server starts before the tasks.
    if (v.major < 4 || (v.major == 4 && v.minor < 2) || (v.major == 6 && v.minor == 0))
        return 0;
    if (v.major == 4)
        return v.minor == 2 && v.release < 6 ? ECONNABORTED : EAGAIN;
    if (v.major == 5 && v.minor == 0 && v.release < 1)
        return ECONNABORTED;
    return EAGAIN;
}

std::string unplannable_because(char* const* env)
{
    for (char* const* e = env; e && *e; ++e) {
        const std::string_view kv = *e;
        if (kv.starts_with("PMIX_MCA_") && kv != "PMIX_MCA_gds=hash")
            return std::string(kv);
    }
    return "";
}

std::vector<std::string> planned_environment(const PlannedServer& server, const std::string& nspace,
                                             std::uint32_t rank)
{
    auto env = planned_step_environment(server, nspace);
    env.push_back(std::string(rank_variable) + "=" + std::to_string(rank));
    return env;
}

std::vector<std::string> planned_step_environment(const PlannedServer& server, const std::string& nspace)
{
    const std::string uri = std::string(server_nspace) + "." + std::to_string(server.node_id) +
                            ";tcp4://127.0.0.1:" + std::to_string(server.port);
    std::vector<std::string> env{"PMIX_NAMESPACE=" + nspace};
    // Up to 5.0 a fixed list; from 6.1 the names of the library's buffer
    // formats (bfrops v61, v51, v41, v4, v3, v21: what 7.0.0 writes), no
    // longer v2.0's.
    const auto v = library_version(server.version);
    const bool by_formats = v && (v->major > 6 || (v->major == 6 && v->minor >= 1));
    const auto names = by_formats ? std::vector<const char*>{"PMIX_SERVER_URI61", "PMIX_SERVER_URI51",
                                                             "PMIX_SERVER_URI41", "PMIX_SERVER_URI4",
                                                             "PMIX_SERVER_URI3", "PMIX_SERVER_URI21"}
                                  : std::vector<const char*>{"PMIX_SERVER_URI41", "PMIX_SERVER_URI4",
                                                             "PMIX_SERVER_URI3", "PMIX_SERVER_URI2",
                                                             "PMIX_SERVER_URI21"};
    for (const char* name : names)
        env.push_back(std::string(name) + "=" + uri);
    env.insert(env.end(), {"PMIX_SECURITY_MODE=native", "PMIX_BFROP_BUFFER_TYPE=PMIX_BFROP_BUFFER_NON_DESC",
                           "PMIX_GDS_MODULE=hash", "PMIX_SERVER_TMPDIR=" + server.dir,
                           "PMIX_SYSTEM_TMPDIR=" + server.dir, "PMIX_HOSTNAME=" + server.hostname,
                           "PMIX_VERSION=" + server.version});
    return env;
}

std::vector<std::string> environment_differences(const std::vector<std::string>& planned,
                                                 const std::vector<std::string>& actual)
{
    auto split = [](const std::vector<std::string>& env) {
        std::map<std::string, std::string> m;
        for (const auto& kv : env) {
            const auto eq = kv.find('=');
            m[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
        }
        return m;
    };
    const auto p = split(planned);
    const auto a = split(actual);
    std::vector<std::string> out;
    for (const auto& [name, value] : p) {
        const auto it = a.find(name);
        if (it == a.end())
            out.push_back(name + ": planned " + value + ", the library has none");
        else if (it->second != value)
            out.push_back(name + ": planned " + value + ", the library's " + it->second);
    }
    for (const auto& [name, value] : a)
        if (!p.contains(name))
            out.push_back(name + ": not planned, the library's " + value);
    return out;
}

}  // namespace exitpolicy::protocol
