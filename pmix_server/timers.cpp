// SPDX-License-Identifier: Apache-2.0
// timers.cpp - see timers.hpp.
#include "timers.hpp"

#include "pmix_server/log.hpp"

#include <event2/event.h>

#include <exception>
#include <utility>

namespace exitpolicy::pmix_server {
namespace {

void call(const std::function<void()>& fn) noexcept
{
    guarded("a timer", fn);
}

}  // namespace

struct Timers::Timer {
    Timers* owner = nullptr;
    std::function<void()> fn;
    protocol::EventHandle ev;
    std::list<std::unique_ptr<Timer>>::iterator at;
};

Timers::Timers(event_base* base) : base_(base)
{
    deferred_event_.reset(event_new(base_, -1, 0, &Timers::run_deferred, this));
}

Timers::~Timers()
{
    pending_.clear();  // each frees its event: it never fires
}

void Timers::after_ms(std::uint32_t ms, std::function<void()> fn)
{
    auto t = std::make_unique<Timer>();
    Timer* raw = t.get();
    raw->owner = this;
    raw->fn = std::move(fn);
    raw->ev.reset(evtimer_new(
        base_,
        [](evutil_socket_t, short, void* arg) {
            auto* fired = static_cast<Timer*>(arg);
            Timers* owner = fired->owner;
            const auto work = std::move(fired->fn);
            owner->pending_.erase(fired->at);  // frees it and its event
            call(work);
        },
        raw));
    if (!raw->ev) {
        log::error("cannot create a timer");
        return;
    }
    pending_.push_back(std::move(t));
    raw->at = std::prev(pending_.end());
    const timeval limit{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
    evtimer_add(raw->ev.get(), &limit);
}

void Timers::defer(std::function<void()> fn)
{
    deferred_.push_back(std::move(fn));
    if (deferred_event_ && !event_pending(deferred_event_.get(), EV_TIMEOUT, nullptr))
        event_active(deferred_event_.get(), EV_TIMEOUT, 0);
}

void Timers::run_deferred(int, short, void* arg)
{
    auto* self = static_cast<Timers*>(arg);
    auto now = std::exchange(self->deferred_, {});
    for (const auto& fn : now)
        call(fn);
}

}  // namespace exitpolicy::pmix_server
