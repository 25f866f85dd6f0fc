/* SPDX-License-Identifier: Apache-2.0 */
/* ep_claim_uid.c - the attacker's shim: preloaded (LD_PRELOAD) into a PMIx
 * client of another user, it makes getuid()/geteuid() say EP_CLAIM_UID and
 * getgid()/getegid() say EP_CLAIM_GID, which is all a client's "native"
 * security sends its server over TCP. Tests use it to show that the node
 * daemon asks the kernel who its peer is, never the peer. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/types.h>

static unsigned long claimed(const char *name, unsigned long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtoul(v, NULL, 10) : fallback;
}

uid_t getuid(void) { return (uid_t)claimed("EP_CLAIM_UID", 0); }
uid_t geteuid(void) { return (uid_t)claimed("EP_CLAIM_UID", 0); }
gid_t getgid(void) { return (gid_t)claimed("EP_CLAIM_GID", 0); }
gid_t getegid(void) { return (gid_t)claimed("EP_CLAIM_GID", 0); }
