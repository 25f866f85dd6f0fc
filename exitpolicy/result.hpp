// SPDX-License-Identifier: Apache-2.0
// result.hpp - a value or a user-facing error message, for functions that
// must not throw (the whole policy core).
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace exitpolicy {

template <typename T>
class Result {
public:
    static Result ok(T value) { return Result(std::move(value), {}); }
    static Result fail(std::string error) { return Result(std::nullopt, std::move(error)); }

    explicit operator bool() const noexcept { return value_.has_value(); }
    bool has_value() const noexcept { return value_.has_value(); }
    const T& value() const& { return *value_; }
    T& value() & { return *value_; }
    T&& value() && { return std::move(*value_); }
    const T& operator*() const& { return *value_; }
    T& operator*() & { return *value_; }
    T&& operator*() && { return std::move(*value_); }
    const T* operator->() const { return &*value_; }
    T* operator->() { return &*value_; }
    // The message a user reads: what is wrong and what would be right.
    const std::string& error() const noexcept { return error_; }

private:
    Result(std::optional<T> value, std::string error)
        : value_(std::move(value)), error_(std::move(error)) {}
    std::optional<T> value_;
    std::string error_;
};

}  // namespace exitpolicy
