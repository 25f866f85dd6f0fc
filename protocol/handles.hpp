// SPDX-License-Identifier: Apache-2.0
// handles.hpp - owners of libevent's objects (EventHandle,
// EvbufferHandle, BufferEventHandle, ListenerHandle, EventBaseHandle), beside a
// descriptor's (fd.hpp). Each is move-only and frees what it holds exactly
// once, in its noexcept destructor or reset(); one given away with
// release() is the taker's to free.
#pragma once

#include "protocol/fd.hpp"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <memory>

namespace exitpolicy::protocol {

template <typename T, void (*Free)(T*)>
struct Freer {
    void operator()(T* p) const noexcept
    {
        if (p)
            Free(p);
    }
};
using EventHandle = std::unique_ptr<event, Freer<event, event_free>>;
using EvbufferHandle = std::unique_ptr<evbuffer, Freer<evbuffer, evbuffer_free>>;
using BufferEventHandle = std::unique_ptr<bufferevent, Freer<bufferevent, bufferevent_free>>;
using ListenerHandle = std::unique_ptr<evconnlistener, Freer<evconnlistener, evconnlistener_free>>;
using EventBaseHandle = std::unique_ptr<event_base, Freer<event_base, event_base_free>>;

}  // namespace exitpolicy::protocol
