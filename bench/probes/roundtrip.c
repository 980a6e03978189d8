/* Cross-core round trip: two threads, each pinned to one of two CPUs, pass a flag back and forth.
 * Prints the mean round trip in nanoseconds for each of SECONDS one-second windows.
 * Built by bench/placement.py with the system C compiler; it times the host, not TVM. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic int flag = 0;
static _Atomic int stop = 0;
static int cpus[2];

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *unused) {
    (void)unused;
    pin(cpus[1]);
    for (;;) {
        int v;
        while ((v = atomic_load_explicit(&flag, memory_order_acquire)) != 1)
            if (atomic_load_explicit(&stop, memory_order_relaxed)) return NULL;
        atomic_store_explicit(&flag, 0, memory_order_release);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: roundtrip CPU0 CPU1 SECONDS\n");
        return 2;
    }
    cpus[0] = atoi(argv[1]);
    cpus[1] = atoi(argv[2]);
    int seconds = atoi(argv[3]);
    pin(cpus[0]);
    pthread_t t;
    pthread_create(&t, NULL, answer, NULL);
    for (int s = 0; s < seconds; s++) {
        long n = 0;
        double start = now(), end = start + 1.0;
        while (now() < end) {
            for (int i = 0; i < 1000; i++) {
                atomic_store_explicit(&flag, 1, memory_order_release);
                while (atomic_load_explicit(&flag, memory_order_acquire) != 0) {}
            }
            n += 1000;
        }
        printf("%.1f\n", (now() - start) * 1e9 / n);
        fflush(stdout);
    }
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
    pthread_join(t, NULL);
    return 0;
}
