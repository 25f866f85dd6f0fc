// option_table.hpp - every name a site writes, spelled once: the
// plugstack.conf arguments. The plugstack parser and its list of valid
// arguments derive from this table.
//
// Constant tables of string literals: nothing here allocates or runs at load
// time (slurmstepd loads this too). No Slurm headers, so it is unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace exitpolicy::plugin {

// The plugstack.conf arguments, in the order of site_arguments.
enum class SiteArg : std::uint8_t {
    default_policy,
    allowed_policies,
    report,
    lost_code,
    grace_ms,
    pmix,
    fanout,
    port_range,
    daemon,
    debug,
    log_dir,
    topology,
    recoverable,
    teardown_grace_ms,
};

struct SiteArgument {
    SiteArg id;
    const char* name;    // before the "="
    const char* syntax;  // its values, as the list of valid arguments shows them
    const char* about;   // one line
};

inline constexpr SiteArgument site_arguments[] = {
    {SiteArg::default_policy, "default_policy", "POLICY",
     "the policy of steps whose user asked for none (default: none, Slurm's own code)"},
    {SiteArg::allowed_policies, "allowed_policies", "POLICY[,POLICY...]",
     "the policies users may choose (default: all)"},
    {SiteArg::report, "report", "auto|always|never", "the default of --exit-report"},
    {SiteArg::lost_code, "lost_code", "0..255", "the code of a task whose outcome never arrived (default 1)"},
    {SiteArg::grace_ms, "grace_ms", "0..600000",
     "how long srun waits for missing outcomes after the step, in ms (default 3000)"},
    {SiteArg::pmix, "pmix", "auto|never",
     "auto: exitpolicy serves PMIx to steps without another PMIx server; never: exit policies only"},
    {SiteArg::fanout, "fanout", "2..1024", "the width of the node daemons' tree (default 32)"},
    {SiteArg::port_range, "port_range", "FIRST-LAST",
     "the TCP ports srun's front end may listen on (default: an ephemeral port)"},
    {SiteArg::daemon, "daemon", "/PATH", "the node daemon, exitpolicy-pmixd (default: the installed one)"},
    {SiteArg::debug, "debug", "0..3", "the log level of the plugin and the node daemons (default 0)"},
    {SiteArg::log_dir, "log_dir", "/PATH", "where the node daemons log, a file per step and node (default: syslog)"},
    {SiteArg::topology, "topology", "discover|none|/PATH",
     "the hardware topology the node daemons give their PMIx clients (default: discover)"},
    {SiteArg::recoverable, "recoverable", "yes|no", "the default of --exit-recoverable (default: no)"},
    {SiteArg::teardown_grace_ms, "teardown_grace_ms", "0..60000",
     "how long the survivors of a failure have before the step is torn down, in ms (default 500)"},
};

constexpr const SiteArgument& site_argument(SiteArg id) noexcept
{
    return site_arguments[static_cast<std::size_t>(id)];
}

// Each entry sits at the index of its id.
constexpr bool tables_in_order() noexcept
{
    for (std::size_t i = 0; i < std::size(site_arguments); ++i)
        if (static_cast<std::size_t>(site_arguments[i].id) != i)
            return false;
    return true;
}
static_assert(tables_in_order(), "site_arguments is in the order of its ids");

}  // namespace exitpolicy::plugin
