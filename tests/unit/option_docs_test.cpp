// SPDX-License-Identifier: Apache-2.0
// option_docs_test.cpp - the documents name every srun option, environment
// variable and plugstack.conf argument of option_table.hpp, and no option,
// variable or argument that is not there.
#include "spank_plugin/option_table.hpp"

#include "exitpolicy/outcome.hpp"
#include "exitpolicy/policy.hpp"
#include "protocol/events.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::spank_plugin {
namespace {

// What a document must name.
enum Names : unsigned {
    srun_options = 1,  // --exit-policy, ...
    variables = 2,     // SLURM_EXIT_POLICY, ...
    site_args = 4,     // default_policy=, ...
};

struct Document {
    const char* path;  // in the source tree
    unsigned names;
};

// The documents that name the entries of the tables (roff's \- and
// \fB...\fR are read as plain text): the README the options, the user's
// manual page the options and variables, the site's and the
// plugstack.conf.d file the package installs the arguments.
constexpr Document documents[] = {
    {"README.md", srun_options},  // the table itself is the manual page's alone
    {"docs/install.md", site_args},
    {"contrib/slurm/plugstack.conf.example", site_args},
    {"contrib/slurm/exitpolicy.conf.in", site_args},
    {"docs/exitpolicy.1", srun_options | variables},
    {"docs/exitpolicy.8", site_args},
};

void PrintTo(const Document& doc, std::ostream* out)
{
    *out << doc.path;
}

std::string read_text(const std::filesystem::path& path)
{
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// roff escapes out: "\fB\-\-exit\-policy\fR" reads "--exit-policy".
std::string plain(const std::string& text)
{
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) {
            const char next = text[i + 1];
            if (next == '-') {
                out += '-';
                ++i;
                continue;
            }
            if (next == '&') {
                ++i;
                continue;
            }
            if (next == 'f' && i + 2 < text.size()) {
                i += text[i + 2] == '(' ? 4 : 2;
                continue;
            }
        }
        out += text[i];
    }
    return out;
}

bool name_char(char c)
{
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

// Whether text has word as a whole word: "--exit-report" is not in
// "--exit-report-json", "report=" not in "--exit-report=".
bool names(std::string_view text, std::string_view word)
{
    for (auto at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
        const auto end = at + word.size();
        const bool starts = at == 0 || !name_char(text[at - 1]);
        const bool ends = !name_char(word.back()) || end == text.size() || !name_char(text[end]);
        if (starts && ends)
            return true;
    }
    return false;
}

bool in_option_table(const std::string& word)
{
    for (const auto& spec : option_table)
        if (word == "--" + std::string(spec.option) || word == spec.env)
            return true;
    return false;
}

bool in_site_arguments(const std::string& name)
{
    for (const auto& a : site_arguments)
        if (name == a.name)
            return true;
    return false;
}

class DocumentTest : public testing::TestWithParam<Document> {};

TEST_P(DocumentTest, NamesEveryEntry)
{
    const Document& doc = GetParam();
    const std::filesystem::path path = std::filesystem::path(EXITPOLICY_SOURCE_DIR) / doc.path;
    ASSERT_TRUE(std::filesystem::is_regular_file(path)) << path;
    const std::string text = plain(read_text(path));
    for (const auto& spec : option_table) {
        const std::string option = "--" + std::string(spec.option);
        if (doc.names & srun_options) {
            EXPECT_TRUE(names(text, option)) << doc.path << " does not name " << option << ": " << spec.help;
        }
        if (doc.names & variables) {
            EXPECT_TRUE(names(text, spec.env))
                << doc.path << " does not name " << spec.env << ", the environment's " << option;
        }
    }
    if (doc.names & site_args) {
        for (const auto& a : site_arguments) {
            EXPECT_TRUE(names(text, std::string(a.name) + "="))
                << doc.path << " does not name the plugstack.conf argument " << a.name << "=" << a.syntax << ": "
                << a.about;
        }
    }
}

std::string test_name(const testing::TestParamInfo<Document>& info)
{
    std::string name = info.param.path;
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)))
            c = '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(Documents, DocumentTest, testing::ValuesIn(documents), test_name);

TEST(DocumentNamesTest, WholeWordsInMarkdownAndRoff)
{
    EXPECT_TRUE(names("| `--exit-report=auto\\|always` |", "--exit-report"));
    EXPECT_FALSE(names("`--exit-report-json=PATH`", "--exit-report"));
    EXPECT_FALSE(names("SLURM_EXIT_REPORT_JSON", "SLURM_EXIT_REPORT"));
    EXPECT_FALSE(names("--exit-report=always", "report="));
    EXPECT_FALSE(names("teardown_grace_ms=500", "grace_ms="));
    EXPECT_TRUE(names("#   grace_ms=N", "grace_ms="));
    const std::string roff = plain(".TP\n\\fB\\-\\-exit\\-policy\\fR=\\fIPOLICY\\fR\n\\f(CWgrace_ms=\\fP3000");
    EXPECT_TRUE(names(roff, "--exit-policy")) << roff;
    EXPECT_TRUE(names(roff, "grace_ms=")) << roff;
}

// A line's roff requests out (".BR auto ." reads "auto ."), lines joined by
// spaces.
std::string running_text(const std::string& roff)
{
    std::istringstream in(plain(roff));
    std::string out, line;
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] == '.') {
            const auto space = line.find(' ');
            line = space == std::string::npos ? "" : line.substr(space + 1);
        }
        if (!out.empty())
            out += ' ';
        out += line;
    }
    return out;
}

// The site's guide's table of arguments gives each default in its second
// column.
TEST(DocumentDefaultsTest, TheInstallGuidesTableGivesEachDefault)
{
    const std::string text = read_text(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "docs/install.md");
    for (const auto& a : site_arguments) {
        const std::string row = "| `" + std::string(a.name) + "=";
        const auto at = text.find("\n" + row);
        ASSERT_NE(at, std::string::npos) << "docs/install.md has no row " << row;
        const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
        // | `name=syntax` | default | meaning |, with | escaped in the syntax.
        auto cell_start = line.find("` |");
        ASSERT_NE(cell_start, std::string::npos) << line;
        cell_start += 3;
        std::string cell = line.substr(cell_start, line.find(" |", cell_start + 1) - cell_start);
        cell.erase(0, cell.find_first_not_of(' '));
        if (cell.size() > 2 && cell.front() == '`' && cell.back() == '`')
            cell = cell.substr(1, cell.size() - 2);
        EXPECT_EQ(cell, a.default_text) << "docs/install.md's default of " << a.name << "=";
    }
}

// The site's manual page says "Default: X." for each argument.
TEST(DocumentDefaultsTest, TheSitesManualPageGivesEachDefault)
{
    const std::string text = read_text(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "docs/exitpolicy.8");
    for (const auto& a : site_arguments) {
        auto at = text.find("\n.BI " + std::string(a.name) + "=");
        if (at == std::string::npos)
            at = text.find("\n.B " + std::string(a.name) + "=");
        ASSERT_NE(at, std::string::npos) << "docs/exitpolicy.8 has no entry for " << a.name << "=";
        const auto end = std::min(text.find("\n.TP\n", at + 1), text.find("\n.SH ", at + 1));
        const std::string entry = running_text(text.substr(at + 1, end - at - 1));
        EXPECT_TRUE(names(entry, std::string("Default: ") + a.default_text))
            << "docs/exitpolicy.8's entry for " << a.name << "= does not say \"Default: " << a.default_text
            << "\": " << entry;
    }
}

// The user's documentation: every --exit-* option and SLURM_EXIT_* variable it
// names is one of option_table.
TEST(DocumentNamesTest, EveryOptionAndVariableNamedIsInTheTable)
{
    const std::filesystem::path root = EXITPOLICY_SOURCE_DIR;
    std::vector<std::filesystem::path> paths = {root / "contrib/slurm/README.md"};
    for (const auto& doc : documents)
        paths.push_back(root / doc.path);
    for (const auto& entry : std::filesystem::directory_iterator(root / "docs"))
        if (entry.path().extension() == ".md")
            paths.push_back(entry.path());
    const std::regex word(R"((^|[^A-Za-z0-9_-])(--exit-[a-z0-9-]*[a-z0-9]|SLURM_EXIT_[A-Z0-9_]*[A-Z0-9]))");
    for (const auto& path : paths) {
        const std::string text = plain(read_text(path));
        for (std::sregex_iterator it(text.begin(), text.end(), word), end; it != end; ++it) {
            EXPECT_TRUE(in_option_table((*it)[2])) << path << " names " << (*it)[2] << ", which is no option";
        }
    }
}

// plugstack.conf.example documents each argument under a line "#   NAME=...".
TEST(DocumentNamesTest, EveryArgumentThePlugstackExampleDocumentsIsInTheTable)
{
    const std::string text =
        read_text(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "contrib/slurm/plugstack.conf.example");
    const std::regex heading(R"((^|\n)#   ([a-z_]+)=)");
    int headings = 0;
    for (std::sregex_iterator it(text.begin(), text.end(), heading), end; it != end; ++it, ++headings) {
        EXPECT_TRUE(in_site_arguments((*it)[2]))
            << "plugstack.conf.example documents " << (*it)[2] << "=, which is no plugstack.conf argument";
    }
    EXPECT_EQ(headings, static_cast<int>(std::size(site_arguments)));
}

// The root-cause rule is written once, in exitpolicy(1) ("The root cause
// decides"); the other pages point there. Each page that still gives the
// reaction window gives the policy core's (reaction_window_us), and the
// rule gives the codes a torn-down shell exits with.
TEST(RuleDocsTest, TheRootCauseRuleIsWrittenOnceAndSaysWhatTheCoreDoes)
{
    const auto source = std::filesystem::path(EXITPOLICY_SOURCE_DIR);
    const std::string man = read_text(source / "docs/exitpolicy.1");
    const auto begin = man.find(".B The root cause decides.");
    ASSERT_NE(begin, std::string::npos) << "docs/exitpolicy.1 has no rule";
    const std::string rule = man.substr(begin, man.find("\n.B max\n", begin) - begin);
    const std::string window = "up to " + std::to_string(reaction_window_us / 1000) + " ms";
    EXPECT_NE(rule.find(window), std::string::npos) << "the rule gives no reaction window of " << window;
    const std::string codes = std::to_string(128 + SIGTERM) + " or " + std::to_string(128 + SIGKILL);
    EXPECT_NE(rule.find("exited with " + codes), std::string::npos) << rule;
    for (const char* policy : {"main\\-rank", "main\\-rank\\-check", "lowest\\-rank", "first\\-failure"})
        EXPECT_NE(rule.find(policy), std::string::npos) << "the rule does not say what " << policy << " does";
    for (const char* page : {"README.md", "docs/pmix-service.md", "docs/report-json.md"}) {
        const std::string text = read_text(source / page);
        EXPECT_NE(text.find("(\"The root cause decides\""), std::string::npos) << page << " does not point to the rule";
        EXPECT_EQ(text.find("exited with code " + codes), std::string::npos) << page << " writes the rule again";
    }
    const std::regex any_window("up to ([0-9]+) ms");
    for (const char* page : {"README.md", "docs/exitpolicy.1", "docs/pmix-service.md", "docs/report-json.md",
                             "docs/status.md", "docs/mpi.md"}) {
        const std::string text = read_text(source / page);
        for (auto it = std::sregex_iterator(text.begin(), text.end(), any_window); it != std::sregex_iterator(); ++it)
            EXPECT_EQ((*it)[0].str(), window) << page << ": a reaction window other than the core's";
    }
}

// docs/pmix-service.md's table of the events a task's abnormal end raises
// ("A task ends abnormally") is what a node daemon sends: each row's code
// and PMIX_EXIT_CODE, from the same outcome (protocol/events.hpp).
TEST(RuleDocsTest, TheEventTableIsWhatANodeDaemonSends)
{
    const std::string text = read_text(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "docs/pmix-service.md");
    const auto begin = text.find("| how the task ended | specific code | `PMIX_EXIT_CODE` |");
    ASSERT_NE(begin, std::string::npos) << "docs/pmix-service.md has no event table";
    std::istringstream rows(text.substr(begin, text.find("\n\n", begin) - begin));
    std::vector<std::pair<std::string, std::string>> table;  // code, exit code, by row
    std::string line;
    std::getline(rows, line);
    std::getline(rows, line);  // |---|
    while (std::getline(rows, line)) {
        const auto a = line.find("| `"), b = line.find("` | ", a + 3);
        ASSERT_TRUE(a != std::string::npos && b != std::string::npos) << line;
        table.emplace_back(line.substr(a + 3, b - a - 3), line.substr(b + 4, line.rfind(" |") - b - 4));
    }
    using protocol::Outcome;
    const auto client = Outcome::flag_finalized_known;
    const auto finalized = Outcome::flag_finalized_known | Outcome::flag_finalized;
    struct Row {
        std::vector<Outcome> ends;  // each raises the row's code, and its exit code
        std::vector<int> codes;
    };
    const std::vector<Row> expect{
        {{{0, 0, 1, 7 << 8, 0, static_cast<std::uint8_t>(Outcome::flag_aborted | client), 7}}, {7}},
        {{{0, 0, 1, SIGSEGV, 0, finalized}, {0, 0, 1, SIGKILL, 0, 0}}, {128 + SIGSEGV, 128 + SIGKILL}},
        {{{0, 0, 1, 0, 0, client}, {0, 0, 1, 3 << 8, 0, client}}, {0, 3}},
        {{{0, 0, 1, 3 << 8, 0, finalized}, {0, 0, 1, 4 << 8, 0, 0}}, {3, 4}},
    };
    ASSERT_EQ(table.size(), expect.size() + 1) << "a row more or less than the daemon's kinds of end (and the lost task's)";
    const std::vector<std::string> exit_words{"status", "128 + signal", "the exit code", "the exit code"};
    for (std::size_t row = 0; row < expect.size(); ++row) {
        EXPECT_EQ(table[row].second, exit_words[row]) << "row " << row;
        for (std::size_t i = 0; i < expect[row].ends.size(); ++i) {
            const auto event = protocol::pmix::termination_event(expect[row].ends[i], 0);
            ASSERT_TRUE(event) << "row " << row;
            EXPECT_EQ(pmix_termination_name(event->code), table[row].first) << "row " << row;
            EXPECT_EQ(event->exit_code, expect[row].codes[i]) << "row " << row;
        }
    }
    // A lost task's row: what pmix_server/pmix_host.cpp's notify_node_down
    // sends for each rank of a lost node (the daemon's side, not linked here).
    EXPECT_EQ(table.back().first, pmix_termination_name(protocol::pmix::proc_term_wo_sync));
    EXPECT_EQ(table.back().second, "`lost_code`");
}

}  // namespace
}  // namespace exitpolicy::spank_plugin
