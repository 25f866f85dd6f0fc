/* SPDX-License-Identifier: Apache-2.0 */
/* ep_group connect|group [--pairs] [--die R:CODE] [--timeout S]
 *
 * connect: PMIx_Connect, then PMIx_Disconnect, over the participants.
 * group:   PMIx_Group_construct of a group of the participants with
 *          PMIX_GROUP_ASSIGN_CONTEXT_ID (as Open MPI 5's
 *          MPI_Comm_create_from_group asks), then PMIx_Group_destruct.
 *
 * The participants: every rank (PMIX_RANK_WILDCARD); with --pairs rank R
 * and rank (R + N/2) mod N, N the job's size (even), named one by one.
 *
 * --die R:CODE every rank registers a handler for PMIX_EVENT_PROC_TERMINATED
 *              and fences once; rank R exits CODE without finalizing, the
 *              others wait for the event about it, then connect (or
 *              construct) over every rank, which must fail: they print the
 *              failure, finalize and exit 0 (1 if it passed).
 *
 * stdout: connect ok rank=R peers=P us=U | disconnect ok rank=R
 *         group ok rank=R id=GROUP ctxid=C members=M us=U | destruct ok rank=R
 *         dying rank=R code=CODE
 *         OP failed rank=R code=<int> seconds=S     (OP: connect, group) */
#include "ep_pmix.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_group connect|group [--pairs] [--die R:CODE] [--timeout S]", why);
}

/* The group's context id among the construct's results; -1 if none. */
static long long context_id(const pmix_info_t *results, size_t nresults) {
  for (size_t i = 0; i < nresults; i++) {
    long long id = 0;
    if (PMIX_CHECK_KEY(&results[i], PMIX_GROUP_CONTEXT_ID) && ep_value_int(&results[i].value, &id)) {
      return id;
    }
  }
  return -1;
}

static pmix_status_t connect_and_disconnect(const pmix_proc_t *procs, size_t nprocs, bool report) {
  const int64_t t0 = ep_now_us();
  ep_wait_begin("connect");
  pmix_status_t rc = PMIx_Connect(procs, nprocs, NULL, 0);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    return rc;
  }
  if (report) {
    ep_out("connect ok rank=%ld peers=%zu us=%lld", ep_rank(), nprocs, (long long)(ep_now_us() - t0));
  }
  ep_wait_begin("disconnect");
  rc = PMIx_Disconnect(procs, nprocs, NULL, 0);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Disconnect", rc);
  }
  if (report) {
    ep_out("disconnect ok rank=%ld", ep_rank());
  }
  return PMIX_SUCCESS;
}

static pmix_status_t construct_and_destruct(const char *id, const pmix_proc_t *procs, size_t nprocs,
                                            bool report) {
  pmix_info_t dir;
  bool yes = true;
  PMIX_INFO_CONSTRUCT(&dir);
  PMIx_Info_load(&dir, PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
  pmix_info_t *results = NULL;
  size_t nresults = 0;
  const int64_t t0 = ep_now_us();
  ep_wait_begin("group construct");
  pmix_status_t rc = PMIx_Group_construct(id, procs, nprocs, &dir, 1, &results, &nresults);
  ep_wait_end();
  const int64_t us = ep_now_us() - t0;
  PMIX_INFO_DESTRUCT(&dir);
  if (rc != PMIX_SUCCESS) {
    return rc;
  }
  const long long ctxid = context_id(results, nresults);
  if (results != NULL) {
    PMIX_INFO_FREE(results, nresults);
  }
  if (ctxid < 0) {
    ep_die(1, "PMIx_Group_construct(%s) gave no context id", id);
  }
  if (report) {
    ep_out("group ok rank=%ld id=%s ctxid=%lld members=%zu us=%lld", ep_rank(), id, ctxid, nprocs, (long long)us);
  }
  ep_wait_begin("group destruct");
  rc = PMIx_Group_destruct(id, NULL, 0);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Group_destruct", rc);
  }
  if (report) {
    ep_out("destruct ok rank=%ld", ep_rank());
  }
  return PMIX_SUCCESS;
}

int main(int argc, char **argv) {
  ep_setup("ep_group");
  bool pairs = false;
  long die_rank = -1, die_code = 0;
  static const struct option opts[] = {
      {"pairs", no_argument, NULL, 'p'},
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
    char *colon = NULL;
    switch (c) {
    case 'p': pairs = true; break;
    case 'x':
      colon = strchr(optarg, ':');
      if (colon == NULL) {
        usage("bad --die (R:CODE, R a rank, CODE 0-255)");
      }
      *colon = '\0';
      if (!ep_parse_long(optarg, 0, INT_MAX, &die_rank) || !ep_parse_long(colon + 1, 0, 255, &die_code)) {
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
  if (optind + 1 != argc || (strcmp(argv[optind], "connect") != 0 && strcmp(argv[optind], "group") != 0)) {
    usage("say connect or group");
  }
  const bool group = strcmp(argv[optind], "group") == 0;
  if (pairs && die_rank >= 0) {
    usage("--pairs and --die exclude each other");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);
  const uint32_t size = ep_job_size(&me);
  if ((pairs && size % 2 != 0) || (die_rank >= 0 && (unsigned long)die_rank >= size)) {
    ep_diag("--pairs needs an even job size, --die one of its ranks (size %u)", size);
    ep_pmix_finalize();
    return EP_EXIT_USAGE;
  }

  pmix_proc_t procs[2];
  size_t nprocs = 1;
  char id[64] = "ep.all";
  procs[0] = ep_proc(&me, PMIX_RANK_WILDCARD);
  if (pairs) {
    const uint32_t peer = (me.rank + size / 2) % size;
    const uint32_t lo = me.rank < peer ? me.rank : peer;
    procs[0] = ep_proc(&me, lo);
    procs[1] = ep_proc(&me, lo == me.rank ? peer : me.rank);
    nprocs = 2;
    snprintf(id, sizeof id, "ep.pair.%u", lo);
  }

  if (die_rank >= 0) {
    pmix_proc_t victim = ep_proc(&me, (pmix_rank_t)die_rank);
    ep_watch_termination(&victim);
    ep_fence(&me, false); /* every handler is in place */
    if ((long)me.rank == die_rank) {
      ep_out("dying rank=%u code=%ld", me.rank, die_code);
      fflush(NULL);
      _exit((int)die_code);
    }
    ep_wait_termination();
  }

  const int64_t t0 = ep_now_us();
  pmix_status_t rc = group ? construct_and_destruct(id, procs, nprocs, die_rank < 0)
                           : connect_and_disconnect(procs, nprocs, die_rank < 0);
  if (die_rank >= 0) {
    if (rc == PMIX_SUCCESS) {
      ep_diag("%s passed over a rank that had died", group ? "the group construct" : "the connect");
      ep_pmix_finalize();
      return 1;
    }
    ep_out("%s failed rank=%u code=%d seconds=%.3f", group ? "group" : "connect", me.rank, rc,
           (double)(ep_now_us() - t0) / 1e6);
    ep_pmix_finalize();
    return EP_EXIT_OK;
  }
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail(group ? "PMIx_Group_construct" : "PMIx_Connect", rc);
  }
  ep_pmix_finalize();
  return EP_EXIT_OK;
}
