// SPDX-License-Identifier: Apache-2.0
// slurmd_spool.cpp - SlurmdSpoolDir from the step's own socket.
#include "slurmd_spool.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace exitpolicy::spank_plugin {

namespace {

// Whether `name` is NODE_JOB.STEP or NODE_JOB.STEP.HETCOMP for this step.
bool is_step_socket(std::string_view name, std::uint32_t job_id, std::uint32_t step_id)
{
    const std::string id = "_" + std::to_string(job_id) + "." + std::to_string(step_id);
    const auto at = name.rfind(id);
    if (at == std::string_view::npos || at == 0)
        return false;
    std::string_view rest = name.substr(at + id.size());
    if (rest.empty())
        return true;
    if (rest.front() != '.' || rest.size() == 1)
        return false;
    for (char c : rest.substr(1))
        if (!std::isdigit(static_cast<unsigned char>(c)))
            return false;
    return true;
}

// The inodes of the sockets this process holds.
std::set<unsigned long> held_sockets()
{
    std::set<unsigned long> inodes;
    DIR* fds = ::opendir("/proc/self/fd");
    if (!fds)
        return inodes;
    while (const dirent* e = ::readdir(fds)) {
        char link[64] = {};
        const std::string path = std::string("/proc/self/fd/") + e->d_name;
        const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        const std::string_view target(link, static_cast<std::size_t>(n));
        constexpr std::string_view prefix = "socket:[";
        if (target.substr(0, prefix.size()) != prefix || target.back() != ']')
            continue;
        try {
            inodes.insert(std::stoul(std::string(target.substr(prefix.size(), target.size() - prefix.size() - 1))));
        } catch (...) {
        }
    }
    ::closedir(fds);
    return inodes;
}

}  // namespace

std::optional<std::string> spool_dir_from(std::string_view net_unix, const std::set<unsigned long>& held,
                                          std::uint32_t job_id, std::uint32_t step_id)
{
    // "Num RefCount Protocol Flags Type St Inode Path", one socket a line.
    std::istringstream lines{std::string(net_unix)};
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string num, refs, protocol, flags, type, state, path;
        unsigned long inode = 0;
        if (!(fields >> num >> refs >> protocol >> flags >> type >> state >> inode >> path))
            continue;
        if (path.empty() || path.front() != '/' || !held.contains(inode))
            continue;
        const auto slash = path.rfind('/');
        if (!is_step_socket(std::string_view(path).substr(slash + 1), job_id, step_id))
            continue;
        return slash == 0 ? std::string("/") : path.substr(0, slash);
    }
    return std::nullopt;
}

std::optional<std::string> slurmd_spool_dir(std::uint32_t job_id, std::uint32_t step_id)
{
    const auto held = held_sockets();
    if (held.empty())
        return std::nullopt;
    std::ifstream in("/proc/net/unix");
    std::ostringstream text;
    text << in.rdbuf();
    if (!in)
        return std::nullopt;
    return spool_dir_from(text.str(), held, job_id, step_id);
}

std::optional<std::string> slurmd_topology_xml(std::uint32_t job_id, std::uint32_t step_id)
{
    const auto dir = slurmd_spool_dir(job_id, step_id);
    if (!dir)
        return std::nullopt;
    std::string path = *dir + "/hwloc_topo_whole.xml";
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        return std::nullopt;
    return path;
}

}  // namespace exitpolicy::spank_plugin
