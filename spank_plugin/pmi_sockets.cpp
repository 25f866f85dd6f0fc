// SPDX-License-Identifier: Apache-2.0
// pmi_sockets.cpp - the local tasks' PMI sockets. See pmi_sockets.hpp.
#include "pmi_sockets.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace exitpolicy::spank_plugin {

Result<std::vector<protocol::Fd>> PmiSockets::make(std::size_t tasks)
{
    using R = Result<std::vector<protocol::Fd>>;
    close_all();
    if (tasks > max_tasks)
        return R::fail(std::to_string(tasks) + " tasks on this node, more than " + std::to_string(max_tasks));
    std::vector<protocol::Fd> daemon_ends;
    for (std::size_t i = 0; i < tasks; ++i) {
        int pair[2] = {-1, -1};
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
            const int err = errno;
            close_all();
            return R::fail(std::string("socketpair: ") + std::strerror(err));
        }
        daemon_ends.emplace_back(pair[0]);
        task_ends_.emplace_back(pair[1]);
    }
    return R::ok(std::move(daemon_ends));
}

int PmiSockets::keep_for_task(std::size_t local)
{
    if (local >= task_ends_.size() || !task_ends_[local] || ::fcntl(task_ends_[local].get(), F_SETFD, 0) != 0)
        return -1;
    return task_ends_[local].get();
}

void PmiSockets::forked(std::size_t local)
{
    if (local < task_ends_.size())
        task_ends_[local].reset();
}

void PmiSockets::close_all()
{
    task_ends_.clear();
}

Environment pmi_task_environment(int fd, std::uint32_t rank)
{
    return {{"PMI_FD", std::to_string(fd)}, {"PMI_RANK", std::to_string(rank)}};
}

Environment pmi_step_environment(std::uint32_t ntasks, std::uint32_t job_id, std::uint32_t step_id)
{
    return {{"PMI_SIZE", std::to_string(ntasks)}, {"PMI_JOBID", std::to_string(job_id) + "." + std::to_string(step_id)}};
}

}  // namespace exitpolicy::spank_plugin
