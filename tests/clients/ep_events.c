/* SPDX-License-Identifier: Apache-2.0 */
/* ep_events --victim R (--exit CODE | --signal SIG | --hang) [--delay S] [--expect K]
 *           [--timeout S] [--no-finalize-victim | --finalize-victim] [--fence-survivors]
 *           [--register all|default|aborted|anchor] [--no-fence]
 *
 * Every rank registers one event handler per failure code (--register all,
 * the default), or one default (code-less) handler as Open MPI 4.1 does
 * (--register default), or a handler for PMIX_ERR_PROC_ABORTED alone as
 * OpenPMIx's examples/fault.c does (--register aborted), or one for
 * PMIX_MAX_ERR_CONSTANT alone, as exitpolicy's event anchor does
 * (pmix_server/event_anchor.hpp: OpenPMIx 4.2 and 5.0 keep a client's
 * default handler only once some client registered that code; such a
 * rank hears no failure itself) (--register anchor); it
 * waits for the registrations to complete, and fences, so that every handler
 * is in place before anyone dies (with --no-fence it does not: the victim is
 * then a task that never uses PMIx and may be gone before the others start,
 * and the survivors only listen). Then
 *   the victim (rank R) waits --delay seconds (default 0; every rank prints
 *   "ready rank=R" first), prints "victim rank=R t_us=T" and either _exit()s with
 *   CODE, raises SIG (default action, e.g. SIGSEGV -> 139), or with --hang
 *   waits to be killed from outside (say, with its whole node; after the
 *   timeout it exits 3). By default it does not call PMIx_Finalize first;
 *   --finalize-victim makes it finalize before it dies (--no-finalize-victim
 *   states the default explicitly).
 *   every survivor prints one line per event received and waits until it has
 *   received K events (default 2) about the victim, or the timeout. With
 *   --fence-survivors it then fences with every rank that no event named
 *   (the survivors on every node) and prints "survivor fence rank=R n=N"
 *   (N = participants). It finalizes, prints "survivor done rank=R events=E"
 *   (E = events about the victim) and exits 0 if E >= K, else 3. With K = 0
 *   it listens for the whole timeout and exits 0.
 *
 * Event handlers run on the PMIx progress thread: they only copy the event
 * into a queue for the main thread (which prints) and complete it
 * (PMIX_EVENT_ACTION_COMPLETE).
 *
 * stdout:
 *   victim rank=R t_us=T
 *   event rank=<me> code=<PMIx_Error_string, blanks as '_'> status=<int> affected=<ns>:<rank>|-
 *         source=<ns>:<rank>|<ns>:wildcard|- (the process the event names as its source)
 *         exit_code=<int>|- term_status=<int>|- host=<PMIX_HOSTNAME>|- t_us=<handler entry, CLOCK_REALTIME us>
 *   survivor fence rank=R n=N
 *   survivor done rank=R events=E */
#include "ep_pmix.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Noreturn void usage(const char *why) {
  ep_die(EP_EXIT_USAGE,
         "%s\nusage: ep_events --victim R (--exit CODE | --signal SIG | --hang) [--delay S] "
         "[--expect K] [--timeout S] [--no-finalize-victim | --finalize-victim] [--fence-survivors] "
         "[--register all|default|aborted|anchor] [--no-fence]",
         why);
}

/* One registration per code. */
struct reg {
  pmix_status_t code;
  const char *name;
  bool done;
  pmix_status_t status;
  size_t ref;
};

#define REG(c) {c, #c, false, PMIX_SUCCESS, 0}
static struct reg regs[] = {
#ifdef PMIX_EVENT_PROC_TERMINATED
    REG(PMIX_EVENT_PROC_TERMINATED),
#endif
#ifdef PMIX_ERR_PROC_ABORTED_BY_SIG
    REG(PMIX_ERR_PROC_ABORTED_BY_SIG),
#endif
#ifdef PMIX_ERR_EXIT_NONZERO_TERM
    REG(PMIX_ERR_EXIT_NONZERO_TERM),
#endif
#ifdef PMIX_ERR_PROC_REQUESTED_ABORT
    REG(PMIX_ERR_PROC_REQUESTED_ABORT),
#endif
#ifdef PMIX_ERR_PROC_TERM_WO_SYNC
    REG(PMIX_ERR_PROC_TERM_WO_SYNC),
#endif
#ifdef PMIX_ERR_PROC_ABORTED /* pmix_deprecated.h in 4.2.2 */
    REG(PMIX_ERR_PROC_ABORTED),
#endif
#ifdef PMIX_EVENT_NODE_DOWN
    REG(PMIX_EVENT_NODE_DOWN),
#endif
};
#define NREGS (sizeof regs / sizeof regs[0])
/* --register default: one code-less (default) handler, as Open MPI 4.1 has. */
static struct reg default_reg = {0, "default", false, PMIX_SUCCESS, 0};
/* --register anchor: PMIX_MAX_ERR_CONSTANT, which lives in OpenPMIx's
 * private pmix_globals.h (INT_MIN in 4.2 and 5.0). */
static struct reg anchor_reg = {INT_MIN, "PMIX_MAX_ERR_CONSTANT", false, PMIX_SUCCESS, 0};

/* An event as the handler saw it. */
struct ev {
  pmix_status_t status;
  char affected[1024];
  char source[PMIX_MAX_NSLEN + 32];
  bool about_victim;
  bool has_exit;
  long long exit_code;
  bool has_term;
  long long term_status;
  char host[64];
  int64_t t_us;
};

#define MAX_EVENTS 256
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static size_t nregs_done;
static struct ev events[MAX_EVENTS];
static size_t nevents;  /* queued */
static size_t ndropped; /* queue full */
static size_t nabout;   /* queued events about the victim */

static pmix_proc_t g_victim;
/* Ranks any event named as affected (the survivors' fence leaves them out). */
static uint32_t g_size;
static bool *g_affected;

static void regcb(pmix_status_t status, size_t refid, void *cbdata) {
  struct reg *r = cbdata;
  pthread_mutex_lock(&mu);
  r->status = status;
  r->ref = refid;
  r->done = true;
  nregs_done++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Append "<nspace>:<rank>" to the comma-separated list in buf (dropped if it
 * does not fit). */
static void append_proc(char *buf, size_t len, const pmix_proc_t *p) {
  if (p->rank != PMIX_RANK_WILDCARD && p->rank < g_size && g_affected != NULL) {
    g_affected[p->rank] = true; /* under mu: the caller holds it */
  }
  char one[PMIX_MAX_NSLEN + 32];
  if (p->rank == PMIX_RANK_WILDCARD) {
    snprintf(one, sizeof one, "%.*s:wildcard", PMIX_MAX_NSLEN, p->nspace);
  } else {
    snprintf(one, sizeof one, "%.*s:%u", PMIX_MAX_NSLEN, p->nspace, p->rank);
  }
  size_t used = strlen(buf), n = strlen(one);
  if (used + n + 2 > len) {
    return;
  }
  if (used > 0) {
    buf[used++] = ',';
  }
  memcpy(buf + used, one, n + 1);
}

static void handler(size_t ref, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata) {
  (void)ref;
  (void)results;
  (void)nresults;
  struct ev e;
  memset(&e, 0, sizeof e);
  e.t_us = ep_now_us();
  e.status = status;
  strcpy(e.source, "-");
  if (source != NULL) {
    if (source->rank == PMIX_RANK_WILDCARD) {
      snprintf(e.source, sizeof e.source, "%.*s:wildcard", PMIX_MAX_NSLEN, source->nspace);
    } else {
      snprintf(e.source, sizeof e.source, "%.*s:%u", PMIX_MAX_NSLEN, source->nspace, source->rank);
    }
    for (char *c = e.source; *c != '\0'; c++) {
      if (!isgraph((unsigned char)*c)) {
        *c = '?'; /* one token, whatever a source gone bad held */
      }
    }
  }
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < ninfo; i++) {
    const pmix_info_t *in = &info[i];
    if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROC) && in->value.type == PMIX_PROC &&
        in->value.data.proc != NULL) {
      append_proc(e.affected, sizeof e.affected, in->value.data.proc);
      if (PMIX_CHECK_PROCID(in->value.data.proc, &g_victim)) {
        e.about_victim = true;
      }
    } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROCS) &&
               in->value.type == PMIX_DATA_ARRAY && in->value.data.darray != NULL &&
               in->value.data.darray->type == PMIX_PROC) {
      const pmix_proc_t *procs = in->value.data.darray->array;
      for (size_t k = 0; k < in->value.data.darray->size; k++) {
        append_proc(e.affected, sizeof e.affected, &procs[k]);
        if (PMIX_CHECK_PROCID(&procs[k], &g_victim)) {
          e.about_victim = true;
        }
      }
    } else if (PMIX_CHECK_KEY(in, PMIX_EXIT_CODE)) {
      e.has_exit = ep_value_int(&in->value, &e.exit_code);
    } else if (PMIX_CHECK_KEY(in, PMIX_PROC_TERM_STATUS)) {
      e.has_term = ep_value_int(&in->value, &e.term_status);
    } else if (PMIX_CHECK_KEY(in, PMIX_HOSTNAME) && in->value.type == PMIX_STRING &&
               in->value.data.string != NULL) {
      snprintf(e.host, sizeof e.host, "%s", in->value.data.string);
    }
  }
  if (e.affected[0] == '\0') {
    strcpy(e.affected, "-");
  }
  if (e.host[0] == '\0') {
    strcpy(e.host, "-");
  }

  if (nevents < MAX_EVENTS) {
    events[nevents++] = e;
    if (e.about_victim) {
      nabout++;
    }
  } else {
    ndropped++;
  }
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);

  if (cbfunc != NULL) {
    cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
  }
}

/* PMIx_Error_string names contain spaces ("PROC TERMINATED"): print them
 * with '_' so that every field stays one whitespace-free token. */
static void code_name(pmix_status_t code, char *buf, size_t len) {
  snprintf(buf, len, "%s", PMIx_Error_string(code));
  for (char *p = buf; *p != '\0'; p++) {
    if (*p == ' ' || *p == '\t' || *p == '=') {
      *p = '_';
    }
  }
}

static void print_event(uint32_t me, const struct ev *e) {
  char exit_code[32] = "-", term[32] = "-", name[128];
  code_name(e->status, name, sizeof name);
  if (e->has_exit) {
    snprintf(exit_code, sizeof exit_code, "%lld", e->exit_code);
  }
  if (e->has_term) {
    snprintf(term, sizeof term, "%lld", e->term_status);
  }
  ep_out("event rank=%u code=%s status=%d affected=%s source=%s exit_code=%s term_status=%s host=%s t_us=%lld",
         me, name, e->status, e->affected, e->source, exit_code, term, e->host, (long long)e->t_us);
}

static _Noreturn void die_as_victim(uint32_t me, bool finalize, long exit_code, long sig, bool hang) {
  if (finalize) {
    ep_pmix_finalize();
  }
  ep_out("victim rank=%u t_us=%lld", me, (long long)ep_now_us());
  fflush(NULL);
  if (hang) {
    struct timespec deadline;
    ep_deadline(ep_timeout(), &deadline);
    pthread_mutex_lock(&mu);
    while (pthread_cond_timedwait(&cv, &mu, &deadline) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&mu);
    ep_diag("--hang: not killed within %g s", ep_timeout());
    _exit(EP_EXIT_TIMEOUT);
  }
  if (sig <= 0) {
    _exit((int)exit_code);
  }
  signal((int)sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, (int)sig);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  raise((int)sig);
  ep_die(EP_EXIT_FAIL, "still alive after raising signal %ld (its default action is not to "
                       "terminate?)",
         sig);
}

int main(int argc, char **argv) {
  ep_setup("ep_events");
  long victim = -1, exit_code = -1, sig = -1, expect = 2;
  bool finalize_victim = false, hang = false, fence_survivors = false, no_fence = false;
  const char *which = "all";
  double delay = 0;
  static const struct option opts[] = {
      {"victim", required_argument, NULL, 'v'},
      {"exit", required_argument, NULL, 'x'},
      {"signal", required_argument, NULL, 's'},
      {"expect", required_argument, NULL, 'k'},
      {"timeout", required_argument, NULL, 't'},
      {"no-finalize-victim", no_argument, NULL, 'n'},
      {"finalize-victim", no_argument, NULL, 'f'},
      {"hang", no_argument, NULL, 'H'},
      {"delay", required_argument, NULL, 'd'},
      {"fence-survivors", no_argument, NULL, 'F'},
      {"register", required_argument, NULL, 'r'},
      {"no-fence", no_argument, NULL, 'N'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 'v':
      if (!ep_parse_long(optarg, 0, INT_MAX, &victim)) {
        usage("bad --victim (a rank >= 0)");
      }
      break;
    case 'x':
      if (!ep_parse_long(optarg, 0, 255, &exit_code)) {
        usage("bad --exit (0..255)");
      }
      break;
    case 's':
      if (!ep_parse_long(optarg, 1, SIGRTMAX, &sig) || sig == SIGSTOP || sig == SIGTSTP ||
          sig == SIGTTIN || sig == SIGTTOU) {
        usage("bad --signal (a signal number; not a stop signal)");
      }
      break;
    case 'k':
      if (!ep_parse_long(optarg, 0, 1000, &expect)) {
        usage("bad --expect (0..1000)");
      }
      break;
    case 't':
      if (!ep_timeout_option(optarg)) {
        usage("bad --timeout (seconds > 0)");
      }
      break;
    case 'n': finalize_victim = false; break;
    case 'f': finalize_victim = true; break;
    case 'H': hang = true; break;
    case 'd':
      if (!ep_parse_seconds(optarg, &delay)) {
        usage("bad --delay (seconds > 0)");
      }
      break;
    case 'F': fence_survivors = true; break;
    case 'N': no_fence = true; break;
    case 'r':
      if (strcmp(optarg, "all") != 0 && strcmp(optarg, "default") != 0 && strcmp(optarg, "aborted") != 0 &&
          strcmp(optarg, "anchor") != 0) {
        usage("bad --register (all, default, aborted or anchor)");
      }
      which = optarg;
      break;
    case 'h': usage("help");
    default: usage("bad option");
    }
  }
  if (optind != argc) {
    usage("unexpected argument");
  }
  if (victim < 0) {
    usage("--victim is required");
  }
  if ((exit_code >= 0) + (sig > 0) + hang != 1) {
    usage("give exactly one of --exit, --signal and --hang");
  }
  ep_cond_init(&cv);

  pmix_proc_t me;
  ep_pmix_init(&me);
  uint32_t size = ep_job_size(&me);
  if ((unsigned long)victim >= size) {
    ep_diag("--victim %ld is not a rank of this job (size %u)", victim, size);
    ep_pmix_finalize();
    return EP_EXIT_USAGE;
  }
  g_victim = ep_proc(&me, (pmix_rank_t)victim);
  g_affected = calloc(size, sizeof *g_affected);
  if (g_affected == NULL) {
    ep_die(EP_EXIT_FAIL, "out of memory");
  }
  pthread_mutex_lock(&mu);
  g_size = size;
  pthread_mutex_unlock(&mu);

  /* The registrations --register asks for: one per code (all), one
   * code-less default handler, PMIX_ERR_PROC_ABORTED alone (what
   * OpenPMIx's examples/fault.c registers), or PMIX_MAX_ERR_CONSTANT alone
   * (the event anchor's). */
  struct reg *chosen[NREGS + 1];
  size_t nchosen = 0;
  for (size_t i = 0; i < NREGS; i++) {
    if (strcmp(which, "all") == 0 ||
        (strcmp(which, "aborted") == 0 && strcmp(regs[i].name, "PMIX_ERR_PROC_ABORTED") == 0)) {
      chosen[nchosen++] = &regs[i];
    }
  }
  if (strcmp(which, "default") == 0) {
    chosen[nchosen++] = &default_reg;
  }
  if (strcmp(which, "anchor") == 0) {
    chosen[nchosen++] = &anchor_reg;
  }
  if (nchosen == 0) {
    ep_die(EP_EXIT_USAGE, "--register %s: no such code in this PMIx", which);
  }
  /* Non-blocking; then wait for all of them. The library reads each
   * registration's code and info on its own thread after the call has
   * returned: they live until every callback came. */
  ep_wait_begin("register");
  pmix_info_t infos[NREGS + 1];
  pmix_status_t codes[NREGS + 1];
  for (size_t i = 0; i < nchosen; i++) {
    char name[64];
    snprintf(name, sizeof name, "ep_events:%s", chosen[i]->name);
    PMIX_INFO_CONSTRUCT(&infos[i]);
    PMIx_Info_load(&infos[i], PMIX_EVENT_HDLR_NAME, name, PMIX_STRING);
    codes[i] = chosen[i]->code;
    bool is_default = chosen[i] == &default_reg;
    pmix_status_t rc = PMIx_Register_event_handler(is_default ? NULL : &codes[i], is_default ? 0 : 1, &infos[i],
                                                   1, handler, regcb, chosen[i]);
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail(chosen[i]->name, rc);
    }
  }
  pthread_mutex_lock(&mu);
  while (nregs_done < nchosen) {
    pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
  for (size_t i = 0; i < nchosen; i++) {
    PMIX_INFO_DESTRUCT(&infos[i]);
  }
  ep_wait_end();
  int failed = 0;
  for (size_t i = 0; i < nchosen; i++) {
    if (chosen[i]->status != PMIX_SUCCESS) {
      ep_diag("registration of a handler for %s (%d) failed: %s", chosen[i]->name, chosen[i]->code,
              PMIx_Error_string(chosen[i]->status));
      failed++;
    }
  }
  if (failed > 0) {
    return EP_EXIT_FAIL;
  }

  if (!no_fence) {
    ep_fence(&me, false);
  }

  if (delay > 0) {
    ep_out("ready rank=%u", me.rank);
    fflush(NULL);
  }
  if ((long)me.rank == victim) {
    if (delay > 0) {
      struct timespec d = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
      while (nanosleep(&d, &d) != 0 && errno == EINTR) {
      }
    }
    die_as_victim(me.rank, finalize_victim, exit_code, sig, hang);
  }

  /* Survivor: print events as they come, until K about the victim or the
   * timeout. */
  struct timespec deadline;
  ep_deadline(ep_timeout(), &deadline);
  size_t printed = 0;
  bool timed_out = false;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (printed < nevents) {
      struct ev e = events[printed++];
      pthread_mutex_unlock(&mu);
      print_event(me.rank, &e);
      pthread_mutex_lock(&mu);
    }
    if (expect > 0 && nabout >= (size_t)expect) {
      break;
    }
    if (timed_out) {
      break;
    }
    if (pthread_cond_timedwait(&cv, &mu, &deadline) == ETIMEDOUT) {
      timed_out = true; /* print what came meanwhile, then stop */
    }
  }
  size_t about = nabout, dropped = ndropped;
  pthread_mutex_unlock(&mu);

  if (dropped > 0) {
    ep_diag("%zu event(s) dropped (queue full)", dropped);
  }
  if (expect > 0 && about < (size_t)expect) {
    ep_diag("timeout: %zu of %ld event(s) about rank %ld within %g s", about, expect, victim,
            ep_timeout());
  }
  if (fence_survivors) {
    /* Everyone no event named: the same set on every survivor once each has
     * heard of every loss (the expected count says when). */
    pmix_proc_t *procs = calloc(size, sizeof *procs);
    size_t n = 0;
    if (procs == NULL) {
      ep_die(EP_EXIT_FAIL, "out of memory");
    }
    pthread_mutex_lock(&mu);
    for (uint32_t r = 0; r < size; r++) {
      if (!g_affected[r]) {
        procs[n++] = ep_proc(&me, r);
      }
    }
    pthread_mutex_unlock(&mu);
    ep_wait_begin("survivors' fence");
    pmix_status_t rc = PMIx_Fence(procs, n, NULL, 0);
    ep_wait_end();
    free(procs);
    if (rc != PMIX_SUCCESS) {
      ep_pmix_fail("PMIx_Fence(survivors)", rc);
    }
    ep_out("survivor fence rank=%u n=%zu", me.rank, n);
  }
  ep_pmix_finalize();
  ep_out("survivor done rank=%u events=%zu", me.rank, about);
  return about >= (size_t)expect ? EP_EXIT_OK : EP_EXIT_TIMEOUT;
}
