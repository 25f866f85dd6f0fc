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
