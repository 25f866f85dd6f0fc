// config.cpp - plugstack.conf arguments. See config.hpp.
#include "config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace exitpolicy::plugin {
namespace {

template <typename T>
std::optional<T> number(std::string_view text, T lo, T hi)
{
    T value{};
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || value < lo || value > hi)
        return std::nullopt;
    return value;
}

std::string bad(std::string_view key, std::string_view value, std::string_view expected)
{
    return "plugstack.conf argument " + std::string(key) + "=" + std::string(value) + " is invalid: " +
           std::string(expected);
}

}  // namespace

bool Config::allows(Policy policy) const noexcept
{
    return allowed_policies.empty() ||
           std::find(allowed_policies.begin(), allowed_policies.end(), policy) != allowed_policies.end();
}

std::string Config::allowed_list() const
{
    if (allowed_policies.empty())
        return "all policies";
    std::string list;
    for (Policy p : allowed_policies) {
        if (!list.empty())
            list += ", ";
        list += policy_name(p);
    }
    return list;
}

std::string_view config_usage() noexcept
{
    return "default_policy=POLICY allowed_policies=POLICY[,POLICY...] report=auto|always|never "
           "lost_code=0..255 grace_ms=0..600000 pmix=auto|never fanout=2..1024 port_range=FIRST-LAST "
           "daemon=/PATH debug=0..3 log_dir=/PATH topology=discover|none|/PATH recoverable=yes|no "
           "teardown_grace_ms=0..60000";
}

Result<bool> parse_switch(std::string_view text)
{
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "yes" || lower == "true" || lower == "1")
        return Result<bool>::ok(true);
    if (lower == "no" || lower == "false" || lower == "0")
        return Result<bool>::ok(false);
    return Result<bool>::fail("invalid value '" + std::string(text) + "': expected yes or no (or true/false, 1/0)");
}

Result<Config> parse_config(const std::vector<std::string_view>& args)
{
    Config c;
    std::vector<std::string_view> seen;
    for (std::string_view arg : args) {
        const auto eq = arg.find('=');
        if (eq == std::string_view::npos || eq == 0)
            return Result<Config>::fail("plugstack.conf argument '" + std::string(arg) +
                                        "' is not KEY=VALUE; valid arguments: " + std::string(config_usage()));
        const std::string_view key = arg.substr(0, eq);
        const std::string_view value = arg.substr(eq + 1);
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            return Result<Config>::fail("plugstack.conf argument " + std::string(key) +
                                        " is given twice; give it once");
        seen.push_back(key);

        if (key == "default_policy") {
            auto p = parse_policy(value);
            if (!p)
                return Result<Config>::fail("plugstack.conf default_policy: " + p.error());
            c.default_policy = *p;
        } else if (key == "allowed_policies") {
            std::string_view rest = value;
            while (true) {
                const auto comma = rest.find(',');
                auto p = parse_policy(rest.substr(0, comma));
                if (!p)
                    return Result<Config>::fail("plugstack.conf allowed_policies: " + p.error());
                if (std::find(c.allowed_policies.begin(), c.allowed_policies.end(), *p) == c.allowed_policies.end())
                    c.allowed_policies.push_back(*p);
                if (comma == std::string_view::npos)
                    break;
                rest = rest.substr(comma + 1);
            }
        } else if (key == "report") {
            auto m = parse_report_mode(value);
            if (!m)
                return Result<Config>::fail("plugstack.conf report: " + m.error());
            c.report = *m;
        } else if (key == "lost_code") {
            auto v = number<int>(value, 0, 255);
            if (!v)
                return Result<Config>::fail(bad(key, value, "expected an exit code, 0 to 255"));
            c.lost_code = *v;
        } else if (key == "grace_ms") {
            auto v = number<std::uint32_t>(value, 0, 600000);
            if (!v)
                return Result<Config>::fail(bad(key, value, "expected milliseconds, 0 to 600000"));
            c.grace_ms = *v;
        } else if (key == "pmix") {
            if (value == "auto")
                c.pmix = PmixMode::automatic;
            else if (value == "never")
                c.pmix = PmixMode::never;
            else
                return Result<Config>::fail(bad(key, value, "expected auto or never"));
        } else if (key == "fanout") {
            auto v = number<std::uint32_t>(value, 2, 1024);
            if (!v)
                return Result<Config>::fail(bad(key, value, "expected a tree fan-out, 2 to 1024"));
            c.fanout = *v;
        } else if (key == "port_range") {
            const auto dash = value.find('-');
            const auto first = number<std::uint16_t>(value.substr(0, dash), 1, 65535);
            const auto last = dash == std::string_view::npos
                                  ? std::nullopt
                                  : number<std::uint16_t>(value.substr(dash + 1), 1, 65535);
            if (!first || !last || *first > *last)
                return Result<Config>::fail(
                    bad(key, value, "expected FIRST-LAST, two TCP ports with FIRST <= LAST, e.g. 60000-60999"));
            c.port_range = PortRange{*first, *last};
        } else if (key == "daemon" || key == "log_dir") {
            if (value.empty() || value.front() != '/')
                return Result<Config>::fail(bad(key, value, "expected an absolute path"));
            (key == "daemon" ? c.daemon : c.log_dir) = std::string(value);
        } else if (key == "topology") {
            if (value != "discover" && value != "none" && (value.empty() || value.front() != '/'))
                return Result<Config>::fail(
                    bad(key, value, "expected discover, none, or the absolute path of an hwloc XML file"));
            c.topology = std::string(value);
        } else if (key == "recoverable") {
            auto v = parse_switch(value);
            if (!v)
                return Result<Config>::fail("plugstack.conf recoverable: " + v.error());
            c.recoverable = *v;
        } else if (key == "teardown_grace_ms") {
            auto v = number<std::uint32_t>(value, 0, 60000);
            if (!v)
                return Result<Config>::fail(bad(key, value, "expected milliseconds, 0 to 60000"));
            c.teardown_grace_ms = *v;
        } else if (key == "debug") {
            auto v = number<int>(value, 0, 3);
            if (!v)
                return Result<Config>::fail(bad(key, value, "expected a level, 0 to 3"));
            c.debug = *v;
        } else {
            return Result<Config>::fail("unknown plugstack.conf argument '" + std::string(key) +
                                        "'; valid arguments: " + std::string(config_usage()));
        }
    }
    if (c.default_policy && !c.allows(*c.default_policy))
        return Result<Config>::fail("plugstack.conf default_policy=" + std::string(policy_name(*c.default_policy)) +
                                    " is not among allowed_policies (" + c.allowed_list() + ")");
    return Result<Config>::ok(c);
}

}  // namespace exitpolicy::plugin
