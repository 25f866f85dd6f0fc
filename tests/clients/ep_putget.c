/* SPDX-License-Identifier: Apache-2.0 */
/* ep_putget --mode=fence|dmodex [--timeout S]
 *
 * Every rank puts
 *   "ep.value" = "v<rank>@<host>"  (PMIX_GLOBAL)
 *   "ep.local" = "l<rank>@<host>"  (PMIX_LOCAL)
 * where <host> is the rank's own PMIX_HOSTNAME (gethostname() if the server
 * gives none), commits, and then
 *   mode fence:  fences WITH data collection and reads every peer's
 *                "ep.value" with PMIX_OPTIONAL (it must have come with the
 *                fence: no direct modex);
 *   mode dmodex: fences WITHOUT data collection (so every rank has committed)
 *                and reads every peer's "ep.value" with a plain PMIx_Get: for
 *                a peer on another node the server must fetch it from the
 *                owner's server (direct modex).
 * Each value is checked exactly against "v<r>@<PMIX_HOSTNAME of r>"; if the
 * peer's PMIX_HOSTNAME is not known only the "v<r>@" part is checked.
 * "ep.local" is read and checked for the peers on my node (PMIX_LOCAL_PEERS),
 * and PMIX_LOCAL_PEERS must agree with the peers' PMIX_HOSTNAME.
 *
 * stdout: putget ok rank=R peers=N mode=M   (N = number of other ranks checked) */
#include "ep_pmix.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_putget --mode=fence|dmodex [--timeout S]", why);
}

static void put_string(pmix_scope_t scope, const char *key, const char *value) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  PMIx_Value_load(&v, value, PMIX_STRING);
  pmix_status_t rc = PMIx_Put(scope, key, &v);
  PMIX_VALUE_DESTRUCT(&v);
  if (rc != PMIX_SUCCESS) {
    ep_diag("PMIx_Put(%s) failed", key);
    ep_pmix_fail("PMIx_Put", rc);
  }
}

/* Is `rank` in the comma-separated list `peers`? */
static bool in_list(const char *peers, uint32_t rank) {
  const char *p = peers;
  while (p != NULL && *p != '\0') {
    char *end = NULL;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p) {
      return false;
    }
    if (v == rank) {
      return true;
    }
    p = (*end == ',') ? end + 1 : NULL;
  }
  return false;
}

int main(int argc, char **argv) {
  ep_setup("ep_putget");
  const char *mode = NULL;
  static const struct option opts[] = {
      {"mode", required_argument, NULL, 'm'},
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
    case 'm': mode = optarg; break;
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
  if (mode == NULL) {
    usage("--mode is required");
  }
  bool fence_mode;
  if (strcmp(mode, "fence") == 0) {
    fence_mode = true;
  } else if (strcmp(mode, "dmodex") == 0) {
    fence_mode = false;
  } else {
    usage("bad --mode (fence or dmodex)");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);
  uint32_t size = ep_job_size(&me);

  char *myhost = NULL;
  bool myhost_known = true; /* from PMIX_HOSTNAME */
  if (ep_get_string(&me, PMIX_HOSTNAME, false, &myhost) != PMIX_SUCCESS) {
    myhost_known = false;
    char buf[256] = "";
    gethostname(buf, sizeof buf - 1);
    myhost = strdup(buf);
    ep_diag("no %s for myself, using gethostname() = %s", PMIX_HOSTNAME, myhost);
  }
  char value[512];
  snprintf(value, sizeof value, "v%u@%s", me.rank, myhost);
  put_string(PMIX_GLOBAL, "ep.value", value);
  snprintf(value, sizeof value, "l%u@%s", me.rank, myhost);
  put_string(PMIX_LOCAL, "ep.local", value);
  ep_wait_begin("commit");
  pmix_status_t rc = PMIx_Commit();
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Commit", rc);
  }

  ep_fence(&me, fence_mode);

  pmix_proc_t wild = ep_proc(&me, PMIX_RANK_WILDCARD);
  char *local_peers = NULL;
  rc = ep_get_string(&wild, PMIX_LOCAL_PEERS, false, &local_peers);
  if (rc != PMIX_SUCCESS) {
    ep_diag("no %s (%s): ep.local is not checked", PMIX_LOCAL_PEERS, PMIx_Error_string(rc));
  }

  int failures = 0;
  uint32_t checked = 0;
  bool warned_host = false;
  for (uint32_t r = 0; r < size; r++) {
    pmix_proc_t peer = ep_proc(&me, r);
    char *host = NULL;
    pmix_status_t hrc = ep_get_string(&peer, PMIX_HOSTNAME, false, &host);
    if (hrc != PMIX_SUCCESS && !warned_host) {
      ep_diag("no %s for rank %u (%s): checking only the rank part of the values",
              PMIX_HOSTNAME, r, PMIx_Error_string(hrc));
      warned_host = true;
    }

    char *got = NULL;
    rc = ep_get_string(&peer, "ep.value", fence_mode, &got);
    if (rc != PMIX_SUCCESS) {
      ep_diag("PMIx_Get(ep.value) of rank %u (mode %s): %s", r, mode, PMIx_Error_string(rc));
      failures++;
    } else {
      char want[512];
      bool ok;
      if (host != NULL) {
        snprintf(want, sizeof want, "v%u@%s", r, host);
        ok = strcmp(got, want) == 0;
      } else {
        snprintf(want, sizeof want, "v%u@", r);
        ok = strncmp(got, want, strlen(want)) == 0 && got[strlen(want)] != '\0';
        strncat(want, "<any host>", sizeof want - strlen(want) - 1);
      }
      if (!ok) {
        ep_diag("rank %u's ep.value is \"%s\", expected \"%s\"", r, got, want);
        failures++;
      }
    }
    free(got);

    /* The server's two statements of locality must agree: PMIX_LOCAL_PEERS
     * (node level, which the client library resolves for the node named by
     * its own hostname) and the peer's PMIX_HOSTNAME. */
    bool listed_local = local_peers != NULL && in_list(local_peers, r);
    if (local_peers != NULL && host != NULL && myhost_known &&
        listed_local != (strcmp(host, myhost) == 0)) {
      ep_diag("inconsistent locality of rank %u: %s=\"%s\" %s it, but its %s is \"%s\" and "
              "mine is \"%s\"",
              r, PMIX_LOCAL_PEERS, local_peers, listed_local ? "lists" : "does not list",
              PMIX_HOSTNAME, host, myhost);
      failures++;
    } else if (listed_local) {
      got = NULL;
      rc = ep_get_string(&peer, "ep.local", false, &got);
      if (rc != PMIX_SUCCESS) {
        ep_diag("PMIx_Get(ep.local) of local rank %u: %s", r, PMIx_Error_string(rc));
        failures++;
      } else {
        char want[512];
        snprintf(want, sizeof want, "l%u@%s", r, host != NULL ? host : "");
        if (host != NULL ? strcmp(got, want) != 0 : strncmp(got, want, strlen(want)) != 0) {
          ep_diag("local rank %u's ep.local is \"%s\", expected \"%s\"", r, got, want);
          failures++;
        }
      }
      free(got);
    }
    free(host);
    if (r != me.rank) {
      checked++;
    }
  }
  free(local_peers);
  free(myhost);

  if (failures > 0) {
    ep_diag("%d check(s) failed", failures);
    ep_pmix_finalize();
    return EP_EXIT_FAIL;
  }
  ep_out("putget ok rank=%u peers=%u mode=%s", me.rank, checked, mode);
  ep_pmix_finalize();
  return EP_EXIT_OK;
}
