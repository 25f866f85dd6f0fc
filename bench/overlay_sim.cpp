// SPDX-License-Identifier: Apache-2.0
// overlay_sim.cpp - the step's overlay at scale, without Slurm or PMIx.
//
// srun's real front end (spank_plugin/front_end.hpp, its own thread, as in
// srun) and N real overlay agents (pmix_server/agent.hpp), each with M
// simulated ranks, over loopback TCP with the real frames, the real
// handshake and the real per-frame HMAC. The agents live in W worker
// processes, each one libevent loop holding N/W of them; the parent holds the
// FE and drives the phases through pipes, timing on CLOCK_MONOTONIC, which
// every process shares.
//
// Step A: start-up (enrollment, step map, tree links), fences with data over
// every rank, failure events to every agent, every rank's outcome to the FE
// and the policy's decision. Step B: a relay agent is lost: when every
// survivor has heard of it, when its children have been adopted, and a fence
// over the survivors through the healed tree.
//
//   overlay_sim [--nodes N] [--ranks M] [--fanout K] [--workers W]
//               [--fences R] [--bytes B]
//
// Prints one line of name=value figures (milliseconds unless named
// otherwise). Figures are for comparison on one machine, never thresholds.
#include "pmix_server/agent.hpp"
#include "pmix_server/log.hpp"

#include "exitpolicy/policy.hpp"
#include "protocol/auth.hpp"
#include "protocol/events.hpp"
#include "protocol/tree.hpp"
#include "spank_plugin/front_end.hpp"

#include <event2/event.h>
#include <event2/thread.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <malloc.h>
#include <map>
#include <memory>
#include <optional>
#include <poll.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using namespace exitpolicy;
using pmix_server::Agent;

std::int64_t now_us()
{
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return std::int64_t{t.tv_sec} * 1'000'000 + t.tv_nsec / 1000;
}

[[noreturn]] void die(const std::string& why)
{
    std::fprintf(stderr, "overlay_sim: %s\n", why.c_str());
    std::exit(1);
}

void write_line(int fd, const std::string& line)
{
    const std::string text = line + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die(std::string("write to a pipe: ") + std::strerror(errno));
        done += static_cast<std::size_t>(n);
    }
}

// What malloc has handed out, in its arenas and in blocks of their own.
double heap_in_use()
{
    const auto m = mallinfo2();
    return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

std::vector<std::string> words(const std::string& line)
{
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
        out.push_back(w);
    return out;
}

std::int64_t number(const std::string& text)
{
    std::int64_t v = 0;
    if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc())
        die("not a number: " + text);
    return v;
}

// Lines from a pipe, as they come.
struct LineReader {
    int fd = -1;
    std::string buffer;
    // The next whole line, if one is there after reading what is ready.
    std::optional<std::string> next()
    {
        for (;;) {
            if (const auto nl = buffer.find('\n'); nl != std::string::npos) {
                std::string line = buffer.substr(0, nl);
                buffer.erase(0, nl + 1);
                return line;
            }
            char chunk[4096];
            const ssize_t n = ::read(fd, chunk, sizeof(chunk));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                return std::nullopt;
            if (n <= 0)
                die("a worker's pipe closed");
            buffer.append(chunk, static_cast<std::size_t>(n));
        }
    }
};

// ---- a worker: agents on one loop ------------------------------------------------

struct Worker;

struct SimNode final : Agent::Node {
    Worker* w = nullptr;
    std::uint32_t id = 0;
    std::unique_ptr<Agent> agent;
    bool is_mapped = false;
    bool is_ready = false;

    void mapped() override;
    void linked_up() override;
    void peer_failed(const protocol::Event& e) override;
    void node_lost(const protocol::NodeDown& d) override;
    void relayed(const protocol::Relay&) override {}
    void terminate(const protocol::Terminate&) override {}
    void dmodex(std::uint32_t, Agent::Done done) override { done(protocol::pmix::success, protocol::Bytes(64, 1)); }
    void stop(int) override {}
    void check_ready();
};

struct Worker {
    event_base* base = nullptr;
    int reply_fd = -1;
    LineReader commands;
    std::uint32_t nnodes = 0, ranks = 0, fanout = 0, first = 0, count = 0, bytes = 0;
    std::uint16_t port = 0;
    protocol::Secret secret{};
    std::optional<protocol::Tree> tree;
    std::vector<std::unique_ptr<SimNode>> nodes;  // node first + i
    std::uint32_t ready = 0;
    // The phase under way.
    struct Fence {
        std::string id;
        std::uint32_t pending = 0, failed = 0;
        std::int64_t last = 0;
    };
    std::optional<Fence> fence;
    struct Heard {
        std::uint32_t count = 0;
        std::int64_t last = 0;
        bool expected = false, replied = false;
    };
    std::map<std::uint32_t, Heard> heard;  // by rank
    struct Loss {
        std::uint32_t node = 0;
        std::uint32_t heard = 0, adopted = 0, orphans = 0;
        std::int64_t heard_last = 0, adopted_last = 0;
        bool expected = false, replied = false;
    };
    std::optional<Loss> loss;
    std::set<std::uint32_t> killed;

    std::uint32_t live() const
    {
        return static_cast<std::uint32_t>(
            std::count_if(nodes.begin(), nodes.end(), [](const auto& n) { return n->agent != nullptr; }));
    }
    void reply(const std::string& line) { write_line(reply_fd, line); }

    void on_ready()
    {
        if (++ready == count)
            reply("ready " + std::to_string(now_us()));
    }
    void on_heard(std::uint32_t rank)
    {
        auto& h = heard[rank];
        ++h.count;
        h.last = now_us();
        check_heard(rank);
    }
    void check_heard(std::uint32_t rank)
    {
        auto& h = heard[rank];
        if (h.expected && !h.replied && h.count >= live()) {
            h.replied = true;
            reply("heard " + std::to_string(rank) + " " + std::to_string(h.last));
        }
    }
    void on_lost(std::uint32_t node)
    {
        if (!loss || loss->node != node)
            loss = Loss{node, 0, 0, 0, 0, 0, false, false};
        ++loss->heard;
        loss->heard_last = now_us();
        check_loss();
    }
    // A node that was ready linked up again: its parent was lost. That can
    // come before this worker reads "expectlost" (the other worker killed
    // the parent first).
    void on_relinked(const SimNode& n)
    {
        const auto parent = tree->static_parent(n.id);
        if (!parent)
            return;
        if (!loss)
            loss = Loss{*parent, 0, 0, 0, 0, 0, false, false};
        if (loss->node != *parent)
            return;
        ++loss->adopted;
        loss->adopted_last = now_us();
        check_loss();
    }
    void check_loss()
    {
        if (!loss || !loss->expected || loss->replied || loss->heard < live() || loss->adopted < loss->orphans)
            return;
        loss->replied = true;
        reply("lost " + std::to_string(loss->node) + " " + std::to_string(loss->heard_last) + " " +
              std::to_string(loss->adopted_last));
    }

    void start()
    {
        tree.emplace(nnodes, fanout);
        for (std::uint32_t i = 0; i < count; ++i) {
            auto n = std::make_unique<SimNode>();
            n->w = this;
            n->id = first + i;
            pmix_server::AgentSetup setup;
            setup.job_id = 1;
            setup.step_id = 0;
            setup.node_id = n->id;
            setup.hostname = "sim" + std::to_string(n->id);
            for (std::uint32_t r = 0; r < ranks; ++r)
                setup.ranks.push_back(n->id * ranks + r);
            setup.fe_host = "127.0.0.1";
            setup.fe_port = port;
            n->agent = std::make_unique<Agent>(base, std::move(setup), secret, *n);
            nodes.push_back(std::move(n));
        }
        for (auto& n : nodes)
            n->agent->start();
    }

    void start_fence(const std::string& id, std::optional<std::uint32_t> without)
    {
        std::vector<std::uint32_t> participants;
        if (without)
            for (std::uint32_t r = 0; r < nnodes * ranks; ++r)
                if (r / ranks != *without)
                    participants.push_back(r);
        fence = Fence{id, live(), 0, 0};
        const protocol::Bytes data(static_cast<std::size_t>(bytes) * ranks, 7);
        for (auto& n : nodes) {
            if (!n->agent)
                continue;
            n->agent->fence(participants, data, 60, [this](int status, protocol::Bytes) {
                fence->last = now_us();
                if (status != protocol::pmix::success && fence->failed++ == 0)
                    std::fprintf(stderr, "overlay_sim: fence %s failed with status %d\n", fence->id.c_str(), status);
                if (--fence->pending == 0)
                    reply("fenced " + fence->id + " " + std::to_string(fence->last) + " " +
                          std::to_string(fence->failed));
            });
        }
    }

    void command(const std::string& line)
    {
        const auto w = words(line);
        if (w.empty())
            return;
        const std::string& what = w[0];
        if (what == "start" && w.size() == 9) {
            port = static_cast<std::uint16_t>(number(w[1]));
            auto s = protocol::secret_from_hex(w[2]);
            if (!s)
                die(s.error());
            secret = *s;
            nnodes = static_cast<std::uint32_t>(number(w[3]));
            ranks = static_cast<std::uint32_t>(number(w[4]));
            fanout = static_cast<std::uint32_t>(number(w[5]));
            first = static_cast<std::uint32_t>(number(w[6]));
            count = static_cast<std::uint32_t>(number(w[7]));
            bytes = static_cast<std::uint32_t>(number(w[8]));
            start();
        } else if (what == "fence" && w.size() == 3) {
            const auto without = number(w[2]);
            start_fence(w[1], without < 0 ? std::nullopt : std::optional<std::uint32_t>(static_cast<std::uint32_t>(without)));
        } else if (what == "fail" && w.size() == 2) {
            const auto rank = static_cast<std::uint32_t>(number(w[1]));
            auto& n = *nodes[rank / ranks - first];
            protocol::Event e;
            e.origin = n.id;
            e.rank = rank;
            e.code = protocol::pmix::proc_aborted_by_sig;
            e.exit_code = 128 + SIGSEGV;
            e.wait_status = SIGSEGV;
            e.client = true;
            n.agent->task_failed(e);
        } else if (what == "expect" && w.size() == 2) {
            const auto rank = static_cast<std::uint32_t>(number(w[1]));
            heard[rank].expected = true;
            check_heard(rank);
        } else if (what == "kill" && w.size() == 2) {
            const auto node = static_cast<std::uint32_t>(number(w[1]));
            nodes[node - first]->agent.reset();  // its sockets close, as at a crash
            killed.insert(node);
        } else if (what == "expectlost" && w.size() == 2) {
            const auto node = static_cast<std::uint32_t>(number(w[1]));
            if (!loss || loss->node != node)
                loss = Loss{node, 0, 0, 0, 0, 0, false, false};
            loss->expected = true;
            for (const auto& n : nodes)
                if (n->agent && tree->static_parent(n->id) == node)
                    ++loss->orphans;
            check_loss();
        } else if (what == "report" && w.size() >= 1) {
            std::set<std::uint32_t> failed;
            for (std::size_t i = 1; i < w.size(); ++i)
                failed.insert(static_cast<std::uint32_t>(number(w[i])));
            std::int64_t last = 0;
            for (auto& n : nodes) {
                if (!n->agent)
                    continue;
                for (std::uint32_t r = 0; r < ranks; ++r) {
                    protocol::Outcome o;
                    o.rank = n->id * ranks + r;
                    o.pid = 1000 + o.rank;
                    o.wait_status = failed.count(o.rank) ? SIGSEGV : 0;
                    o.end_time_us = now_us();
                    n->agent->report(o);
                }
                last = now_us();
            }
            reply("reported " + std::to_string(last));
        } else if (what == "clear") {
            nodes.clear();
            ready = 0;
            fence.reset();
            heard.clear();
            loss.reset();
            killed.clear();
            reply("cleared");
        } else if (what == "quit") {
            nodes.clear();
            event_base_loopexit(base, nullptr);
        } else {
            die("worker: unknown command: " + line);
        }
    }
};

void SimNode::mapped()
{
    is_mapped = true;
    agent->serving();
    check_ready();
}

void SimNode::linked_up()
{
    if (is_ready)
        w->on_relinked(*this);
    check_ready();
}

void SimNode::check_ready()
{
    if (is_ready || !is_mapped || !agent->linked_up())
        return;
    is_ready = true;
    w->on_ready();
}

void SimNode::peer_failed(const protocol::Event& e)
{
    w->on_heard(e.rank);
}

void SimNode::node_lost(const protocol::NodeDown& d)
{
    w->on_lost(d.node);
}

int run_worker(int cmd_fd, int reply_fd)
{
    evthread_use_pthreads();
    Worker w;
    w.base = event_base_new();
    w.reply_fd = reply_fd;
    w.commands.fd = cmd_fd;
    ::fcntl(cmd_fd, F_SETFL, ::fcntl(cmd_fd, F_GETFL) | O_NONBLOCK);
    event* ev = event_new(
        w.base, cmd_fd, EV_READ | EV_PERSIST,
        [](evutil_socket_t, short, void* arg) {
            auto* self = static_cast<Worker*>(arg);
            while (auto line = self->commands.next())
                self->command(*line);
        },
        &w);
    event_add(ev, nullptr);
    event_base_loop(w.base, EVLOOP_NO_EXIT_ON_EMPTY);
    event_free(ev);
    w.nodes.clear();
    event_base_free(w.base);
    return 0;
}

// ---- the parent: the FE and the phases ---------------------------------------------

struct Child {
    pid_t pid = -1;
    int cmd = -1;
    LineReader replies;
    std::uint32_t first = 0, count = 0;
};

struct Options {
    std::uint32_t nodes = 64, ranks = 16, fanout = 32, workers = 2, fences = 5, bytes = 8;
};

class Driver {
public:
    explicit Driver(const Options& o) : o_(o) {}

    void fork_workers()
    {
        const std::uint32_t per = (o_.nodes + o_.workers - 1) / o_.workers;
        for (std::uint32_t first = 0; first < o_.nodes; first += per) {
            int down[2], up[2];
            if (::pipe(down) != 0 || ::pipe(up) != 0)
                die("pipe");
            const pid_t pid = ::fork();
            if (pid < 0)
                die("fork");
            if (pid == 0) {
                ::close(down[1]);
                ::close(up[0]);
                for (const auto& c : children_) {
                    ::close(c.cmd);
                    ::close(c.replies.fd);
                }
                std::_Exit(run_worker(down[0], up[1]));
            }
            ::close(down[0]);
            ::close(up[1]);
            Child c;
            c.pid = pid;
            c.cmd = down[1];
            c.replies.fd = up[0];
            ::fcntl(up[0], F_SETFL, ::fcntl(up[0], F_GETFL) | O_NONBLOCK);
            c.first = first;
            c.count = std::min(per, o_.nodes - first);
            children_.push_back(std::move(c));
        }
    }

    Child& owner(std::uint32_t node)
    {
        for (auto& c : children_)
            if (node >= c.first && node < c.first + c.count)
                return c;
        die("no worker holds node " + std::to_string(node));
    }

    void to_all(const std::string& line)
    {
        for (auto& c : children_)
            write_line(c.cmd, line);
    }

    // One reply starting with `what` from every worker: their words.
    std::vector<std::vector<std::string>> from_all(const std::string& what, int timeout_s = 120)
    {
        std::vector<std::vector<std::string>> out(children_.size());
        std::vector<bool> got(children_.size(), false);
        std::size_t left = children_.size();
        const auto deadline = now_us() + std::int64_t{timeout_s} * 1'000'000;
        while (left > 0) {
            for (std::size_t i = 0; i < children_.size(); ++i) {
                while (!got[i]) {
                    auto line = children_[i].replies.next();
                    if (!line)
                        break;
                    auto w = words(*line);
                    if (w.empty() || w[0] != what)
                        die("expected '" + what + "' from a worker, got: " + *line);
                    out[i] = std::move(w);
                    got[i] = true;
                    --left;
                }
            }
            if (left == 0)
                break;
            if (now_us() > deadline)
                die("no '" + what + "' from every worker within " + std::to_string(timeout_s) + " s");
            std::vector<pollfd> fds;
            for (std::size_t i = 0; i < children_.size(); ++i)
                if (!got[i])
                    fds.push_back(pollfd{children_[i].replies.fd, POLLIN, 0});
            ::poll(fds.data(), fds.size(), 1000);
        }
        return out;
    }

    static std::int64_t latest(const std::vector<std::vector<std::string>>& replies, std::size_t field)
    {
        std::int64_t last = 0;
        for (const auto& w : replies)
            last = std::max(last, number(w.at(field)));
        return last;
    }

    std::unique_ptr<spank_plugin::FrontEnd> start_step(std::int64_t& started)
    {
        spank_plugin::FrontEndSetup s;
        s.job_id = 1;
        s.step_id = 0;
        s.ntasks = o_.nodes * o_.ranks;
        s.nnodes = o_.nodes;
        s.fanout = o_.fanout;
        s.recoverable = true;  // the events and the loss are measured, not a teardown
        started = now_us();
        auto fe = spank_plugin::FrontEnd::start(s);
        if (!fe)
            die("front end: " + fe.error());
        const std::string hex = protocol::to_hex((*fe)->secret());
        for (auto& c : children_)
            write_line(c.cmd, "start " + std::to_string((*fe)->port()) + " " + hex + " " + std::to_string(o_.nodes) +
                                  " " + std::to_string(o_.ranks) + " " + std::to_string(o_.fanout) + " " +
                                  std::to_string(c.first) + " " + std::to_string(c.count) + " " +
                                  std::to_string(o_.bytes));
        return std::move(*fe);
    }

    double fence(const std::string& id, std::int64_t without)
    {
        const auto t0 = now_us();
        to_all("fence " + id + " " + std::to_string(without));
        const auto r = from_all("fenced");
        for (const auto& w : r)
            if (number(w.at(3)) != 0) {
                std::fprintf(stderr, "overlay_sim: fence %s failed on %s agents\n", id.c_str(), w.at(3).c_str());
                failures_ = true;
            }
        return static_cast<double>(latest(r, 2) - t0) / 1000.0;
    }

    void run()
    {
        const std::uint32_t ntasks = o_.nodes * o_.ranks;
        protocol::Tree tree(o_.nodes, o_.fanout);
        std::uint32_t depth = 0;
        for (std::optional<std::uint32_t> n = o_.nodes - 1; n; n = tree.static_parent(*n))
            ++depth;

        // ---- step A ----
        // What a front end costs once per srun, whatever the step's size
        // (OpenSSL's and libevent's first use in the process: their
        // providers, tables and thread support, about 250 KB here), is paid
        // before the measurement: the figure is what grows with the step.
        {
            spank_plugin::FrontEndSetup once;
            once.ntasks = once.nnodes = 1;
            if (auto warm = spank_plugin::FrontEnd::start(once); !warm)
                die("front end: " + warm.error());
        }
        const auto heap_before = heap_in_use();
        std::int64_t started = 0;
        auto fe = start_step(started);
        const double startup = static_cast<double>(latest(from_all("ready"), 1) - started) / 1000.0;
        // The enrollment links of the nodes below other nodes close as
        // those link to their parents: what stays is the FE's children.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const std::size_t fe_connections = sockets() - 1;  // the listener is one
        std::vector<double> fences;
        for (std::uint32_t i = 0; i < o_.fences; ++i)
            fences.push_back(fence("f" + std::to_string(i), -1));
        // Failure events from ranks on the deepest nodes and elsewhere.
        std::vector<double> events;
        std::vector<std::uint32_t> failed;
        for (std::uint32_t node : {o_.nodes - 1, o_.nodes / 2, 0u}) {
            const std::uint32_t rank = node * o_.ranks + 1;
            if (std::find(failed.begin(), failed.end(), rank) != failed.end())
                continue;
            failed.push_back(rank);
            const auto t0 = now_us();
            to_all("expect " + std::to_string(rank));
            write_line(owner(node).cmd, "fail " + std::to_string(rank));
            events.push_back(static_cast<double>(latest(from_all("heard"), 2) - t0) / 1000.0);
        }
        std::string report = "report";
        for (auto r : failed)
            report += " " + std::to_string(r);
        to_all(report);
        auto collected = fe->finish(std::chrono::seconds(60));
        Settings settings;
        settings.policy = Policy::first_failure;
        auto decision = decide(collected.step, settings);
        const auto decided = now_us();
        // What the FE keeps per task, without the outcomes it hands over
        // to the policy core (one TaskOutcome each).
        const auto heap_after = heap_in_use() -
                                static_cast<double>(collected.step.tasks.capacity() * sizeof(TaskOutcome));
        const auto reported = latest(from_all("reported"), 1);
        for (const auto& p : collected.problems)
            std::fprintf(stderr, "overlay_sim: the front end says: %s\n", p.c_str());
        if (collected.missing != 0 || !decision)
            die(std::to_string(collected.missing) + " outcomes missing at the decision");
        const double per_task = (heap_after - heap_before) / ntasks;
        to_all("clear");
        from_all("cleared");
        fe.reset();

        // ---- step B: a relay is lost ----
        fe = start_step(started);
        from_all("ready");
        // The first node below the FE relays for the most (its children
        // and their subtrees).
        const std::uint32_t victim = 0;
        const bool relay = !tree.children(victim).empty();
        const auto t0 = now_us();
        to_all("expectlost " + std::to_string(victim));
        write_line(owner(victim).cmd, "kill " + std::to_string(victim));
        const auto lost = from_all("lost");
        const double heard_lost = static_cast<double>(latest(lost, 2) - t0) / 1000.0;
        const double adopted = relay ? static_cast<double>(latest(lost, 3) - t0) / 1000.0 : 0.0;
        const double after_loss = fence("healed", victim);
        for (const auto& p : fe->finish(std::chrono::milliseconds(0)).problems)  // before the agents go
            std::fprintf(stderr, "overlay_sim: the front end says: %s\n", p.c_str());
        fe.reset();
        to_all("clear");
        from_all("cleared");

        std::sort(fences.begin(), fences.end());
        std::sort(events.begin(), events.end());
        std::printf("nodes=%u ranks_per_node=%u tasks=%u fanout=%u depth=%u fence_bytes_per_rank=%u "
                    "startup_ms=%.1f fence_ms=%.2f fence_max_ms=%.2f event_ms=%.2f event_max_ms=%.2f "
                    "decision_ms=%.2f fe_bytes_per_task=%.0f handed_over_bytes_per_task=%zu fe_connections=%zu lost_heard_ms=%.1f "
                    "adopted_ms=%.1f fence_after_loss_ms=%.2f code=%d\n",
                    o_.nodes, o_.ranks, ntasks, o_.fanout, depth, o_.bytes, startup, fences[fences.size() / 2],
                    fences.back(), events[events.size() / 2], events.back(),
                    static_cast<double>(decided - reported) / 1000.0, per_task, sizeof(TaskOutcome), fe_connections, heard_lost,
                    adopted, after_loss, decision->code);
    }

    void stop_workers()
    {
        to_all("quit");
        for (auto& c : children_) {
            int status = 0;
            ::waitpid(c.pid, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                die("a worker ended with wait status " + std::to_string(status));
        }
    }

private:
    // The sockets this process holds: the FE's (the workers' pipes are none).
    static std::size_t sockets()
    {
        std::size_t n = 0;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
            struct stat st{};
            if (::stat(e.path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode))
                ++n;
        }
        return n;
    }

    Options o_;
    std::vector<Child> children_;

public:
    bool failures_ = false;  // a fence failed: the figures are no good
};

}  // namespace

int main(int argc, char** argv)
{
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string name = argv[i];
        const auto value = static_cast<std::uint32_t>(number(argv[i + 1]));
        if (name == "--nodes")
            o.nodes = value;
        else if (name == "--ranks")
            o.ranks = value;
        else if (name == "--fanout")
            o.fanout = value;
        else if (name == "--workers")
            o.workers = value;
        else if (name == "--fences")
            o.fences = value;
        else if (name == "--bytes")
            o.bytes = value;
        else
            die("unknown option " + name +
                " (valid: --nodes N --ranks M --fanout K --workers W --fences R --bytes B)");
    }
    if (argc % 2 == 0)
        die("every option takes a value");
    if (o.nodes < 2 || o.ranks < 2 || o.fanout < 2 || o.workers < 1 || o.fences < 1)
        die("need at least 2 nodes, 2 ranks per node, a fan-out of 2, 1 worker and 1 fence");
    // Every agent holds a listener, its links up and down, and its
    // enrollment for a while; the FE one per node at the start.
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
    std::signal(SIGPIPE, SIG_IGN);
    exitpolicy::pmix_server::log::open("overlay_sim", std::getenv("OVERLAY_SIM_LOG_DIR") ? std::getenv("OVERLAY_SIM_LOG_DIR") : "", std::getenv("OVERLAY_SIM_LOG_DIR") ? 2 : 0);
    Driver d(o);
    d.fork_workers();
    d.run();
    d.stop_workers();
    return d.failures_ ? 1 : 0;
}
