// SPDX-License-Identifier: Apache-2.0
// pmi_encoding.cpp - the step as MPICH reads it (PMI_process_mapping), an
// abort's code as MPICH gives it, and a node's puts in a fence. See
// pmi_encoding.hpp.
#include "pmi_encoding.hpp"

#include <algorithm>
#include <charconv>
#include <climits>

namespace exitpolicy::pmix_server {
namespace {

void append_string(protocol::Bytes& out, const std::string& s)
{
    const auto n = static_cast<std::uint32_t>(s.size());
    for (int shift = 24; shift >= 0; shift -= 8)
        out.push_back(static_cast<std::uint8_t>(n >> shift));
    out.insert(out.end(), s.begin(), s.end());
}

// Reads what append_string wrote; false at the end or on a malformed rest.
bool read_string(const protocol::Bytes& in, std::size_t& at, std::string& s)
{
    if (in.size() - at < 4)
        return false;
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
        n = (n << 8) | in[at + static_cast<std::size_t>(i)];
    at += 4;
    if (in.size() - at < n)
        return false;
    s.assign(reinterpret_cast<const char*>(in.data() + at), n);
    at += n;
    return true;
}

}  // namespace

protocol::Bytes encode_pairs(const std::vector<std::pair<std::string, std::string>>& pairs)
{
    protocol::Bytes out;
    for (const auto& [key, value] : pairs) {
        append_string(out, key);
        append_string(out, value);
    }
    return out;
}

Result<std::vector<std::pair<std::string, std::string>>> decode_pairs(const protocol::Bytes& data)
{
    using R = Result<std::vector<std::pair<std::string, std::string>>>;
    std::vector<std::pair<std::string, std::string>> pairs;
    std::size_t at = 0;
    std::string key, value;
    while (at < data.size()) {
        if (!read_string(data, at, key) || !read_string(data, at, value))
            return R::fail("cut short or malformed at byte " + std::to_string(at) + " of " +
                           std::to_string(data.size()));
        pairs.emplace_back(std::move(key), std::move(value));
    }
    return R::ok(std::move(pairs));
}

int abort_code(std::optional<long> exitcode, std::string_view message)
{
    // MPICH's PMI-2 client says -1 whatever the code; its message has it.
    constexpr std::string_view call = "MPI_Abort(";
    if (exitcode.value_or(-1) == -1) {
        if (const auto at = message.find(call); at != std::string_view::npos) {
            const auto comma = message.find(", ", at);
            const auto close = message.find(')', at);
            long v = 0;
            if (comma != std::string_view::npos && close != std::string_view::npos && comma < close) {
                const char* first = message.data() + comma + 2;
                const char* last = message.data() + close;
                const auto [end, ec] = std::from_chars(first, last, v);
                if (ec == std::errc{} && end == last)
                    exitcode = v;
            }
        }
    }
    return static_cast<int>(std::clamp<long>(exitcode.value_or(1), INT_MIN, INT_MAX));
}

bool application_abort(std::string_view message)
{
    return message.starts_with("application called MPI_Abort(");
}

namespace {

struct Triple {
    std::uint32_t first_node, nodes, per_node;
    bool operator==(const Triple&) const = default;
};

// MPICH's reading of a mapping: the triples in turn, from the first again
// when they run out, until every rank has its node.
bool expands_to(const std::vector<Triple>& triples, std::size_t n, const std::vector<std::uint32_t>& rank_node)
{
    std::size_t rank = 0;
    for (std::size_t t = 0; rank < rank_node.size(); t = (t + 1) % n)
        for (std::uint32_t node = triples[t].first_node; node < triples[t].first_node + triples[t].nodes; ++node)
            for (std::uint32_t k = 0; k < triples[t].per_node && rank < rank_node.size(); ++k)
                if (rank_node[rank++] != node)
                    return false;
    return true;
}

}  // namespace

std::string process_mapping(const std::vector<std::uint32_t>& rank_node, std::size_t limit)
{
    // Blocks: (node, ranks in a row there); then triples: blocks of one
    // size on consecutive nodes.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> blocks;
    for (std::uint32_t node : rank_node) {
        if (!blocks.empty() && blocks.back().first == node)
            ++blocks.back().second;
        else
            blocks.emplace_back(node, 1);
    }
    std::vector<Triple> triples;
    for (std::size_t i = 0; i < blocks.size();) {
        std::size_t j = i + 1;
        while (j < blocks.size() && blocks[j].first == blocks[j - 1].first + 1 && blocks[j].second == blocks[i].second)
            ++j;
        triples.push_back({blocks[i].first, static_cast<std::uint32_t>(j - i), blocks[i].second});
        i = j;
    }
    if (triples.empty())
        return {};
    // A cyclic layout repeats its first triples: MPICH repeats them too.
    // Tried where the list starts over, a bounded number of times.
    std::size_t n = triples.size();
    int tries = 0;
    for (std::size_t p = 1; p < triples.size() && tries < 16; ++p) {
        if (!(triples[p] == triples[0]))
            continue;
        ++tries;
        if (expands_to(triples, p, rank_node)) {
            n = p;
            break;
        }
    }
    std::string out = "(vector";
    for (std::size_t i = 0; i < n; ++i) {
        const Triple& t = triples[i];
        out += ",(" + std::to_string(t.first_node) + "," + std::to_string(t.nodes) + "," +
               std::to_string(t.per_node) + ")";
        if (out.size() >= limit)
            return {};
    }
    out += ")";
    return out.size() <= limit ? out : std::string{};
}

}  // namespace exitpolicy::pmix_server
