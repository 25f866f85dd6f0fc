// SPDX-License-Identifier: Apache-2.0
// cleanup_test.cpp - what clients ask the node's PMIx server to remove
// when they are gone (PMIX_REGISTER_CLEANUP_DIR through job control, as
// Open MPI does for its session directory) is removed when the server
// stops, however the clients ended; and the namespace's session directory
// (PMIX_NSDIR) is the one under the server's directory.
//
// Real parts: each test forks a process that is a PMIx server (PmixHost,
// the daemon's own) and runs real client programs (tests/clients/ep_cleanup)
// as two local ranks; only the overlay behind the upcalls is a stand-in
// (this node is the whole step). The test process checks the files after
// the server process has ended, as slurmstepd would.
#include "one_node.hpp"
#include "pmix_host.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace exitpolicy::pmix_server {
namespace {

namespace fs = std::filesystem;

using one_node::OneNode;

struct Ending {
    std::string scope = "proc";  // ep_cleanup --scope
    std::string then;            // ep_cleanup --then
};

// The server process: serves two local ranks running ep_cleanup until both
// ended, then stops as the daemon does (PmixHost's destructor). Exit 0 if
// all of that went as planned; what is left on disk is the caller's check.
[[noreturn]] void serve(const std::string& server_dir, const std::string& client_dir, const Ending& run)
{
    const auto fail = one_node::server_fails;
    OneNode overlay;
    overlay.as_node0(server_dir, {0, 1});
    {
        PmixHost host(overlay);
        if (auto ok = host.init(server_dir); !ok)
            fail(ok.error());
        one_node::register_one_node(host, overlay, "exitpolicy.7.0", 2);
        std::vector<pid_t> clients;
        for (std::uint32_t rank : overlay.args_.ranks) {
            auto env = host.environment(rank);
            if (!env)
                fail(env.error());
            const pid_t pid = ::fork();
            if (pid == 0) {
                for (const auto& kv : *env)
                    ::putenv(::strdup(kv.c_str()));
                const std::string program = EP_CLEANUP_PATH;
                ::execl(program.c_str(), program.c_str(), "--dir", client_dir.c_str(), "--scope", run.scope.c_str(),
                        "--then", run.then.c_str(), "--timeout", "20", static_cast<char*>(nullptr));
                std::_Exit(127);
            }
            clients.push_back(pid);
        }
        // Until both ended (20 s at most), serving their upcalls.
        for (int i = 0; i < 2000 && !clients.empty(); ++i) {
            overlay.queue.run();
            std::erase_if(clients, [](pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == pid; });
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (!clients.empty())
            fail("a client did not end");
        overlay.queue.close();
    }  // deregistered, finalized
    std::_Exit(0);
}

class Cleanup : public ::testing::TestWithParam<Ending> {
protected:
    void SetUp() override
    {
        char server[] = "/tmp/ep-cleanup-test.server.XXXXXX";
        char clients[] = "/tmp/ep-cleanup-test.clients.XXXXXX";
        ASSERT_NE(::mkdtemp(server), nullptr);
        ASSERT_NE(::mkdtemp(clients), nullptr);
        server_dir_ = server;
        client_dir_ = clients;
    }
    void TearDown() override
    {
        fs::remove_all(server_dir_);
        fs::remove_all(client_dir_);
    }
    // Runs the server process; its exit status.
    int serve_once(const Ending& run)
    {
        std::fflush(nullptr);
        const pid_t pid = ::fork();
        if (pid == 0)
            serve(server_dir_, client_dir_, run);
        int status = 0;
        ::waitpid(pid, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::vector<std::string> left() const
    {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(client_dir_))
            out.push_back(e.path().filename().string());
        return out;
    }
    std::string server_dir_;
    std::string client_dir_;
};

TEST_P(Cleanup, WhatAClientRegisteredIsGoneWhenTheServerStops)
{
    ASSERT_EQ(serve_once(GetParam()), 0);
    EXPECT_EQ(left(), std::vector<std::string>{}) << "left in " << client_dir_;
    // The namespace's session directory was made under the server's.
    EXPECT_TRUE(fs::is_directory(namespace_dir(server_dir_, "exitpolicy.7.0")));
}

// A server without a directory of its own makes none: the namespace's
// directory once went to "/<namespace>".
TEST(NamespaceDir, IsMadeOnlyUnderTheServersDirectory)
{
    const std::string nspace = "exitpolicy.nsdir-test." + std::to_string(::getpid());
    EXPECT_EQ(make_namespace_dir("", nspace), "");
    EXPECT_FALSE(fs::exists("/" + nspace));
    char tmpl[] = "/tmp/exitpolicy-nsdir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const std::string made = make_namespace_dir(tmpl, nspace);
    EXPECT_EQ(made, std::string(tmpl) + "/" + nspace);
    EXPECT_EQ(fs::status(made).permissions(), fs::perms::owner_all);
    // Twice is an error the caller hears about (it falls back to /tmp).
    EXPECT_EQ(make_namespace_dir(tmpl, nspace), "");
    fs::remove_all(tmpl);
}

INSTANTIATE_TEST_SUITE_P(Ways, Cleanup,
                         ::testing::Values(Ending{"proc", "finalize"}, Ending{"proc", "exit:3"}, Ending{"proc", "segv"},
                                           Ending{"job", "finalize"}, Ending{"job", "exit:3"}),
                         [](const auto& param_info) {
                             std::string name = param_info.param.scope + "_" + param_info.param.then;
                             for (char& c : name)
                                 if (c == ':')
                                     c = '_';
                             return name;
                         });

}  // namespace
}  // namespace exitpolicy::pmix_server
