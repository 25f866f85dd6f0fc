/* SPDX-License-Identifier: Apache-2.0 */
/* ep_mpi_fail --fail R:HOW [--delay MS] [--survivors-finalize] [--timeout S]
 *
 * A real MPI program whose rank R dies in the middle of a collective, as
 * applications do. Every rank: MPI_Init; MPI_Barrier; prints
 * "barrier1 rank=N". Then rank R waits --delay milliseconds (default 300,
 * so that the others are inside the second barrier) and dies HOW:
 *   segv      a segmentation fault (SIGSEGV, core dumps off)
 *   exit:N    exit(N) without MPI_Finalize
 *   abort:N   MPI_Abort(MPI_COMM_WORLD, N)
 * while every other rank waits in a second MPI_Barrier, which can never
 * complete: a rank that passes it prints "passed rank=N" (a bug). With
 * --survivors-finalize the others instead wait --delay + 500 ms and call
 * MPI_Finalize, printing "finished rank=N" (run-through: nothing of theirs
 * needs the dead rank).
 * MPI's default error handler stays in place (errors are fatal), as in most
 * applications.
 *
 * stdout: barrier1 rank=N; "fail rank=R how=HOW t_us=T" just before the
 * failure (T: CLOCK_REALTIME, microseconds). */
#include "ep_common.h"

#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE,
         "%s\nusage: ep_mpi_fail --fail R:segv|R:exit:N|R:abort:N [--delay MS] [--survivors-finalize] [--timeout S]",
         why);
}

int main(int argc, char **argv) {
  ep_setup("ep_mpi_fail");
  long fail_rank = -1, code = 0, delay_ms = 300;
  int survivors_finalize = 0;
  char how[16] = "";
  static const struct option opts[] = {
      {"fail", required_argument, NULL, 'f'},
      {"delay", required_argument, NULL, 'd'},
      {"survivors-finalize", no_argument, NULL, 's'},
      {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    char *colon = NULL, *second = NULL;
    switch (c) {
    case 'f':
      colon = strchr(optarg, ':');
      if (colon == NULL) {
        usage("bad --fail (R:HOW)");
      }
      *colon = '\0';
      if (!ep_parse_long(optarg, 0, INT_MAX, &fail_rank)) {
        usage("bad --fail rank");
      }
      second = strchr(colon + 1, ':');
      if (second != NULL) {
        *second = '\0';
        if (!ep_parse_long(second + 1, INT_MIN, INT_MAX, &code)) {
          usage("bad --fail code");
        }
      }
      snprintf(how, sizeof(how), "%s", colon + 1);
      if (strcmp(how, "segv") != 0 && !(second && (strcmp(how, "exit") == 0 || strcmp(how, "abort") == 0))) {
        usage("bad --fail HOW (segv, exit:N or abort:N)");
      }
      break;
    case 'd':
      if (!ep_parse_long(optarg, 0, 600000, &delay_ms)) {
        usage("bad --delay (milliseconds)");
      }
      break;
    case 's':
      survivors_finalize = 1;
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
  if (optind != argc || fail_rank < 0) {
    usage("--fail is required");
  }

  ep_wait_begin("MPI_Init");
  MPI_Init(&argc, &argv);
  ep_wait_end();
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ep_set_rank(rank);
  ep_wait_begin("MPI_Barrier 1");
  MPI_Barrier(MPI_COMM_WORLD);
  ep_wait_end();
  ep_out("barrier1 rank=%d", rank);

  if (rank == fail_rank) {
    struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    ep_out("fail rank=%d how=%s t_us=%lld", rank, how, (long long)ep_now_us());
    if (strcmp(how, "segv") == 0) {
      struct rlimit none = {0, 0};
      setrlimit(RLIMIT_CORE, &none);
      raise(SIGSEGV);
    } else if (strcmp(how, "exit") == 0) {
      exit((int)code);
    } else {
      MPI_Abort(MPI_COMM_WORLD, (int)code);
    }
    ep_die(4, "rank %d survived its own failure", rank);
  }
  if (survivors_finalize) {
    /* Run-through: the others need nothing of the dead rank and end. */
    struct timespec after = {(delay_ms + 500) / 1000, ((delay_ms + 500) % 1000) * 1000000L};
    nanosleep(&after, NULL);
    ep_wait_begin("MPI_Finalize");
    MPI_Finalize();
    ep_wait_end();
    ep_out("finished rank=%d", rank);
    return EP_EXIT_OK;
  }
  ep_wait_begin("MPI_Barrier 2");
  MPI_Barrier(MPI_COMM_WORLD);
  ep_wait_end();
  ep_out("passed rank=%d", rank);
  MPI_Finalize();
  return EP_EXIT_OK;
}
