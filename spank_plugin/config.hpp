// SPDX-License-Identifier: Apache-2.0
// config.hpp - the site's plugstack.conf arguments.
//
//   optional exitpolicy.so default_policy=main-rank report=auto grace_ms=3000 ...
//
// Parsed strictly: an unknown argument, a repeated one or a bad value is an
// error that names the argument and what would be valid; the plugin then
// disables itself (fail open). No Slurm headers here, so it is unit-tested.
#pragma once

#include "option_table.hpp"

#include "exitpolicy/policy.hpp"
#include "exitpolicy/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exitpolicy::spank_plugin {

enum class PmixMode : std::uint8_t { automatic, never };

struct PortRange {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
};

struct Config {
    std::optional<Policy> default_policy;    // unset: no policy unless asked
    std::vector<Policy> allowed_policies;    // empty: all
    ReportMode report = ReportMode::automatic;
    // Defaults and ranges of numbers: site_arguments (option_table.hpp).
    int lost_code = site_default<int>(SiteArg::lost_code);
    std::uint32_t grace_ms = site_default<std::uint32_t>(SiteArg::grace_ms);
    PmixMode pmix = PmixMode::automatic;
    std::uint32_t fanout = site_default<std::uint32_t>(SiteArg::fanout);
    std::optional<PortRange> port_range;     // unset: an ephemeral port
    std::string daemon;                      // path of exitpolicy-pmixd; empty: installed default
    int debug = site_default<int>(SiteArg::debug);
    std::string log_dir;
    // What the node daemon gives its PMIx clients as the node's hardware
    // topology: "slurmd" (slurmd's own <SlurmdSpoolDir>/hwloc_topo_whole.xml,
    // else discover), "discover" (hwloc, once per node and step), "none", or
    // an absolute path of an hwloc XML file, %n standing for the node's name.
    std::string topology = "slurmd";
    // Failures in a PMIx step: run-through (recoverable) or teardown after
    // teardown_grace_ms (the default).
    bool recoverable = false;
    std::uint32_t teardown_grace_ms = site_default<std::uint32_t>(SiteArg::teardown_grace_ms);
    // srun records a decided step's verdict in the job's accounting record
    // (job_record.hpp).
    bool record_verdict = false;

    bool allows(Policy policy) const noexcept;
    // "main-rank, max" or "all policies".
    std::string allowed_list() const;
};

// args: the words after the plugin path in plugstack.conf.
Result<Config> parse_config(const std::vector<std::string_view>& args);

// yes/no, true/false, 1/0 (any case), for switches; the error lists them.
Result<bool> parse_switch(std::string_view text);

// The valid arguments, "default_policy=POLICY ...", from site_arguments
// (option_table.hpp), for error messages.
std::string_view config_usage() noexcept;

}  // namespace exitpolicy::spank_plugin
