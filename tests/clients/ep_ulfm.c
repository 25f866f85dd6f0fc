/* SPDX-License-Identifier: Apache-2.0 */
/* ep_ulfm --fail R:HOW[,R:HOW] [--mode shrink|agree] [--delay MS] [--timeout S]
 *
 * A fault-tolerant MPI program (ULFM, Open MPI 5's mpi-ext.h), written as
 * such codes are: it runs on when ranks die. Every rank: MPI_Init; dups
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN; a barrier; prints "ready rank=N".
 * Then one round per failure given: the round's victim waits --delay
 * milliseconds (default 300: the others are inside the round's allreduce)
 * and dies HOW:
 *   segv      a segmentation fault (SIGSEGV, core dumps off)
 *   exit:N    exit(N) without MPI_Finalize (exit:0 too)
 *   hang      waits, for its node to be lost around it (the caller's part)
 * while every other rank sums 1 over the communicator, resiliently: the
 * allreduce fails (MPIX_ERR_PROC_FAILED, or MPIX_ERR_REVOKED once a peer
 * revoked), the survivors agree on whether it succeeded everywhere
 * (MPIX_Comm_agree; with --mode agree each acknowledges the failures it
 * knows first, MPIX_Comm_failure_ack), and if not they revoke the
 * communicator, shrink it to the survivors (MPIX_Comm_shrink), print
 * "recovered rank=N round=K size=S t_us=T" and sum again. Each round ends with
 * "round rank=N round=K size=S sum=T"; after the last the survivors print
 * "done rank=N size=S sum=T", finalize and exit 0.
 *
 * stdout also: "fail rank=R how=HOW t_us=T" just before a failure, and
 * "failed rank=N round=K error=E" for each failed attempt. It ignores
 * SIGPIPE, as a fault-tolerant code on Open MPI 5.0's TCP transport must. */
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
#include <unistd.h>

enum { max_failures = 4 };

struct failure {
  long rank;
  enum { by_signal, by_exit, by_hanging } how;
  long code;
};

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE,
         "%s\nusage: ep_ulfm --fail R:segv|R:exit:N|R:hang[,...] [--mode shrink|agree] [--delay MS] [--timeout S]",
         why);
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
  f->code = 0;
  if (strcmp(how, "segv") == 0) {
    f->how = by_signal;
    return true;
  }
  if (strcmp(how, "hang") == 0) {
    f->how = by_hanging;
    return true;
  }
  f->how = by_exit;
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

/* Sums 1 over *comm until every member agrees it succeeded, shrinking
 * *comm to the survivors after each failure. */
static int resilient_sum(MPI_Comm *comm, int rank, int round, bool ack) {
  for (;;) {
    int one = 1, sum = 0;
    ep_wait_begin("MPI_Allreduce");
    const int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, *comm);
    ep_wait_end();
    int flag = rc == MPI_SUCCESS;
    if (rc != MPI_SUCCESS) {
      ep_out("failed rank=%d round=%d error=%s", rank, round, error_name(rc));
    }
    if (ack) {
      MPIX_Comm_failure_ack(*comm);
      ep_wait_begin("MPIX_Comm_agree");
      const int arc = MPIX_Comm_agree(*comm, &flag);
      ep_wait_end();
      ep_out("agreed rank=%d round=%d rc=%s flag=%d", rank, round, arc == MPI_SUCCESS ? "success" : error_name(arc),
             flag);
    }
    if (flag) {
      return sum;
    }
    MPIX_Comm_revoke(*comm);
    MPI_Comm smaller = MPI_COMM_NULL;
    ep_wait_begin("MPIX_Comm_shrink");
    if (MPIX_Comm_shrink(*comm, &smaller) != MPI_SUCCESS) {
      ep_die(EP_EXIT_FAIL, "MPIX_Comm_shrink failed in round %d", round);
    }
    ep_wait_end();
    MPI_Comm_free(comm);
    *comm = smaller;
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
    int size = 0;
    MPI_Comm_size(*comm, &size);
    ep_out("recovered rank=%d round=%d size=%d t_us=%lld", rank, round, size, (long long)ep_now_us());
  }
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
    switch (c) {
    case 'f':
      for (char *save = NULL, *one = strtok_r(optarg, ",", &save); one != NULL; one = strtok_r(NULL, ",", &save)) {
        if (nfailures == max_failures || !parse_failure(one, &failures[nfailures])) {
          usage("bad --fail (R:segv, R:exit:N or R:hang, at most 4, comma-separated)");
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
      if (!ep_timeout_option(optarg)) {
        usage("bad --timeout (seconds > 0)");
      }
      break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc || nfailures == 0) {
    usage("--fail is required");
  }

  /* As a fault-tolerant code over TCP must on Open MPI 5.0: its TCP BTL sends
   * with writev(), so a survivor's send on a connection a dead peer's kernel
   * reset raises SIGPIPE and kills the survivor (Open MPI 6 sends with
   * MSG_NOSIGNAL, open-mpi/ompi#11915). */
  signal(SIGPIPE, SIG_IGN);
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

  int size = 0, sum = 0;
  for (int round = 0; round < nfailures; ++round) {
    const struct failure *f = &failures[round];
    if (rank == f->rank) {
      struct timespec delay = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&delay, NULL);
      static const char *const names[] = {"segv", "exit", "hang"};
      ep_out("fail rank=%d how=%s:%ld t_us=%lld", rank, names[f->how], f->code, (long long)ep_now_us());
      if (f->how == by_signal) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        raise(SIGSEGV);
      }
      if (f->how == by_hanging) {
        for (;;) {
          pause();
        }
      }
      exit((int)f->code);
    }
    sum = resilient_sum(&comm, rank, round, agree);
    MPI_Comm_size(comm, &size);
    ep_out("round rank=%d round=%d size=%d sum=%d", rank, round, size, sum);
  }
  ep_out("done rank=%d size=%d sum=%d", rank, size, sum);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return EP_EXIT_OK;
}
