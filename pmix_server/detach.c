/* SPDX-License-Identifier: Apache-2.0 */
/* detach.c - exitpolicy-detach: how slurmstepd starts the node daemon
 * without copying itself.
 *
 *   exitpolicy-detach --uid U --gid G [--groups G1,G2,...]
 *                     [--limit RESOURCE=VALUE ...]
 *                     [--start-on FD --wake-fd FD --unless-hangup FD
 *                      [--pmi-fds FIRST-LAST]]
 *                     -- DAEMON [ARGS...]
 *
 * slurmstepd spawns it (posix_spawn: no copy of slurmstepd's address
 * space) as root, in a session of its own, with the daemon's descriptors
 * in place (0-2 /dev/null, 3 the secret, 4 the ready line, 5 the control
 * link, 6 the reserved PMIx socket if any), 8 the write end of a pipe for
 * the daemon's pid and 9 the read end of the "go" pipe. It forks (a copy of
 * this small program), writes the child's pid on 8 and exits, so that
 * slurmstepd reaps it at once and the daemon is nobody's child of
 * slurmstepd's (proctrack does not end it with the tasks). The child waits
 * for "go" on 9, which slurmstepd writes once it holds a pidfd of it (until
 * then its pid cannot be reused: it is still root's and nobody else's),
 * lowers its limits to the tasks' (RESOURCE is the number of an RLIMIT_*),
 * becomes the job's user and execs the daemon. Any failure ends it with
 * 126 before the daemon runs (127: the exec failed). Only what a program
 * needs of libc: it is started for every step.
 *
 * With --start-on, the child stands by as the job's user before the exec:
 * a step whose tasks never use PMIx never runs the daemon. It execs the
 * daemon (the same process: slurmstepd's pidfd stays good) once the
 * --start-on descriptor (the PMIx socket the tasks were told of: a task
 * connects) or the --wake-fd one (a listening socket whose port srun was
 * told: another node's daemon has started) turns readable; the wake
 * socket is closed first. It exits 0 without running anything once the
 * --unless-hangup descriptor (the control link: slurmstepd has closed its
 * end at the step's end) hangs up. The --pmi-fds descriptors (the
 * daemon's ends of the tasks' PMI sockets) wake it too when a task writes
 * to its own (MPICH's PMI_Init); one whose task hangs up without a word (a
 * task that never used PMI has ended) is no longer watched, and stays open
 * for the daemon to find closed.
 *
 * A standby reads the control link as it comes, so that slurmstepd never
 * finds it full (a node of many tasks tells of each task's start), and
 * keeps what it read in a memory file, in the job's user's memory: the
 * daemon gets that file at the --wake-fd descriptor's number and
 * --control-backlog-fd added to its arguments, and reads it before the
 * link. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <sys/socket.h>
#include <time.h>

/* How long a standby lets its control link gather words after reading it. */
enum { control_pause_ns = 5 * 1000 * 1000 };

enum { pid_fd = 8, go_fd = 9, max_groups = 65536, max_limits = 16 };

/* fd in ep's interest list, level-triggered. */
static int watch(int ep, int fd, unsigned events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
}

/* All of buf to fd, or 0. */
static int write_whole(int fd, const char *buf, size_t size)
{
    while (size > 0) {
        const ssize_t n = write(fd, buf, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        buf += n;
        size -= (size_t)n;
    }
    return 1;
}

static int number(const char *s, unsigned long long *out)
{
    char *end = NULL;
    if (!s || !*s || *s == '-')
        return 0;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && end && *end == '\0';
}

/* An inherited descriptor's number, 3-1023; else the helper fails. */
static int descriptor(const char *s)
{
    unsigned long long v = 0;
    if (!number(s, &v) || v < 3 || v > 1023)
        _exit(126);
    return (int)v;
}

/* What slurmstepd asks for (the usage above). */
struct request {
    unsigned long long uid, gid;
    int have_uid, have_gid, ngroups, nlimits;
    int start_on, wake_fd, hangup_fd, pmi_first, pmi_last;
    gid_t groups[max_groups];
    struct {
        int resource;
        rlim_t value;
    } limits[max_limits];
    char **daemon; /* after "--" */
};

/* FIRST-LAST, two descriptors from 10 up. */
static void parse_pmi_fds(struct request *r, const char *value)
{
    const char *dash = strchr(value, '-');
    char first[8];
    if (!dash || (size_t)(dash - value) >= sizeof first)
        _exit(126);
    memcpy(first, value, (size_t)(dash - value));
    first[dash - value] = '\0';
    r->pmi_first = descriptor(first);
    r->pmi_last = descriptor(dash + 1);
    if (r->pmi_last < r->pmi_first || r->pmi_first < 10)
        _exit(126);
}

static void parse_groups(struct request *r, const char *value)
{
    unsigned long long v = 0;
    char *list = strdup(value), *save = NULL, *g;
    for (g = list ? strtok_r(list, ",", &save) : NULL; g; g = strtok_r(NULL, ",", &save)) {
        if (r->ngroups == max_groups || !number(g, &v))
            _exit(126);
        r->groups[r->ngroups++] = (gid_t)v;
    }
    free(list);
}

/* RESOURCE=VALUE, both numbers. */
static void parse_limit(struct request *r, const char *value)
{
    const char *eq = strchr(value, '=');
    unsigned long long resource = 0, v = 0;
    char name[16];
    if (!eq || r->nlimits == max_limits || (size_t)(eq - value) >= sizeof name)
        _exit(126);
    memcpy(name, value, (size_t)(eq - value));
    name[eq - value] = '\0';
    if (!number(name, &resource) || !number(eq + 1, &v))
        _exit(126);
    r->limits[r->nlimits].resource = (int)resource;
    r->limits[r->nlimits].value = (rlim_t)v;
    ++r->nlimits;
}

/* The command line, checked whole; anything amiss ends the helper. */
static void parse(struct request *r, int argc, char **argv)
{
    int i;
    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value)
            _exit(126);
        if (strcmp(argv[i], "--uid") == 0 && number(value, &r->uid))
            r->have_uid = 1;
        else if (strcmp(argv[i], "--gid") == 0 && number(value, &r->gid))
            r->have_gid = 1;
        else if (strcmp(argv[i], "--start-on") == 0)
            r->start_on = descriptor(value);
        else if (strcmp(argv[i], "--wake-fd") == 0)
            r->wake_fd = descriptor(value);
        else if (strcmp(argv[i], "--unless-hangup") == 0)
            r->hangup_fd = descriptor(value);
        else if (strcmp(argv[i], "--pmi-fds") == 0)
            parse_pmi_fds(r, value);
        else if (strcmp(argv[i], "--groups") == 0)
            parse_groups(r, value);
        else if (strcmp(argv[i], "--limit") == 0)
            parse_limit(r, value);
        else
            _exit(126);
    }
    if (!r->have_uid || !r->have_gid || i + 1 >= argc || (r->start_on >= 0) != (r->wake_fd >= 0) ||
        (r->start_on >= 0) != (r->hangup_fd >= 0) || (r->pmi_first >= 0 && r->start_on < 0))
        _exit(126);
    r->daemon = argv + i + 1;
}

/* The parent writes the child's pid and exits; the child returns once
 * slurmstepd says "go". */
static void detach(void)
{
    if (fcntl(pid_fd, F_SETFD, FD_CLOEXEC) != 0 || fcntl(go_fd, F_SETFD, FD_CLOEXEC) != 0)
        _exit(126);
    const pid_t child = fork();
    if (child != 0) {
        if (child > 0 && write(pid_fd, &child, sizeof child) == (ssize_t)sizeof child)
            _exit(0);
        _exit(1);
    }
    char go = 0;
    ssize_t got;
    while ((got = read(go_fd, &go, 1)) < 0 && errno == EINTR) {
    }
    if (got != 1)
        _exit(126);
    close(pid_fd);
    close(go_fd);
}

/* The OOM killer's view of a task: slurmstepd shields itself
 * (oom_score_adj -999 from Slurm 25.11, -1000 before), and what it forks
 * inherits that; Slurm gives each task 0 back (mgr.c), and so does the
 * daemon here, the job's user's process like the tasks. Best effort: a
 * kernel that refuses the write leaves slurmstepd's value. */
static void score_like_a_task(void)
{
    const int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (write(fd, "0", 1) != 1) {
        /* kept as it was: nothing else to do */
    }
    close(fd);
}

/* The tasks' limits, lowered only (root may keep them raised), and their
 * OOM score, then the job's user. */
static void become_user(const struct request *r)
{
    score_like_a_task();
    for (int i = 0; i < r->nlimits; ++i) {
        struct rlimit l;
        if (getrlimit(r->limits[i].resource, &l) == 0 && r->limits[i].value < l.rlim_cur) {
            l.rlim_cur = r->limits[i].value;
            setrlimit(r->limits[i].resource, &l);
        }
    }
    if (setgroups((size_t)r->ngroups, r->groups) != 0 || setgid((gid_t)r->gid) != 0 ||
        setuid((uid_t)r->uid) != 0)
        _exit(126);
}

/* What the control link says, kept in `backlog`; ends the helper (0)
 * once slurmstepd has hung up. */
static void keep_control_words(int hangup_fd, unsigned events, int backlog)
{
    if (!(events & EPOLLIN))
        _exit(0);
    char buf[4096];
    const ssize_t got = read(hangup_fd, buf, sizeof buf);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
        _exit(0);
    if (got > 0 && !write_whole(backlog, buf, (size_t)got))
        _exit(126);
    /* A node of many tasks tells of their starts about a millisecond
     * apart: a moment's pause lets the next ones gather, read in one turn
     * rather than one wake each. A task that connects meanwhile waits that
     * moment; the link holds hundreds of words. */
    if (got > 0)
        nanosleep(&(struct timespec){.tv_nsec = control_pause_ns}, NULL);
}

/* Stands by until a task or srun wakes it (the usage above); returns the
 * memory file of what the control link said meanwhile, or -1. */
static int stand_by(const struct request *r)
{
    /* epoll, not poll: the control link wakes it once per task's start
     * and each task's PMI socket once at its end, and a poll would walk
     * every watched descriptor each time. */
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    int woken = 0;
    /* Without a memory file the link is not read: slurmstepd keeps what
     * does not fit in it, and waits on nothing. */
    const int backlog = memfd_create("exitpolicy-control-backlog", MFD_CLOEXEC);
    if (ep < 0 || !watch(ep, r->start_on, EPOLLIN) || !watch(ep, r->wake_fd, EPOLLIN) ||
        !watch(ep, r->hangup_fd, backlog >= 0 ? EPOLLIN : 0))
        _exit(126);
    for (int fd = r->pmi_first; fd >= 0 && fd <= r->pmi_last; ++fd)
        if (!watch(ep, fd, EPOLLIN))
            _exit(126);
    while (!woken) {
        struct epoll_event ready[64];
        const int n = epoll_wait(ep, ready, sizeof ready / sizeof ready[0], -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            _exit(126);
        }
        for (int k = 0; k < n; ++k) {
            const int fd = ready[k].data.fd;
            if (fd == r->hangup_fd) {
                keep_control_words(fd, ready[k].events, backlog);
            } else if (fd == r->start_on || fd == r->wake_fd) {
                woken = 1;
            } else {
                char c;
                const ssize_t peeked = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
                if (peeked == 1)
                    woken = 1;
                else if (peeked == 0 || (errno != EAGAIN && errno != EINTR))
                    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); /* its task hung up */
            }
        }
    }
    close(ep);
    close(r->wake_fd);
    return backlog;
}

/* The daemon's arguments and two more, --control-backlog-fd N, with the
 * memory file at the wake socket's number (closed by now). */
static char **with_backlog(char **daemon, int backlog, int at)
{
    static char number_text[8];
    size_t count = 0;
    while (daemon[count])
        ++count;
    char **with = calloc(count + 3, sizeof *with);
    if (!with || dup2(backlog, at) != at)
        _exit(126);
    memcpy(with, daemon, count * sizeof *with);
    snprintf(number_text, sizeof number_text, "%d", at);
    with[count] = "--control-backlog-fd";
    with[count + 1] = number_text;
    return with;
}

int main(int argc, char **argv)
{
    static struct request r = {.start_on = -1, .wake_fd = -1, .hangup_fd = -1, .pmi_first = -1, .pmi_last = -2};
    parse(&r, argc, argv);
    detach();
    become_user(&r);
    char **daemon = r.daemon;
    const int backlog = r.start_on >= 0 ? stand_by(&r) : -1;
    if (backlog >= 0 && lseek(backlog, 0, SEEK_END) > 0)
        daemon = with_backlog(daemon, backlog, r.wake_fd);
    if (backlog >= 0)
        close(backlog);
    execv(daemon[0], daemon);
    _exit(127);
}
