// SPDX-License-Identifier: Apache-2.0
// tool_upcalls.cpp - job control and log; spawn is refused.
#include "upcalls.hpp"

#include "pmix_server/log.hpp"

#include <string>
#include <vector>

namespace exitpolicy::pmix_server {

// Terminating or killing the whole job (no targets, or the namespace's
// wildcard) ends the step on every node through the FE; single processes
// are not supported.
pmix_status_t on_job_control(const pmix_proc_t* requestor, const pmix_proc_t targets[], size_t ntargets,
                             const pmix_info_t directives[], size_t ndirs, pmix_info_cbfunc_t cbfunc,
                             void* cbdata) noexcept
{
    return upcall("job_control", cbfunc, cbdata, [&](StepServices& step, InfoCompletion& done) {
        bool end = false;
        for (size_t i = 0; i < ndirs; ++i)
            if ((PMIX_CHECK_KEY(&directives[i], PMIX_JOB_CTRL_TERMINATE) ||
                 PMIX_CHECK_KEY(&directives[i], PMIX_JOB_CTRL_KILL)) &&
                PMIX_INFO_TRUE(&directives[i]))
                end = true;
        if (!end)
            return done.returned(PMIX_ERR_NOT_SUPPORTED);
        for (size_t i = 0; i < ntargets; ++i)
            if (targets[i].rank != PMIX_RANK_WILDCARD)
                return done.returned(PMIX_ERR_NOT_SUPPORTED);
        const std::uint32_t rank = requestor->rank;
        step.post([&step, rank, done]() mutable {
            step.terminate_step("rank " + std::to_string(rank) + " asked to terminate the job");
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
}

// PMIx_Log: stderr/stdout lines go to srun's stderr as the task wrote them
// (Open MPI 5 sends its help messages, MPI_Abort's banner among them, this
// way), the rest to our log.
// The upcall returns nothing: its answer is always cbfunc's.
void on_log(const pmix_proc_t* client, const pmix_info_t data[], size_t ndata, const pmix_info_t[], size_t,
            pmix_op_cbfunc_t cbfunc, void* cbdata) noexcept
{
    const pmix_status_t rc = upcall("log", cbfunc, cbdata, [&](StepServices& step, OpCompletion& done) {
        std::vector<std::string> lines;
        const std::uint32_t rank = client->rank;
        for (size_t i = 0; i < ndata; ++i) {
            if (data[i].value.type != PMIX_STRING || !data[i].value.data.string)
                continue;
            const std::string text = data[i].value.data.string;
            if (PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDERR) || PMIX_CHECK_KEY(&data[i], PMIX_LOG_STDOUT))
                lines.push_back(text);
            else
                log::info("rank %u logs %s: %s", client->rank, data[i].key, text.c_str());
        }
        step.post([&step, rank, lines = std::move(lines), done]() mutable {
            for (const auto& line : lines)
                step.task_log(rank, line);
            done.answer(PMIX_SUCCESS);
        });
        return PMIX_SUCCESS;
    });
    // Answered by the return value: no caller reads it here, so cbfunc.
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED && cbfunc)
        cbfunc(rc, cbdata);
}

pmix_status_t on_spawn(const pmix_proc_t*, const pmix_info_t[], size_t, const pmix_app_t[], size_t,
                       pmix_spawn_cbfunc_t, void*) noexcept
{
    return PMIX_ERR_NOT_SUPPORTED;
}

}  // namespace exitpolicy::pmix_server
