// SPDX-License-Identifier: Apache-2.0
// config.cpp - plugstack.conf arguments. See config.hpp.
#include "config.hpp"

#include "option_table.hpp"
#include "protocol/tree.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <string>

namespace exitpolicy::spank_plugin {
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

// "default_policy=POLICY allowed_policies=... teardown_grace_ms=0..60000",
// built at compile time from site_arguments.
constexpr std::size_t length(const char* text)
{
    return std::char_traits<char>::length(text);
}

constexpr std::size_t usage_size()
{
    std::size_t n = 0;
    for (const auto& a : site_arguments)
        n += (n ? 1 : 0) + length(a.name) + 1 + length(a.syntax);
    return n;
}

constexpr std::array<char, usage_size()> usage = [] {
    std::array<char, usage_size()> out{};
    std::size_t at = 0;
    auto put = [&](const char* text) {
        for (; *text; ++text)
            out[at++] = *text;
    };
    for (const auto& a : site_arguments) {
        if (at)
            put(" ");
        put(a.name);
        put("=");
        put(a.syntax);
    }
    return out;
}();

// A number argument within its range, or the error that says which.
Result<std::int64_t> range_checked(const SiteArgument& a, std::string_view value)
{
    const Number& n = a.number;
    if (auto v = number<std::int64_t>(value, n.lo, n.hi))
        return Result<std::int64_t>::ok(*v);
    return Result<std::int64_t>::fail(bad(a.name, value, "expected " + std::string(n.what) + ", " +
                                                             std::to_string(n.lo) + " to " + std::to_string(n.hi)));
}

static_assert(site_argument(SiteArg::fanout).number.hi == protocol::max_fanout,
              "fanout's range ends at the widest tree the overlay builds");

const SiteArgument* find_argument(std::string_view name) noexcept
{
    for (const auto& a : site_arguments)
        if (name == a.name)
            return &a;
    return nullptr;
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
    return {usage.data(), usage.size()};
}

namespace {

// Words are read case-insensitively, as policy names are.
std::string lowered(std::string_view text)
{
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower;
}

}  // namespace

Result<bool> parse_switch(std::string_view text)
{
    const std::string lower = lowered(text);
    if (lower == "yes" || lower == "true" || lower == "1")
        return Result<bool>::ok(true);
    if (lower == "no" || lower == "false" || lower == "0")
        return Result<bool>::ok(false);
    return Result<bool>::fail("invalid value '" + std::string(text) + "': expected yes or no (or true/false, 1/0)");
}

namespace {

// Where each number argument goes; its range was checked.
void set_number(Config& c, SiteArg id, std::int64_t v)
{
    switch (id) {
    case SiteArg::lost_code: c.lost_code = static_cast<int>(v); return;
    case SiteArg::grace_ms: c.grace_ms = static_cast<std::uint32_t>(v); return;
    case SiteArg::fanout: c.fanout = static_cast<std::uint32_t>(v); return;
    case SiteArg::teardown_grace_ms: c.teardown_grace_ms = static_cast<std::uint32_t>(v); return;
    case SiteArg::debug: c.debug = static_cast<int>(v); return;
    default: return;
    }
}

// allowed_policies: a comma-separated list, each policy once.
Result<bool> add_policies(std::vector<Policy>& to, std::string_view value, const std::string& named)
{
    std::string_view rest = value;
    while (true) {
        const auto comma = rest.find(',');
        auto p = parse_policy(rest.substr(0, comma));
        if (!p)
            return Result<bool>::fail(named + p.error());
        if (std::find(to.begin(), to.end(), *p) == to.end())
            to.push_back(*p);
        if (comma == std::string_view::npos)
            return Result<bool>::ok(true);
        rest = rest.substr(comma + 1);
    }
}

// port_range: FIRST-LAST.
std::optional<PortRange> parse_port_range(std::string_view value)
{
    const auto dash = value.find('-');
    const auto first = number<std::uint16_t>(value.substr(0, dash), 1, 65535);
    const auto last =
        dash == std::string_view::npos ? std::nullopt : number<std::uint16_t>(value.substr(dash + 1), 1, 65535);
    if (!first || !last || *first > *last)
        return std::nullopt;
    return PortRange{*first, *last};
}

// One argument's value into `c`: a case per kind of setting
// (option_table.hpp lists them), kept in one switch so that the compiler
// checks every kind has its case.
Result<bool> set_argument(Config& c, const SiteArgument& known, std::string_view key, std::string_view value)
{
    using R = Result<bool>;
    // Errors of a parser that names the value: "plugstack.conf KEY: ...".
    const std::string named = "plugstack.conf " + std::string(key) + ": ";
    switch (known.id) {
    case SiteArg::default_policy: {
        auto p = parse_policy(value);
        if (!p)
            return R::fail(named + p.error());
        c.default_policy = *p;
        return R::ok(true);
    }
    case SiteArg::allowed_policies:
        return add_policies(c.allowed_policies, value, named);
    case SiteArg::report: {
        auto m = parse_report_mode(value);
        if (!m)
            return R::fail(named + m.error());
        c.report = *m;
        return R::ok(true);
    }
    case SiteArg::pmix: {
        const std::string word = lowered(value);
        if (word != "auto" && word != "never")
            return R::fail(bad(key, value, "expected auto or never"));
        c.pmix = word == "auto" ? PmixMode::automatic : PmixMode::never;
        return R::ok(true);
    }
    case SiteArg::port_range:
        c.port_range = parse_port_range(value);
        if (!c.port_range)
            return R::fail(bad(key, value, "expected FIRST-LAST, two TCP ports with FIRST <= LAST, e.g. 60000-60999"));
        return R::ok(true);
    case SiteArg::daemon:
    case SiteArg::log_dir:
        if (value.empty() || value.front() != '/')
            return R::fail(bad(key, value, "expected an absolute path"));
        (known.id == SiteArg::daemon ? c.daemon : c.log_dir) = std::string(value);
        return R::ok(true);
    case SiteArg::topology: {
        const std::string word = lowered(value);
        const bool keyword = word == "slurmd" || word == "discover" || word == "none";
        if (!keyword && (value.empty() || value.front() != '/'))
            return R::fail(bad(key, value, "expected slurmd, discover, none, or the absolute path of an hwloc XML file"));
        c.topology = keyword ? word : std::string(value);
        return R::ok(true);
    }
    case SiteArg::recoverable:
    case SiteArg::record_verdict: {
        auto v = parse_switch(value);
        if (!v)
            return R::fail(named + v.error());
        (known.id == SiteArg::recoverable ? c.recoverable : c.record_verdict) = *v;
        return R::ok(true);
    }
    case SiteArg::lost_code:
    case SiteArg::grace_ms:
    case SiteArg::fanout:
    case SiteArg::teardown_grace_ms:
    case SiteArg::debug: {
        auto v = range_checked(known, value);
        if (!v)
            return R::fail(v.error());
        set_number(c, known.id, *v);
        return R::ok(true);
    }
    }
    return R::ok(true);
}

}  // namespace

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
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            return Result<Config>::fail("plugstack.conf argument " + std::string(key) +
                                        " is given twice; give it once");
        seen.push_back(key);
        const SiteArgument* known = find_argument(key);
        if (!known)
            return Result<Config>::fail("unknown plugstack.conf argument '" + std::string(key) +
                                        "'; valid arguments: " + std::string(config_usage()));
        if (auto set = set_argument(c, *known, key, arg.substr(eq + 1)); !set)
            return Result<Config>::fail(set.error());
    }
    if (c.default_policy && !c.allows(*c.default_policy)) {
        const std::string default_policy = site_argument(SiteArg::default_policy).name;
        const std::string allowed_policies = site_argument(SiteArg::allowed_policies).name;
        return Result<Config>::fail("plugstack.conf " + default_policy + "=" +
                                    std::string(policy_name(*c.default_policy)) + " is not among " + allowed_policies +
                                    " (" + c.allowed_list() + ")");
    }
    return Result<Config>::ok(c);
}

}  // namespace exitpolicy::spank_plugin
