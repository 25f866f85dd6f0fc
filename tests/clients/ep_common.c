/* SPDX-License-Identifier: Apache-2.0 */
/* ep_common.c - shared helpers of the exitpolicy test clients. */
#include "ep_common.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_prog = "ep";
static volatile long g_rank = -1;
static double g_timeout = EP_DEFAULT_TIMEOUT;

/* Watchdog state, guarded by wd_mu. */
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv;
static bool wd_armed;
static struct timespec wd_deadline;
static const char *wd_what = "";
static double wd_seconds;

const char *ep_prog(void) { return g_prog; }
void ep_set_rank(long rank) { g_rank = rank; }
long ep_rank(void) { return g_rank; }
void ep_set_timeout(double seconds) { g_timeout = seconds; }
bool ep_timeout_option(const char *arg) {
  double t = 0;
  if (!ep_parse_seconds(arg, &t)) {
    return false;
  }
  ep_set_timeout(t);
  return true;
}
double ep_timeout(void) { return g_timeout; }

static void rank_str(char *buf, size_t len) {
  long r = g_rank;
  if (r < 0) {
    snprintf(buf, len, "-");
  } else {
    snprintf(buf, len, "%ld", r);
  }
}

void ep_out(const char *fmt, ...) {
  va_list ap;
  flockfile(stdout);
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
  funlockfile(stdout);
}

static void vdiag(const char *fmt, va_list ap) {
  char rank[32];
  rank_str(rank, sizeof rank);
  flockfile(stderr);
  fprintf(stderr, "%s rank=%s: ", g_prog, rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  fflush(stderr);
  funlockfile(stderr);
}

void ep_diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(fmt, ap);
  va_end(ap);
}

void ep_die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdiag(fmt, ap);
  va_end(ap);
  /* _exit: no atexit handlers or library destructors that could block. */
  fflush(NULL);
  _exit(code);
}

bool ep_parse_seconds(const char *s, double *out) {
  if (s == NULL || *s == '\0') {
    return false;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0.0 || v > 1e6) {
    return false;
  }
  *out = v;
  return true;
}

bool ep_parse_long(const char *s, long min, long max, long *out) {
  if (s == NULL || *s == '\0') {
    return false;
  }
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
    return false;
  }
  *out = v;
  return true;
}

int64_t ep_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void ep_deadline(double seconds, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  double whole = floor(seconds);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((seconds - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

void ep_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
}

static bool passed(const struct timespec *deadline) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > deadline->tv_sec ||
         (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static void *watchdog(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  for (;;) {
    if (!wd_armed) {
      pthread_cond_wait(&wd_cv, &wd_mu);
      continue;
    }
    if (!passed(&wd_deadline)) {
      pthread_cond_timedwait(&wd_cv, &wd_mu, &wd_deadline);
      continue;
    }
    /* Fire: the step is stuck. Report and end the process at once (no
     * finalize, no atexit handlers: the stuck library may hold locks). */
    char rank[32];
    rank_str(rank, sizeof rank);
    ep_out("timeout rank=%s phase=%s", rank, wd_what);
    ep_diag("timeout: no progress in %s after %g s, exiting with status %d", wd_what,
            wd_seconds, EP_EXIT_TIMEOUT);
    _exit(EP_EXIT_TIMEOUT);
  }
  return NULL;
}

void ep_setup(const char *prog) {
  g_prog = prog;
  ep_cond_init(&wd_cv);
  /* The watchdog takes no signals: they go to the program's own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, NULL, watchdog, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ep_die(EP_EXIT_FAIL, "cannot start the watchdog thread: %s", strerror(rc));
  }
  pthread_detach(t);
}

void ep_wait_begin(const char *what) {
  pthread_mutex_lock(&wd_mu);
  wd_what = what;
  wd_seconds = g_timeout;
  ep_deadline(g_timeout, &wd_deadline);
  wd_armed = true;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void ep_wait_end(void) {
  pthread_mutex_lock(&wd_mu);
  wd_armed = false;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}
