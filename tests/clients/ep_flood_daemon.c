/* SPDX-License-Identifier: Apache-2.0 */
/* ep_flood_daemon.c - a node daemon its user has made hostile: put in
 * exitpolicy-pmixd's place (plugstack.conf daemon=), it is started as the
 * real one is (woken from its standby with the same descriptors), says
 * "ready", acknowledges each outcome slurmstepd hands it, and answers
 * slurmstepd's Stop with its Ack and then Acks frames, as fast as the
 * socket takes them, until slurmstepd closes the link (or 20 s).
 *
 * Once it has said ready it leaves <log_dir>/ep_flood_daemon.<pid>.ready.
 * It writes what root took into <log_dir>/ep_flood_daemon.<pid>.report:
 *
 *     flooded bytes=N frames=F seconds=S ended=closed|timeout|running
 *
 * "running" is the report it rewrites as it floods, at the Stop and after
 * each MiB: the step's end may kill it before it sees the link close. Or,
 * when slurmstepd hung up without asking it to stop,
 *
 *     unasked outcomes=N
 *
 * bytes: what send() took before the link closed. Speaks the control link's
 * frames by hand (protocol/codec.hpp: 'E' 'P' version type, a big-endian
 * u32 body length; an Acks body is a u32 count and 8 bytes an ack), as a
 * user who wrote their own would. No PMIx. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The control link's version, protocol_version in protocol/codec.hpp (the
 * build passes it): a frame of another version is refused. */
#ifndef EP_PROTOCOL_VERSION
#error "EP_PROTOCOL_VERSION: build ep_flood_daemon with tests/clients/CMakeLists.txt"
#endif
enum { HEADER = 8, VERSION = EP_PROTOCOL_VERSION, OUTCOME = 4, ACK = 5, STOP = 18, ACKS = 25, MAX_BODY = 64 * 1024 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static int read_all(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Sends all of buf, waiting at most until `deadline`; bytes taken in *sent.
 * 0: all sent; -1: the link closed; 1: the deadline. */
static int send_all(int fd, const uint8_t *buf, size_t n, double deadline, unsigned long long *sent)
{
    size_t off = 0;
    while (off < n) {
        const ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            *sent += (unsigned long long)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        const double left = deadline - now();
        if (left <= 0)
            return 1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, (int)(left * 1000) + 1);
        if (p.revents & (POLLERR | POLLHUP))
            return -1;
    }
    return 0;
}

static size_t frame(uint8_t *out, uint8_t type, uint32_t body_len)
{
    out[0] = 'E';
    out[1] = 'P';
    out[2] = VERSION;
    out[3] = type;
    put32(out + 4, body_len);
    return HEADER + body_len;
}

static void report(const char *log_dir, const char *line)
{
    if (!log_dir)
        return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/ep_flood_daemon.%ld.report", log_dir, (long)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(line, f);
    if (fclose(f) == 0)
        rename(tmp, path); /* whole or not at all for the reader */
}

int main(int argc, char **argv)
{
    int control = -1, ready = -1;
    const char *log_dir = NULL;
    for (int i = 1; i + 1 < argc; ++i) {
        if (strcmp(argv[i], "--control-fd") == 0)
            control = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ready-fd") == 0)
            ready = atoi(argv[++i]);
        else if (strcmp(argv[i], "--log-dir") == 0)
            log_dir = argv[++i];
    }
    if (control < 0) {
        fprintf(stderr, "ep_flood_daemon: no --control-fd\n");
        return 2;
    }
    if (ready >= 0) {
        if (write(ready, "ready\n", 6) != 6)
            fprintf(stderr, "ep_flood_daemon: cannot say ready: %s\n", strerror(errno));
        close(ready);
        /* A mark the test's task waits for: past it, slurmstepd's Stop
         * comes to a daemon that said ready, never to a standby. */
        if (log_dir) {
            char mark[4096];
            snprintf(mark, sizeof mark, "%s/ep_flood_daemon.%ld.ready", log_dir, (long)getpid());
            const int m = open(mark, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (m >= 0)
                close(m);
        }
    }
    /* Blocking reads of slurmstepd's frames until its Stop. */
    const int flags = fcntl(control, F_GETFL);
    fcntl(control, F_SETFL, flags & ~O_NONBLOCK);
    static uint8_t body[MAX_BODY];
    static uint8_t out[HEADER + MAX_BODY];
    unsigned long long ignored = 0;
    unsigned outcomes = 0;
    for (;;) {
        uint8_t h[HEADER];
        if (read_all(control, h, HEADER) != 0) {
            char line[64];
            snprintf(line, sizeof line, "unasked outcomes=%u\n", outcomes);
            report(log_dir, line); /* slurmstepd hung up: nothing to flood */
            return 0;
        }
        const uint32_t len = get32(h + 4);
        if (h[0] != 'E' || h[1] != 'P' || len > MAX_BODY || read_all(control, body, len) != 0)
            return 1;
        if (h[3] == OUTCOME && len >= 8) {
            ++outcomes;
            memcpy(out + HEADER, body, 8); /* the outcome's rank and epoch */
            const size_t n = frame(out, ACK, 8);
            if (send_all(control, out, n, now() + 5, &ignored) != 0)
                return 1;
        } else if (h[3] == STOP) {
            break;
        }
    }
    /* The Stop's Ack, then Acks frames, each as full as a frame may be, of
     * acks never seen before. */
    memset(out + HEADER, 0, 8);
    unsigned long long sent = 0;
    const double start = now(), deadline = start + 20;
    int ended = send_all(control, out, frame(out, ACK, 8), deadline, &sent);
    const uint32_t per_frame = (MAX_BODY - 4) / 8;
    unsigned long long frames = 0, next_report = 0;
    uint32_t epoch = 1;
    char line[160];
    while (ended == 0) {
        if (sent >= next_report) {
            snprintf(line, sizeof line, "flooded bytes=%llu frames=%llu seconds=%.3f ended=running\n", sent, frames,
                     now() - start);
            report(log_dir, line);
            next_report = sent + (1u << 20);
        }
        put32(out + HEADER, per_frame);
        for (uint32_t i = 0; i < per_frame; ++i) {
            put32(out + HEADER + 4 + 8 * i, i);
            put32(out + HEADER + 8 + 8 * i, epoch);
        }
        ++epoch;
        ended = send_all(control, out, frame(out, ACKS, 4 + 8 * per_frame), deadline, &sent);
        ++frames;
    }
    snprintf(line, sizeof line, "flooded bytes=%llu frames=%llu seconds=%.3f ended=%s\n", sent, frames, now() - start,
             ended < 0 ? "closed" : "timeout");
    report(log_dir, line);
    return 0;
}
