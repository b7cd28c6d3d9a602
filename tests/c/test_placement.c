/* Where the pool's workers run (libtgrad/src/cpu/placement.c): a worker taking part in a job is
 * kept off the CPU its caller published the job from, whether it was spinning (it steers itself
 * when the caller's CPU changed) or asleep (the caller steers it before the wake-up). The caller
 * here is pinned to one CPU, then to another, with jobs back to back and after sleeps longer
 * than the workers' spin; worker 1 runs task 1 of every job (tg_pool_run_exact) and reads its own
 * affinity. Either mechanism alone keeps this property (the worker's own step runs before every
 * job; steering a sleeper decides where its wake-up lands, which the bench measures): with both
 * removed, the check fails within the first rounds. Skipped (77) with fewer than two CPUs. Linked
 * from libtgrad's objects (the pool is hidden). Prints "N passed, N failed". */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "internal.h"

static int caller_cpu;
static atomic_int worker_ran, worker_may_use_caller_cpu;

static void task(int64_t t, int32_t worker, void *arg) {
    (void)t, (void)arg;
    if (worker == 0) return;
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) return;
    atomic_store(&worker_ran, 1);
    if (CPU_ISSET(caller_cpu, &mine)) atomic_store(&worker_may_use_caller_cpu, 1);
}

static void nap_ms(long ms) {
    struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
    nanosleep(&ts, NULL);
}

int main(void) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2) {
        printf("skipped: fewer than two CPUs to place threads on\n");
        return 77;
    }
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    EXPECT(tgrad_set_num_threads(2), TGRAD_OK);
    tg_pool_run_exact(2, task, NULL); /* the pool starts with this thread's affinity: all CPUs */
    for (int round = 0; round < 4; round++) {
        caller_cpu = cpus[round % 2];
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(caller_cpu, &one);
        CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
        for (int job = 0; job < 40; job++) {
            if (job % 4 == 3) nap_ms(3); /* past the workers' spin: they sleep */
            atomic_store(&worker_ran, 0);
            atomic_store(&worker_may_use_caller_cpu, 0);
            tg_pool_run_exact(2, task, NULL);
            CHECK(atomic_load(&worker_ran));
            if (atomic_load(&worker_may_use_caller_cpu)) {
                fprintf(stderr, "round %d job %d: the worker may run on the caller's CPU %d\n", round, job, caller_cpu);
                CHECK(0);
                break;
            }
        }
    }
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
