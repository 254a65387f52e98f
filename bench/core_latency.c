/* A cache line handed back and forth between two threads pinned to cores
   a and b: nanoseconds per round trip (bench/core_latency.py). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic long turn __attribute__((aligned(64)));
static long rounds;

static void *answer(void *unused) {
    (void)unused;
    for (long i = 0; i < rounds; i++) {
        while (atomic_load(&turn) != 2 * i + 1)
            ;
        atomic_store(&turn, 2 * i + 2);
    }
    return 0;
}

/* -1 where a thread cannot be pinned or started; the caller's affinity is
   restored. */
double round_trip_ns(int a, int b, long count) {
    cpu_set_t before, here, there;
    pthread_attr_t attr;
    pthread_t other;
    struct timespec start, end;
    int started;
    if (pthread_getaffinity_np(pthread_self(), sizeof before, &before) != 0)
        return -1;
    CPU_ZERO(&here);
    CPU_SET(a, &here);
    CPU_ZERO(&there);
    CPU_SET(b, &there);
    if (pthread_setaffinity_np(pthread_self(), sizeof here, &here) != 0)
        return -1;
    rounds = count;
    atomic_store(&turn, 0);
    pthread_attr_init(&attr);
    started = pthread_attr_setaffinity_np(&attr, sizeof there, &there) == 0 &&
              pthread_create(&other, &attr, answer, 0) == 0;
    pthread_attr_destroy(&attr);
    if (started) {
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (long i = 0; i < count; i++) {
            atomic_store(&turn, 2 * i + 1);
            while (atomic_load(&turn) != 2 * i + 2)
                ;
        }
        clock_gettime(CLOCK_MONOTONIC, &end);
        pthread_join(other, 0);
    }
    pthread_setaffinity_np(pthread_self(), sizeof before, &before);
    if (!started)
        return -1;
    return ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / count;
}
