/* SPDX-License-Identifier: Apache-2.0 */
/* ep_hello [--timeout S]
 *
 * PMIx_Init, then the job's and the process's basic keys:
 *   PMIX_JOB_SIZE   on rank WILDCARD (job level)
 *   PMIX_LOCAL_RANK, PMIX_NODE_RANK, PMIX_HOSTNAME on my own proc;
 *   and, optionally, the node's hwloc topology (PMIX_HWLOC_XML_V2, job level),
 *   reported as the number of PUs its XML lists ("-" when absent).
 *
 * stdout: hello rank=R size=N local_rank=L node_rank=NR hostname=H nspace=NS topology_pus=P
 * (a missing key is printed as "-", named on stderr, and the exit status is 1). */
#include "ep_pmix.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_hello [--timeout S]", why);
}

static int missing;

static void get_int(const pmix_proc_t *proc, const char *key, const char *what, char *buf,
                    size_t len) {
  long long v = 0;
  pmix_status_t rc = ep_get_int(proc, key, false, &v);
  if (rc == PMIX_SUCCESS) {
    snprintf(buf, len, "%lld", v);
  } else {
    snprintf(buf, len, "-");
    ep_diag("missing key %s (%s) on %s:%s: %s", key, what, proc->nspace,
            proc->rank == PMIX_RANK_WILDCARD ? "WILDCARD" : "me", PMIx_Error_string(rc));
    missing++;
  }
}

int main(int argc, char **argv) {
  ep_setup("ep_hello");
  static const struct option opts[] = {
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

  pmix_proc_t me;
  ep_pmix_init(&me);
  pmix_proc_t wild = ep_proc(&me, PMIX_RANK_WILDCARD);

  char size[32], lrank[32], nrank[32];
  get_int(&wild, PMIX_JOB_SIZE, "job size", size, sizeof size);
  get_int(&me, PMIX_LOCAL_RANK, "local rank", lrank, sizeof lrank);
  get_int(&me, PMIX_NODE_RANK, "node rank", nrank, sizeof nrank);
  char *host = NULL;
  pmix_status_t rc = ep_get_string(&me, PMIX_HOSTNAME, false, &host);
  if (rc != PMIX_SUCCESS) {
    ep_diag("missing key %s (hostname) on %s:me: %s", PMIX_HOSTNAME, me.nspace,
            PMIx_Error_string(rc));
    missing++;
  }

  /* Open MPI 4.1 reads the topology this way and discovers its own
   * (in every process) when it is absent. */
  char pus[32] = "-";
  char *xml = NULL;
  if (ep_get_string(&wild, PMIX_HWLOC_XML_V2, true, &xml) == PMIX_SUCCESS && xml != NULL) {
    int n = 0;
    for (const char *p = xml; (p = strstr(p, "type=\"PU\"")) != NULL; p++) {
      n++;
    }
    snprintf(pus, sizeof pus, "%d", n);
  }
  free(xml);

  ep_out("hello rank=%u size=%s local_rank=%s node_rank=%s hostname=%s nspace=%s topology_pus=%s",
         me.rank, size, lrank, nrank, host != NULL ? host : "-", me.nspace, pus);
  free(host);
  ep_pmix_finalize();
  return missing > 0 ? EP_EXIT_FAIL : EP_EXIT_OK;
}
