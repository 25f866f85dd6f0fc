// SPDX-License-Identifier: Apache-2.0
// slurmd_spool.cpp - SlurmdSpoolDir from the step's own socket.
#include "slurmd_spool.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <vector>

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

// The path each unix socket this process holds is bound at, as the
// kernel keeps it (getsockname): never text another user can shape, as
// /proc/net/unix is, where a path is printed byte for byte, newlines
// included, and a socket bound at "x\n... INODE /their/dir/n_J.S" reads as
// a second line that names our socket's inode.
std::vector<std::string> held_socket_paths()
{
    std::vector<std::string> paths;
    DIR* fds = ::opendir("/proc/self/fd");
    if (!fds)
        return paths;
    const int own = ::dirfd(fds);
    while (const dirent* e = ::readdir(fds)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == own)
            continue;
        struct stat st{};
        if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;
        sockaddr_un addr{};
        socklen_t len = sizeof(addr);
        if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
            addr.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) || addr.sun_path[0] != '/')
            continue;  // not unix, unbound, or abstract
        const std::size_t max = std::min<std::size_t>(len - offsetof(sockaddr_un, sun_path), sizeof(addr.sun_path));
        paths.emplace_back(addr.sun_path, ::strnlen(addr.sun_path, max));
    }
    ::closedir(fds);
    return paths;
}

}  // namespace

std::optional<std::string> slurmd_spool_dir(std::uint32_t job_id, std::uint32_t step_id)
{
    for (const std::string& path : held_socket_paths()) {
        const auto slash = path.rfind('/');
        if (is_step_socket(std::string_view(path).substr(slash + 1), job_id, step_id))
            return slash == 0 ? std::string("/") : path.substr(0, slash);
    }
    return std::nullopt;
}

std::optional<std::uint32_t> step_het_component(std::uint32_t job_id, std::uint32_t step_id)
{
    const std::string id = "_" + std::to_string(job_id) + "." + std::to_string(step_id) + ".";
    for (const std::string& path : held_socket_paths()) {
        const std::string_view name = std::string_view(path).substr(path.rfind('/') + 1);
        if (!is_step_socket(name, job_id, step_id))
            continue;
        const auto at = name.rfind(id);
        if (at == std::string_view::npos || at + id.size() >= name.size())
            return std::nullopt;  // NODE_JOB.STEP: no component
        std::uint32_t index = 0;
        const auto digits = name.substr(at + id.size());
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
        if (ec != std::errc() || end != digits.data() + digits.size())
            return std::nullopt;
        return index;
    }
    return std::nullopt;
}

std::optional<std::string> slurmd_topology_xml(std::uint32_t job_id, std::uint32_t step_id)
{
    const auto dir = slurmd_spool_dir(job_id, step_id);
    if (!dir)
        return std::nullopt;
    // slurmd's (root's) file in its directory, which no one else may
    // change: every client of the step is given what it says.
    std::string path = *dir + "/hwloc_topo_whole.xml";
    struct stat st{}, in{};
    const auto roots = [](const struct stat& s) { return s.st_uid == 0 && (s.st_mode & (S_IWGRP | S_IWOTH)) == 0; };
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !roots(st) || ::lstat(dir->c_str(), &in) != 0 ||
        !S_ISDIR(in.st_mode) || !roots(in))
        return std::nullopt;
    return path;
}

}  // namespace exitpolicy::spank_plugin
