// event_loop.hpp - a libevent loop the unit tests drive themselves: turned
// without blocking until a condition holds, or a bound passes.
#pragma once

#include <event2/event.h>

#include <chrono>
#include <functional>
#include <thread>

namespace exitpolicy::test {

// Turns `base` until done() holds (true) or `timeout` passed (false).
inline bool run_until(event_base* base, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5))
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        event_base_loop(base, EVLOOP_NONBLOCK);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// A loop of the test's own.
class Loop {
public:
    Loop() : base_(event_base_new()) {}
    ~Loop() { event_base_free(base_); }
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;
    event_base* base() const { return base_; }
    bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(5))
    {
        return test::run_until(base_, done, timeout);
    }

private:
    event_base* base_;
};

}  // namespace exitpolicy::test
