/* SPDX-License-Identifier: Apache-2.0 */
/* ep_abort --status N [--rank R] [--peers-first] [--timeout S]
 *
 * All ranks PMIx_Init and fence. Rank R (default 0) prints
 * "abort rank=R status=N" and calls PMIx_Abort(N, "ep_abort", NULL, 0) (the
 * whole namespace). Every other rank prints "waiting rank=R" and sleeps until
 * it is killed; after the timeout it exits with status 3.
 *
 * If PMIx_Abort returns an error: message on stderr, exit 4 at once.
 * If PMIx_Abort returns success (the host took the request), the rank waits
 * to be killed like the others; if that does not happen within the timeout it
 * prints "abort returned rank=R" and exits 4.
 *
 * --peers-first: as Open MPI's MPI_Abort does, rank R first aborts its peers
 * (PMIx_Abort with every other rank), 300 ms later the whole namespace, and
 * then exits with N; it ignores SIGTERM from the start, so that the step's
 * teardown finds it still running between the two calls.
 *
 * stdout: abort rank=R status=N | waiting rank=R | abort returned rank=R */
#include "ep_pmix.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define EP_EXIT_ABORT_RETURNED 4

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_abort --status N [--rank R] [--peers-first] [--timeout S]", why);
}

/* Sleep for `seconds` (signals that do not kill us do not shorten it). */
static void sleep_for(double seconds) {
  struct timespec until;
  ep_deadline(seconds, &until);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
  }
}

int main(int argc, char **argv) {
  ep_setup("ep_abort");
  long status = 0;
  bool have_status = false;
  long victim = 0;
  bool peers_first = false;
  static const struct option opts[] = {
      {"status", required_argument, NULL, 's'},
      {"rank", required_argument, NULL, 'r'},
      {"peers-first", no_argument, NULL, 'p'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 's':
      if (!ep_parse_long(optarg, INT_MIN, INT_MAX, &status)) {
        usage("bad --status (an int)");
      }
      have_status = true;
      break;
    case 'r':
      if (!ep_parse_long(optarg, 0, INT_MAX, &victim)) {
        usage("bad --rank (a rank >= 0)");
      }
      break;
    case 't':
      if (!ep_timeout_option(optarg)) {
        usage("bad --timeout (seconds > 0)");
      }
      break;
    case 'p': peers_first = true; break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc) {
    usage("unexpected argument");
  }
  if (!have_status) {
    usage("--status is required");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);
  uint32_t size = ep_job_size(&me);
  if ((unsigned long)victim >= size) {
    ep_diag("--rank %ld is not a rank of this job (size %u)", victim, size);
    ep_pmix_finalize();
    return EP_EXIT_USAGE;
  }

  ep_fence(&me, false);

  if ((long)me.rank == victim && peers_first) {
    signal(SIGTERM, SIG_IGN);
    pmix_proc_t *peers = NULL;
    PMIX_PROC_CREATE(peers, size - 1);
    uint32_t n = 0;
    for (uint32_t r = 0; r < size; r++) {
      if (r != me.rank) {
        PMIX_PROC_LOAD(&peers[n], me.nspace, r); /* a macro: no side effects in its arguments */
        n++;
      }
    }
    ep_out("abort rank=%u status=%ld", me.rank, status);
    ep_wait_begin("abort of the peers");
    pmix_status_t rc = PMIx_Abort((int)status, "ep_abort: the peers", peers, size - 1);
    ep_wait_end();
    PMIX_PROC_FREE(peers, size - 1);
    sleep_for(0.3);
    ep_wait_begin("abort");
    if (rc == PMIX_SUCCESS) {
      rc = PMIx_Abort((int)status, "ep_abort", NULL, 0);
    }
    ep_wait_end();
    if (rc != PMIX_SUCCESS) {
      ep_die(EP_EXIT_ABORT_RETURNED, "PMIx_Abort(%ld) returned %s (%d)", status, PMIx_Error_string(rc), rc);
    }
    _exit((int)status);
  }

  if ((long)me.rank == victim) {
    ep_out("abort rank=%u status=%ld", me.rank, status);
    ep_wait_begin("abort");
    pmix_status_t rc = PMIx_Abort((int)status, "ep_abort", NULL, 0);
    ep_wait_end();
    if (rc != PMIX_SUCCESS) {
      ep_die(EP_EXIT_ABORT_RETURNED, "PMIx_Abort(%ld) returned %s (%d)", status,
             PMIx_Error_string(rc), rc);
    }
    ep_diag("PMIx_Abort(%ld) returned success; waiting to be killed", status);
    sleep_for(ep_timeout());
    ep_out("abort returned rank=%u", me.rank);
    ep_die(EP_EXIT_ABORT_RETURNED, "PMIx_Abort(%ld) returned and nobody killed me within %g s",
           status, ep_timeout());
  }

  ep_out("waiting rank=%u", me.rank);
  ep_wait_begin("killed");
  for (;;) {
    pause();
  }
}
