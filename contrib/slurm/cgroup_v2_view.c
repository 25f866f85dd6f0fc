// SPDX-License-Identifier: Apache-2.0
/*
 * cgroup_v2_view.c — what slurmd (and the slurmstepd it starts, which
 * inherit it) read in /proc/PID/cgroup, for contrib/slurm/cluster's
 * EXITPOLICY_CLUSTER_CGROUP=v2. The cluster script builds it at `up`
 * (cc -shared -fPIC -O2) and starts each node's slurmd with LD_PRELOAD set
 * to it.
 *
 * Why: each node's slurmd runs in a cgroup namespace of its own whose root
 * is the node's own cgroup v2 directory, bind-mounted over /sys/fs/cgroup.
 * Slurm's cgroup/v2 plugin then needs two things this machine does not
 * give it:
 *
 *   * a cgroup v2 only ("unified") host: it reads /proc/self/cgroup
 *     (and, in releases after 22.05, /proc/1/cgroup) and stops with
 *     "Hybrid mode is not supported" when it finds more than the one
 *     "0::PATH" line, as on a host that also mounts cgroup v1
 *     controllers. The lines of the v1 hierarchies are left out here, so
 *     Slurm sees only the v2 one;
 *   * a pid 1 inside its cgroup namespace: Slurm takes the directory of
 *     pid 1's cgroup for the top of the machine's hierarchy (a container's
 *     init) and makes system.slice/slurmstepd.scope there. The nodes share
 *     the machine's pid namespace, so pid 1 is the machine's init, outside
 *     the namespace, and its path reads "/../..". A path outside the
 *     namespace ("/.." or "/../...") is shown as "/", the root of the
 *     node's namespace, as a container's init would be; this holds on a
 *     host with cgroup v2 only as much as on a hybrid one.
 *
 * How: open, open64, openat, openat64, their _FORTIFY_SOURCE variants,
 * fopen and fopen64, given an absolute path /proc/X/cgroup or
 * /proc/X/task/Y/cgroup opened for reading, read the real file and return
 * an anonymous file (memfd) holding the line shown instead. Everything else
 * goes to the C library unchanged. Slurm reads the file with open() and
 * read() (its cgroup plugins' common file reader) or fopen().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One path component: at least one character, no '/'. */
static const char *skip_component(const char *p)
{
	const char *s = p;

	while (*p && *p != '/')
		p++;
	return p == s ? NULL : p;
}

/* /proc/X/cgroup or /proc/X/task/Y/cgroup. */
static int is_proc_cgroup(const char *path)
{
	const char *p;

	if (!path || strncmp(path, "/proc/", 6))
		return 0;
	if (!(p = skip_component(path + 6)))
		return 0;
	if (!strncmp(p, "/task/", 6) && !(p = skip_component(p + 6)))
		return 0;
	return !strcmp(p, "/cgroup");
}

static int wants_view(const char *path, int flags)
{
	return (flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | O_TMPFILE)) &&
	       is_proc_cgroup(path);
}

/* write all of buf to fd. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * The view of PATH: a memfd holding its "0::" line (a path outside the
 * namespace shown as "/"), or all of it if it has none (a host with cgroup
 * v1 only). -1 with errno set as the real open() would.
 */
static int view_fd(const char *path, int flags)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	const char *out, *line = NULL, *rest;
	size_t out_len;
	int src, fd, saved;

	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	src = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (src < 0) {
		saved = errno;
		free(buf);
		errno = saved;
		return -1;
	}
	for (;;) {
		ssize_t n;

		if (len + 1 >= cap) {
			char *bigger = realloc(buf, cap * 2);

			if (!bigger) {
				close(src);
				free(buf);
				errno = ENOMEM;
				return -1;
			}
			buf = bigger;
			cap *= 2;
		}
		n = read(src, buf + len, cap - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			saved = errno;
			close(src);
			free(buf);
			errno = saved;
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(src);
	buf[len] = '\0';

	/* The v2 line: "0::PATH" at the start of a line. */
	for (rest = buf; *rest; rest++) {
		if (!strncmp(rest, "0::", 3)) {
			line = rest;
			break;
		}
		if (!(rest = strchr(rest, '\n')))
			break;
	}
	if (!line) {
		out = buf;
		out_len = len;
	} else {
		const char *cg = line + 3;
		size_t cg_len = strcspn(cg, "\n");

		if ((cg_len == 3 && !strncmp(cg, "/..", 3)) || !strncmp(cg, "/../", 4)) {
			out = "0::/";
			out_len = 4;
		} else {
			out = line;
			out_len = 3 + cg_len;
		}
	}

	fd = memfd_create("cgroup", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0 || write_all(fd, out, out_len) || (line && write_all(fd, "\n", 1)) ||
	    lseek(fd, 0, SEEK_SET) < 0) {
		saved = errno;
		if (fd >= 0)
			close(fd);
		free(buf);
		errno = saved;
		return -1;
	}
	free(buf);
	return fd;
}

#define NEXT(name) ((name##_fn)dlsym(RTLD_NEXT, #name))

typedef int (*open_fn)(const char *, int, ...);
typedef int (*open64_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*openat64_fn)(int, const char *, int, ...);
typedef int (*__open_2_fn)(const char *, int);
typedef int (*__open64_2_fn)(const char *, int);
typedef int (*__openat_2_fn)(int, const char *, int);
typedef int (*__openat64_2_fn)(int, const char *, int);
typedef FILE *(*fopen_fn)(const char *, const char *);
typedef FILE *(*fopen64_fn)(const char *, const char *);

/* The mode argument, which is there only with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, last)                              \
	mode_t mode = 0;                                   \
	if ((flags) & (O_CREAT | O_TMPFILE)) {             \
		va_list ap;                                \
		va_start(ap, last);                        \
		mode = (mode_t)va_arg(ap, unsigned int);   \
		va_end(ap);                                \
	}

int open(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(open)(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(open64)(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(openat)(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(openat64)(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags)
{
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(__open_2)(path, flags);
}

int __open64_2(const char *path, int flags)
{
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(__open64_2)(path, flags);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(__openat_2)(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	if (wants_view(path, flags))
		return view_fd(path, flags);
	return NEXT(__openat64_2)(dirfd, path, flags);
}

/* fopen's view, for a mode that only reads ("r", "re", "rb", ...). */
static FILE *fopen_view(const char *path, const char *mode)
{
	int fd;
	FILE *f;

	fd = view_fd(path, strchr(mode, 'e') ? O_CLOEXEC : 0);
	if (fd < 0)
		return NULL;
	if (!(f = fdopen(fd, "r"))) {
		int saved = errno;

		close(fd);
		errno = saved;
	}
	return f;
}

static int fopen_wants_view(const char *path, const char *mode)
{
	return mode && mode[0] == 'r' && !strchr(mode, '+') && is_proc_cgroup(path);
}

FILE *fopen(const char *path, const char *mode)
{
	if (fopen_wants_view(path, mode))
		return fopen_view(path, mode);
	return NEXT(fopen)(path, mode);
}

FILE *fopen64(const char *path, const char *mode)
{
	if (fopen_wants_view(path, mode))
		return fopen_view(path, mode);
	return NEXT(fopen64)(path, mode);
}
