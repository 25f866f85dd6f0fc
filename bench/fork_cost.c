// SPDX-License-Identifier: Apache-2.0
// fork_cost.c - what loading a plugin costs each fork and exec of the
// process that loaded it, as slurmstepd forks every task of a step.
//
// Usage: fork_cost TASKS ROUNDS PLUGIN...
// Each round, for "none" and then each PLUGIN in turn, a fresh process
// loads the plugin (RTLD_LAZY: Slurm's symbols are not there, and none is
// called), touches 6 MiB of heap as slurmstepd's own, then forks and execs
// /bin/true TASKS times, one after the other, and reports the CPU time
// (its own and its children's) per task. Prints, per configuration, the
// mappings of the loading process, the median CPU time per task and the
// median of the per-round ratios to "none". CPU time, not wall time: the
// machine is shared. bench/run.sh forks builds and runs it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

enum { max_configs = 8, max_rounds = 200 };

static double cpu_seconds(void)
{
    struct rusage self, children;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + children.ru_utime.tv_sec + children.ru_stime.tv_sec) +
           (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + children.ru_utime.tv_usec +
                    children.ru_stime.tv_usec) / 1e6;
}

static int mappings(void)
{
    FILE* maps = fopen("/proc/self/maps", "r");
    int n = 0;
    char line[512];
    if (!maps)
        return -1;
    while (fgets(line, sizeof line, maps))
        n++;
    fclose(maps);
    return n;
}

// In a child of ours: loads `plugin` (NULL: none), then measures. Writes
// {mappings, CPU microseconds per task} to `out`.
static void measure(const char* plugin, int tasks, int out)
{
    if (plugin && !dlopen(plugin, RTLD_LAZY | RTLD_GLOBAL)) {
        fprintf(stderr, "fork_cost: %s\n", dlerror());
        _exit(1);
    }
    const size_t heap = 6u << 20;
    char* own = malloc(heap);
    if (!own)
        _exit(1);
    memset(own, 1, heap);
    const double start = cpu_seconds();
    for (int i = 0; i < tasks; i++) {
        const pid_t pid = fork();
        if (pid == 0) {
            execl("/bin/true", "true", (char*)NULL);
            _exit(127);
        }
        if (pid < 0 || waitpid(pid, NULL, 0) != pid)
            _exit(1);
    }
    const double result[2] = {(double)mappings(), (cpu_seconds() - start) / tasks * 1e6};
    if (write(out, result, sizeof result) != (ssize_t)sizeof result || own[heap - 1] != 1)
        _exit(1);
    _exit(0);
}

static int by_value(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(double* v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char** argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fork_cost TASKS ROUNDS PLUGIN...\n");
        return 2;
    }
    const int tasks = atoi(argv[1]), rounds = atoi(argv[2]), configs = argc - 2;
    if (tasks < 1 || rounds < 1 || rounds > max_rounds || configs > max_configs) {
        fprintf(stderr, "fork_cost: TASKS >= 1, 1 <= ROUNDS <= %d, at most %d plugins\n", max_rounds, max_configs - 1);
        return 2;
    }
    static double cpu[max_configs][max_rounds], ratio[max_configs][max_rounds];
    int maps[max_configs] = {0};
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < configs; c++) {
            int pipefd[2];
            if (pipe(pipefd) != 0)
                return 1;
            const pid_t pid = fork();
            if (pid == 0) {
                close(pipefd[0]);
                measure(c == 0 ? NULL : argv[2 + c], tasks, pipefd[1]);
            }
            close(pipefd[1]);
            double result[2];
            int status = 0;
            const ssize_t got = read(pipefd[0], result, sizeof result);
            close(pipefd[0]);
            if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0 || got != (ssize_t)sizeof result) {
                fprintf(stderr, "fork_cost: the measurement of %s failed\n", c == 0 ? "none" : argv[2 + c]);
                return 1;
            }
            maps[c] = (int)result[0];
            cpu[c][r] = result[1];
            ratio[c][r] = result[1] / cpu[0][r];
        }
    printf("fork and exec of /bin/true, %d per measurement, %d interleaved rounds, CPU time per task\n", tasks, rounds);
    printf("%-60s %9s %14s %22s\n", "loaded", "mappings", "median CPU", "median ratio vs none");
    for (int c = 0; c < configs; c++)
        printf("%-60s %9d %11.1f us %22.3f\n", c == 0 ? "none" : argv[2 + c], maps[c], median(cpu[c], rounds),
               median(ratio[c], rounds));
    return 0;
}
