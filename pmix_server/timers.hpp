// SPDX-License-Identifier: Apache-2.0
// timers.hpp - timers and deferred work on one libevent loop, owned by
// whoever schedules them: what is still pending when the owner goes is
// dropped uncalled, so no callback outlives the object it was for (an
// overlay agent that leaves while the loop runs on, say).
//
// Loop thread only. A callback that throws is logged and dropped.
#pragma once

#include "protocol/handles.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>

namespace exitpolicy::pmix_server {

class Timers {
public:
    explicit Timers(event_base* base);
    ~Timers();
    Timers(const Timers&) = delete;
    Timers& operator=(const Timers&) = delete;

    // Runs fn after `ms` milliseconds.
    void after_ms(std::uint32_t ms, std::function<void()> fn);
    // Runs fn on the loop's next turn, after what was deferred before it:
    // off the callback that asks (a link's own, which must not free it).
    void defer(std::function<void()> fn);

private:
    struct Timer;
    static void run_deferred(int, short, void* arg);
    event_base* base_;
    std::list<std::unique_ptr<Timer>> pending_;
    protocol::EventHandle deferred_event_;
    std::deque<std::function<void()>> deferred_;
};

}  // namespace exitpolicy::pmix_server
