/* ep_fence [--data] [--timeout S]
 *
 * Fence over the whole namespace. With --data every rank first puts
 * "ep.fence" = its rank (uint32, PMIX_GLOBAL) and the fence collects data;
 * then every rank reads every rank's "ep.fence" with PMIX_OPTIONAL (so the
 * value must have come with the fence, no direct modex) and checks it.
 *
 * stdout: fence ok rank=R size=N data=0|1 */
#include "ep_pmix.h"

#include <getopt.h>
#include <stdio.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_fence [--data] [--timeout S]", why);
}

int main(int argc, char **argv) {
  ep_setup("ep_fence");
  bool data = false;
  static const struct option opts[] = {
      {"data", no_argument, NULL, 'd'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    double t = 0;
    switch (c) {
    case 'd': data = true; break;
    case 't':
      if (!ep_parse_seconds(optarg, &t)) {
        usage("bad --timeout (seconds > 0)");
      }
      ep_set_timeout(t);
      break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc) {
    usage("unexpected argument");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);
  uint32_t size = ep_job_size(&me);

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

  ep_fence(&me, data);

  int failures = 0;
  if (data) {
    for (uint32_t r = 0; r < size; r++) {
      pmix_proc_t peer = ep_proc(&me, r);
      long long got = -1;
      pmix_status_t rc = ep_get_int(&peer, "ep.fence", true, &got);
      if (rc != PMIX_SUCCESS) {
        ep_diag("PMIx_Get(ep.fence) of rank %u after the collecting fence: %s", r,
                PMIx_Error_string(rc));
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

  ep_out("fence ok rank=%u size=%u data=%d", me.rank, size, data ? 1 : 0);
  ep_pmix_finalize();
  return EP_EXIT_OK;
}
