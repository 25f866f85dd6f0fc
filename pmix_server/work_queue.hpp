// SPDX-License-Identifier: Apache-2.0
// work_queue.hpp - work handed from other threads (PMIx's progress thread,
// the init thread) to the daemon's loop thread.
//
// run() runs on the loop thread and lets no exception out: posted work that
// throws is logged and dropped, and whatever it owned (an upcall's
// Completion, say) answers as it is destroyed. After close(), push()
// destroys the work at once, uncalled: the loop no longer runs, and a
// Completion inside must answer while the PMIx library is still up.
#pragma once

#include <deque>
#include <functional>
#include <mutex>

namespace exitpolicy::pmix_server {

class WorkQueue {
public:
    // Any thread. false: closed, `fn` was destroyed uncalled.
    bool push(std::function<void()> fn);
    // The loop thread: runs what was pushed until now, in order.
    void run() noexcept;
    // Any thread: destroys what is queued, uncalled; later pushes too.
    void close() noexcept;

private:
    std::mutex mu_;
    std::deque<std::function<void()>> queue_;
    bool closed_ = false;
};

}  // namespace exitpolicy::pmix_server
