/* SPDX-License-Identifier: Apache-2.0 */
/* ep_fence [--data] [--fence-timeout T] [--skip R:S | --die R:CODE] [--timeout S]
 *
 * Fence over the whole namespace. With --data every rank first puts
 * "ep.fence" = its rank (uint32, PMIX_GLOBAL) and the fence collects data;
 * then every rank reads every rank's "ep.fence" with PMIX_IMMEDIATE (so the
 * value must have come with the fence, no direct modex) and checks it.
 * --fence-timeout T gives the fence PMIX_TIMEOUT = T (seconds).
 *
 * A fence that must fail:
 *   --skip R:S   rank R never calls the fence: it sleeps S seconds, then
 *                finalizes and exits 0 (the others need --fence-timeout).
 *   --die R:CODE every rank registers a handler for PMIX_EVENT_PROC_TERMINATED
 *                and fences once (all handlers in place); then rank R exits
 *                CODE without finalizing, the others wait for the event about
 *                it and fence again, over every rank.
 * The others print the failure, finalize and exit 0 (1 if the fence passed).
 *
 * stdout: fence ok rank=R size=N data=0|1 us=<the fence call's microseconds>
 *         skipping rank=R | dying rank=R code=CODE
 *         fence failed rank=R status=<PMIx_Error_string, blanks as _> code=<int> seconds=<elapsed> */
#include "ep_pmix.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_fence [--data] [--fence-timeout T] [--skip R:S | --die R:CODE] [--timeout S]",
         why);
}

/* "R:X" into a rank and the rest (X is left as a string). */
static bool split_rank(char *arg, long *rank, char **rest) {
  char *colon = strchr(arg, ':');
  if (colon == NULL) {
    return false;
  }
  *colon = '\0';
  *rest = colon + 1;
  return ep_parse_long(arg, 0, INT_MAX, rank);
}

/* PMIx_Fence over everyone; the caller judges the status. */
static pmix_status_t fence(const pmix_proc_t *me, bool collect, int timeout_s) {
  pmix_proc_t wild = ep_proc(me, PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  size_t ninfo = 0;
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  if (collect) {
    PMIx_Info_load(&info[ninfo++], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  }
  if (timeout_s > 0) {
    PMIx_Info_load(&info[ninfo++], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
  }
  ep_wait_begin(collect ? "fence-data" : "fence");
  pmix_status_t rc = PMIx_Fence(&wild, 1, ninfo > 0 ? info : NULL, ninfo);
  ep_wait_end();
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  return rc;
}

int main(int argc, char **argv) {
  ep_setup("ep_fence");
  bool data = false;
  long fence_timeout = 0;
  long skip_rank = -1, die_rank = -1, die_code = 0;
  double skip_s = 0;
  static const struct option opts[] = {
      {"data", no_argument, NULL, 'd'},
      {"fence-timeout", required_argument, NULL, 'f'},
      {"skip", required_argument, NULL, 's'},
      {"die", required_argument, NULL, 'x'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    char *rest = NULL;
    switch (c) {
    case 'd': data = true; break;
    case 'f':
      if (!ep_parse_long(optarg, 1, INT_MAX, &fence_timeout)) {
        usage("bad --fence-timeout (whole seconds > 0)");
      }
      break;
    case 's':
      if (!split_rank(optarg, &skip_rank, &rest) || !ep_parse_seconds(rest, &skip_s)) {
        usage("bad --skip (R:S, R a rank, S seconds > 0)");
      }
      break;
    case 'x':
      if (!split_rank(optarg, &die_rank, &rest) || !ep_parse_long(rest, 0, 255, &die_code)) {
        usage("bad --die (R:CODE, R a rank, CODE 0-255)");
      }
      break;
    case 't':
      if (!ep_timeout_option(optarg)) {
        usage("bad --timeout (seconds > 0)");
      }
      break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc) {
    usage("unexpected argument");
  }
  if (skip_rank >= 0 && die_rank >= 0) {
    usage("--skip and --die exclude each other");
  }
  const bool must_fail = skip_rank >= 0 || die_rank >= 0;

  pmix_proc_t me;
  ep_pmix_init(&me);
  uint32_t size = ep_job_size(&me);
  if ((skip_rank >= 0 && (unsigned long)skip_rank >= size) || (die_rank >= 0 && (unsigned long)die_rank >= size)) {
    ep_diag("the rank of --skip or --die is not a rank of this job (size %u)", size);
    ep_pmix_finalize();
    return EP_EXIT_USAGE;
  }

  if (die_rank >= 0) {
    pmix_proc_t victim = ep_proc(&me, (pmix_rank_t)die_rank);
    ep_watch_termination(&victim);
    pmix_status_t rc = fence(&me, false, 0);  /* every handler is in place */
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Fence (before the death)", rc);
    }
    if ((long)me.rank == die_rank) {
      ep_out("dying rank=%u code=%ld", me.rank, die_code);
      fflush(NULL);
      _exit((int)die_code);
    }
    ep_wait_termination();
  }
  if ((long)me.rank == skip_rank) {
    ep_out("skipping rank=%u", me.rank);
    struct timespec d = {(time_t)skip_s, (long)((skip_s - (double)(time_t)skip_s) * 1e9)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
    ep_pmix_finalize();
    return EP_EXIT_OK;
  }

  if (data) {
    pmix_value_t v;
    uint32_t mine = me.rank;
    PMIX_VALUE_CONSTRUCT(&v);
    PMIx_Value_load(&v, &mine, PMIX_UINT32);
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, "ep.fence", &v);
    PMIX_VALUE_DESTRUCT(&v);
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Put(ep.fence)", rc);
    }
    ep_wait_begin("commit");
    rc = PMIx_Commit();
    ep_wait_end();
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Commit", rc);
    }
  }

  const int64_t t0 = ep_now_us();
  pmix_status_t rc = fence(&me, data, (int)fence_timeout);
  const double elapsed = (double)(ep_now_us() - t0) / 1e6;
  if (must_fail) {
    if (rc == PMIX_SUCCESS) {
      ep_diag("the fence passed, but a rank %s", skip_rank >= 0 ? "never called it" : "had died");
      ep_out("fence ok rank=%u size=%u data=%d", me.rank, size, data ? 1 : 0);
      ep_pmix_finalize();
      return EP_EXIT_FAIL;
    }
    char name[128];
    snprintf(name, sizeof name, "%s", PMIx_Error_string(rc));
    for (char *p = name; *p != '\0'; p++) {
      if (*p == ' ') {
        *p = '_';
      }
    }
    ep_out("fence failed rank=%u status=%s code=%d seconds=%.2f", me.rank, name, rc, elapsed);
    ep_pmix_finalize();
    return EP_EXIT_OK;
  }
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail(data ? "PMIx_Fence(collect data)" : "PMIx_Fence", rc);
  }

  int failures = 0;
  if (data) {
    for (uint32_t r = 0; r < size; r++) {
      pmix_proc_t peer = ep_proc(&me, r);
      long long got = -1;
      pmix_status_t grc = ep_get_int(&peer, "ep.fence", true, &got);
      if (grc != PMIX_SUCCESS) {
        ep_diag("PMIx_Get(ep.fence) of rank %u after the collecting fence: %s", r,
                PMIx_Error_string(grc));
        failures++;
      } else if (got != (long long)r) {
        ep_diag("rank %u's ep.fence is %lld, expected %u", r, got, r);
        failures++;
      }
    }
  }
  if (failures > 0) {
    ep_diag("%d check(s) failed", failures);
    ep_pmix_finalize();
    return EP_EXIT_FAIL;
  }

  ep_out("fence ok rank=%u size=%u data=%d us=%.0f", me.rank, size, data ? 1 : 0, elapsed * 1e6);
  ep_pmix_finalize();
  return EP_EXIT_OK;
}
