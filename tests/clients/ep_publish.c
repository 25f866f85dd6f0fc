/* SPDX-License-Identifier: Apache-2.0 */
/* ep_publish [--timeout S] [--missing T] [--duplicate]
 *
 * --missing T: every rank looks up "ep.never", which nobody publishes, with
 * PMIX_WAIT and PMIX_TIMEOUT = T seconds, and prints
 *   missing rank=R status=<PMIx_Error_string, blanks as '_'> code=<int> seconds=<elapsed>
 * exiting 0 when the lookup failed (as it must), 1 when it found something.
 *
 * Otherwise:
 * rank 0:   PMIx_Publish "ep.service" = "service-of-<nspace>"
 * all:      fence
 * with --duplicate, rank 1: PMIx_Publish "ep.service" = "impostor", which
 *            must fail (the first publication stands), and prints
 *            duplicate rank=1 status=<int>; then a fence
 * rank != 0: PMIx_Lookup "ep.service" (PMIX_WAIT, PMIX_TIMEOUT) and check the
 *            value and the publisher (<nspace>:0)
 * all:      fence
 * rank 0:   PMIx_Unpublish "ep.service"
 *
 * stdout: publish ok rank=R */
#include "ep_pmix.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_publish [--timeout S] [--missing T] [--duplicate]", why);
}

static int lookup_missing(const pmix_proc_t *me, int seconds) {
  pmix_pdata_t pdata;
  PMIX_PDATA_CONSTRUCT(&pdata);
  PMIX_LOAD_KEY(pdata.key, "ep.never");
  pmix_info_t info[2];
  int wait_all = 0;
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  PMIx_Info_load(&info[0], PMIX_WAIT, &wait_all, PMIX_INT);
  PMIx_Info_load(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const int64_t t0 = ep_now_us();
  ep_wait_begin("lookup of a key nobody publishes");
  pmix_status_t rc = PMIx_Lookup(&pdata, 1, info, 2);
  ep_wait_end();
  const double elapsed = (double)(ep_now_us() - t0) / 1e6;
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  PMIX_PDATA_DESTRUCT(&pdata);
  char name[128];
  snprintf(name, sizeof name, "%s", PMIx_Error_string(rc));
  for (char *p = name; *p != '\0'; p++) {
    if (*p == ' ') {
      *p = '_';
    }
  }
  ep_out("missing rank=%u status=%s code=%d seconds=%.2f", me->rank, name, rc, elapsed);
  ep_pmix_finalize();
  return rc == PMIX_SUCCESS ? EP_EXIT_FAIL : EP_EXIT_OK;
}

int main(int argc, char **argv) {
  ep_setup("ep_publish");
  static const struct option opts[] = {
      {"timeout", required_argument, NULL, 't'},
      {"missing", required_argument, NULL, 'm'},
      {"duplicate", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  long missing = 0;
  bool duplicate = false;
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 't':
      if (!ep_timeout_option(optarg)) {
        usage("bad --timeout (seconds > 0)");
      }
      break;
    case 'm':
      if (!ep_parse_long(optarg, 1, 3600, &missing)) {
        usage("bad --missing (seconds, 1..3600)");
      }
      break;
    case 'd': duplicate = true; break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc) {
    usage("unexpected argument");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);
  if (missing > 0) {
    return lookup_missing(&me, (int)missing);
  }
  char service[PMIX_MAX_NSLEN + 32];
  snprintf(service, sizeof service, "service-of-%s", me.nspace);

  pmix_status_t rc;
  if (me.rank == 0) {
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIx_Info_load(&info, "ep.service", service, PMIX_STRING);
    ep_wait_begin("publish");
    rc = PMIx_Publish(&info, 1);
    ep_wait_end();
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Publish(ep.service)", rc);
    }
  }

  ep_fence(&me, false);

  if (duplicate) {
    if (me.rank == 1) {
      pmix_info_t info;
      PMIX_INFO_CONSTRUCT(&info);
      PMIx_Info_load(&info, "ep.service", "impostor", PMIX_STRING);
      ep_wait_begin("publish of a key published already");
      rc = PMIx_Publish(&info, 1);
      ep_wait_end();
      PMIX_INFO_DESTRUCT(&info);
      ep_out("duplicate rank=%u status=%d", me.rank, rc);
    }
    ep_fence(&me, false);
  }

  int failures = 0;
  if (me.rank != 0) {
    pmix_pdata_t pdata;
    PMIX_PDATA_CONSTRUCT(&pdata);
    PMIX_LOAD_KEY(pdata.key, "ep.service");
    pmix_info_t info[2];
    int wait_all = 0; /* 0: wait until every requested key is found */
    int seconds = (int)ceil(ep_timeout());
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIx_Info_load(&info[0], PMIX_WAIT, &wait_all, PMIX_INT);
    PMIx_Info_load(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    ep_wait_begin("lookup");
    rc = PMIx_Lookup(&pdata, 1, info, 2);
    ep_wait_end();
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Lookup(ep.service)", rc);
    }
    if (pdata.value.type != PMIX_STRING || pdata.value.data.string == NULL) {
      ep_diag("ep.service has type %s, expected a string",
              PMIx_Data_type_string(pdata.value.type));
      failures++;
    } else if (strcmp(pdata.value.data.string, service) != 0) {
      ep_diag("ep.service is \"%s\", expected \"%s\"", pdata.value.data.string, service);
      failures++;
    }
    if (!PMIX_CHECK_NSPACE(pdata.proc.nspace, me.nspace) || pdata.proc.rank != 0) {
      ep_diag("ep.service was published by %s:%u, expected %s:0", pdata.proc.nspace,
              pdata.proc.rank, me.nspace);
      failures++;
    }
    PMIX_PDATA_DESTRUCT(&pdata);
  }

  ep_fence(&me, false);

  if (me.rank == 0) {
    char key[] = "ep.service";
    char *keys[] = {key, NULL};
    ep_wait_begin("unpublish");
    rc = PMIx_Unpublish(keys, NULL, 0);
    ep_wait_end();
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Unpublish(ep.service)", rc);
    }
  }

  if (failures > 0) {
    ep_diag("%d check(s) failed", failures);
    ep_pmix_finalize();
    return EP_EXIT_FAIL;
  }
  ep_out("publish ok rank=%u", me.rank);
  ep_pmix_finalize();
  return EP_EXIT_OK;
}
