// SPDX-License-Identifier: Apache-2.0
// srun.cpp - the local context: srun.
//
// init_post_opt: resolve the step's options (bad ones stop srun before it
// allocates; so do options with srun --async, whose step srun never sees).
// local_user_init: check the main rank against the task count, start the
// front end, hand the nodes the bootstrap variable (a heterogeneous step's
// front end reserves its port in init_post_opt). exit (after
// the step, from srun's atexit): collect the outcomes, decide, report,
// record the verdict in the job's accounting record where the site asks
// (record_verdict=yes), and end srun with the policy's code. Any trouble of
// our own: one warning, and srun keeps Slurm's exit code.
#include "front_end.hpp"
#include "job_record.hpp"
#include "spank_plugin/log.hpp"
#include "spank.hpp"
#include "user_line.hpp"
#include "report_file.hpp"
#include "plugin.hpp"

#include "exitpolicy/report.hpp"
#include "protocol/auth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace exitpolicy::spank_plugin::srun {
namespace {

struct Local {
    std::optional<StepOptions> options;
    // A report was asked for without a policy: decide under max (Slurm's own
    // rule) for the report, and leave srun's exit code to Slurm.
    bool report_only = false;
    // The step gets exitpolicy's PMIx service (no other PMIx server).
    bool pmix = false;
    // The step has a PMI server of Slurm's own: its tasks' aborts are unseen.
    bool slurm_pmi = false;
    std::unique_ptr<FrontEnd> fe;
    // A heterogeneous step (srun A : B): the front end's socket and secret,
    // reserved in init_post_opt (its variable must be in srun's environment
    // before the components take it) until local_user_init starts it.
    bool heterogeneous = false;
    std::optional<Reserved> reserved;
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    std::uint32_t ntasks = 0;
    // srun makes the job for itself (no allocation was there when it
    // started): it ends the job before its exit hooks run.
    bool own_job = false;
};
Local local;

// How long srun may spend recording a verdict (job_record.hpp), in all.
constexpr std::chrono::seconds record_timeout{10};

std::optional<std::string> env_value(const char* name)
{
    const char* v = std::getenv(name);
    if (!v)
        return std::nullopt;
    return std::string(v);
}

void write_json(const std::string& path, const std::string& text)
{
    auto written = write_report_file(path, text);
    if (written)
        return;
    if (refused_report_file(written.error()))
        user_line("warning: the JSON report is not written to %s: %s; give --exit-report-json a path to a plain "
                  "file of yours (srun's exit code is not affected)",
                  path.c_str(), written.error().c_str());
    else
        user_line("warning: cannot write the JSON report to %s: %s (srun's exit code is not affected)", path.c_str(),
                  written.error().c_str());
}

// A number srun's environment holds, whole; none when it holds none.
std::optional<std::uint32_t> env_number(const char* name)
{
    const auto v = env_value(name);
    if (!v || v->empty())
        return std::nullopt;
    char* end = nullptr;
    const unsigned long n = std::strtoul(v->c_str(), &end, 10);
    return *end == '\0' && n <= 0xffffffffUL ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(n))
                                             : std::nullopt;
}

// The job array's ids from srun's environment, as srun takes them for its
// own --output patterns (src/srun/fname.c).
ArrayIds array_ids()
{
    return {env_number("SLURM_ARRAY_JOB_ID"), env_number("SLURM_ARRAY_TASK_ID")};
}

// srun's own command line (/proc/self/cmdline); empty if unreadable.
std::vector<std::string> srun_argv()
{
    std::vector<std::string> argv;
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    for (std::string word; std::getline(in, word, '\0');)
        argv.push_back(word);
    return argv;
}

// Whether srun makes its job for itself: neither an allocation's
// environment (sbatch, salloc) nor srun --jobid names one.
bool makes_own_job(const std::vector<std::string>& argv)
{
    if (env_value("SLURM_JOB_ID") || env_value("SLURM_JOBID"))
        return false;
    return std::none_of(argv.begin(), argv.end(),
                        [](const std::string& a) { return a == "--jobid" || a.rfind("--jobid=", 0) == 0; });
}

// The directory of srun's own executable, where its sacct and sacctmgr are.
std::string srun_dir()
{
    char path[4096];
    const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return "/usr/bin";
    const std::string exe(path, static_cast<std::size_t>(n));
    return exe.substr(0, exe.rfind('/'));
}

// The verdict in the job's accounting record; trouble is one warning.
void record(const StepOutcomes& step, const Settings& settings, const Decision& decision)
{
    VerdictRecord r;
    r.job_id = local.job_id;
    r.code = decision.code;
    r.comment = verdict_comment(policy_name(settings.policy), decision.code, explain(step, settings, decision));
    r.job_ended = local.own_job;
    r.bin_dir = srun_dir();
    if (auto done = record_verdict(r, record_timeout); !done)
        user_line("warning: the verdict is not in the job's accounting record: %s (srun's exit code is not "
                  "affected)",
                  done.error().c_str());
}

// A heterogeneous step (srun A : B): srun calls init_post_opt once per
// component, takes each component's environment from its own before
// local_user_init, and runs that once, for one of the components
// (src/srun/srun_job.c, pre_launch_srun_job). The front end's port and
// secret go into the environment now; each component's nodes say which
// component they serve (spank_plugin/het_placement.hpp). No PMIx service.
void reserve_front_end()
{
    auto reserved = FrontEnd::reserve(state().config.port_range);
    if (!reserved) {
        user_line("warning: %s; srun keeps Slurm's exit code", reserved.error().c_str());
        return;
    }
    const std::string bootstrap =
        "1:" + std::to_string(reserved->port) + ":" + protocol::to_hex(reserved->secret) + ":het";
    if (::setenv(bootstrap_env, bootstrap.c_str(), 1) != 0) {
        user_line("warning: cannot export the bootstrap variable; srun keeps Slurm's exit code");
        return;
    }
    local.reserved = std::move(*reserved);
}

}  // namespace

int init_post_opt(spank_t)
{
    State& st = state();
    const RawOptions env = options_from_env(env_value);
    if (st.disabled) {
        if (st.cli.any() || env.any())
            user_line("warning: the plugin is disabled by a plugstack.conf error (see above or the Slurm log; "
                      "ask your administrator); --exit-* options and SLURM_EXIT_* variables are ignored");
        return 0;
    }
    auto options = resolve_options(st.cli, env, st.config);
    if (!options) {
        log::error("%s", options.error().c_str());
        return -1;
    }
    // srun --async: the step manager launches the step and srun returns at
    // once; no task's end, and no code but 0, ever reaches srun. Asked for
    // on the command line, that is refused before anything is submitted;
    // from the environment (a batch script's policy for its every step),
    // the step runs as if none was asked, with one line that says so; a
    // site's default, silently.
    if (asks_async(srun_argv())) {
        constexpr const char* why = "srun --async returns before the step runs, so no task's end reaches it; "
                                    "its exit code is in sacct (-o ExitCode,DerivedExitCode)";
        if (st.cli.any()) {
            log::error("--exit-* options do not apply to srun --async: %s. Run the step without --async to "
                       "use them",
                       why);
            return -1;
        }
        if (env.any())
            user_line("warning: SLURM_EXIT_* variables are ignored for this step: %s", why);
        return 0;
    }
    local.heterogeneous = is_heterogeneous(srun_argv());
    if (!options->policy) {
        const bool report_asked = !options->report_json.empty() ||
                                  ((st.cli.report || env.report) && options->report == ReportMode::always);
        if (report_asked) {
            options->policy = Policy::max;
            local.report_only = true;
        } else if (options->main_rank_given) {
            // Named as the user gave it: on the command line or in the environment.
            const std::string given = st.cli.main_rank ? std::string("--") + opt_main_rank.option : opt_main_rank.env;
            user_line("warning: %s has no effect without --%s (or %s)", given.c_str(), opt_policy.option,
                      opt_policy.env);
        }
    }
    local.options = *options;
    local.own_job = makes_own_job(srun_argv());
    if (local.heterogeneous && local.options->policy && !local.reserved)
        reserve_front_end();
    return 0;
}

// Whether this step has a PMI server of Slurm's own (mpi/pmix, mpi/pmi2,
// ...): srun's MPI plugin (--mpi, SLURM_MPI_TYPE, MpiDefault) is in
// SLURM_MPI_TYPE by now.
bool slurm_serves_pmi()
{
    const char* mpi = std::getenv("SLURM_MPI_TYPE");
    return mpi && *mpi && std::string_view(mpi) != "none";
}

namespace {

// A heterogeneous step's front end, on what init_post_opt reserved. SPANK
// tells of one component only: the whole step is in srun's environment by
// now, as srun gives it to every component's tasks (SLURM_JOB_ID, the
// first component's job; SLURM_NTASKS, SLURM_NNODES, the sums).
int start_heterogeneous(spank_t sp)
{
    if (!local.reserved)
        return 0;  // init_post_opt said why
    local.job_id = env_number("SLURM_JOB_ID").value_or(0);
    local.ntasks = env_number("SLURM_NTASKS").value_or(0);
    const std::uint32_t nnodes = env_number("SLURM_NNODES").value_or(0);
    if (!item(sp, S_JOB_STEPID, local.step_id) || local.job_id == 0 || local.ntasks == 0 || nnodes == 0) {
        user_line("warning: the heterogeneous step's size is unknown; srun keeps Slurm's exit code");
        local.reserved.reset();
        return 0;
    }
    if (auto ok = check_main_rank(*local.options, local.ntasks); !ok) {
        log::error("%s", ok.error().c_str());
        return -1;
    }
    FrontEndSetup setup{local.job_id, local.step_id, local.ntasks, nnodes, state().config.port_range,
                        state().config.fanout, state().config.lost_code};
    setup.heterogeneous = true;
    auto fe = FrontEnd::start(setup, std::move(local.reserved));
    local.reserved.reset();
    if (!fe) {
        user_line("warning: %s; srun keeps Slurm's exit code", fe.error().c_str());
        return 0;
    }
    local.fe = std::move(*fe);
    log::verbose("front end for heterogeneous step %u.%u on port %u, %u tasks on %u nodes", local.job_id,
                 local.step_id, local.fe->port(), local.ntasks, nnodes);
    return 0;
}

}  // namespace

int local_user_init(spank_t sp)
{
    if (!local.options)
        return 0;
    local.slurm_pmi = slurm_serves_pmi();
    if (local.heterogeneous)
        return start_heterogeneous(sp);
    local.pmix = state().config.pmix == PmixMode::automatic && !local.slurm_pmi;
    if (!local.options->policy && !local.pmix)
        return 0;
    std::uint32_t nnodes = 0;
    if (!item(sp, S_JOB_ID, local.job_id) || !item(sp, S_JOB_STEPID, local.step_id) ||
        !item(sp, S_JOB_TOTAL_TASK_COUNT, local.ntasks) || !item(sp, S_JOB_NNODES, nnodes)) {
        user_line("warning: the step's size is unknown; srun keeps Slurm's exit code");
        return 0;
    }
    if (auto ok = check_main_rank(*local.options, local.ntasks); local.options->policy && !ok) {
        log::error("%s", ok.error().c_str());
        return -1;
    }
    FrontEndSetup setup{local.job_id, local.step_id, local.ntasks, nnodes, state().config.port_range,
                        state().config.fanout, state().config.lost_code};
    setup.recoverable = local.options->recoverable;
    setup.teardown_grace = std::chrono::milliseconds(state().config.teardown_grace_ms);
    auto fe = FrontEnd::start(setup);
    if (!fe) {
        user_line("warning: %s; srun keeps Slurm's exit code", fe.error().c_str());
        return 0;
    }
    local.fe = std::move(*fe);
    std::string bootstrap = "1:" + std::to_string(local.fe->port()) + ":" + protocol::to_hex(local.fe->secret());
    if (local.pmix)
        bootstrap += ":pmix:" + std::to_string(state().config.fanout);
    // srun copies its environment into the step's: spank_setenv is refused here.
    if (::setenv(bootstrap_env, bootstrap.c_str(), 1) != 0) {
        user_line("warning: cannot export the bootstrap variable; srun keeps Slurm's exit code");
        local.fe.reset();
        return 0;
    }
    log::verbose("front end for step %u.%u on port %u, %u tasks on %u nodes%s", local.job_id, local.step_id,
                 local.fe->port(), local.ntasks, nnodes, local.pmix ? ", PMIx service" : "");
    return 0;
}

int exit(spank_t)
{
    if (!local.fe)
        return 0;
    const State& st = state();
    const StepOptions& opts = *local.options;
    Collected got = local.fe->finish(std::chrono::milliseconds(st.config.grace_ms));
    local.fe.reset();
    got.step.aborts_unseen = local.slurm_pmi;
    for (const auto& p : got.problems)
        log::verbose("front end: %s", p.c_str());
    // No policy of the user's: srun's code is Slurm's, but for an abort
    // that is the root cause in a step our PMIx serves (as under Slurm's
    // mpi/pmix, MPI_Abort(comm, 7) makes srun exit 7).
    const bool user_policy = opts.policy && !local.report_only;
    auto slurms_code = [&](const Decision& d) {
        if (local.pmix && !got.missing && d.reason == Reason::aborted) {
            std::fflush(nullptr);
            ::_exit(d.code);
        }
        return 0;
    };
    if (!opts.policy) {
        if (auto d = decide(got.step, Settings{Policy::max, 0, st.config.lost_code}); d)
            return slurms_code(*d);
        return 0;
    }

    if (got.missing && got.nodes_reporting < got.nnodes) {
        user_line("warning: %u of %u nodes never reported (see the Slurm log of those nodes); "
                  "srun keeps Slurm's exit code",
                  got.nnodes - got.nodes_reporting, got.nnodes);
        return 0;
    }
    const Settings settings{*opts.policy, opts.main_rank, st.config.lost_code};
    auto decision = decide(got.step, settings);
    if (!decision) {
        user_line("warning: %s; srun keeps Slurm's exit code", decision.error().c_str());
        return 0;
    }
    if (should_report(opts.report, !local.report_only, *decision)) {
        const std::string text = render_summary(got.step, settings, *decision);
        std::fputs(text.c_str(), stderr);
    }
    if (!opts.report_json.empty()) {
        const ReportContext ctx{std::to_string(local.job_id), std::to_string(local.step_id)};
        write_json(expand_report_path(opts.report_json, local.job_id, local.step_id, array_ids()),
                   render_json(got.step, settings, *decision, ctx));
    }
    if (!user_policy)
        return slurms_code(*decision);
    if (st.config.record_verdict)
        record(got.step, settings, *decision);
    // _exit sets srun's code and skips later atexit handlers: everything of
    // ours is done, and stdio is flushed first so that no output is lost.
    std::fflush(nullptr);
    ::_exit(decision->code);
}

}  // namespace exitpolicy::spank_plugin::srun
