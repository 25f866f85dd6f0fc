// SPDX-License-Identifier: Apache-2.0
// guard.hpp - the one guard of every callback a C library calls (libevent's,
// the PMIx library's, Slurm's hooks): guarded() runs the callback's body, and
// an exception it throws never unwinds into C: its text goes to the
// caller's on_error, which logs it the way its process logs.
#pragma once

#include <exception>
#include <utility>

namespace exitpolicy::protocol {

// Runs body(). Should it throw, on_error(const char* what) hears why (an
// exception from on_error itself is dropped) and false is returned: no
// exception leaves, whatever the body does.
template <typename Body, typename OnError>
bool guarded(Body&& body, OnError&& on_error) noexcept
{
    try {
        std::forward<Body>(body)();
        return true;
    } catch (const std::exception& e) {
        try {
            on_error(e.what());
        } catch (...) {
        }
    } catch (...) {
        try {
            on_error("an exception of unknown type");
        } catch (...) {
        }
    }
    return false;
}

}  // namespace exitpolicy::protocol
