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
        const std::string_view value = arg.substr(eq + 1);
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            return Result<Config>::fail("plugstack.conf argument " + std::string(key) +
                                        " is given twice; give it once");
        seen.push_back(key);
        const SiteArgument* known = find_argument(key);
        if (!known)
            return Result<Config>::fail("unknown plugstack.conf argument '" + std::string(key) +
                                        "'; valid arguments: " + std::string(config_usage()));
        // Errors of a parser that names the value: "plugstack.conf KEY: ...".
        const std::string named = "plugstack.conf " + std::string(key) + ": ";

        switch (known->id) {
        case SiteArg::default_policy: {
            auto p = parse_policy(value);
            if (!p)
                return Result<Config>::fail(named + p.error());
            c.default_policy = *p;
            break;
        }
        case SiteArg::allowed_policies: {
            std::string_view rest = value;
            while (true) {
                const auto comma = rest.find(',');
                auto p = parse_policy(rest.substr(0, comma));
                if (!p)
                    return Result<Config>::fail(named + p.error());
                if (std::find(c.allowed_policies.begin(), c.allowed_policies.end(), *p) == c.allowed_policies.end())
                    c.allowed_policies.push_back(*p);
                if (comma == std::string_view::npos)
                    break;
                rest = rest.substr(comma + 1);
            }
            break;
        }
        case SiteArg::report: {
            auto m = parse_report_mode(value);
            if (!m)
                return Result<Config>::fail(named + m.error());
            c.report = *m;
            break;
        }
        case SiteArg::pmix: {
            const std::string word = lowered(value);
            if (word == "auto")
                c.pmix = PmixMode::automatic;
            else if (word == "never")
                c.pmix = PmixMode::never;
            else
                return Result<Config>::fail(bad(key, value, "expected auto or never"));
            break;
        }
        case SiteArg::port_range: {
            const auto dash = value.find('-');
            const auto first = number<std::uint16_t>(value.substr(0, dash), 1, 65535);
            const auto last = dash == std::string_view::npos
                                  ? std::nullopt
                                  : number<std::uint16_t>(value.substr(dash + 1), 1, 65535);
            if (!first || !last || *first > *last)
                return Result<Config>::fail(
                    bad(key, value, "expected FIRST-LAST, two TCP ports with FIRST <= LAST, e.g. 60000-60999"));
            c.port_range = PortRange{*first, *last};
            break;
        }
        case SiteArg::daemon:
        case SiteArg::log_dir:
            if (value.empty() || value.front() != '/')
                return Result<Config>::fail(bad(key, value, "expected an absolute path"));
            (known->id == SiteArg::daemon ? c.daemon : c.log_dir) = std::string(value);
            break;
        case SiteArg::topology: {
            const std::string word = lowered(value);
            const bool keyword = word == "slurmd" || word == "discover" || word == "none";
            if (!keyword && (value.empty() || value.front() != '/'))
                return Result<Config>::fail(
                    bad(key, value, "expected slurmd, discover, none, or the absolute path of an hwloc XML file"));
            c.topology = keyword ? word : std::string(value);
            break;
        }
        case SiteArg::recoverable: {
            auto v = parse_switch(value);
            if (!v)
                return Result<Config>::fail(named + v.error());
            c.recoverable = *v;
            break;
        }
        case SiteArg::lost_code:
        case SiteArg::grace_ms:
        case SiteArg::fanout:
        case SiteArg::teardown_grace_ms:
        case SiteArg::debug: {
            auto v = range_checked(*known, value);
            if (!v)
                return Result<Config>::fail(v.error());
            set_number(c, known->id, *v);
            break;
        }
        }
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
