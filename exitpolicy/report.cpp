// SPDX-License-Identifier: Apache-2.0
// report.cpp - the human summary and the JSON document. See report.hpp.
#include "report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

namespace exitpolicy {
namespace {

std::string_view node_of(const StepOutcomes& step, const TaskOutcome& task) noexcept
{
    return task.node < step.nodes.size() ? std::string_view(step.nodes[task.node])
                                         : std::string_view("?");
}

// The component of a heterogeneous step that `rank` is in.
std::size_t component_of(const StepOutcomes& step, std::uint32_t rank) noexcept
{
    const auto after = std::upper_bound(step.components.begin(), step.components.end(), rank);
    return after == step.components.begin() ? 0 : static_cast<std::size_t>(after - step.components.begin()) - 1;
}

// "rank 3", and in a heterogeneous step "rank 3 (component 1)".
std::string rank_text(const StepOutcomes& step, std::uint32_t rank)
{
    std::string text = "rank " + std::to_string(rank);
    if (!step.components.empty())
        text += " (component " + std::to_string(component_of(step, rank)) + ")";
    return text;
}

std::string_view reason_name(Reason reason) noexcept
{
    switch (reason) {
    case Reason::all_succeeded: return "all_succeeded";
    case Reason::aborted: return "aborted";
    case Reason::highest_signal: return "highest_signal";
    case Reason::highest_code: return "highest_code";
    case Reason::main_rank: return "main_rank";
    case Reason::some_failed: return "some_failed";
    case Reason::main_rank_failed: return "main_rank_failed";
    case Reason::other_failed: return "other_failed";
    case Reason::first_failure: return "first_failure";
    case Reason::lowest_rank: return "lowest_rank";
    case Reason::root_cause: return "root_cause";
    }
    return "unknown";
}

std::string_view state_name(const TaskOutcome& task) noexcept
{
    if (task.lost)
        return "lost";
    switch (task.status().kind) {
    case WaitStatus::Kind::exited: return "exited";
    case WaitStatus::Kind::signaled: return "signaled";
    case WaitStatus::Kind::other: break;
    }
    return "other";
}

std::string ranks_word(std::size_t count)
{
    return count == 1 ? "rank " : "ranks ";
}

std::string plural(std::size_t count, std::string_view one, std::string_view many)
{
    return std::to_string(count) + " " + std::string(count == 1 ? one : many);
}

std::string pad(unsigned long value, std::size_t width)
{
    std::string digits = std::to_string(value);
    if (digits.size() < width)
        digits.insert(0, width - digits.size(), '0');
    return digits;
}

// The text a task is grouped under in the summary.
std::string group_text(const StepOutcomes& step, const Settings& settings,
                       const Decision& decision, std::size_t index, bool collateral)
{
    const TaskOutcome& task = step.tasks[index];
    const bool unfinalized = task.finalized.has_value() && !*task.finalized;
    if (succeeded(task) && !unfinalized)
        return "succeeded";
    std::string text = describe(task, settings.lost_code);
    if (collateral)
        text += " (collateral: ended after rank " +
                std::to_string(step.tasks[*decision.first_failure].rank) + " failed)";
    return text;
}

std::size_t node_count(const StepOutcomes& step)
{
    std::vector<bool> used(step.nodes.size());
    std::size_t count = 0;
    for (const auto& t : step.tasks)
        if (t.node < used.size() && !used[t.node]) {
            used[t.node] = true;
            ++count;
        }
    return count;
}

std::size_t collateral_count(const StepOutcomes& step, const Decision& decision)
{
    std::size_t count = 0;
    for (std::size_t i = 0; i < step.tasks.size(); ++i)
        count += is_collateral(step, decision, i) ? 1 : 0;
    return count;
}

}  // namespace

static std::string compress_ranks_impl(std::vector<std::uint32_t> ranks)
{
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::string out;
    for (std::size_t i = 0; i < ranks.size();) {
        std::size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
            ++j;
        if (!out.empty())
            out += ',';
        out += std::to_string(ranks[i]);
        if (j > i)
            out += '-' + std::to_string(ranks[j]);
        i = j + 1;
    }
    return out;
}

namespace {

// A host name as a prefix and the number it ends with, if any.
struct NumberedHost {
    std::string prefix;
    std::string digits;  // trailing number as written, may be empty
    unsigned long value = 0;
};

// `hosts`, once each, in the order of their prefix and then their number.
std::vector<NumberedHost> numbered_hosts(std::vector<std::string> hosts)
{
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
    std::vector<NumberedHost> parsed;
    for (const auto& h : hosts) {
        std::size_t cut = h.size();
        while (cut > 0 && h[cut - 1] >= '0' && h[cut - 1] <= '9')
            --cut;
        NumberedHost host{h.substr(0, cut), h.substr(cut), 0};
        // Names with more digits than a long holds stay as they are.
        if (host.digits.size() > 18) {
            host.prefix = h;
            host.digits.clear();
        }
        if (!host.digits.empty())
            host.value = std::stoul(host.digits);
        parsed.push_back(std::move(host));
    }
    std::sort(parsed.begin(), parsed.end(), [](const NumberedHost& a, const NumberedHost& b) {
        return std::tie(a.prefix, a.value, a.digits) < std::tie(b.prefix, b.value, b.digits);
    });
    return parsed;
}

}  // namespace

static std::string hostlist_impl(std::vector<std::string> hosts)
{
    const std::vector<NumberedHost> parsed = numbered_hosts(std::move(hosts));
    std::string out;
    for (std::size_t i = 0; i < parsed.size();) {
        if (!out.empty())
            out += ',';
        const std::string& prefix = parsed[i].prefix;
        if (parsed[i].digits.empty()) {
            out += prefix;
            ++i;
            continue;
        }
        // All numbered hosts with this prefix, as ranges that keep padding.
        std::string ranges;
        std::size_t count = 0;
        std::size_t j = i;
        while (j < parsed.size() && parsed[j].prefix == prefix && !parsed[j].digits.empty()) {
            const NumberedHost& lo = parsed[j];
            const std::size_t width = lo.digits.size() > 1 && lo.digits[0] == '0' ? lo.digits.size() : 0;
            std::size_t k = j;
            while (k + 1 < parsed.size() && parsed[k + 1].prefix == prefix &&
                   parsed[k + 1].value == parsed[k].value + 1 &&
                   pad(parsed[k + 1].value, width) == parsed[k + 1].digits)
                ++k;
            if (!ranges.empty())
                ranges += ',';
            ranges += lo.digits;
            if (k > j)
                ranges += '-' + parsed[k].digits;
            count += k - j + 1;
            j = k + 1;
        }
        out += count == 1 ? prefix + ranges : prefix + '[' + ranges + ']';
        i = j;
    }
    return out;
}

static std::string explain_impl(const StepOutcomes& step, const Settings& settings, const Decision& decision)
{
    auto where = [&](std::size_t index) {
        const TaskOutcome& t = step.tasks[index];
        return rank_text(step, t.rank) + " on " + std::string(node_of(step, t));
    };
    auto task_text = [&](std::size_t index) {
        return where(index) + " " + describe(step.tasks[index], settings.lost_code);
    };
    // max reads wait statuses: an abort that did not decide is told after
    // the kill that ended the task.
    auto wait_text = [&](std::size_t index) {
        TaskOutcome t = step.tasks[index];
        if (!t.abort_status)
            return task_text(index);
        const int status = *t.abort_status;
        t.abort_status.reset();
        return where(index) + " " + describe(t, settings.lost_code) + " (after aborting with status " +
               std::to_string(status) + ")";
    };
    const std::size_t total = step.tasks.size();
    const std::size_t unsuccessful = decision.failed + decision.lost;
    switch (decision.reason) {
    case Reason::all_succeeded:
        return total == 1 ? "the task succeeded" : "all " + std::to_string(total) + " tasks succeeded";
    case Reason::aborted:
        return task_text(*decision.deciding) + ", the first failure; its abort decides the step's code";
    case Reason::highest_signal:
        return wait_text(*decision.deciding) +
               ", the highest signal (any signal beats any exit code)";
    case Reason::highest_code:
        return wait_text(*decision.deciding) + ", the highest exit code";
    case Reason::main_rank:
        return "main " + task_text(*decision.deciding);
    case Reason::some_failed:
        return std::to_string(unsuccessful) + " of " + plural(total, "task", "tasks") +
               " did not succeed";
    case Reason::main_rank_failed:
        return "main " + task_text(*decision.deciding);
    case Reason::other_failed:
        return "main rank " + std::to_string(settings.main_rank) + " succeeded but " +
               plural(unsuccessful, "other task", "other tasks") + " did not";
    case Reason::first_failure:
        return task_text(*decision.deciding) + ", the first failure";
    case Reason::lowest_rank:
        return task_text(*decision.deciding) + ", the lowest failing rank";
    case Reason::root_cause:
        return "main " + where(*decision.main) +
               " ended after the first failure (collateral); the first failure's code: " +
               where(*decision.deciding) + ", " +
               describe(step.tasks[*decision.deciding], settings.lost_code);
    }
    return "unknown reason";
}

// The public helpers never throw: out of memory gives an empty text.
std::string one_line(std::string_view message, std::size_t width)
{
    try {
        const auto says_something = [](std::string_view line) {
            return std::any_of(line.begin(), line.end(),
                               [](unsigned char c) { return std::isalnum(c) || c >= 0x80; });
        };
        std::string first;
        std::size_t more = 0;
        while (!message.empty()) {
            const std::size_t eol = message.find('\n');
            std::string_view line = message.substr(0, eol);
            message = eol == std::string_view::npos ? std::string_view{} : message.substr(eol + 1);
            if (!says_something(line))
                continue;
            if (!first.empty()) {
                ++more;
                continue;
            }
            const std::size_t begin = line.find_first_not_of(" \t\r");
            const std::size_t end = line.find_last_not_of(" \t\r");
            line = line.substr(begin, end - begin + 1);
            for (unsigned char c : line)
                first.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
        }
        if (width >= 4 && first.size() > width) {
            std::size_t cut = width - 3;  // at a character's start, never inside UTF-8
            while (cut > 0 && (static_cast<unsigned char>(first[cut]) & 0xC0) == 0x80)
                --cut;
            first.resize(cut);
            first += "...";
        }
        if (more)
            first += " (" + plural(more, "more line", "more lines") + ")";
        return first;
    } catch (...) {
        return {};
    }
}

std::string compress_ranks(std::vector<std::uint32_t> ranks)
{
    try {
        return compress_ranks_impl(std::move(ranks));
    } catch (...) {
        return {};
    }
}

std::string hostlist(std::vector<std::string> hosts)
{
    try {
        return hostlist_impl(std::move(hosts));
    } catch (...) {
        return {};
    }
}

std::string explain(const StepOutcomes& step, const Settings& settings, const Decision& decision)
{
    try {
        return explain_impl(step, settings, decision);
    } catch (...) {
        return {};
    }
}

namespace {

// The summary's first lines: the code and why, the counts, the first
// failure and an abort's message.
std::string summary_head(const StepOutcomes& step, const Settings& settings, const Decision& decision,
                         const std::string& pre)
{
    std::string out = pre + "exit code " + std::to_string(decision.code) + " under policy " +
                      std::string(policy_name(settings.policy)) + ": " + explain(step, settings, decision) + "\n";
    if (decision.native_code != decision.code)
        out += pre + "Slurm's native exit code would be " + std::to_string(decision.native_code) + "\n";
    out += pre + plural(step.tasks.size(), "task", "tasks") + " on " + plural(node_count(step), "node", "nodes") +
           ": " + std::to_string(decision.succeeded) + " succeeded, " + std::to_string(decision.failed) + " failed";
    if (decision.lost)
        out += ", " + std::to_string(decision.lost) + " lost";
    out += "\n";
    if (!step.components.empty()) {
        out += pre + "heterogeneous step:";
        for (std::size_t k = 0; k < step.components.size(); ++k) {
            const std::uint32_t first = step.components[k];
            const std::uint32_t end = k + 1 < step.components.size() ? step.components[k + 1]
                                                                     : static_cast<std::uint32_t>(step.tasks.size());
            std::vector<std::uint32_t> ranks;
            for (std::uint32_t r = first; r < end; ++r)
                ranks.push_back(r);
            const std::string word = ranks_word(ranks.size());
            out += std::string(k ? "," : "") + " component " + std::to_string(k) + " " + word +
                   compress_ranks(std::move(ranks));
        }
        out += "\n";
    }
    if (decision.first_failure && step.tasks.size() > 1) {
        const TaskOutcome& first = step.tasks[*decision.first_failure];
        out += pre + "first failure: " + rank_text(step, first.rank) + " on " + std::string(node_of(step, first)) +
               ", " + describe(first, settings.lost_code) + "\n";
    }
    if (decision.first_abort) {
        const TaskOutcome& aborted = step.tasks[*decision.first_abort];
        // Open MPI says "N/A" when the program gave no message.
        if (const std::string said = one_line(aborted.abort_message); !said.empty() && said != "N/A")
            out += pre + "rank " + std::to_string(aborted.rank) + "'s abort message: " + said + "\n";
    }
    return out;
}

// Tasks that ended alike, as one line of the summary.
struct Group {
    std::uint32_t lowest_rank = UINT32_MAX;
    bool success = false;
    bool collateral = false;
    std::vector<std::uint32_t> ranks;
    std::vector<std::uint32_t> nodes;
};

// One line per group: failures first, the root cause's before the
// collateral ones, then the successes; within each, by lowest rank.
std::string group_lines(const StepOutcomes& step, const Settings& settings, const Decision& decision,
                        const std::string& pre)
{
    std::map<std::string, Group> groups;
    for (std::size_t i = 0; i < step.tasks.size(); ++i) {
        const TaskOutcome& t = step.tasks[i];
        const bool collateral = is_collateral(step, decision, i);
        const std::string text = group_text(step, settings, decision, i, collateral);
        Group& g = groups[text];
        g.success = text == "succeeded";
        g.collateral = collateral;
        g.lowest_rank = std::min(g.lowest_rank, t.rank);
        g.ranks.push_back(t.rank);
        g.nodes.push_back(t.node);
    }
    std::vector<std::pair<const std::string*, Group*>> order;
    for (auto& [text, g] : groups)
        order.emplace_back(&text, &g);
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return std::tie(a.second->success, a.second->collateral, a.second->lowest_rank) <
               std::tie(b.second->success, b.second->collateral, b.second->lowest_rank);
    });
    std::string out;
    for (const auto& [text, g] : order) {
        const std::string word = ranks_word(g->ranks.size());
        std::sort(g->nodes.begin(), g->nodes.end());
        g->nodes.erase(std::unique(g->nodes.begin(), g->nodes.end()), g->nodes.end());
        std::vector<std::string> hosts;
        for (std::uint32_t node : g->nodes)
            hosts.emplace_back(node < step.nodes.size() ? step.nodes[node] : "?");
        out += pre + "  " + word + compress_ranks(std::move(g->ranks)) + " on " + hostlist(std::move(hosts)) + ": " +
               *text + "\n";
    }
    return out;
}

// The JSON document's fields about the step as a whole.
nlohmann::json json_head(const StepOutcomes& step, const Settings& settings, const Decision& decision,
                         const ReportContext& context)
{
    using nlohmann::json;
    auto opt_rank = [&](const std::optional<std::size_t>& index) -> json {
        return index ? json(step.tasks[*index].rank) : json(nullptr);
    };
    return {
        {"version", report_json_version},
        {"job_id", context.job_id.empty() ? json(nullptr) : json(context.job_id)},
        {"step_id", context.step_id.empty() ? json(nullptr) : json(context.step_id)},
        {"policy", policy_name(settings.policy)},
        {"main_rank", settings.main_rank},
        {"lost_code", settings.lost_code},
        {"exit_code", decision.code},
        {"native_exit_code", decision.native_code},
        {"reason", reason_name(decision.reason)},
        {"explanation", explain(step, settings, decision)},
        {"deciding_rank", opt_rank(decision.deciding)},
        {"first_failure_rank", opt_rank(decision.first_failure)},
        {"abort", decision.first_abort ? json{{"rank", step.tasks[*decision.first_abort].rank},
                                              {"status", *step.tasks[*decision.first_abort].abort_status},
                                              {"message", step.tasks[*decision.first_abort].abort_message}}
                                       : json(nullptr)},
        {"counts", {{"tasks", step.tasks.size()},
                    {"nodes", node_count(step)},
                    {"succeeded", decision.succeeded},
                    {"failed", decision.failed},
                    {"lost", decision.lost},
                    {"collateral", collateral_count(step, decision)}}},
        {"components", step.components.empty() ? json(nullptr) : json(step.components)},
    };
}

// One task's entry in the JSON document, built field by field: several
// times faster than an initializer list for steps of 100 000 tasks and more.
nlohmann::json json_task(const StepOutcomes& step, const Settings& settings, const Decision& decision,
                         std::size_t i)
{
    using nlohmann::json;
    const TaskOutcome& t = step.tasks[i];
    const WaitStatus s = t.status();
    const bool exited = !t.lost && s.kind == WaitStatus::Kind::exited;
    const bool signaled = !t.lost && s.kind == WaitStatus::Kind::signaled;
    json entry(json::value_t::object);
    auto& o = entry.get_ref<json::object_t&>();
    o.emplace("rank", t.rank);
    o.emplace("epoch", t.epoch);
    o.emplace("node", t.node < step.nodes.size() ? json(step.nodes[t.node]) : json(nullptr));
    o.emplace("pid", t.lost || t.pid < 0 ? json(nullptr) : json(t.pid));
    o.emplace("state", state_name(t));
    o.emplace("wait_status", t.lost ? json(nullptr) : json(t.wait_status));
    o.emplace("exit_code", exited ? json(s.exit_code) : json(nullptr));
    o.emplace("signal", signaled ? json(s.signal) : json(nullptr));
    o.emplace("signal_name", signaled ? json(signal_name(s.signal)) : json(nullptr));
    o.emplace("core_dumped", signaled && s.core_dumped);
    o.emplace("oom_killed", !t.lost && t.oom_killed);
    o.emplace("memory_limit", !t.lost && t.oom_killed && t.memory_limit ? json(t.memory_limit) : json(nullptr));
    o.emplace("aborted", t.abort_status.has_value());
    o.emplace("abort_status", t.abort_status ? json(*t.abort_status) : json(nullptr));
    o.emplace("finalized", t.finalized ? json(*t.finalized) : json(nullptr));
    o.emplace("end_time_us", t.lost ? json(nullptr) : json(t.end_time_us));
    o.emplace("code", task_code(t, settings.lost_code));
    o.emplace("succeeded", succeeded(t));
    o.emplace("collateral", is_collateral(step, decision, i));
    o.emplace("description", describe(t, settings.lost_code));
    return entry;
}

}  // namespace

std::string render_summary(const StepOutcomes& step, const Settings& settings,
                           const Decision& decision, std::string_view prefix)
{
    try {
        const std::string pre(prefix);
        return summary_head(step, settings, decision, pre) + group_lines(step, settings, decision, pre);
    } catch (...) {
        return std::string(prefix) + "exit code " + std::to_string(decision.code) +
               " (the report could not be rendered)\n";
    }
}

std::string render_json(const StepOutcomes& step, const Settings& settings,
                        const Decision& decision, const ReportContext& context)
{
    using nlohmann::json;
    try {
        json doc = json_head(step, settings, decision, context);
        std::vector<std::size_t> by_rank(step.tasks.size());
        for (std::size_t i = 0; i < by_rank.size(); ++i)
            by_rank[i] = i;
        std::sort(by_rank.begin(), by_rank.end(), [&](std::size_t a, std::size_t b) {
            return step.tasks[a].rank < step.tasks[b].rank;
        });
        json tasks = json::array();
        auto& list = tasks.get_ref<json::array_t&>();
        list.reserve(by_rank.size());
        for (std::size_t i : by_rank)
            list.push_back(json_task(step, settings, decision, i));
        doc["tasks"] = std::move(tasks);
        return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    } catch (...) {
        return "{\"version\": " + std::to_string(report_json_version) +
               ", \"exit_code\": " + std::to_string(decision.code) +
               ", \"error\": \"the report could not be rendered\"}\n";
    }
}

}  // namespace exitpolicy
