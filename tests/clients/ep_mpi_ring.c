/* SPDX-License-Identifier: Apache-2.0 */
/* ep_mpi_ring [--abort R:CODE] [--hold S] [--timeout S]
 *
 * MPI_Init; MPI_Allreduce of the ranks (sum, checked against N*(N-1)/2);
 * with --abort R:CODE rank R prints "abort rank=R code=CODE" and calls
 * MPI_Abort(MPI_COMM_WORLD, CODE) right after the allreduce; a ring
 * MPI_Sendrecv (send my rank to rank+1, receive from rank-1, checked);
 * with --hold S each rank then sleeps S seconds (a connected client whose
 * memory a benchmark can look at); MPI_Finalize.
 *
 * stdout: mpi ok rank=R size=N   (and "abort rank=R code=CODE") */
#include "ep_common.h"

#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_mpi_ring [--abort R:CODE] [--hold S] [--timeout S]", why);
}

static void check_mpi(int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ep_die(EP_EXIT_FAIL, "%s failed: %s", call, msg);
  }
}

int main(int argc, char **argv) {
  ep_setup("ep_mpi_ring");
  long abort_rank = -1, abort_code = 0;
  double hold = 0;
  static const struct option opts[] = {
      {"abort", required_argument, NULL, 'a'},
      {"hold", required_argument, NULL, 'H'},
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
    case 'a':
      colon = strchr(optarg, ':');
      if (colon == NULL) {
        usage("bad --abort (R:CODE)");
      }
      *colon = '\0';
      if (!ep_parse_long(optarg, 0, INT_MAX, &abort_rank) ||
          !ep_parse_long(colon + 1, INT_MIN, INT_MAX, &abort_code)) {
        usage("bad --abort (R:CODE, R a rank, CODE an int)");
      }
      break;
    case 'H':
      if (!ep_parse_seconds(optarg, &hold)) {
        usage("bad --hold (seconds > 0)");
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

  ep_wait_begin("MPI_Init");
  check_mpi(MPI_Init(&argc, &argv), "MPI_Init");
  ep_wait_end();
  /* Errors come back as codes, not as MPI's own abort. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ep_set_rank(rank);
  if (abort_rank >= size) {
    ep_diag("--abort rank %ld is not a rank of this job (size %d)", abort_rank, size);
    MPI_Finalize();
    return EP_EXIT_USAGE;
  }

  int failures = 0;
  long long mine = rank, sum = -1;
  ep_wait_begin("MPI_Allreduce");
  check_mpi(MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  ep_wait_end();
  long long want = (long long)size * (size - 1) / 2;
  if (sum != want) {
    ep_diag("MPI_Allreduce sum of ranks is %lld, expected %lld", sum, want);
    failures++;
  }

  if (rank == abort_rank) {
    ep_out("abort rank=%d code=%ld", rank, abort_code);
    ep_wait_begin("MPI_Abort");
    MPI_Abort(MPI_COMM_WORLD, (int)abort_code);
    ep_die(4, "MPI_Abort returned");
  }

  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int got = -1;
  ep_wait_begin("MPI_Sendrecv");
  check_mpi(MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Sendrecv");
  ep_wait_end();
  if (got != left) {
    ep_diag("ring: received %d from rank %d, expected %d", got, left, left);
    failures++;
  }

  if (hold > 0) {
    struct timespec ts = {(time_t)hold, (long)((hold - (double)(time_t)hold) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }

  ep_wait_begin("MPI_Finalize");
  check_mpi(MPI_Finalize(), "MPI_Finalize");
  ep_wait_end();
  if (failures > 0) {
    ep_diag("%d check(s) failed", failures);
    return EP_EXIT_FAIL;
  }
  ep_out("mpi ok rank=%d size=%d", rank, size);
  return EP_EXIT_OK;
}
