// SPDX-License-Identifier: Apache-2.0
// source_tree_test.cpp - the source tree names its license: LICENSE holds
// the Apache License 2.0, and every source file says so in its first lines
// (an SPDX line), so that a file copied out of the tree still does. The
// includes show the design: the plugin and the daemon meet only in
// protocol/, the floors below include neither, and within a folder no
// piece includes one that includes it back.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr const char* spdx = "SPDX-License-Identifier: Apache-2.0";

bool is_source(const std::filesystem::path& p)
{
    static const std::set<std::string> extensions = {".cpp", ".hpp", ".c", ".h", ".py", ".sh", ".cmake"};
    static const std::set<std::string> scripts = {"cluster", "build", "rootfs", "deb", "demo", "install-deps", "run"};
    const std::string name = p.filename().string();
    if (name == "CMakeLists.txt" || extensions.count(p.extension().string()))
        return true;
    // The scripts without an extension: contrib/... and .ci/run.
    const std::string dir = p.parent_path().filename().string();
    return p.extension().empty() && scripts.count(name) && (dir == "contrib" || dir == "slurm" || dir == "rpm" ||
                                                             dir == ".ci");
}

TEST(SourceTree, LicenseIsTheApacheLicense)
{
    std::ifstream in(std::filesystem::path(EXITPOLICY_SOURCE_DIR) / "LICENSE");
    ASSERT_TRUE(in.good());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("Apache License"), std::string::npos);
    EXPECT_NE(text.find("Version 2.0, January 2004"), std::string::npos);
}

TEST(SourceTree, EverySourceFileNamesItsLicense)
{
    const std::filesystem::path root = EXITPOLICY_SOURCE_DIR;
    std::vector<std::string> missing;
    std::size_t checked = 0;
    auto check = [&](const std::filesystem::path& p) {
        std::ifstream in(p);
        std::string first, second;
        std::getline(in, first);
        std::getline(in, second);
        ++checked;
        // After a #! line, the second.
        const bool named = first.find(spdx) != std::string::npos ||
                           (first.starts_with("#!") && second.find(spdx) != std::string::npos);
        if (!named)
            missing.push_back(std::filesystem::relative(p, root).string());
    };
    check(root / "CMakeLists.txt");
    for (const char* dir : {"exitpolicy", "protocol", "spank_plugin", "pmix_server", "tests", "bench", "contrib",
                            "cmake", "docs", ".ci"})
        for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir))
            if (entry.is_regular_file() && is_source(entry.path()))
                check(entry.path());
    EXPECT_GT(checked, 150u);
    EXPECT_TRUE(missing.empty()) << "without \"" << spdx
                                 << "\" in their first lines: " << ::testing::PrintToString(missing);
}

// The quoted includes and the source files a CMakeLists.txt names, of every
// file directly in `dir`, that lie in one of `forbidden`.
std::vector<std::string> reaches(const std::filesystem::path& root, const std::string& dir,
                                 const std::vector<std::string>& forbidden)
{
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(root / dir)) {
        if (!entry.is_regular_file() || !is_source(entry.path()))
            continue;
        std::ifstream in(entry.path());
        const bool cmake = entry.path().filename() == "CMakeLists.txt";
        for (std::string line; std::getline(in, line);) {
            const auto first = line.find_first_not_of(" \t");
            if (first == std::string::npos || (!cmake && line.compare(first, 10, "#include \"") != 0) ||
                (cmake && line[first] == '#'))
                continue;
            for (const auto& other : forbidden)
                if (line.find(other + "/") != std::string::npos)
                    found.push_back(dir + "/" + entry.path().filename().string() + ": " + line.substr(first));
        }
    }
    return found;
}

TEST(SourceTree, ThePluginAndTheDaemonMeetOnlyInProtocol)
{
    const std::filesystem::path root = EXITPOLICY_SOURCE_DIR;
    const std::map<std::string, std::vector<std::string>> never = {
        {"spank_plugin", {"pmix_server"}},
        {"pmix_server", {"spank_plugin"}},
        {"protocol", {"spank_plugin", "pmix_server"}},
        {"exitpolicy", {"spank_plugin", "pmix_server", "protocol"}},
    };
    for (const auto& [dir, forbidden] : never) {
        const auto found = reaches(root, dir, forbidden);
        EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
    }
}

// A folder's pieces (a .hpp and the .cpp of its name are one piece) and the
// pieces of that folder each one's quoted includes name.
std::map<std::string, std::set<std::string>> piece_includes(const std::filesystem::path& root, const std::string& dir)
{
    std::map<std::string, std::set<std::string>> edges;
    for (const auto& entry : std::filesystem::directory_iterator(root / dir)) {
        const auto ext = entry.path().extension();
        if (!entry.is_regular_file() || (ext != ".hpp" && ext != ".cpp"))
            continue;
        const std::string piece = entry.path().stem().string();
        auto& to = edges[piece];
        std::ifstream in(entry.path());
        for (std::string line; std::getline(in, line);) {
            if (!line.starts_with("#include \""))
                continue;
            std::string name = line.substr(10, line.find('"', 10) - 10);
            if (name.starts_with(dir + "/"))
                name = name.substr(dir.size() + 1);
            if (name.find('/') != std::string::npos || !name.ends_with(".hpp"))
                continue;  // another folder's, or no header
            name.resize(name.size() - 4);
            if (name != piece && std::filesystem::exists(root / dir / (name + ".hpp")))
                to.insert(name);
        }
    }
    return edges;
}

// Each cycle of includes among a folder's pieces, as "a -> b -> a".
std::vector<std::string> include_cycles(const std::map<std::string, std::set<std::string>>& edges)
{
    std::vector<std::string> cycles;
    std::map<std::string, int> state;  // 1: on the path, 2: done
    std::vector<std::string> path;
    std::function<void(const std::string&)> visit = [&](const std::string& piece) {
        state[piece] = 1;
        path.push_back(piece);
        if (const auto it = edges.find(piece); it != edges.end())
            for (const auto& next : it->second) {
                if (state[next] == 1) {
                    std::string cycle;
                    for (auto at = std::find(path.begin(), path.end(), next); at != path.end(); ++at)
                        cycle += *at + " -> ";
                    cycles.push_back(cycle + next);
                } else if (state[next] == 0) {
                    visit(next);
                }
            }
        path.pop_back();
        state[piece] = 2;
    };
    for (const auto& [piece, to] : edges)
        if (state[piece] == 0)
            visit(piece);
    return cycles;
}

TEST(SourceTree, WithinAFolderNoPieceIncludesOneThatIncludesItBack)
{
    const std::filesystem::path root = EXITPOLICY_SOURCE_DIR;
    // The check itself: a cycle of three is found.
    EXPECT_EQ(include_cycles({{"a", {"b"}}, {"b", {"c"}}, {"c", {"a"}}}), std::vector<std::string>{"a -> b -> c -> a"});
    EXPECT_TRUE(include_cycles({{"a", {"b", "c"}}, {"b", {"c"}}, {"c", {}}}).empty());
    for (const char* dir : {"exitpolicy", "protocol", "spank_plugin", "pmix_server"}) {
        const auto cycles = include_cycles(piece_includes(root, dir));
        EXPECT_TRUE(cycles.empty()) << dir << "/: " << ::testing::PrintToString(cycles);
    }
}

}  // namespace
