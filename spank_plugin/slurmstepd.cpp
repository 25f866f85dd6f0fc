// slurmstepd.cpp - the remote context: slurmstepd, once per node per step,
// as root.
//
// init_post_opt: in a step that srun's front end serves (the bootstrap
// variable is set), connect to the FE once and authenticate; in a batch
// step, pass sbatch's --exit-* options on to the job script's srun as
// SLURM_EXIT_* variables. task_exit: send the task's outcome on that
// connection and wait (bounded) for its acknowledgement. No threads; any
// trouble is logged once and the step goes on as without us.
#include "log.hpp"
#include "outcome_sink.hpp"
#include "plugin.hpp"

#include <slurm/slurm.h>

#include <charconv>
#include <memory>
#include <vector>
#include <cstdlib>
#include <ctime>
#include <string>
#include <unistd.h>

namespace exitpolicy::plugin::slurmstepd {
namespace {

constexpr std::chrono::milliseconds connect_timeout{5000};
constexpr std::chrono::milliseconds ack_timeout{2000};

struct Remote {
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    // Tried in order for each outcome; empty when no front end serves this step.
    std::vector<std::unique_ptr<OutcomeSink>> sinks;
    bool failure_logged = false;  // one error line per step, not one per task
};
Remote remote;

std::optional<std::string> job_env(spank_t sp, const char* name)
{
    char buf[4096];
    if (spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_SUCCESS)
        return std::nullopt;
    return std::string(buf);
}

template <typename T>
bool item(spank_t sp, spank_item_t which, T& out)
{
    return spank_get_item(sp, which, &out) == ESPANK_SUCCESS;
}

// "1:PORT:SECRET"
bool parse_bootstrap(const std::string& text, LinkSetup& setup)
{
    const auto first = text.find(':');
    const auto second = text.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos || text.substr(0, first) != "1")
        return false;
    const std::string port = text.substr(first + 1, second - first - 1);
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), setup.port);
    if (ec != std::errc() || ptr != port.data() + port.size() || setup.port == 0)
        return false;
    auto secret = wire::secret_from_hex(text.substr(second + 1));
    if (!secret)
        return false;
    setup.secret = *secret;
    return true;
}

// Batch step: sbatch's options become the job script's environment, where
// every srun of the job finds them as its defaults.
void forward_batch_options(spank_t sp)
{
    const RawOptions& cli = state().cli;
    const std::pair<const std::optional<std::string>*, const char*> vars[] = {
        {&cli.policy, opt_policy.env},
        {&cli.main_rank, opt_main_rank.env},
        {&cli.report, opt_report.env},
        {&cli.report_json, opt_report_json.env},
    };
    for (const auto& [value, name] : vars)
        if (*value && spank_setenv(sp, name, (*value)->c_str(), 1) != ESPANK_SUCCESS)
            log::error("cannot set %s for the job script", name);
}

}  // namespace

int init_post_opt(spank_t sp)
{
    if (state().disabled)
        return 0;
    std::uint32_t job_id = 0, step_id = 0;
    if (!item(sp, S_JOB_ID, job_id) || !item(sp, S_JOB_STEPID, step_id))
        return 0;
    if (step_id == SLURM_BATCH_SCRIPT) {
        forward_batch_options(sp);
        return 0;
    }
    auto bootstrap = job_env(sp, bootstrap_env);
    if (!bootstrap)
        return 0;
    // The tasks need not see the step's secret.
    spank_unsetenv(sp, bootstrap_env);

    LinkSetup setup;
    setup.job_id = job_id;
    setup.step_id = step_id;
    if (!parse_bootstrap(*bootstrap, setup)) {
        log::error("step %u.%u: malformed %s; this node's exit codes are left to Slurm", job_id, step_id,
                   bootstrap_env);
        return 0;
    }
    auto host = job_env(sp, "SLURM_SRUN_COMM_HOST");
    std::uint32_t local_tasks = 0;
    if (!host || !item(sp, S_JOB_NODEID, setup.node_id) || !item(sp, S_JOB_LOCAL_TASK_COUNT, local_tasks)) {
        log::error("step %u.%u: srun's address or this node's place in the step is unknown; this node's exit "
                   "codes are left to Slurm",
                   job_id, step_id);
        return 0;
    }
    setup.host = *host;
    for (std::uint32_t local_id = 0; local_id < local_tasks; ++local_id) {
        std::uint32_t global_id = 0;
        if (spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, local_id, &global_id) == ESPANK_SUCCESS)
            setup.ranks.push_back(global_id);
    }
    // slurmstepd's own environment names its node (the job's may carry a
    // stale SLURMD_NODENAME, e.g. from a batch script).
    if (const char* name = ::getenv("SLURMD_NODENAME"); name && *name) {
        setup.hostname = name;
    } else {
        char buf[256] = {};
        ::gethostname(buf, sizeof(buf) - 1);
        setup.hostname = buf;
    }
    remote.job_id = job_id;
    remote.step_id = step_id;
    const std::string fe = setup.host + ":" + std::to_string(setup.port);
    auto sink = std::make_unique<FrontEndSink>(std::move(setup), connect_timeout, ack_timeout);
    if (auto opened = sink->open(); !opened)
        log::error("step %u.%u: cannot reach srun at %s: %s; will retry at the first task exit", job_id, step_id,
                   fe.c_str(), opened.error().c_str());
    else
        log::debug("step %u.%u: connected to srun's front end at %s", job_id, step_id, fe.c_str());
    remote.sinks.push_back(std::move(sink));
    return 0;
}

int task_exit(spank_t sp)
{
    if (remote.sinks.empty())
        return 0;
    wire::Outcome o;
    int status = 0;
    pid_t pid = 0;
    if (!item(sp, S_TASK_GLOBAL_ID, o.rank) || !item(sp, S_TASK_EXIT_STATUS, status))
        return 0;
    if (item(sp, S_TASK_PID, pid))
        o.pid = pid;
    o.wait_status = status;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    o.end_time_us = std::int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;

    std::string errors;
    for (auto& sink : remote.sinks) {
        auto delivered = sink->deliver(o);
        if (delivered)
            return 0;
        errors += (errors.empty() ? "" : "; ") + delivered.error();
    }
    if (!remote.failure_logged)
        log::error("step %u.%u: cannot deliver rank %u's exit to srun (%s); srun will keep Slurm's exit code",
                   remote.job_id, remote.step_id, o.rank, errors.c_str());
    else
        log::debug("step %u.%u: rank %u's exit not delivered: %s", remote.job_id, remote.step_id, o.rank,
                   errors.c_str());
    remote.failure_logged = true;
    return 0;
}

int exit(spank_t)
{
    remote.sinks.clear();
    return 0;
}

}  // namespace exitpolicy::plugin::slurmstepd
