/* SPDX-License-Identifier: Apache-2.0 */
/* ep_common.h - shared helpers of the exitpolicy test clients (no PMIx, no MPI).
 *
 * Output conventions (see README.md):
 *   stdout: machine-readable lines, one per event, flushed at once (ep_out);
 *   stderr: diagnostics "<prog> rank=<R>: <message>" (ep_diag).
 * Exit codes: 0 success, 1 checked failure, 2 usage error, 3 timeout.
 *
 * Every blocking step is bracketed by ep_wait_begin()/ep_wait_end(): a watchdog
 * thread prints "timeout rank=R phase=P" on stdout, a diagnostic on stderr, and
 * ends the process with status 3 when a step outlives the timeout. */
#ifndef EP_COMMON_H
#define EP_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

enum {
  EP_EXIT_OK = 0,
  EP_EXIT_FAIL = 1,
  EP_EXIT_USAGE = 2,
  EP_EXIT_TIMEOUT = 3,
};

#define EP_DEFAULT_TIMEOUT 30.0

#define EP_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Program name for messages; starts the watchdog thread with the default
 * timeout (change it with ep_set_timeout). Call first in main(). */
void ep_setup(const char *prog);
const char *ep_prog(void);

/* Rank shown in messages (negative: unknown, shown as "-"). */
void ep_set_rank(long rank);
long ep_rank(void);

/* One machine-readable line on stdout (a newline is added), flushed. */
void ep_out(const char *fmt, ...) EP_PRINTF(1, 2);
/* One diagnostic line on stderr, prefixed "<prog> rank=<R>: ". */
void ep_diag(const char *fmt, ...) EP_PRINTF(1, 2);
/* ep_diag, then _exit(code) (stdio flushed first). */
_Noreturn void ep_die(int code, const char *fmt, ...) EP_PRINTF(2, 3);

/* Parsers: return true on success. */
bool ep_parse_seconds(const char *s, double *out); /* > 0, at most 1e6 */
bool ep_parse_long(const char *s, long min, long max, long *out);

/* The per-wait timeout in seconds (default 30). */
void ep_set_timeout(double seconds);
/* --timeout's argument: parsed as ep_parse_seconds and set; false when bad. */
bool ep_timeout_option(const char *arg);
double ep_timeout(void);

/* Arm the watchdog for one blocking step named `what` (a string literal):
 * it fires ep_timeout() seconds from now. ep_wait_end() disarms it. */
void ep_wait_begin(const char *what);
void ep_wait_end(void);

/* Wall clock (CLOCK_REALTIME) in microseconds. */
int64_t ep_now_us(void);
/* CLOCK_MONOTONIC now + seconds, for pthread_cond_timedwait on a condvar
 * made by ep_cond_init. */
void ep_deadline(double seconds, struct timespec *ts);
/* A condition variable timed on CLOCK_MONOTONIC. */
void ep_cond_init(pthread_cond_t *cv);

#endif
