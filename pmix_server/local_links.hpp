// SPDX-License-Identifier: Apache-2.0
// local_links.hpp - the node daemon's local links: its socket in the step's
// directory (DIR/daemon.sock), where each task asks for its PMIx
// environment before exec, and slurmstepd's control link (task starts and
// outcomes in, the stop; the last word out). Only the job's user and root
// may connect, as the kernel says (SO_PEERCRED). Each frame is read whole
// and checked (a local request, a rank of this node, the control link's
// own words only on it) before the node is asked; the replies are written
// here. Loop thread only.
#pragma once

#include "exitpolicy/result.hpp"
#include "protocol/handles.hpp"
#include "protocol/wire.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

struct event_base;

namespace exitpolicy::pmix_server {

class LocalLinks {
public:
    // What the node answers on its local links.
    class Node {
    public:
        // Whether a task's environment request is answered now; those that
        // come earlier wait for release_waiting().
        virtual bool environment_ready() const = 0;
        // The environment of `rank`, asked by the task itself before exec
        // (`pid`: the kernel's word for the asking process), or why not.
        virtual Result<std::vector<std::string>> task_environment(std::uint32_t rank, pid_t pid) = 0;
        // slurmstepd's words on its control link.
        virtual void task_started(const protocol::TaskStarted& started) = 0;
        virtual void task_outcome(const protocol::Outcome& outcome) = 0;  // acknowledged after
        virtual void step_ends() = 0;                                     // Stop, acknowledged first
        // The control link closed: slurmstepd is gone.
        virtual void slurmstepd_gone() = 0;

    protected:
        ~Node() = default;
    };

    LocalLinks(event_base* base, uid_t user, std::vector<std::uint32_t> ranks, Node& node);
    // Every link closed; the socket's file removed.
    ~LocalLinks();
    LocalLinks(const LocalLinks&) = delete;
    LocalLinks& operator=(const LocalLinks&) = delete;

    // Listens on `path`; false (logged) if it cannot.
    bool listen(const std::string& path);
    // slurmstepd's control link, which no other process holds, and what the
    // standby read of it (-1: nothing), served first as if the link had
    // carried it now.
    void adopt_control(int fd, int backlog_fd);
    // The environment requests that waited are answered, in order.
    void release_waiting();
    // slurmstepd's last word from the daemon: which of its outcomes srun
    // has, queued on the control link after whatever waits there;
    // `written` runs once it is written or the link broke. False when
    // there is nothing to say or nobody to say it to (its silence says as
    // much): then `written` never runs.
    bool tell_slurmstepd(const std::vector<protocol::Ack>& confirmed, std::function<void()> written);

private:
    struct Link;
    void add(int fd, uid_t uid, pid_t pid, bool control);
    // Serves every whole frame of the link's input, in order (the rest
    // waits for more); may drop the link.
    void read_frames(Link& link) noexcept;
    void serve_frames(Link& link);
    void on_frame(Link& link, protocol::Type type, std::span<const std::uint8_t> body);
    void environment_request(Link& link, std::span<const std::uint8_t> body);
    bool local_rank(std::uint32_t rank) const;
    // Closes the link and frees it, with any request of it still waiting.
    // The caller, maybe its own callback, returns at once.
    void drop(const Link& link);

    event_base* base_;
    uid_t user_;
    std::vector<std::uint32_t> ranks_;
    Node& node_;
    std::string path_;
    protocol::ListenerHandle listener_;
    std::vector<std::unique_ptr<Link>> links_;
    std::vector<std::pair<Link*, protocol::Bytes>> waiting_;
};

}  // namespace exitpolicy::pmix_server
