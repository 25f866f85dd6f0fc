// SPDX-License-Identifier: Apache-2.0
// pending_requests.hpp - requests sent to other nodes that await their
// answer, by id: each is answered once, by its answer or, when its time is
// up first, by what `expired` makes of it (PMIX_ERR_TIMEOUT). An answer
// that comes later finds nothing and is dropped. Loop thread only.
#pragma once

#include "timers.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>

namespace exitpolicy::pmix_server {

template <typename Done>
class PendingRequests {
public:
    // timers: its agent's; what is pending when the agent goes is dropped.
    explicit PendingRequests(Timers& timers) : timers_(timers) {}
    PendingRequests(const PendingRequests&) = delete;
    PendingRequests& operator=(const PendingRequests&) = delete;

    // A new request's id, whose answer `done` waits for; after timeout_s
    // seconds (0: never), expired(done, id) answers it instead.
    std::uint64_t add(Done done, int timeout_s, std::function<void(Done&, std::uint64_t)> expired)
    {
        const std::uint64_t id = next_++;
        waiting_.emplace(id, std::move(done));
        if (timeout_s > 0)
            timers_.after_ms(static_cast<std::uint32_t>(timeout_s) * 1000, [this, id, expired = std::move(expired)] {
                if (auto caller = take(id))
                    expired(*caller, id);
            });
        return id;
    }
    // The request's caller, once: none when it was answered or expired.
    std::optional<Done> take(std::uint64_t id)
    {
        auto it = waiting_.find(id);
        if (it == waiting_.end())
            return std::nullopt;
        std::optional<Done> done(std::move(it->second));
        waiting_.erase(it);
        return done;
    }
    // Every caller still waiting, by id (the way they went is gone).
    std::map<std::uint64_t, Done> take_all() { return std::exchange(waiting_, {}); }

private:
    Timers& timers_;
    std::uint64_t next_ = 1;
    std::map<std::uint64_t, Done> waiting_;
};

}  // namespace exitpolicy::pmix_server
