// SPDX-License-Identifier: Apache-2.0
// pmi_wire.cpp - PMI-1 lines, PMI-1 spawn blocks and PMI-2 frames cut out
// of one connection's bytes, and replies written. See pmi_wire.hpp.
#include "pmi_wire.hpp"

#include <algorithm>
#include <charconv>

namespace exitpolicy::pmix_server::pmi {
namespace {

using Next = Result<std::optional<Request>>;
using std::string_view;

constexpr std::size_t quote_max = 40;  // input quoted in an error message
constexpr std::size_t length_size = 6; // a PMI-2 frame's length field
constexpr std::size_t max_frame_body = 999'999;  // what it can say

// `s` as an error message quotes it: at most quote_max characters, control
// characters as '?'.
std::string quoted(string_view s)
{
    std::string out = "\"";
    for (const char c : s.substr(0, quote_max))
        out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
    out += s.size() > quote_max ? "...\"" : "\"";
    return out;
}

string_view trim_spaces(string_view s) noexcept
{
    const auto first = s.find_first_not_of(' ');
    if (first == string_view::npos)
        return {};
    return s.substr(first, s.find_last_not_of(' ') - first + 1);
}

void add(Request& r, string_view key, string_view value)
{
    r.args.emplace_back(std::string(key), std::string(value));
}

// Where the line starting at `from` in `buf` ends ('\n'), or npos while
// that has not come; an error once `buf` holds more than max_request bytes
// and no request may end within them.
Result<std::size_t> line_end(const std::string& buf, std::size_t from, string_view what)
{
    const auto nl = buf.find('\n', from);
    if (nl != std::string::npos && nl <= max_request)
        return Result<std::size_t>::ok(nl);
    if (buf.size() > max_request)
        return Result<std::size_t>::fail("not a PMI request: " + std::string(what) + " longer than " +
                                         std::to_string(max_request) + " bytes (got " + quoted(buf) + ")");
    return Result<std::size_t>::ok(std::string::npos);
}

// One PMI-1 line, without its '\n': "cmd=NAME k=v k ...".
Result<Request> parse_line(string_view line)
{
    string_view rest = trim_spaces(line);
    if (rest.empty())
        return Result<Request>::fail("not a PMI request: an empty line (a PMI-1 line must start with cmd=)");
    Request r;
    while (!rest.empty()) {
        const auto end = std::min(rest.find(' '), rest.size());
        const string_view token = rest.substr(0, end);
        const auto eq = token.find('=');
        const string_view key = token.substr(0, eq);
        const string_view value = eq == string_view::npos ? string_view{} : token.substr(eq + 1);
        if (r.cmd.empty()) {
            if (key != "cmd" || eq == string_view::npos)
                return Result<Request>::fail("not a PMI request: a PMI-1 line must start with cmd= (got " +
                                             quoted(line) + ")");
            if (value.empty())
                return Result<Request>::fail("not a PMI request: cmd= without a command name (got " +
                                             quoted(line) + ")");
            r.cmd = value;
        } else if (r.cmd == "abort" && key == "message" && eq != string_view::npos) {
            // MPICH 4.2 writes the message unescaped: it is the rest of the line.
            add(r, key, rest.substr(eq + 1));
            break;
        } else {
            add(r, key, value);
        }
        rest = trim_spaces(rest.substr(end));
    }
    return Result<Request>::ok(std::move(r));
}

// One PMI-2 frame's body: "cmd=NAME;k=v;k;...".
Result<Request> parse_body(string_view body)
{
    if (!body.starts_with("cmd="))
        return Result<Request>::fail("not a PMI-2 request: the body must start with cmd= (got " + quoted(body) +
                                     ")");
    Request r;
    r.version = 2;
    std::size_t pos = 0;
    while (pos < body.size()) {
        const auto end = std::min(body.find(';', pos), body.size());
        const string_view pair = body.substr(pos, end - pos);
        const std::size_t start = pos;
        pos = end + 1;
        if (pair.empty())
            continue;
        const auto eq = pair.find('=');
        const string_view key = pair.substr(0, eq);
        const string_view value = eq == string_view::npos ? string_view{} : pair.substr(eq + 1);
        if (r.cmd.empty()) {  // the first pair: "cmd=" is there
            if (value.empty())
                return Result<Request>::fail("not a PMI-2 request: cmd= without a command name (got " +
                                             quoted(body) + ")");
            r.cmd = value;
        } else if (r.cmd == "abort" && key == "message" && eq != string_view::npos) {
            // Unescaped, ';' included: the rest of the body less one final ';'.
            string_view message = body.substr(start + eq + 1);
            if (message.ends_with(';'))
                message.remove_suffix(1);
            add(r, key, message);
            break;
        } else {
            add(r, key, value);
        }
    }
    return Result<Request>::ok(std::move(r));
}

}  // namespace

const std::string* Request::get(std::string_view key) const noexcept
{
    for (const auto& [k, v] : args)
        if (k == key)
            return &v;
    return nullptr;
}

void Parser::feed(std::string_view bytes)
{
    buf_.append(bytes);
}

Result<std::optional<Request>> Parser::next_frame()
{
    if (buf_.size() < length_size)
        return Next::ok(std::nullopt);
    const string_view field(buf_.data(), length_size);
    const string_view digits = trim_spaces(field);
    std::size_t length = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
        return Next::fail("not a PMI-2 request: the first 6 characters must be a decimal length (got " +
                          quoted(field) + ")");
    if (length == 0)
        return Next::fail("not a PMI-2 request: a length of 0 (got " + quoted(field) + ")");
    if (length > max_request)
        return Next::fail("not a PMI-2 request: a length of " + std::to_string(length) + " is over the " +
                          std::to_string(max_request) + " bytes taken");
    if (buf_.size() - length_size < length)
        return Next::ok(std::nullopt);
    auto r = parse_body(string_view(buf_).substr(length_size, length));
    if (!r)
        return Next::fail(r.error());
    buf_.erase(0, length_size + length);
    return Next::ok(std::move(*r));
}

Result<std::optional<Request>> Parser::next_spawn(std::size_t first_end)
{
    Request r;
    r.cmd = "spawn";
    for (std::size_t from = first_end + 1;;) {
        auto e = line_end(buf_, from, "a spawn block");
        if (!e)
            return Next::fail(e.error());
        if (*e == std::string::npos)
            return Next::ok(std::nullopt);
        const string_view line = string_view(buf_).substr(from, *e - from);
        from = *e + 1;
        if (line == "endcmd") {
            buf_.erase(0, from);
            return Next::ok(std::move(r));
        }
        if (line.empty())
            continue;
        const auto eq = line.find('=');
        add(r, line.substr(0, eq), eq == string_view::npos ? string_view{} : line.substr(eq + 1));
    }
}

Result<std::optional<Request>> Parser::next()
{
    if (version_ == 2)
        return next_frame();
    auto nl = line_end(buf_, 0, "a line");
    if (!nl)
        return Next::fail(nl.error());
    if (*nl == std::string::npos)
        return Next::ok(std::nullopt);
    if (string_view(buf_).substr(0, *nl) == "mcmd=spawn")
        return next_spawn(*nl);
    auto r = parse_line(string_view(buf_).substr(0, *nl));
    if (!r)
        return Next::fail(r.error());
    buf_.erase(0, *nl + 1);
    if (r->cmd == "init") {
        const std::string* asked = r->get("pmi_version");
        if (asked && *asked == "2")
            version_ = 2;
    }
    return Next::ok(std::move(*r));
}

std::string reply(int version, std::string_view cmd, const std::vector<std::pair<std::string, std::string>>& args)
{
    const bool v2 = version == 2;
    // A value ends at a space or a line's end in PMI-1, at ';' in PMI-2: a
    // value that holds one (any task may put anything, in either framing)
    // would end early, and what follows it be read as more of the reply, or
    // as the next one. Such a reply is the command's failure.
    const std::string_view ends = v2 ? std::string_view(";") : std::string_view(" \n");
    for (const auto& [key, value] : args)
        if (value.find_first_of(ends) != std::string::npos) {
            std::vector<std::pair<std::string, std::string>> failed{
                {"rc", "-1"}, {v2 ? "errmsg" : "msg", "a_value_this_framing_cannot_carry"}};
            for (const auto& [k, v] : args)
                if (k == "thrid" && v.find_first_of(ends) == std::string::npos)
                    failed.emplace_back(k, v);
            return reply(version, cmd, failed);
        }
    std::string body = "cmd=";
    body += cmd;
    if (v2)
        body += ';';
    for (const auto& [key, value] : args) {
        if (value.empty())
            continue;  // MPICH 4.2's PMI-1 reader rejects "key="
        if (!v2)
            body += ' ';
        body += key;
        body += '=';
        body += value;
        if (v2)
            body += ';';
    }
    if (!v2)
        return body + '\n';
    // Six digits say a frame's length: one longer would be read as
    // another's. It becomes the command's failure (with its thrid, which
    // a threaded client matches replies by).
    if (body.size() > max_frame_body) {
        std::vector<std::pair<std::string, std::string>> failed{{"rc", "-1"},
                                                                {"errmsg", "the_reply_is_over_PMI-2's_999999_bytes"}};
        for (const auto& [key, value] : args)
            if (key == "thrid")
                failed.emplace_back(key, value);
        return reply(version, cmd.substr(0, 64), failed);
    }
    const std::string length = std::to_string(body.size());
    return std::string(length.size() < length_size ? length_size - length.size() : 0, ' ') + length + body;
}

}  // namespace exitpolicy::pmix_server::pmi
