/* Where the pool's threads run (Linux; elsewhere every call does nothing).
 *
 * A job's caller works on its tasks too, so a worker on the caller's CPU adds nothing: the two
 * take turns. Linux puts it there more often than expected. On a 2-vCPU KVM guest (Zen 4, kernel
 * 6.18, measured 2026-12-02 with C loops that logged each task's thread, CPU and times; see
 * docs/performance.md, "Contention and cold calls"):
 * - after the process idled, the woken worker was queued on the waker's CPU although the other
 *   CPU was idle; it then waited behind the caller for a time slice, or preempted it and ran the
 *   whole job alone, then spun there: 2 threads took 1.6x as long as 1;
 * - with another process spinning on the other CPU, the load balancer moved the worker next to
 *   the caller (one CPU held two runnable threads, the other one): a 1024^3 product's tasks each
 *   took twice as long while they shared it, and 2 threads gained nothing over 1.
 * So each worker's affinity leaves out the CPU the last job's caller ran on (the worker does it
 * itself when it picks up a job from a new CPU; the caller does it for a sleeping worker before
 * waking it, so the wake-up cannot land there). With one CPU left the affinity is not narrowed.
 *
 * And a worker asks the scheduler (sched_setattr, Linux 6.12's custom slices for SCHED_OTHER;
 * ignored by older kernels) for the shortest time slice, 0.1 ms: a woken worker whose CPU is
 * busy with another process then runs within about that long instead of after the other
 * process's slice (1.4 ms by default there), which a product of a few hundred microseconds
 * would not survive. Its share of the CPU (its nice value, its weight) is unchanged. */
#include "placement.h"

#if defined(__linux__)
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

static cpu_set_t allowed; /* the process's CPUs when the pool started */
static atomic_int worker_tid[TG_PLACE_MAX_WORKERS];
static atomic_int worker_excluded[TG_PLACE_MAX_WORKERS]; /* the CPU left out of its affinity, or -1 */

void tg_place_init(void) {
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed); /* then never steer */
    for (int i = 0; i < TG_PLACE_MAX_WORKERS; i++) atomic_init(&worker_excluded[i], -1);
}

/* The kernel's struct sched_attr, first version (48 bytes; glibc before 2.41 does not declare it). */
struct slice_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

enum { SHORTEST_SLICE_NS = 100000 }; /* the kernel's lower bound for a custom slice */

static void ask_short_slice(void) {
#if defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
    struct slice_attr at = { 0 };
    if (syscall(SYS_sched_getattr, 0, &at, sizeof at, 0) != 0 || at.policy != SCHED_OTHER) return;
    at.size = sizeof at, at.runtime = SHORTEST_SLICE_NS;
    (void)syscall(SYS_sched_setattr, 0, &at, 0); /* the nice value read above is kept */
#endif
}

void tg_place_worker_start(int32_t id) {
    atomic_store(&worker_tid[id], (int32_t)syscall(SYS_gettid));
    ask_short_slice();
}

int tg_place_current_cpu(void) { return sched_getcpu(); }

static bool can_exclude(int cpu) { return cpu >= 0 && CPU_ISSET(cpu, &allowed) && CPU_COUNT(&allowed) >= 2; }

/* Worker `id`, thread `tid` (0: the calling thread), may run on the pool's CPUs but `cpu`,
 * unless it already does or cannot; records the outcome. */
static void exclude(int32_t id, pid_t tid, int cpu) {
    if (atomic_load(&worker_excluded[id]) == cpu || !can_exclude(cpu)) return;
    cpu_set_t others = allowed;
    CPU_CLR(cpu, &others);
    atomic_store(&worker_excluded[id], sched_setaffinity(tid, sizeof others, &others) == 0 ? cpu : -1);
}

void tg_place_worker_job(int32_t id, int caller_cpu) { exclude(id, 0, caller_cpu); }

void tg_place_steer_sleeper(int32_t id, int caller_cpu) {
    int32_t tid = atomic_load(&worker_tid[id]);
    if (tid > 0) exclude(id, tid, caller_cpu);
}

#else
void tg_place_init(void) {}
void tg_place_worker_start(int32_t id) { (void)id; }
int tg_place_current_cpu(void) { return -1; }
void tg_place_worker_job(int32_t id, int caller_cpu) { (void)id, (void)caller_cpu; }
void tg_place_steer_sleeper(int32_t id, int caller_cpu) { (void)id, (void)caller_cpu; }
#endif
