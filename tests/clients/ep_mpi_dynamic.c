/* SPDX-License-Identifier: Apache-2.0 */
/* ep_mpi_dynamic names|connect|session [--timeout S]
 *
 * names:   MPI_Init; rank 0 publishes the service "ep.names" at a port of
 *          its own making (MPI_Publish_name: no MPI_Open_port, so any
 *          transport will do); after a barrier every other rank looks it up
 *          (checked); after another rank 0 unpublishes it, and after a third
 *          every other rank's lookup must fail. MPI_Finalize.
 * connect: MPI_Init; the job splits into two halves (ranks below N/2, and
 *          the rest). The first half's rank 0 opens a port and publishes it
 *          (MPI_Publish_name "ep.dynamic"); after a barrier the second
 *          half's rank 0 looks it up; the first half accepts, the second
 *          connects (MPI_Comm_accept / MPI_Comm_connect on the halves'
 *          communicators). Over the intercommunicator an allreduce sums the
 *          other half's ranks (checked), then MPI_Comm_disconnect and
 *          MPI_Finalize.
 * session: no MPI_Init: MPI_Session_init, MPI_Group_from_session_pset of
 *          "mpi://WORLD", MPI_Comm_create_from_group, an allreduce of the
 *          ranks (checked), MPI_Session_finalize (MPI 4's sessions, and
 *          Open MPI 5's; where the MPI has none, prints "session
 *          unsupported" and exits 77).
 *
 * stdout: names ok rank=R size=N
 *         connect ok rank=R size=N remote=M sum=S
 *         session ok rank=R size=N */
#include "ep_common.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE, "%s\nusage: ep_mpi_dynamic names|connect|session [--timeout S]", why);
}

static void check_mpi(int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ep_die(EP_EXIT_FAIL, "%s failed: %s", call, msg);
  }
}

/* Runs `call` under the watchdog, named `what`. */
#define WAIT(what, call)           \
  do {                             \
    ep_wait_begin(what);           \
    check_mpi((call), what);       \
    ep_wait_end();                 \
  } while (0)

static int names(int argc, char **argv) {
  WAIT("MPI_Init", MPI_Init(&argc, &argv));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ep_set_rank(rank);
  char port[MPI_MAX_PORT_NAME] = "ep-port-of-rank-0";
  if (rank == 0) {
    WAIT("MPI_Publish_name", MPI_Publish_name("ep.names", MPI_INFO_NULL, port));
  }
  WAIT("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
  int failures = 0;
  if (rank != 0) {
    char found[MPI_MAX_PORT_NAME] = "";
    WAIT("MPI_Lookup_name", MPI_Lookup_name("ep.names", MPI_INFO_NULL, found));
    if (strcmp(found, port) != 0) {
      ep_diag("MPI_Lookup_name found \"%s\", expected \"%s\"", found, port);
      failures++;
    }
  }
  WAIT("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    WAIT("MPI_Unpublish_name", MPI_Unpublish_name("ep.names", MPI_INFO_NULL, port));
  }
  WAIT("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
  if (rank != 0) {
    char found[MPI_MAX_PORT_NAME] = "";
    ep_wait_begin("MPI_Lookup_name (unpublished)");
    const int rc = MPI_Lookup_name("ep.names", MPI_INFO_NULL, found);
    ep_wait_end();
    if (rc == MPI_SUCCESS) {
      ep_diag("MPI_Lookup_name found \"%s\" after MPI_Unpublish_name", found);
      failures++;
    }
  }
  if (failures == 0) {
    ep_out("names ok rank=%d size=%d", rank, size);
  }
  WAIT("MPI_Finalize", MPI_Finalize());
  return failures == 0 ? EP_EXIT_OK : EP_EXIT_FAIL;
}

static int connect_halves(int argc, char **argv) {
  WAIT("MPI_Init", MPI_Init(&argc, &argv));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ep_set_rank(rank);
  if (size < 2) {
    ep_die(EP_EXIT_USAGE, "connect needs 2 ranks or more (size %d)", size);
  }
  const int half = size / 2;
  const bool first = rank < half;
  MPI_Comm mine = MPI_COMM_NULL;
  WAIT("MPI_Comm_split", MPI_Comm_split(MPI_COMM_WORLD, first ? 0 : 1, rank, &mine));
  MPI_Comm_set_errhandler(mine, MPI_ERRORS_RETURN);
  char port[MPI_MAX_PORT_NAME] = "";
  if (rank == 0) {
    WAIT("MPI_Open_port", MPI_Open_port(MPI_INFO_NULL, port));
    WAIT("MPI_Publish_name", MPI_Publish_name("ep.dynamic", MPI_INFO_NULL, port));
  }
  WAIT("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
  if (rank == half) {
    WAIT("MPI_Lookup_name", MPI_Lookup_name("ep.dynamic", MPI_INFO_NULL, port));
  }
  MPI_Comm inter = MPI_COMM_NULL;
  if (first) {
    WAIT("MPI_Comm_accept", MPI_Comm_accept(port, MPI_INFO_NULL, 0, mine, &inter));
  } else {
    WAIT("MPI_Comm_connect", MPI_Comm_connect(port, MPI_INFO_NULL, 0, mine, &inter));
  }
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  int remote = 0;
  MPI_Comm_remote_size(inter, &remote);
  long long me = rank, sum = -1;
  WAIT("MPI_Allreduce", MPI_Allreduce(&me, &sum, 1, MPI_LONG_LONG, MPI_SUM, inter));
  /* The other half's ranks: [half, size) for the first, [0, half) for the second. */
  const long long lo = first ? half : 0, hi = first ? size : half;
  const long long want = (hi * (hi - 1) - lo * (lo - 1)) / 2;
  int failures = 0;
  if (remote != (first ? size - half : half) || sum != want) {
    ep_diag("the other half: %d ranks summing to %lld, expected %lld summing to %lld", remote, sum,
            hi - lo, want);
    failures++;
  }
  WAIT("MPI_Comm_disconnect", MPI_Comm_disconnect(&inter));
  if (rank == 0) {
    WAIT("MPI_Unpublish_name", MPI_Unpublish_name("ep.dynamic", MPI_INFO_NULL, port));
    WAIT("MPI_Close_port", MPI_Close_port(port));
  }
  MPI_Comm_free(&mine);
  if (failures == 0) {
    ep_out("connect ok rank=%d size=%d remote=%d sum=%lld", rank, size, remote, sum);
  }
  WAIT("MPI_Finalize", MPI_Finalize());
  return failures == 0 ? EP_EXIT_OK : EP_EXIT_FAIL;
}

static int session_world(void) {
/* Open MPI 5 has sessions and still says MPI 3.1. */
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
  MPI_Session session = MPI_SESSION_NULL;
  WAIT("MPI_Session_init", MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
  MPI_Group world = MPI_GROUP_NULL;
  WAIT("MPI_Group_from_session_pset", MPI_Group_from_session_pset(session, "mpi://WORLD", &world));
  MPI_Comm comm = MPI_COMM_NULL;
  WAIT("MPI_Comm_create_from_group",
       MPI_Comm_create_from_group(world, "ep.session", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm));
  int rank = -1, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  ep_set_rank(rank);
  long long me = rank, sum = -1;
  WAIT("MPI_Allreduce", MPI_Allreduce(&me, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm));
  const long long want = (long long)size * (size - 1) / 2;
  if (sum != want) {
    ep_die(EP_EXIT_FAIL, "MPI_Allreduce sum of ranks is %lld, expected %lld", sum, want);
  }
  ep_out("session ok rank=%d size=%d", rank, size);
  WAIT("MPI_Comm_free", MPI_Comm_free(&comm));
  WAIT("MPI_Group_free", MPI_Group_free(&world));
  WAIT("MPI_Session_finalize", MPI_Session_finalize(&session));
  return EP_EXIT_OK;
#else
  ep_out("session unsupported");
  return 77;
#endif
}

int main(int argc, char **argv) {
  ep_setup("ep_mpi_dynamic");
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
  if (optind + 1 != argc) {
    usage("say names, connect or session");
  }
  if (strcmp(argv[optind], "names") == 0) {
    return names(argc, argv);
  }
  if (strcmp(argv[optind], "connect") == 0) {
    return connect_halves(argc, argv);
  }
  if (strcmp(argv[optind], "session") == 0) {
    return session_world();
  }
  usage("say names, connect or session");
}
