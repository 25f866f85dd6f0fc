/* SPDX-License-Identifier: Apache-2.0 */
/* ep_pmix.h - PMIx helpers of the exitpolicy test clients.
 *
 * Every helper that blocks is bounded by the watchdog (ep_wait_begin), and
 * every PMIx error it cannot handle ends the program with a diagnostic and
 * status 1 (3 for PMIX_ERR_TIMEOUT). */
#ifndef EP_PMIX_H
#define EP_PMIX_H

#include "ep_common.h"

#include <pmix.h>

/* PMIx_Init; sets the rank shown in messages. */
void ep_pmix_init(pmix_proc_t *me);
/* PMIx_Finalize (bounded). */
void ep_pmix_finalize(void);

/* Exit status for a failed PMIx call: 3 for PMIX_ERR_TIMEOUT, else 1. */
int ep_pmix_exit_code(pmix_status_t rc);
/* Report a failed PMIx call and exit (ep_pmix_exit_code). */
_Noreturn void ep_pmix_fail(const char *call, pmix_status_t rc);

/* A proc of my namespace. */
pmix_proc_t ep_proc(const pmix_proc_t *me, pmix_rank_t rank);

/* PMIx_Get of an integer value of any integer type. Returns PMIX_SUCCESS,
 * the PMIx_Get error, or PMIX_ERR_TYPE_MISMATCH. With `immediate`, the get
 * carries PMIX_IMMEDIATE: the value must be in the client's or its server's
 * store already; the server never asks its host (no direct modex).
 * (PMIX_OPTIONAL would not do: under OpenPMIx 5 it keeps the get from the
 * server too, and what a fence collected is held there, not in the client.) */
pmix_status_t ep_get_int(const pmix_proc_t *proc, const char *key, bool immediate,
                         long long *out);
/* PMIx_Get of a string value; *out is malloc'ed (free it). */
pmix_status_t ep_get_string(const pmix_proc_t *proc, const char *key, bool immediate,
                            char **out);
/* Integer value of any integer type (or pmix_status_t / pmix_rank_t).
 * Returns false for non-integers. */
bool ep_value_int(const pmix_value_t *v, long long *out);

/* The job size (PMIX_JOB_SIZE on rank WILDCARD); exits 1 if missing. */
uint32_t ep_job_size(const pmix_proc_t *me);

/* Fence over the whole namespace (rank WILDCARD), with or without data
 * collection; exits on error. */
void ep_fence(const pmix_proc_t *me, bool collect);

/* Registers a handler for PMIX_EVENT_PROC_TERMINATED that notes when
 * `victim` ended; exits on error. */
void ep_watch_termination(const pmix_proc_t *victim);
/* Waits (bounded by the watchdog) until the event about the victim came. */
void ep_wait_termination(void);

#endif
