/* SPDX-License-Identifier: Apache-2.0 */
/* ep_pmix.c - PMIx helpers of the exitpolicy test clients. */
#include "ep_pmix.h"

#include <stdlib.h>
#include <string.h>

int ep_pmix_exit_code(pmix_status_t rc) {
  return rc == PMIX_ERR_TIMEOUT ? EP_EXIT_TIMEOUT : EP_EXIT_FAIL;
}

void ep_pmix_fail(const char *call, pmix_status_t rc) {
  ep_die(ep_pmix_exit_code(rc), "%s failed: %s (%d)", call, PMIx_Error_string(rc), rc);
}

void ep_pmix_init(pmix_proc_t *me) {
  ep_wait_begin("init");
  pmix_status_t rc = PMIx_Init(me, NULL, 0);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Init", rc);
  }
  ep_set_rank((long)me->rank);
}

void ep_pmix_finalize(void) {
  ep_wait_begin("finalize");
  pmix_status_t rc = PMIx_Finalize(NULL, 0);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Finalize", rc);
  }
}

pmix_proc_t ep_proc(const pmix_proc_t *me, pmix_rank_t rank) {
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, me->nspace, rank);
  return p;
}

bool ep_value_int(const pmix_value_t *v, long long *out) {
  switch (v->type) {
  case PMIX_INT: *out = v->data.integer; return true;
  case PMIX_INT8: *out = v->data.int8; return true;
  case PMIX_INT16: *out = v->data.int16; return true;
  case PMIX_INT32: *out = v->data.int32; return true;
  case PMIX_INT64: *out = v->data.int64; return true;
  case PMIX_UINT: *out = v->data.uint; return true;
  case PMIX_UINT8: *out = v->data.uint8; return true;
  case PMIX_UINT16: *out = v->data.uint16; return true;
  case PMIX_UINT32: *out = v->data.uint32; return true;
  case PMIX_UINT64: *out = (long long)v->data.uint64; return true;
  case PMIX_SIZE: *out = (long long)v->data.size; return true;
  case PMIX_PID: *out = v->data.pid; return true;
  case PMIX_STATUS: *out = v->data.status; return true;
  case PMIX_PROC_RANK: *out = v->data.rank; return true;
  default: return false;
  }
}

static pmix_status_t get_value(const pmix_proc_t *proc, const char *key, bool immediate,
                               pmix_value_t **val) {
  pmix_info_t info;
  bool yes = true;
  PMIX_INFO_CONSTRUCT(&info);
  PMIx_Info_load(&info, PMIX_IMMEDIATE, &yes, PMIX_BOOL);
  *val = NULL;
  ep_wait_begin(immediate ? "get-immediate" : "get");
  pmix_status_t rc = PMIx_Get(proc, key, immediate ? &info : NULL, immediate ? 1 : 0, val);
  ep_wait_end();
  PMIX_INFO_DESTRUCT(&info);
  if (rc == PMIX_SUCCESS && *val == NULL) {
    rc = PMIX_ERR_NOT_FOUND;
  }
  return rc;
}

pmix_status_t ep_get_int(const pmix_proc_t *proc, const char *key, bool immediate,
                         long long *out) {
  pmix_value_t *val = NULL;
  pmix_status_t rc = get_value(proc, key, immediate, &val);
  if (rc != PMIX_SUCCESS) {
    return rc;
  }
  if (!ep_value_int(val, out)) {
    rc = PMIX_ERR_TYPE_MISMATCH;
  }
  PMIX_VALUE_RELEASE(val);
  return rc;
}

pmix_status_t ep_get_string(const pmix_proc_t *proc, const char *key, bool immediate,
                            char **out) {
  pmix_value_t *val = NULL;
  *out = NULL;
  pmix_status_t rc = get_value(proc, key, immediate, &val);
  if (rc != PMIX_SUCCESS) {
    return rc;
  }
  if (val->type == PMIX_STRING && val->data.string != NULL) {
    *out = strdup(val->data.string);
    if (*out == NULL) {
      rc = PMIX_ERR_NOMEM;
    }
  } else {
    rc = PMIX_ERR_TYPE_MISMATCH;
  }
  PMIX_VALUE_RELEASE(val);
  return rc;
}

uint32_t ep_job_size(const pmix_proc_t *me) {
  pmix_proc_t wild = ep_proc(me, PMIX_RANK_WILDCARD);
  long long size = 0;
  pmix_status_t rc = ep_get_int(&wild, PMIX_JOB_SIZE, false, &size);
  if (rc != PMIX_SUCCESS) {
    ep_die(EP_EXIT_FAIL, "missing key %s (job size) on %s:WILDCARD: %s", PMIX_JOB_SIZE,
           me->nspace, PMIx_Error_string(rc));
  }
  if (size <= 0 || size > UINT32_MAX) {
    ep_die(EP_EXIT_FAIL, "bad job size %lld", size);
  }
  return (uint32_t)size;
}

void ep_fence(const pmix_proc_t *me, bool collect) {
  pmix_proc_t wild = ep_proc(me, PMIX_RANK_WILDCARD);
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  PMIx_Info_load(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  ep_wait_begin(collect ? "fence-data" : "fence");
  /* Without collection: a plain fence, no directives at all. */
  pmix_status_t rc = PMIx_Fence(&wild, 1, collect ? &info : NULL, collect ? 1 : 0);
  ep_wait_end();
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail(collect ? "PMIx_Fence(collect data)" : "PMIx_Fence", rc);
  }
}

/* The termination event about one process, from the progress thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static bool registered;
static pmix_status_t reg_status;
static bool victim_ended;
static pmix_proc_t g_victim;

static void regcb(pmix_status_t status, size_t refid, void *cbdata) {
  (void)refid;
  (void)cbdata;
  pthread_mutex_lock(&mu);
  reg_status = status;
  registered = true;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void handler(size_t ref, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[],
                    size_t ninfo, pmix_info_t *results, size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata) {
  (void)ref;
  (void)status;
  (void)source;
  (void)results;
  (void)nresults;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < ninfo; i++) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC &&
        info[i].value.data.proc != NULL && PMIX_CHECK_PROCID(info[i].value.data.proc, &g_victim)) {
      victim_ended = true;
    }
  }
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  if (cbfunc != NULL) {
    cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
  }
}

void ep_watch_termination(const pmix_proc_t *victim) {
  ep_cond_init(&cv);
  g_victim = *victim;
  pmix_status_t code = PMIX_EVENT_PROC_TERMINATED;
  ep_wait_begin("register");
  pmix_status_t rc = PMIx_Register_event_handler(&code, 1, NULL, 0, handler, regcb, NULL);
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("PMIx_Register_event_handler", rc);
  }
  pthread_mutex_lock(&mu);
  while (!registered) {
    pthread_cond_wait(&cv, &mu);
  }
  rc = reg_status;
  pthread_mutex_unlock(&mu);
  ep_wait_end();
  if (rc != PMIX_SUCCESS) {
    ep_pmix_fail("registering the PROC_TERMINATED handler", rc);
  }
}

void ep_wait_termination(void) {
  ep_wait_begin("event");
  pthread_mutex_lock(&mu);
  while (!victim_ended) {
    pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
  ep_wait_end();
}
