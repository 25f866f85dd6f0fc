// options.cpp - resolving a step's options. See options.hpp.
#include "options.hpp"

namespace exitpolicy::plugin {
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

template <typename T>
Result<T> named(const char* source, Result<T> r)
{
    if (r)
        return r;
    return Result<T>::fail(std::string(source) + ": " + r.error());
}

}  // namespace

Result<bool> check_option(const OptionName& name, std::string_view value, const Config& config)
{
    const std::string source = "--" + std::string(name.option);
    const std::string_view option = name.option;
    if (option == opt_policy.option) {
        auto p = named(source.c_str(), allowed_policy(value, config));
        if (!p)
            return Result<bool>::fail(p.error());
    } else if (option == opt_main_rank.option) {
        auto r = named(source.c_str(), parse_rank(value));
        if (!r)
            return Result<bool>::fail(r.error());
    } else if (option == opt_report.option) {
        auto m = named(source.c_str(), parse_report_mode(value));
        if (!m)
            return Result<bool>::fail(m.error());
    } else if (option == opt_recoverable.option) {
        auto v = named(source.c_str(), parse_switch(value));
        if (!v)
            return Result<bool>::fail(v.error());
    } else if (option == opt_report_json.option) {
        if (value.empty())
            return Result<bool>::fail(source + ": expected a file path (%j and %s expand to the job and step id)");
    }
    return Result<bool>::ok(true);
}

Result<StepOptions> resolve_options(const RawOptions& cli, const RawOptions& env, const Config& config)
{
    StepOptions o;
    o.report = config.report;
    o.policy = config.default_policy;
    o.recoverable = config.recoverable;

    auto pick = [](const std::optional<std::string>& c, const std::optional<std::string>& e, const OptionName& n,
                   std::string& source) -> const std::optional<std::string>& {
        source = c ? "--" + std::string(n.option) : std::string(n.env);
        return c ? c : e;
    };
    std::string source;
    if (const auto& v = pick(cli.policy, env.policy, opt_policy, source)) {
        auto p = named(source.c_str(), allowed_policy(*v, config));
        if (!p)
            return Result<StepOptions>::fail(p.error());
        o.policy = *p;
    }
    if (const auto& v = pick(cli.main_rank, env.main_rank, opt_main_rank, source)) {
        auto r = named(source.c_str(), parse_rank(*v));
        if (!r)
            return Result<StepOptions>::fail(r.error());
        o.main_rank = *r;
        o.main_rank_given = true;
    }
    if (const auto& v = pick(cli.report, env.report, opt_report, source)) {
        auto m = named(source.c_str(), parse_report_mode(*v));
        if (!m)
            return Result<StepOptions>::fail(m.error());
        o.report = *m;
    }
    if (const auto& v = pick(cli.report_json, env.report_json, opt_report_json, source)) {
        if (v->empty())
            return Result<StepOptions>::fail(source +
                                             ": expected a file path (%j and %s expand to the job and step id)");
        o.report_json = *v;
    }
    if (const auto& v = pick(cli.recoverable, env.recoverable, opt_recoverable, source)) {
        auto r = named(source.c_str(), parse_switch(*v));
        if (!r)
            return Result<StepOptions>::fail(r.error());
        o.recoverable = *r;
    }
    return Result<StepOptions>::ok(o);
}

Result<bool> check_main_rank(const StepOptions& options, std::uint32_t ntasks)
{
    if (options.main_rank < ntasks)
        return Result<bool>::ok(true);
    return Result<bool>::fail("main rank " + std::to_string(options.main_rank) + " is not a task of this step: " +
                              "with " + std::to_string(ntasks) + (ntasks == 1 ? " task" : " tasks") +
                              " give --exit-main-rank from 0 to " + std::to_string(ntasks ? ntasks - 1 : 0));
}

std::string expand_report_path(std::string_view pattern, std::uint32_t job_id, std::uint32_t step_id)
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
        case '%': out += '%'; ++i; break;
        default: out += '%'; break;
        }
    }
    return out;
}

}  // namespace exitpolicy::plugin
