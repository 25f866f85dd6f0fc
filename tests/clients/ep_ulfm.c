/* ep_ulfm --fail R:HOW[,R:HOW] [--mode shrink|agree] [--delay MS] [--timeout S]
 *
 * A fault-tolerant MPI program (ULFM, Open MPI 5's mpi-ext.h), as such codes
 * are written: it runs on when ranks die. Every rank: MPI_Init; dups
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN; a barrier; prints "ready rank=N".
 * Then one round per failure given: the round's victim waits --delay
 * milliseconds (default 300: the others are inside the round's barrier)
 * and dies HOW:
 *   segv      a segmentation fault (SIGSEGV, core dumps off)
 *   exit:N    exit(N) without MPI_Finalize (exit:0 too)
 * while every other rank's barrier fails (MPIX_ERR_PROC_FAILED, or
 * MPIX_ERR_REVOKED once a peer revoked) and it recovers:
 *   shrink    revokes the communicator and shrinks it to the survivors
 *   agree     acknowledges the failure, agrees with the survivors
 *             (MPIX_Comm_agree), then shrinks
 * and prints "recovered rank=N round=K size=S". After the last round the
 * survivors sum 1 over the shrunk communicator, print
 * "done rank=N size=S sum=T", finalize and exit 0. A barrier that succeeds
 * although its victim died prints "passed rank=N round=K" (a bug).
 *
 * stdout also: "fail rank=R how=HOW t_us=T" just before a failure. */
#include "ep_common.h"

#include <mpi.h>
/* after mpi.h, which it needs */
#include <mpi-ext.h>

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { max_failures = 4 };

struct failure {
  long rank;
  bool segv;
  long code;
};

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE,
         "%s\nusage: ep_ulfm --fail R:segv|R:exit:N[,...] [--mode shrink|agree] [--delay MS] [--timeout S]", why);
}

static bool parse_failure(char *text, struct failure *f) {
  char *colon = strchr(text, ':');
  if (colon == NULL) {
    return false;
  }
  *colon = '\0';
  if (!ep_parse_long(text, 0, INT_MAX, &f->rank)) {
    return false;
  }
  const char *how = colon + 1;
  if (strcmp(how, "segv") == 0) {
    f->segv = true;
    return true;
  }
  f->segv = false;
  return strncmp(how, "exit:", 5) == 0 && ep_parse_long(how + 5, 0, 255, &f->code);
}

static const char *error_name(int rc) {
  int cls = 0;
  MPI_Error_class(rc, &cls);
  if (cls == MPIX_ERR_PROC_FAILED) {
    return "MPIX_ERR_PROC_FAILED";
  }
  if (cls == MPIX_ERR_REVOKED) {
    return "MPIX_ERR_REVOKED";
  }
  return "another error";
}

int main(int argc, char **argv) {
  ep_setup("ep_ulfm");
  struct failure failures[max_failures];
  int nfailures = 0;
  long delay_ms = 300;
  bool agree = false;
  static const struct option opts[] = {
      {"fail", required_argument, NULL, 'f'},   {"mode", required_argument, NULL, 'm'},
      {"delay", required_argument, NULL, 'd'},  {"timeout", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    double t = 0;
    switch (c) {
    case 'f':
      for (char *save = NULL, *one = strtok_r(optarg, ",", &save); one != NULL; one = strtok_r(NULL, ",", &save)) {
        if (nfailures == max_failures || !parse_failure(one, &failures[nfailures])) {
          usage("bad --fail (R:segv or R:exit:N, at most 4, comma-separated)");
        }
        ++nfailures;
      }
      break;
    case 'm':
      if (strcmp(optarg, "shrink") != 0 && strcmp(optarg, "agree") != 0) {
        usage("bad --mode (shrink or agree)");
      }
      agree = strcmp(optarg, "agree") == 0;
      break;
    case 'd':
      if (!ep_parse_long(optarg, 0, 600000, &delay_ms)) {
        usage("bad --delay (milliseconds)");
      }
      break;
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
  if (optind != argc || nfailures == 0) {
    usage("--fail is required");
  }

  ep_wait_begin("MPI_Init");
  MPI_Init(&argc, &argv);
  ep_wait_end();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ep_set_rank(rank);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  ep_wait_begin("MPI_Barrier (ready)");
  if (MPI_Barrier(comm) != MPI_SUCCESS) {
    ep_die(EP_EXIT_FAIL, "the first barrier failed");
  }
  ep_wait_end();
  ep_out("ready rank=%d", rank);

  for (int round = 0; round < nfailures; ++round) {
    const struct failure *f = &failures[round];
    if (rank == f->rank) {
      struct timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&pause, NULL);
      ep_out("fail rank=%d how=%s:%ld t_us=%lld", rank, f->segv ? "segv" : "exit", f->segv ? 0L : f->code,
             (long long)ep_now_us());
      if (f->segv) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        raise(SIGSEGV);
      }
      exit((int)f->code);
    }
    ep_wait_begin("MPI_Barrier (a round)");
    const int rc = MPI_Barrier(comm);
    ep_wait_end();
    if (rc == MPI_SUCCESS) {
      ep_out("passed rank=%d round=%d", rank, round);
      continue;
    }
    ep_out("failed rank=%d round=%d error=%s", rank, round, error_name(rc));
    if (agree) {
      MPIX_Comm_failure_ack(comm);
      int flag = 1;
      ep_wait_begin("MPIX_Comm_agree");
      const int arc = MPIX_Comm_agree(comm, &flag);
      ep_wait_end();
      ep_out("agreed rank=%d round=%d rc=%s flag=%d", rank, round, arc == MPI_SUCCESS ? "success" : error_name(arc),
             flag);
    }
    MPIX_Comm_revoke(comm);
    MPI_Comm smaller = MPI_COMM_NULL;
    ep_wait_begin("MPIX_Comm_shrink");
    if (MPIX_Comm_shrink(comm, &smaller) != MPI_SUCCESS) {
      ep_die(EP_EXIT_FAIL, "MPIX_Comm_shrink failed in round %d", round);
    }
    ep_wait_end();
    MPI_Comm_free(&comm);
    comm = smaller;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int size = 0;
    MPI_Comm_size(comm, &size);
    ep_out("recovered rank=%d round=%d size=%d", rank, round, size);
  }

  int one = 1, sum = 0, size = 0;
  MPI_Comm_size(comm, &size);
  ep_wait_begin("MPI_Allreduce");
  if (MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS) {
    ep_die(EP_EXIT_FAIL, "the survivors' allreduce failed");
  }
  ep_wait_end();
  ep_out("done rank=%d size=%d sum=%d", rank, size, sum);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return EP_EXIT_OK;
}
