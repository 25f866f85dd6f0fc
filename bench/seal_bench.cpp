// SPDX-License-Identifier: Apache-2.0
// seal_bench.cpp - what the per-frame tag (protocol/auth.hpp) costs: the
// time to tag one frame of each size a step sends (an outcome or ack of
// ~64 bytes, a notice or small fence of 4 KiB, fence data of 64 KiB and
// 1 MiB), and each further link's tag for a frame hashed once, beside a
// plain copy of the same bytes for scale.
//
// Run: bash bench/run.sh seal (or build/bench/seal_bench).
#include "protocol/auth.hpp"

#include <benchmark/benchmark.h>

#include <cstring>

namespace {

using namespace exitpolicy::protocol;

void BM_FrameTag(benchmark::State& state)
{
    const Bytes frame(static_cast<std::size_t>(state.range(0)), 0x5a);
    const SessionKey key = session_key(Secret{7}, Nonce{1}, Nonce{2});
    FrameSeal seal(key, false);
    for (auto _ : state)
        benchmark::DoNotOptimize(seal.seal(frame));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_FrameTag)->Arg(64)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// Each further link's tag for a frame already hashed (a relay sending one
// frame to all its children): independent of the frame's size.
void BM_FrameTagOfDigest(benchmark::State& state)
{
    const Bytes frame(static_cast<std::size_t>(state.range(0)), 0x5a);
    const SessionKey key = session_key(Secret{7}, Nonce{1}, Nonce{2});
    FrameSeal seal(key, false);
    const FrameDigest digest = frame_digest(frame);
    for (auto _ : state)
        benchmark::DoNotOptimize(seal.seal(digest));
}
BENCHMARK(BM_FrameTagOfDigest)->Arg(1 << 20);

void BM_Copy(benchmark::State& state)
{
    const Bytes frame(static_cast<std::size_t>(state.range(0)), 0x5a);
    Bytes out(frame.size());
    for (auto _ : state) {
        std::memcpy(out.data(), frame.data(), frame.size());
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Copy)->Arg(64)->Arg(4096)->Arg(65536)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
