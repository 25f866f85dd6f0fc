// SPDX-License-Identifier: Apache-2.0
// options.cpp - resolving a step's options. See options.hpp.
#include "options.hpp"

#include <algorithm>

namespace exitpolicy::spank_plugin {
namespace {

Result<Policy> allowed_policy(std::string_view value, const Config& config)
{
    auto p = parse_policy(value);
    if (!p)
        return p;
    if (!config.allows(*p))
        return Result<Policy>::fail("exit policy '" + std::string(value) + "' is not allowed on this cluster; " +
                                    "allowed: " + config.allowed_list());
    return p;
}

// Reads one value of an option into o; the error says what was expected,
// without the option's name.
Result<bool> apply(OptionId id, std::string_view value, const Config& config, StepOptions& o)
{
    switch (id) {
    case OptionId::policy: {
        auto p = allowed_policy(value, config);
        if (!p)
            return Result<bool>::fail(p.error());
        o.policy = *p;
        break;
    }
    case OptionId::main_rank: {
        auto r = parse_rank(value);
        if (!r)
            return Result<bool>::fail(r.error());
        o.main_rank = *r;
        o.main_rank_given = true;
        break;
    }
    case OptionId::report: {
        auto m = parse_report_mode(value);
        if (!m)
            return Result<bool>::fail(m.error());
        o.report = *m;
        break;
    }
    case OptionId::report_json:
        if (value.empty())
            return Result<bool>::fail("expected a file path (%j and %s expand to the job and step id)");
        o.report_json = std::string(value);
        break;
    case OptionId::recoverable: {
        auto v = parse_switch(value);
        if (!v)
            return Result<bool>::fail(v.error());
        o.recoverable = *v;
        break;
    }
    }
    return Result<bool>::ok(true);
}

}  // namespace

Result<bool> check_option(const OptionSpec& spec, std::string_view value, const Config& config)
{
    StepOptions scratch;
    if (auto ok = apply(spec.id, value, config, scratch); !ok)
        return Result<bool>::fail("--" + std::string(spec.option) + ": " + ok.error());
    return Result<bool>::ok(true);
}

Result<StepOptions> resolve_options(const RawOptions& cli, const RawOptions& env, const Config& config)
{
    StepOptions o;
    o.report = config.report;
    o.policy = config.default_policy;
    o.recoverable = config.recoverable;
    for (const auto& spec : option_table) {
        const auto& given = cli.*spec.value ? cli.*spec.value : env.*spec.value;
        if (!given)
            continue;
        if (auto ok = apply(spec.id, *given, config, o); !ok) {
            const std::string source = cli.*spec.value ? "--" + std::string(spec.option) : std::string(spec.env);
            return Result<StepOptions>::fail(source + ": " + ok.error());
        }
    }
    return Result<StepOptions>::ok(o);
}

std::vector<std::pair<std::string, std::string>> run_through_environment(std::uint32_t ntasks)
{
    return {{"OMPI_MCA_mpi_ft_enable", "1"},
            {"OMPI_MCA_coll", "^han"},
            // Open MPI adds every peer at MPI_Init when the world is smaller
            // than the cutoff (ompi/proc/proc.c: num_procs < cutoff).
            {"OMPI_MCA_mpi_add_procs_cutoff", std::to_string(std::uint64_t{ntasks} + 1)}};
}

Result<bool> check_main_rank(const StepOptions& options, std::uint32_t ntasks)
{
    if (options.main_rank < ntasks)
        return Result<bool>::ok(true);
    return Result<bool>::fail("main rank " + std::to_string(options.main_rank) + " is not a task of this step: " +
                              "with " + std::to_string(ntasks) + (ntasks == 1 ? " task" : " tasks") +
                              " give --" + opt_main_rank.option + " (or " + opt_main_rank.env + ") from 0 to " +
                              std::to_string(ntasks ? ntasks - 1 : 0));
}

std::string option_help(const OptionSpec& spec)
{
    std::string help = spec.help;
    constexpr std::string_view policies = "{policies}";
    if (const auto at = help.find(policies); at != std::string::npos)
        help.replace(at, policies.size(), valid_policies());
    return help;
}

namespace {

// srun's options whose value may be the next word (required_argument in
// Slurm 26.05's src/common/slurm_opt.c, the first release with --async),
// short and long; and ours (an option with an argument in option_table).
constexpr std::string_view srun_short_with_value = "ABCDFGJLMNSTWbcdeimnopqrtwx";
constexpr std::string_view srun_long_with_value[] = {
    "accel-bind", "account", "acctg-freq", "autocomplete", "bb", "bbf", "bcast-exclude", "begin", "chdir",
    "cluster", "cluster-constraint", "clusters", "comment", "constraint", "container", "container-id",
    "container-type", "context", "core-spec", "cores-per-socket", "cpu-bind", "cpu-freq", "cpu_bind",
    "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution", "epilog", "error",
    "exclude", "export", "extra", "extra-node-info", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
    "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "het-group", "hint", "ignore-signals", "input",
    "job-name", "jobid", "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu",
    "mem-per-gpu", "mem-update", "mincpus", "mpi", "msg-timeout", "network", "nodefile", "nodelist", "nodes",
    "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "ntasks-per-tres",
    "open-mode", "output", "pack-group", "partition", "prefer", "priority", "profile", "prolog", "qos",
    "relative", "reservation", "resources", "segment", "signal", "slurmd-debug", "sockets-per-node", "switches",
    "task-epilog", "task-prolog", "tasks-per-node", "thread-spec", "threads", "threads-per-core", "time",
    "time-min", "tmp", "treewidth", "tres-bind", "tres-per-task", "wait", "wckey"};

// Whether long option `name` (without "--", without "=VALUE") takes the
// next word as its value: it or the option it abbreviates (getopt_long
// takes a unique prefix).
bool long_takes_next(std::string_view name)
{
    const auto names_it = [name](std::string_view option) { return option.starts_with(name); };
    if (std::any_of(std::begin(srun_long_with_value), std::end(srun_long_with_value), names_it))
        return true;
    return std::any_of(std::begin(option_table), std::end(option_table),
                       [&](const OptionSpec& spec) { return spec.arg && names_it(spec.option); });
}

}  // namespace

bool asks_async(const std::vector<std::string>& argv)
{
    for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string& word = argv[i];
        // getopt_long takes a unique prefix: no other option of srun's
        // begins with "as".
        if (word.size() >= 4 && std::string_view("--async").starts_with(word))
            return true;
        if (word == "--" || word.size() < 2 || word[0] != '-')
            return false;
        if (word[1] == '-') {
            if (word.find('=') == std::string::npos && long_takes_next(std::string_view(word).substr(2)))
                ++i;
            continue;
        }
        // -vN 2: flags, then an option whose value is the rest of the word
        // or, when nothing is left, the next word.
        for (std::size_t c = 1; c < word.size(); ++c)
            if (srun_short_with_value.find(word[c]) != std::string_view::npos) {
                if (c + 1 == word.size())
                    ++i;
                break;
            }
    }
    return false;
}

bool is_heterogeneous(const std::vector<std::string>& argv)
{
    return argv.size() > 1 && std::find(argv.begin() + 1, argv.end(), std::string(":")) != argv.end();
}

std::string expand_report_path(std::string_view pattern, std::uint32_t job_id, std::uint32_t step_id,
                               const ArrayIds& array)
{
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] != '%' || i + 1 == pattern.size()) {
            out += pattern[i];
            continue;
        }
        switch (pattern[i + 1]) {
        case 'j': out += std::to_string(job_id); ++i; break;
        case 's': out += std::to_string(step_id); ++i; break;
        case 'A': out += std::to_string(array.job.value_or(job_id)); ++i; break;
        case 'a': out += std::to_string(array.task.value_or(0)); ++i; break;
        case '%': out += '%'; ++i; break;
        default: out += '%'; break;
        }
    }
    return out;
}

}  // namespace exitpolicy::spank_plugin
