// SPDX-License-Identifier: Apache-2.0
// timeouts.hpp - every bound that one process of a step keeps while it
// waits for another (srun's front end, slurmstepd, the node daemons, the
// tasks), in one place, with the orders between them that the code relies
// on checked when it compiles (the others are independent of each other). A site's own bounds (grace_ms,
// teardown_grace_ms) are plugstack arguments (spank_plugin/option_table.hpp).
#pragma once

#include <chrono>

namespace exitpolicy::protocol::timeouts {

using std::chrono::milliseconds;

// ---- slurmstepd (root) and its node daemon --------------------------------

// The node daemon's end: it drains (waits for srun's step_done and for
// what it passed on to be acknowledged) at most drain_limit; slurmstepd,
// which asks it to stop at the step's end, waits stop_wait for it, the
// drain and a margin, before it kills it.
inline constexpr milliseconds daemon_drain_limit{2000};
inline constexpr milliseconds daemon_stop_wait = daemon_drain_limit + milliseconds{1000};
// After its drain the daemon's last word to slurmstepd (which outcomes srun
// confirmed) leaves on the control link within this, or it exits without.
inline constexpr milliseconds daemon_last_word{500};
// A daemon launched to serve at once (not a standby) says "ready" within
// this, or slurmstepd stops it and the step runs without its service.
inline constexpr milliseconds daemon_ready{20000};
// The daemon's event anchor, the client that keeps the tasks' default
// event handlers registered, registers within this or the daemon goes on
// without it.
inline constexpr milliseconds event_anchor_settle{5000};
// A task's PMIx environment: the daemon gives it once its PMIx server is
// up and the step's namespace registered; the task starts without it
// after this long.
inline constexpr milliseconds task_environment{10000};
// Removing a step's directory as the job's user (a forked rm, killed
// after this).
inline constexpr milliseconds step_dir_removal{2000};

// ---- slurmstepd and srun's front end ---------------------------------------

// slurmstepd's connection to srun's front end, handshake included.
inline constexpr milliseconds stepd_connect{5000};
// Each write to the front end, and the wait at the step's end for its
// acknowledgements of what slurmstepd sent it directly.
inline constexpr milliseconds stepd_ack{2000};
// A frame that has begun to arrive gets this long to complete, whatever
// the caller's own wait (0 to only look).
inline constexpr milliseconds frame_completion{1000};
// How long finish() still waits for outcomes once every link has closed,
// in a step with node daemons (one may be rerouting to the front end).
inline constexpr milliseconds settle_after_close{500};

// ---- the overlay: srun's front end and the node daemons --------------------

// How long a channel has from accept() or connect() to become ready.
inline constexpr milliseconds handshake{10000};
// How long the front end tries to reach a standby's wake port.
inline constexpr milliseconds standby_wake{5000};
// The teardown: SIGTERM, then SIGKILL to the tasks left after this.
inline constexpr milliseconds teardown_kill_after{2000};
// A request to another node (direct modex, lookup) that names no timeout
// fails with PMIX_ERR_TIMEOUT after this.
inline constexpr milliseconds request_default{30000};
// A link whose sent data goes unacknowledged this long (a peer whose
// machine died sends no FIN) closes like any other (TCP_USER_TIMEOUT).
inline constexpr milliseconds unacknowledged_data{30000};

// slurmstepd's wait outlasts the daemon's drain and its last word: a
// daemon that drains is never killed mid-way, and says which outcomes srun
// confirmed.
static_assert(daemon_stop_wait > daemon_drain_limit + daemon_last_word);
// Waiting stepd_ack for acknowledgements returns within stepd_ack, even
// when one has begun to arrive.
static_assert(frame_completion <= stepd_ack);

}  // namespace exitpolicy::protocol::timeouts
