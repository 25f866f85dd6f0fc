// SPDX-License-Identifier: Apache-2.0
// decide_bench.cpp - deciding and reporting over large steps.
//
// Run: bench/run.sh (or build/bench/decide_bench). Prints the time to decide
// one policy over 1 000 000 task outcomes, and to render the report.
#include "exitpolicy/policy.hpp"
#include "exitpolicy/report.hpp"

#include <benchmark/benchmark.h>

#include <csignal>
#include <string>

namespace {

using namespace exitpolicy;

// n tasks, 8 per node; every 1000th fails with a code, one segfaults first,
// its neighbours are torn down after it.
StepOutcomes big_step(std::uint32_t n)
{
    StepOutcomes s;
    for (std::uint32_t node = 0; node < (n + 7) / 8; ++node)
        s.nodes.push_back("nid" + std::to_string(100000 + node));
    s.tasks.resize(n);
    for (std::uint32_t r = 0; r < n; ++r) {
        TaskOutcome& t = s.tasks[r];
        t.rank = r;
        t.node = r / 8;
        t.pid = 1000 + r;
        t.end_time_us = 2'000'000 + r;
        t.wait_status = r % 1000 == 999 ? WaitStatus::exited(1).raw() : 0;
    }
    s.tasks[n / 2].wait_status = WaitStatus::signaled(SIGSEGV, true).raw();
    s.tasks[n / 2].end_time_us = 1'000'000;
    for (std::uint32_t r = n / 2 + 1; r < n / 2 + 8 && r < n; ++r)
        s.tasks[r].wait_status = WaitStatus::signaled(SIGTERM).raw();
    return s;
}

void BM_Decide(benchmark::State& state)
{
    const auto policy = static_cast<Policy>(state.range(1));
    const StepOutcomes s = big_step(static_cast<std::uint32_t>(state.range(0)));
    for (auto _ : state) {
        auto d = decide(s, Settings{policy, 0, 1});
        benchmark::DoNotOptimize(d);
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
    state.SetLabel(std::string(policy_name(policy)));
}
BENCHMARK(BM_Decide)
    ->ArgsProduct({{1'000'000}, {0, 1, 2, 3, 4, 5}})
    ->Unit(benchmark::kMillisecond);

void BM_Summary(benchmark::State& state)
{
    const StepOutcomes s = big_step(static_cast<std::uint32_t>(state.range(0)));
    const Settings settings{Policy::main_rank, 0, 1};
    const Decision d = *decide(s, settings);
    for (auto _ : state) {
        auto text = render_summary(s, settings, d);
        benchmark::DoNotOptimize(text);
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Summary)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

void BM_Json(benchmark::State& state)
{
    const StepOutcomes s = big_step(static_cast<std::uint32_t>(state.range(0)));
    const Settings settings{Policy::main_rank, 0, 1};
    const Decision d = *decide(s, settings);
    for (auto _ : state) {
        auto text = render_json(s, settings, d);
        benchmark::DoNotOptimize(text);
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Json)->Arg(100'000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
