/* SPDX-License-Identifier: Apache-2.0 */
/* ep_cleanup --dir DIR [--scope proc|job] [--then HOW] [--timeout S]
 *
 * Asks the PMIx server to remove a directory of ours once we are gone, as
 * Open MPI 4.1 does for its session directory: each rank creates DIR/rank.R
 * with a file in it, asks with PMIx_Job_control for PMIX_REGISTER_CLEANUP_DIR
 * = that directory and PMIX_CLEANUP_RECURSIVE (scope proc, the default: the
 * target is the rank itself, as Open MPI asks; job: no target, the whole
 * namespace), prints "registered rank=R dir=PATH status=S", fences (so every
 * rank has asked before any ends), prints "ready rank=R" and then ends as
 * HOW says:
 *
 *   finalize  PMIx_Finalize, exit 0 (the default)
 *   exit:N    exit N without finalizing
 *   segv      SIGSEGV
 *   wait      sleep until killed (exit 3 after the timeout)
 *
 * A server that ignores the request, or refuses it, leaves the directory:
 * the caller checks that it is gone after the step. status is the request's
 * PMIx status (0 or PMIX_OPERATION_SUCCEEDED when the server took it); any
 * other is an error on stderr and exit 1.
 *
 * stdout: registered rank=R dir=PATH status=S | ready rank=R */
#include "ep_pmix.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_cleanup --dir DIR [--scope proc|job] [--then finalize|exit:N|segv|wait] [--timeout S]",
         why);
}

int main(int argc, char **argv) {
  ep_setup("ep_cleanup");
  const char *dir = NULL;
  bool job_scope = false;
  const char *then = "finalize";
  long code = 0;
  static const struct option opts[] = {
      {"dir", required_argument, NULL, 'd'},
      {"scope", required_argument, NULL, 's'},
      {"then", required_argument, NULL, 'n'},
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
    case 'd': dir = optarg; break;
    case 's':
      if (strcmp(optarg, "proc") == 0) {
        job_scope = false;
      } else if (strcmp(optarg, "job") == 0) {
        job_scope = true;
      } else {
        usage("bad --scope (proc or job)");
      }
      break;
    case 'n':
      then = optarg;
      if (strncmp(then, "exit:", 5) == 0) {
        if (!ep_parse_long(then + 5, 0, 255, &code)) {
          usage("bad --then exit:N (0..255)");
        }
      } else if (strcmp(then, "finalize") != 0 && strcmp(then, "segv") != 0 && strcmp(then, "wait") != 0) {
        usage("bad --then (finalize, exit:N, segv or wait)");
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
  if (!dir) {
    usage("--dir is required");
  }

  pmix_proc_t me;
  ep_pmix_init(&me);

  char mine[PATH_MAX];
  char file[PATH_MAX + 16];
  if (snprintf(mine, sizeof(mine), "%s/rank.%u", dir, me.rank) >= (int)sizeof(mine)) {
    ep_die(EP_EXIT_USAGE, "--dir is too long");
  }
  snprintf(file, sizeof(file), "%s/data", mine);
  if (mkdir(mine, 0700) != 0) {
    ep_die(EP_EXIT_FAIL, "mkdir %s: %s", mine, strerror(errno));
  }
  FILE *f = fopen(file, "w");
  if (!f || fputs("ep_cleanup\n", f) == EOF || fclose(f) != 0) {
    ep_die(EP_EXIT_FAIL, "cannot write %s", file);
  }

  pmix_info_t directives[2];
  PMIX_INFO_LOAD(&directives[0], PMIX_REGISTER_CLEANUP_DIR, mine, PMIX_STRING);
  bool recursive = true;
  PMIX_INFO_LOAD(&directives[1], PMIX_CLEANUP_RECURSIVE, &recursive, PMIX_BOOL);
  pmix_info_t *results = NULL;
  size_t nresults = 0;
  ep_wait_begin("register");
  pmix_status_t rc = job_scope ? PMIx_Job_control(NULL, 0, directives, 2, &results, &nresults)
                               : PMIx_Job_control(&me, 1, directives, 2, &results, &nresults);
  ep_wait_end();
  PMIX_INFO_DESTRUCT(&directives[0]);
  PMIX_INFO_DESTRUCT(&directives[1]);
  if (results) {
    PMIX_INFO_FREE(results, nresults);
  }
  ep_out("registered rank=%u dir=%s status=%d", me.rank, mine, rc);
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) {
    ep_die(EP_EXIT_FAIL, "PMIx_Job_control(PMIX_REGISTER_CLEANUP_DIR): %s", PMIx_Error_string(rc));
  }

  ep_fence(&me, false);
  ep_out("ready rank=%u", me.rank);

  if (strcmp(then, "finalize") == 0) {
    ep_pmix_finalize();
    return EP_EXIT_OK;
  }
  if (strncmp(then, "exit:", 5) == 0) {
    _exit((int)code);
  }
  if (strcmp(then, "segv") == 0) {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
  ep_wait_begin("killed");
  for (;;) {
    pause();
  }
}
