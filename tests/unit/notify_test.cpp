// SPDX-License-Identifier: Apache-2.0
// notify_test.cpp - a peer's end, as the node's PMIx server tells it
// (PmixHost::notify_terminated), reaches a client that registered only a
// default handler, as Open MPI's runtime does, naming the ended process
// as the event's source and as the affected process.
//
// From OpenPMIx 6.1 on, PMIx_Notify_event reads its source and its infos
// on the library's own thread after the call has returned: what the host
// passes must live until the callback. A source on the caller's stack was
// read after the frame was gone, and on Debian forky's OpenPMIx 7 a
// survivor with only a default handler heard nothing of its peer's death.
// Here the server's thread overwrites the stack right after each call,
// so that such a source is garbage if the library reads it later; it
// reads it sooner now and then, so the end is told of 20 times (measured
// on OpenPMIx 7.0.0 with the source on the stack: 1 call in 3 went
// wrong). On older libraries (4.2, 5.0), which copy both before they
// return, the test passes either way.
//
// Real parts: a forked process is the PMIx server (PmixHost, the daemon's
// own) of three real client programs (tests/clients/ep_events): the
// survivor, the victim, and a rank that does what the daemon's event
// anchor does (pmix_server/event_anchor.hpp; without it OpenPMIx 4.2 and
// 5.0 drop every default handler). Only the overlay behind the upcalls is
// a stand-in (this node is the whole step).
#include "one_node.hpp"
#include "pmix_host.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <pmix_common.h>

namespace exitpolicy::pmix_server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using one_node::OneNode;
constexpr auto fail = one_node::server_fails;

const char* const nspace = "exitpolicy.7.0";
constexpr std::uint32_t survivor = 0, victim = 1, anchor = 2;
constexpr int times_told = 20;

std::string read_file(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// What was on the stack below the caller is overwritten.
[[gnu::noinline]] void scribble_stack()
{
    volatile unsigned char junk[64 * 1024];
    for (auto& b : junk)
        b = 0xa5;
}

std::string output(const std::string& dir, std::uint32_t rank)
{
    return read_file(dir + "/out." + std::to_string(rank));
}

// ep_events as `rank` of the step, its stdout in dir/out.RANK, once it
// said "ready" (its handler is registered; 20 s at most). The survivor and
// the victim register one default handler; the victim then waits to be
// killed, the survivor for `times_told` events about the victim (10 s at
// most). The
// anchor registers the anchor's code and listens, hearing nothing.
pid_t start_client(PmixHost& host, OneNode& overlay, const std::string& dir, std::uint32_t rank)
{
    auto env = host.environment(rank);
    if (!env)
        fail(env.error());
    const std::string out = dir + "/out." + std::to_string(rank);
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fd, 1);
        for (const auto& kv : *env)
            ::putenv(::strdup(kv.c_str()));
        const std::string victim_rank = std::to_string(victim);
        const bool anchoring = rank == anchor;
        const std::string expect = anchoring ? "0" : std::to_string(times_told);
        ::execl(EP_EVENTS_PATH, EP_EVENTS_PATH, "--victim", victim_rank.c_str(), "--hang", "--delay", "0.01",
                "--expect", expect.c_str(), "--register", anchoring ? "anchor" : "default", "--no-fence",
                "--timeout", anchoring ? "30" : "10", static_cast<char*>(nullptr));
        std::_Exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (output(dir, rank).find("ready rank=") == std::string::npos && std::chrono::steady_clock::now() < until) {
        overlay.queue.run();
        std::this_thread::sleep_for(10ms);
    }
    if (output(dir, rank).find("ready rank=") == std::string::npos)
        fail("rank " + std::to_string(rank) + " did not get ready: " + output(dir, rank));
    return pid;
}

// The server process: exit 0 when the survivor heard of the victim's end
// from the event's source, else a reason on stderr (server_fails).
[[noreturn]] void serve(const std::string& dir)
{
    OneNode overlay;
    overlay.as_node0(dir, {survivor, victim, anchor});
    std::vector<pid_t> clients;
    {
        PmixHost host(overlay);
        if (auto ok = host.init(dir); !ok)
            fail(ok.error());
        one_node::register_one_node(host, overlay, nspace, 3);
        // The anchor's registration first, as the daemon orders it.
        for (std::uint32_t rank : {anchor, survivor, victim})
            clients.push_back(start_client(host, overlay, dir, rank));
        const pid_t survivor_pid = clients[1];

        // The victim is told of as the daemon tells a task's end whose
        // client never finalized (it still runs: nothing but this event
        // can tell the survivor of it).
        for (int i = 0; i < times_told; ++i) {
            host.notify_terminated(victim, PMIX_ERR_PROC_TERM_WO_SYNC, 9);
            scribble_stack();
        }

        int status = -1;
        for (int i = 0; i < 1500 && status == -1; ++i) {
            overlay.queue.run();
            if (::waitpid(survivor_pid, &status, WNOHANG) != survivor_pid)
                status = -1;
            std::this_thread::sleep_for(10ms);
        }
        for (pid_t pid : clients)
            if (pid != survivor_pid || status == -1) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, nullptr, 0);
            }
        const std::string said = output(dir, survivor);
        if (status != 0)
            fail("the survivor did not hear of rank 1's end (wait status " + std::to_string(status) + "): " + said);
        const std::string about = std::string(nspace) + ":" + std::to_string(victim);
        std::istringstream lines(said);
        int heard = 0;
        for (std::string line; std::getline(lines, line);) {
            if (line.rfind("event ", 0) != 0)
                continue;
            if (line.find(" affected=" + about + " source=" + about + " ") == std::string::npos)
                fail("the survivor heard of it from another source: " + line);
            ++heard;
        }
        if (heard != times_told)
            fail("the survivor heard of it " + std::to_string(heard) + " times, not " + std::to_string(times_told) +
                 ": " + said);
        overlay.queue.close();
    }  // deregistered, finalized
    std::_Exit(0);
}

TEST(Notify, ADefaultHandlerHearsAPeersEndFromItsSource)
{
    char tmpl[] = "/tmp/ep-notify-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0)
        serve(dir);
    int status = 0;
    ::waitpid(pid, &status, 0);
    fs::remove_all(dir);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server process wait status " << status;
}

}  // namespace
}  // namespace exitpolicy::pmix_server
