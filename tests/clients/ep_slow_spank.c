/* SPDX-License-Identifier: Apache-2.0 */
/* ep_slow_spank.c - a SPANK plugin that holds slurmstepd in init_post_opt
 * for delay_ms=N milliseconds (its plugstack.conf argument), before the
 * plugins listed after it: how a test keeps a step between the moment its
 * slurmstepd listens on its step socket and exitpolicy's init_post_opt,
 * where an attacker acts in a real node's race, however fast the machine. */
#define _POSIX_C_SOURCE 200809L
#include <slurm/spank.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

SPANK_PLUGIN(ep_slow, 1)

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    long ms = 0;
    (void)sp;
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    for (int i = 0; i < ac; i++)
        if (strncmp(av[i], "delay_ms=", 9) == 0)
            ms = strtol(av[i] + 9, NULL, 10);
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0)
        ;
    return 0;
}
