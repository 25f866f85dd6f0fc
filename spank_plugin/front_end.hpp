// SPDX-License-Identifier: Apache-2.0
// front_end.hpp - the step's front end (FE) in srun.
//
// One libevent thread with a TCP listener. Each node's slurmstepd connects
// once, proves it holds the step's secret (protocol/auth.hpp), and sends
// every task outcome of its node; the FE acknowledges each one and keeps one
// per rank + epoch. In a step with the PMIx service the FE is also the root
// of the node daemons' overlay tree, and it declares a node lost when both
// its daemon and its slurmstepd are gone while some of its ranks never
// reported; unless the step is recoverable, it then tears the step down
// (the daemons signal their tasks). srun's main thread calls finish() after
// the step: it
// waits (bounded) for the outcomes still missing, stops the thread and hands
// over what arrived.
//
// Threads: start() and finish() run on srun's main thread; every callback
// runs on the FE thread, which alone owns the connections. The collected
// outcomes are shared under one mutex. No Slurm headers here: unit-tested
// with real sockets.
#pragma once

#include "front_end_setup.hpp"
#include "exitpolicy/result.hpp"
#include "protocol/auth.hpp"
#include "protocol/fd.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace exitpolicy::spank_plugin {

// The front end's listening socket and the step's secret, made before
// the front end: a heterogeneous step's components take srun's environment,
// and the bootstrap variable in it, before srun knows the step
// (srun.cpp). Close-on-exec.
struct Reserved {
    protocol::Fd fd;
    std::uint16_t port = 0;
    protocol::Secret secret{};
};

class FrontEnd {
public:
    static Result<Reserved> reserve(const std::optional<PortRange>& ports);
    // On `reserved` when given (its port and secret), else on a port and a
    // secret of its own.
    static Result<std::unique_ptr<FrontEnd>> start(const FrontEndSetup& setup,
                                                   std::optional<Reserved> reserved = std::nullopt);
    ~FrontEnd();
    FrontEnd(const FrontEnd&) = delete;
    FrontEnd& operator=(const FrontEnd&) = delete;

    std::uint16_t port() const noexcept;
    const protocol::Secret& secret() const noexcept;

    // Waits until every outcome arrived, or every node that connected has
    // closed its connection and all nodes connected, or the grace period
    // passed; then stops the FE thread.
    Collected finish(std::chrono::milliseconds grace);

    struct Impl;

private:
    explicit FrontEnd(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace exitpolicy::spank_plugin
