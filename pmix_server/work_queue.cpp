// SPDX-License-Identifier: Apache-2.0
// work_queue.cpp - see work_queue.hpp.
#include "work_queue.hpp"

#include "pmix_server/log.hpp"

#include <exception>
#include <utility>

namespace exitpolicy::pmix_server {

bool WorkQueue::push(std::function<void()> fn)
{
    {
        std::lock_guard lock(mu_);
        if (!closed_) {
            queue_.push_back(std::move(fn));
            return true;
        }
    }
    fn = nullptr;  // outside the lock: what it owns may answer a client
    return false;
}

void WorkQueue::run() noexcept
{
    std::deque<std::function<void()>> work;
    {
        std::lock_guard lock(mu_);
        work.swap(queue_);
    }
    while (!work.empty()) {
        auto fn = std::move(work.front());
        work.pop_front();
        guarded("posted work", fn);
    }
}

void WorkQueue::close() noexcept
{
    std::deque<std::function<void()>> dropped;
    {
        std::lock_guard lock(mu_);
        closed_ = true;
        dropped.swap(queue_);
    }
    // `dropped` goes here, outside the lock.
}

}  // namespace exitpolicy::pmix_server
