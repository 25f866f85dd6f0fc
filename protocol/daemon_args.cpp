// SPDX-License-Identifier: Apache-2.0
// daemon_args.cpp - see daemon_args.hpp.
#include "daemon_args.hpp"

#include <charconv>
#include <map>
#include <utility>

namespace exitpolicy::protocol {
namespace {

template <typename T>
bool number(const std::string& text, T& out)
{
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

using Options = std::map<std::string, std::string>;

const std::string* option(const Options& v, const char* key)
{
    auto it = v.find(key);
    return it == v.end() ? nullptr : &it->second;
}

// --ranks R,R,...: each below the step's task count.
Result<bool> parse_ranks(const std::string* ranks, DaemonArgs& args)
{
    if (!ranks)
        return Result<bool>::fail("missing --ranks");
    for (std::size_t pos = 0; pos < ranks->size();) {
        const auto comma = ranks->find(',', pos);
        std::uint32_t r = 0;
        if (!number(ranks->substr(pos, comma - pos), r) || r >= args.ntasks)
            return Result<bool>::fail("bad --ranks " + *ranks);
        args.ranks.push_back(r);
        pos = comma == std::string::npos ? ranks->size() : comma + 1;
    }
    return Result<bool>::ok(true);
}

// The step's place, the front end and the descriptors: none may be missing.
Result<bool> parse_required(const Options& v, DaemonArgs& args)
{
    using R = Result<bool>;
    const std::pair<const char*, std::uint32_t*> numbers[] = {
        {"job", &args.job_id}, {"step", &args.step_id}, {"node", &args.node_id},
        {"nnodes", &args.nnodes}, {"ntasks", &args.ntasks}, {"uid", &args.uid},
    };
    for (const auto& [key, out] : numbers) {
        const std::string* s = option(v, key);
        if (!s || !number(*s, *out))
            return R::fail(std::string("missing or bad --") + key);
    }
    for (const auto& [key, out] : {std::pair{"secret-fd", &args.secret_fd}, std::pair{"ready-fd", &args.ready_fd},
                                   std::pair{"control-fd", &args.control_fd}}) {
        const std::string* s = option(v, key);
        if (!s || !number(*s, *out) || *out < 0)
            return R::fail(std::string("missing or bad --") + key);
    }
    if (auto ranks = parse_ranks(option(v, "ranks"), args); !ranks)
        return ranks;
    const std::string* fe = option(v, "fe");
    const auto colon = fe ? fe->rfind(':') : std::string::npos;
    if (!fe || colon == std::string::npos || !number(fe->substr(colon + 1), args.fe_port))
        return R::fail("missing or bad --fe HOST:PORT");
    args.fe_host = fe->substr(0, colon);
    for (const auto& [key, out] : {std::pair{"hostname", &args.hostname}, std::pair{"dir", &args.dir}}) {
        const std::string* s = option(v, key);
        if (!s || s->empty())
            return R::fail(std::string("missing --") + key);
        *out = *s;
    }
    return R::ok(true);
}

// What a site or a step may leave out.
Result<bool> parse_optional(const Options& v, DaemonArgs& args)
{
    using R = Result<bool>;
    if (const std::string* s = option(v, "log-dir"))
        args.log_dir = *s;
    if (const std::string* s = option(v, "topology")) {
        if (*s != "discover" && *s != "none" && (s->empty() || s->front() != '/'))
            return R::fail("bad --topology " + *s + " (discover, none or an absolute path)");
        args.topology = *s;
    }
    if (const std::string* s = option(v, "debug"); s && (!number(*s, args.debug) || args.debug < 0 || args.debug > 3))
        return R::fail("bad --debug");
    const std::string* reserved = option(v, "reserved-fd");
    const std::string* planned = option(v, "planned-version");
    if (!reserved != !planned)
        return R::fail("--reserved-fd and --planned-version go together");
    if (reserved && (!number(*reserved, args.reserved_fd) || args.reserved_fd < 0 || planned->empty()))
        return R::fail("bad --reserved-fd or --planned-version");
    if (planned)
        args.planned_version = *planned;
    // The tasks' PMI sockets: one per local rank, in their order, from here.
    if (const std::string* s = option(v, "pmi-fd"); s && (!number(*s, args.pmi_fd) || args.pmi_fd < 3))
        return R::fail("bad --pmi-fd");
    if (const std::string* s = option(v, "control-backlog-fd");
        s && (!number(*s, args.control_backlog_fd) || args.control_backlog_fd < 3))
        return R::fail("bad --control-backlog-fd");
    return R::ok(true);
}

}  // namespace

Result<DaemonArgs> parse_daemon_args(const std::vector<std::string>& argv)
{
    using R = Result<DaemonArgs>;
    Options v;
    for (std::size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a.rfind("--", 0) != 0 || i + 1 >= argv.size())
            return R::fail("unexpected argument '" + a + "'");
        v[a.substr(2)] = argv[++i];
    }
    DaemonArgs args;
    if (auto required = parse_required(v, args); !required)
        return R::fail(required.error());
    if (auto optional = parse_optional(v, args); !optional)
        return R::fail(optional.error());
    if (args.node_id >= args.nnodes)
        return R::fail("--node is not below --nnodes");
    return R::ok(std::move(args));
}

std::vector<std::string> daemon_command_line(const DaemonArgs& a)
{
    std::string ranks;
    for (std::uint32_t r : a.ranks)
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    std::vector<std::string> out = {
        "--job", std::to_string(a.job_id), "--step", std::to_string(a.step_id), "--node", std::to_string(a.node_id),
        "--nnodes", std::to_string(a.nnodes), "--ntasks", std::to_string(a.ntasks), "--ranks", ranks,
        "--hostname", a.hostname, "--fe", a.fe_host + ":" + std::to_string(a.fe_port), "--dir", a.dir,
        "--uid", std::to_string(a.uid), "--topology", a.topology, "--debug", std::to_string(a.debug)};
    if (!a.log_dir.empty())
        out.insert(out.end(), {"--log-dir", a.log_dir});
    if (!a.planned_version.empty())
        out.insert(out.end(), {"--planned-version", a.planned_version});
    for (const auto& [key, fd] : {std::pair{"--secret-fd", a.secret_fd}, std::pair{"--ready-fd", a.ready_fd},
                                  std::pair{"--control-fd", a.control_fd}, std::pair{"--reserved-fd", a.reserved_fd},
                                  std::pair{"--pmi-fd", a.pmi_fd}, std::pair{"--control-backlog-fd", a.control_backlog_fd}})
        if (fd >= 0)
            out.insert(out.end(), {key, std::to_string(fd)});
    return out;
}

}  // namespace exitpolicy::protocol
