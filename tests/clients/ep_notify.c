/* SPDX-License-Identifier: Apache-2.0 */
/* ep_notify [--timeout S]: rank 0 raises an application event
 * (PMIx_Notify_event, a code of its own, range namespace) with one info
 * "ep.note" = "from-<rank>"; every other rank, on every node, waits for it.
 *
 * stdout: "notified rank=R" (rank 0), "got rank=R code=C source=NS:R note=V"
 * (the others), then "notify ok rank=R". Exit 0; 3 on timeout. */
#include "ep_pmix.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EP_NOTE_CODE (PMIX_EXTERNAL_ERR_BASE - 17)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int got;
static char note[128];
static char source[PMIX_MAX_NSLEN + 16];
static pmix_status_t registered = PMIX_ERR_TIMEOUT;
static int registered_done;

static void on_event(size_t id, pmix_status_t status, const pmix_proc_t *src, pmix_info_t info[], size_t ninfo,
                     pmix_info_t results[], size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                     void *cbdata)
{
    (void)id, (void)results, (void)nresults;
    pthread_mutex_lock(&mu);
    if (status == EP_NOTE_CODE && !got) {
        for (size_t i = 0; i < ninfo; ++i)
            if (PMIX_CHECK_KEY(&info[i], "ep.note") && info[i].value.type == PMIX_STRING)
                snprintf(note, sizeof note, "%s", info[i].value.data.string);
        snprintf(source, sizeof source, "%s:%u", src ? src->nspace : "-", src ? src->rank : 0);
        got = 1;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    if (cbfunc)
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void on_registered(pmix_status_t status, size_t id, void *cbdata)
{
    (void)id, (void)cbdata;
    pthread_mutex_lock(&mu);
    registered = status;
    registered_done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv)
{
    ep_setup("ep_notify");
    double timeout = 30;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--timeout") && i + 1 < argc && ep_parse_seconds(argv[i + 1], &timeout))
            ++i;
        else
            ep_die(EP_EXIT_USAGE, "usage: ep_notify [--timeout S]");
    }
    ep_set_timeout(timeout);
    ep_cond_init(&cv);
    pmix_proc_t me;
    ep_pmix_init(&me);

    pmix_status_t code = EP_NOTE_CODE;
    PMIx_Register_event_handler(&code, 1, NULL, 0, on_event, on_registered, NULL);
    struct timespec until;
    ep_deadline(timeout, &until);
    pthread_mutex_lock(&mu);
    while (!registered_done)
        if (pthread_cond_timedwait(&cv, &mu, &until) != 0)
            break;
    pthread_mutex_unlock(&mu);
    if (registered != PMIX_SUCCESS)
        ep_pmix_fail("PMIx_Register_event_handler", registered);
    ep_fence(&me, false);  /* everyone listens before rank 0 speaks */

    /* The library may read the event's source and info on its own thread
     * after PMIx_Notify_event returned (OpenPMIx 6.1 on): they live until
     * the end. */
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    if (me.rank == 0) {
        char text[64];
        snprintf(text, sizeof text, "from-%u", me.rank);
        PMIX_INFO_LOAD(&info, "ep.note", text, PMIX_STRING);
        pmix_status_t rc = PMIx_Notify_event(EP_NOTE_CODE, &me, PMIX_RANGE_NAMESPACE, &info, 1, NULL, NULL);
        if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
            ep_pmix_fail("PMIx_Notify_event", rc);
        ep_out("notified rank=%u", me.rank);
    } else {
        ep_wait_begin("event");
        pthread_mutex_lock(&mu);
        while (!got)
            pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        ep_wait_end();
        ep_out("got rank=%u code=%d source=%s note=%s", me.rank, EP_NOTE_CODE, source, note);
    }
    ep_fence(&me, false);
    ep_pmix_finalize();
    PMIX_INFO_DESTRUCT(&info);
    ep_out("notify ok rank=%u", me.rank);
    return 0;
}
