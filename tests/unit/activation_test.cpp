// SPDX-License-Identifier: Apache-2.0
// activation_test.cpp - a PMIx server that starts after its clients
// (pmix_server/socket_activation.hpp): clients given the planned environment
// before the server exists wait for it, are held until the gate opens and
// are then served; the planned environment is the library's own; the one
// process let through passes the closed gate; held clients fail at once
// when the daemon stops instead of hanging.
//
// Real parts: each test forks a process that is a PMIx server (PmixHost,
// the daemon's own, with this executable's bind() and accept(), as the
// daemon's) and runs real client programs (tests/clients/ep_hello); only
// the overlay behind the upcalls is a stand-in (this node is the whole step).
#include "one_node.hpp"
#include "pmix_compat.hpp"
#include "pmix_host.hpp"
#include "socket_activation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <grp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <csignal>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace exitpolicy::pmix_server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using one_node::OneNode;
constexpr auto fail = one_node::server_fails;

// The server process's side: a node of two local ranks whose server is
// planned on a reserved socket.
struct Node {
    std::string dir;
    OneNode overlay;
    activation::Reserved reserved;
    PlannedServer planned;
    std::string nspace = "exitpolicy.7.0";

    explicit Node(std::string server_dir) : dir(std::move(server_dir))
    {
        overlay.as_node0(dir, {0, 1});
        auto r = protocol::listen_loopback();
        if (!r)
            fail(r.error());
        reserved = std::move(*r);
        const auto version = compat::running_version();
        if (!version || !compat::activation_errno(*version))
            fail("this OpenPMIx is not one the gate was made for");
        planned = PlannedServer{reserved.port, 0, dir, "node0", version->text};
        ::setenv("PMIX_MCA_gds", "hash", 1);
        activation::arm(reserved, compat::activation_errno(*version));
    }

    // A client (ep_hello) started with the planned environment, its stdout
    // in dir/out.RANK.
    pid_t client(std::uint32_t rank) const { return client(rank, planned_environment(planned, nspace, rank)); }
    // With `pmix_env`: a server not planned (the library's own socket).
    pid_t client(std::uint32_t rank, const std::vector<std::string>& pmix_env) const
    {
        std::vector<std::string> env;
        for (char** e = environ; *e; ++e)
            env.emplace_back(*e);
        for (auto& kv : pmix_env)
            env.push_back(kv);
        const std::string out = dir + "/out." + std::to_string(rank);
        const pid_t pid = ::fork();
        if (pid == 0) {
            const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            ::dup2(fd, 1);
            std::vector<char*> envp;
            for (auto& kv : env)
                envp.push_back(kv.data());
            envp.push_back(nullptr);
            char timeout[] = "--timeout";
            char seconds[] = "20";
            char* argv[] = {const_cast<char*>(EP_HELLO_PATH), timeout, seconds, nullptr};
            ::execve(EP_HELLO_PATH, argv, envp.data());
            std::_Exit(127);
        }
        return pid;
    }

    // The same client as a process of `uid` (another user of the node)
    // that claims to be uid/gid 0, this test's own user, with the
    // attacker's shim (tests/clients/ep_claim_uid.c): everything of its
    // environment is guessable, and a client's "native" security sends the
    // server only what geteuid() says. `env`: its PMIx environment.
    pid_t stranger(std::uint32_t rank, uid_t uid, const std::vector<std::string>& pmix_env) const
    {
        std::vector<std::string> env{"PATH=/usr/bin:/bin", "LD_PRELOAD=" EP_CLAIM_UID_PATH, "EP_CLAIM_UID=0",
                                     "EP_CLAIM_GID=0", "ASAN_OPTIONS=verify_asan_link_order=0"};
        env.insert(env.end(), pmix_env.begin(), pmix_env.end());
        const std::string out = dir + "/out." + std::to_string(rank);
        const pid_t pid = ::fork();
        if (pid == 0) {
            const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
            ::dup2(fd, 1);
            if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)
                std::_Exit(126);
            std::vector<char*> envp;
            for (auto& kv : env)
                envp.push_back(kv.data());
            envp.push_back(nullptr);
            char timeout[] = "--timeout";
            char seconds[] = "5";
            char* argv[] = {const_cast<char*>(EP_HELLO_PATH), timeout, seconds, nullptr};
            ::execve(EP_HELLO_PATH, argv, envp.data());
            std::_Exit(127);
        }
        return pid;
    }

    std::string output(std::uint32_t rank) const
    {
        std::ifstream in(dir + "/out." + std::to_string(rank));
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }

    void register_namespace(PmixHost& host) { one_node::register_one_node(host, overlay, nspace, 2); }
};

// -1 while it runs, else its wait status; waits at most `bound`, running
// the upcalls' work meanwhile as the daemon's loop would.
int wait_for(Node& node, pid_t pid, std::chrono::milliseconds bound)
{
    const auto until = std::chrono::steady_clock::now() + bound;
    int status = 0;
    for (;;) {
        node.overlay.queue.run();
        if (::waitpid(pid, &status, WNOHANG) == pid)
            return status;
        if (std::chrono::steady_clock::now() >= until)
            return -1;
        std::this_thread::sleep_for(10ms);
    }
}

bool held_within(std::size_t n, std::chrono::milliseconds bound)
{
    const auto until = std::chrono::steady_clock::now() + bound;
    while (activation::held() != n && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(10ms);
    return activation::held() == n;
}

// Runs `scenario` in a process of its own (one PMIx server per process);
// its exit status, with what it said on stderr shown by gtest.
int in_server_process(void (*scenario)(const std::string& dir))
{
    char tmpl[] = "/tmp/exitpolicy-activation-test.XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    const pid_t pid = ::fork();
    if (pid == 0) {
        scenario(dir);
        std::_Exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    fs::remove_all(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void clients_before_the_server(const std::string& dir)
{
    Node node(dir);
    const pid_t a = node.client(0);
    const pid_t b = node.client(1);
    // Nothing listens for PMIx yet, only the reserved socket: a refused
    // connect would fail them at once.
    std::this_thread::sleep_for(300ms);
    if (wait_for(node, a, 0ms) != -1 || wait_for(node, b, 0ms) != -1)
        fail("a client ended before its server existed");
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, &node.planned); !ok)
        fail(ok.error());
    if (!held_within(2, 5s))
        fail("the gate holds " + std::to_string(activation::held()) + " clients, not 2");
    node.register_namespace(host);
    // Nothing a client sees differs from what the library would give it.
    auto actual = host.environment(0);
    if (!actual)
        fail(actual.error());
    std::string differences;
    for (const auto& d : environment_differences(planned_environment(node.planned, node.nspace, 0), *actual))
        differences += "\n  " + d;
    if (!differences.empty())
        fail("the planned environment is not the library's:" + differences);
    if (wait_for(node, a, 200ms) != -1 || wait_for(node, b, 0ms) != -1)
        fail("a held client ended before the gate opened");
    activation::open();
    for (auto [pid, rank] : {std::pair{a, 0u}, std::pair{b, 1u}}) {
        const int status = wait_for(node, pid, 20s);
        if (status != 0)
            fail("client " + std::to_string(rank) + " ended with status " + std::to_string(status));
        const std::string want = "hello rank=" + std::to_string(rank) + " size=2 ";
        if (node.output(rank).find(want) == std::string::npos)
            fail("client " + std::to_string(rank) + " said: " + node.output(rank));
    }
    if (activation::held() != 0)
        fail("clients still held after the gate opened");
}

void one_passes_the_closed_gate(const std::string& dir)
{
    Node node(dir);
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, &node.planned); !ok)
        fail(ok.error());
    node.register_namespace(host);
    const pid_t held = node.client(0);
    if (!held_within(1, 5s))
        fail("the first client is not held");
    // As the event anchor: its pid is known before it connects.
    const pid_t through = node.client(1);
    activation::let_through(through);
    if (const int status = wait_for(node, through, 20s); status != 0)
        fail("the client let through ended with status " + std::to_string(status) + ": " + node.output(1));
    if (wait_for(node, held, 0ms) != -1 || activation::held() != 1)
        fail("the held client did not wait for the gate");
    activation::open();
    if (const int status = wait_for(node, held, 20s); status != 0)
        fail("the held client ended with status " + std::to_string(status));
}

void held_clients_fail_when_the_daemon_stops(const std::string& dir)
{
    Node node(dir);
    const pid_t a = node.client(0);
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, &node.planned); !ok)
        fail(ok.error());
    if (!held_within(1, 5s))
        fail("the client is not held");
    const auto stopped = std::chrono::steady_clock::now();
    activation::close_held();
    const int status = wait_for(node, a, 10s);
    if (status == -1)
        fail("a held client still waits 10 s after the daemon stopped");
    if (status == 0)
        fail("a client without a server ended as if served");
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - stopped);
    std::fprintf(stderr, "the held client ended %lld ms after the stop\n", static_cast<long long>(took.count()));
}

// Another user of the node who knows the step's PMIx environment (its
// port is in /proc/net/tcp, the rest follows a pattern) and claims to be
// the step's user: refused before the library reads a byte of it, and the
// server goes on serving the step's own clients.
void another_user_is_refused(Node& node, const std::vector<std::string>& env, const std::vector<std::string>& own_env)
{
    constexpr uid_t other = 4242;
    const pid_t intruder = node.stranger(1, other, env);
    const int status = wait_for(node, intruder, 20s);
    if (status == -1)
        fail("another user's client still runs after 20 s");
    if (node.output(1).find("hello rank=1") != std::string::npos)
        fail("another user's client was served: " + node.output(1));
    if (status == 0)
        fail("another user's client ended as if served");
    if (activation::refused() == 0)
        fail("no connection was refused");
    if (std::count(node.overlay.connected.begin(), node.overlay.connected.end(), 1u) != 0)
        fail("the server took another user's client for rank 1");
    const pid_t own = node.client(0, own_env);
    if (const int own_status = wait_for(node, own, 20s); own_status != 0)
        fail("the step's own client, after the refusal, ended with status " + std::to_string(own_status) + ": " +
             node.output(0));
}

void another_user_at_the_reserved_socket(const std::string& dir)
{
    ::chmod(dir.c_str(), 0755);  // nothing of the directory stops the intruder: only the gate may
    Node node(dir);
    activation::serve_only(::getuid(), compat::activation_errno(*compat::running_version()));
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, &node.planned); !ok)
        fail(ok.error());
    node.register_namespace(host);
    activation::open();
    another_user_is_refused(node, planned_environment(node.planned, node.nspace, 1),
                            planned_environment(node.planned, node.nspace, 0));
}

void another_user_at_the_librarys_own_socket(const std::string& dir)
{
    ::chmod(dir.c_str(), 0755);
    Node node(dir);
    activation::serve_only(::getuid(), EAGAIN);
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, nullptr); !ok)  // the library listens on a port of its own
        fail(ok.error());
    node.register_namespace(host);
    auto env = host.environment(1);
    auto own_env = host.environment(0);
    if (!env || !own_env)
        fail(env ? own_env.error() : env.error());
    another_user_is_refused(node, *env, *own_env);
}

// Another user fills the closed gate first: 4 200 connections to the
// reserved port, which they hold open. Before, the gate kept 4 096 of
// them and closed the step's own client that came next; now another
// user's are never held, and the step's client is served once it opens.
void another_user_fills_the_gate(const std::string& dir)
{
    ::chmod(dir.c_str(), 0755);
    Node node(dir);
    activation::serve_only(::getuid(), compat::activation_errno(*compat::running_version()));
    PmixHost host(node.overlay);
    if (auto ok = host.init(dir, &node.planned); !ok)
        fail(ok.error());
    int ready[2];
    if (::pipe(ready) != 0)
        fail("pipe");
    const std::uint16_t port = node.reserved.port;
    const pid_t flood = ::fork();
    if (flood == 0) {
        ::close(ready[0]);
        rlimit lim{8192, 8192};
        if (::setrlimit(RLIMIT_NOFILE, &lim) != 0 || ::setgroups(0, nullptr) != 0 || ::setgid(4242) != 0 ||
            ::setuid(4242) != 0)
            std::_Exit(126);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // after setuid, which clears it: never outlives the server
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int made = 0;
        for (int i = 0; i < 4200; ++i) {
            const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
            if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0)
                ++made;
        }
        [[maybe_unused]] auto w = ::write(ready[1], &made, sizeof made);
        ::sleep(60);  // holds them all
        std::_Exit(0);
    }
    ::close(ready[1]);
    int made = 0;
    // The gate's accepts run on the library's thread meanwhile.
    if (::read(ready[0], &made, sizeof made) != sizeof made || made < 4100)
        fail("the flood made " + std::to_string(made) + " connections");
    ::close(ready[0]);
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (activation::refused() < 4100 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(10ms);
    const std::uint64_t refused = activation::refused();
    const pid_t own = node.client(0);
    if (!held_within(1, 5s))
        fail("the step's own client is not held behind " + std::to_string(refused) + " refused connections (" +
             std::to_string(activation::held()) + " held)");
    node.register_namespace(host);
    activation::open();
    const int status = wait_for(node, own, 20s);
    ::kill(flood, SIGKILL);
    ::waitpid(flood, nullptr, 0);
    if (status != 0)
        fail("the step's own client ended with status " + std::to_string(status) + ": " + node.output(0));
    if (refused < 4100)
        fail("only " + std::to_string(refused) + " of another user's connections were refused");
}

TEST(SocketActivation, AnotherUserCannotFillTheGateBeforeTheStepsClients)
{
    EXPECT_EQ(in_server_process(another_user_fills_the_gate), 0);
}

TEST(SocketActivation, AnotherUserClaimingTheStepsUidIsRefusedAtTheReservedSocket)
{
    EXPECT_EQ(in_server_process(another_user_at_the_reserved_socket), 0);
}

TEST(SocketActivation, AnotherUserClaimingTheStepsUidIsRefusedAtTheLibrarysOwnSocket)
{
    EXPECT_EQ(in_server_process(another_user_at_the_librarys_own_socket), 0);
}

TEST(SocketActivation, ClientsThatCameBeforeTheServerAreServedWithTheLibrarysEnvironment)
{
    EXPECT_EQ(in_server_process(clients_before_the_server), 0);
}

TEST(SocketActivation, TheOneLetThroughPassesTheClosedGateAndTheOthersWait)
{
    EXPECT_EQ(in_server_process(one_passes_the_closed_gate), 0);
}

TEST(SocketActivation, HeldClientsFailAtOnceWhenTheDaemonStops)
{
    EXPECT_EQ(in_server_process(held_clients_fail_when_the_daemon_stops), 0);
}

TEST(SocketActivation, TheRunningLibraryIsOneTheGateWasMadeFor)
{
    // Debian 12's 4.2.2, Debian 13's 5.0.7, forky's 7.0.0: the daemon plans
    // its server on each (before 4.2 it starts before the tasks).
    const auto v = compat::running_version();
    ASSERT_TRUE(v.has_value()) << PMIx_Get_version();
    EXPECT_NE(compat::activation_errno(*v), 0) << v->text;
    EXPECT_EQ(v->text.find_first_of(" ,("), std::string::npos) << v->text;
}

// slurmstepd writes the tasks' environment for the library the project was
// built with: on a machine that builds and runs it, the one running.
TEST(SocketActivation, SlurmstepdPlansForTheRunningLibrary)
{
    const auto built = protocol::built_library_version();
    const auto running = compat::running_version();
    ASSERT_TRUE(built.has_value());
    ASSERT_TRUE(running.has_value());
    EXPECT_EQ(built->text, running->text);
    EXPECT_EQ(protocol::activation_errno(*built), compat::activation_errno(*running));
}

TEST(SocketActivation, AVersionIsReadAsTheLibrarySaysIt)
{
    const auto full = protocol::library_version("OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, Stable ABI: 0.0)");
    ASSERT_TRUE(full.has_value());
    EXPECT_EQ(full->text, "4.2.2rc2");
    EXPECT_EQ(full->major * 10000 + full->minor * 100 + full->release, 40202);
    const auto bare = protocol::library_version("5.0.7");
    ASSERT_TRUE(bare.has_value());
    EXPECT_EQ(bare->text, "5.0.7");
    EXPECT_EQ(protocol::activation_errno(*bare), EAGAIN);
    EXPECT_EQ(protocol::activation_errno(*full), ECONNABORTED);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("5.0.0")), ECONNABORTED);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("4.2.6")), EAGAIN);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("6.1.0")), EAGAIN);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("6.0.0")), 0);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("7.0.0rc1")), EAGAIN);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("4.1.2")), 0);
    EXPECT_EQ(protocol::activation_errno(*protocol::library_version("3.2.3")), 0);
    EXPECT_FALSE(protocol::library_version("OpenPMIx"));
    EXPECT_FALSE(protocol::library_version("PMIx 4.2.2"));
}

// A site's PMIX_MCA_* may change what the library gives its clients: then
// the library writes the tasks' environment, not slurmstepd.
TEST(SocketActivation, ASitesLibrarySettingLeavesTheEnvironmentToTheLibrary)
{
    char path[] = "PATH=/usr/bin";
    char gds[] = "PMIX_MCA_gds=hash";
    char ptl[] = "PMIX_MCA_ptl_base_if_include=lo";
    char* plain[] = {path, gds, nullptr};
    char* site[] = {path, ptl, gds, nullptr};
    EXPECT_EQ(protocol::unplannable_because(plain), "");
    EXPECT_EQ(protocol::unplannable_because(site), "PMIX_MCA_ptl_base_if_include=lo");
    EXPECT_EQ(protocol::unplannable_because(nullptr), "");
}

}  // namespace
}  // namespace exitpolicy::pmix_server
