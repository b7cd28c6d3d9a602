/* A persistent worker pool. tg_pool_run() hands out task indices [0, ntasks) through an atomic
 * claim; the calling thread starts on them at once and works too. Which worker runs a task never
 * changes a result: tasks write disjoint outputs and each output's arithmetic is fixed by the
 * numerics contract. One job runs at a time (callers from several threads queue on job_lock).
 * Size: TGRAD_NUM_THREADS, else the cores this process may use; tgrad_set_num_threads() changes
 * it between jobs.
 *
 * A job ends when its last task is done, not when every worker has checked in: a worker that is
 * late to wake, or has lost its core to another process, holds nothing up, and one that arrives
 * after the work is gone finds none. So each job has an epoch, and a task is claimed by one
 * compare-and-swap on a word holding (epoch, next task): a straggler from an earlier job cannot
 * claim a task of a later one, and the job's fields it reads before claiming are known to be its
 * own job's when the claim succeeds: a job cannot end while one of its tasks is unclaimed, and the
 * next job first closes the word (new epoch, no task left), then writes its fields, then opens it,
 * so a claim read before the close fails after it (every access below is sequentially consistent
 * for that argument; tests/c/test_abi's thread sweeps caught the version without the close).
 *
 * Waking a sleeping thread costs tens of microseconds on a virtual machine, more than a mid-size
 * matmul takes; so a worker that just finished spins for a short while (SPIN_NS) watching for the
 * next job before it sleeps, and the caller spins likewise for the last tasks to finish. A
 * spinner that finds it lost its CPU meanwhile (another process wants it) sleeps at once: its
 * spinning only takes turns from that process, and a thread that slept is the one the scheduler
 * runs soon after its wake-up. A
 * sleeping worker is woken through the condition variable; job_seq is read under state_lock
 * before sleeping, so no wake-up is lost. Where the workers run (which CPUs, how soon after a
 * wake-up) is placement.c's. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#include "../../../kernels/cpu/fp_env.h"
#include "internal.h"
#include "placement.h"

#define MAX_WORKERS TG_PLACE_MAX_WORKERS
#define SPIN_NS 200000 /* 0.2 ms */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A spinning thread checks the clock every 256 pauses (a few microseconds); a gap longer than
 * this between two checks means it lost its CPU to another thread meanwhile. */
#define PREEMPTED_NS 50000

/* Whether a spin that started at `start` should go on: SPIN_NS not over since then and the
 * thread not preempted since the last check at *last (updated to now). */
static bool keep_spinning(int64_t start, int64_t *last) {
    int64_t t = now_ns();
    bool go = t - start < SPIN_NS && t - *last < PREEMPTED_NS;
    *last = t;
    return go;
}

/* Spin until *seq differs from `seen`, or until keep_spinning says stop; returns the last value
 * read. */
static uint_fast64_t spin_while_equal(atomic_uint_fast64_t *seq, uint_fast64_t seen) {
    int64_t start = now_ns(), last = start;
    for (int i = 0;; i++) {
        uint_fast64_t v = atomic_load_explicit(seq, memory_order_acquire);
        if (v != seen) return v;
        if ((i & 255) == 255 && !keep_spinning(start, &last)) return v;
        CPU_RELAX();
    }
}

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the fields below */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static int32_t nthreads = 1;  /* threads used per job, caller included */
static int32_t nstarted;      /* worker threads created (nthreads - 1 at most are used) */
/* The published job: its epoch (high bits) and how many workers take part (low 16 bits), in one
 * word so that a worker's view of both is always consistent. Workers wait on it. */
static atomic_uint_fast64_t job_seq;
static int32_t sleepers;      /* workers blocked on `wake` (state_lock) */
/* The job's fields, written before its epoch is published (atomics: a straggler may read them
 * while the next job's are written, and then its claim fails). */
static _Atomic(tg_task_fn) job_fn;
static _Atomic(void *) job_arg;
static atomic_int_fast64_t job_ntasks;
static atomic_bool job_exact; /* task i runs on worker i (the peak probe needs one task per thread) */
/* (epoch's low 24 bits << EPOCH_SHIFT) | next task: a task is claimed by a compare-and-swap that
 * keeps the epoch (a straggler would need to sleep through 2^24 jobs to be fooled) */
#define EPOCH_SHIFT 40
#define TASK_MASK ((UINT64_C(1) << EPOCH_SHIFT) - 1)
#define CLAIM_EPOCH(e) ((uint_fast64_t)(e) & ((UINT64_C(1) << (64 - EPOCH_SHIFT)) - 1))
static atomic_uint_fast64_t claim;
static atomic_uint_fast64_t exact_ran[MAX_WORKERS]; /* exact jobs: the (full) epoch worker i last ran task i in */
static atomic_int_fast64_t tasks_done;               /* of the current job */
static atomic_int job_cpu;                           /* the CPU its caller published it from */
static bool worker_asleep[MAX_WORKERS];              /* blocked on `wake` (state_lock) */

/* A task of the current job is done: the last one wakes a caller that sleeps on `done`. */
static void finish_task(int64_t ntasks) {
    if (atomic_fetch_add(&tasks_done, 1) + 1 == ntasks) {
        pthread_mutex_lock(&state_lock);
        pthread_cond_signal(&done);
        pthread_mutex_unlock(&state_lock);
    }
}

/* Run tasks of job `epoch` while there are some; returns at once for another epoch's job. */
static void drain(int32_t worker, uint_fast64_t epoch) {
    for (;;) {
        uint_fast64_t w = atomic_load(&claim);
        if (w >> EPOCH_SHIFT != CLAIM_EPOCH(epoch)) return;
        tg_task_fn fn = atomic_load(&job_fn);
        void *arg = atomic_load(&job_arg);
        int64_t ntasks = atomic_load(&job_ntasks);
        if (atomic_load(&job_exact)) {
            /* fields of this epoch if the epoch still holds now; task `worker` is then unrun */
            if (worker >= ntasks || atomic_load(&claim) >> EPOCH_SHIFT != CLAIM_EPOCH(epoch)) return;
            if (atomic_exchange(&exact_ran[worker], epoch) == epoch) return;
            fn(worker, worker, arg);
            finish_task(ntasks);
            return;
        }
        int64_t t = (int64_t)(w & TASK_MASK);
        if (t >= ntasks) return;
        if (!atomic_compare_exchange_strong(&claim, &w, w + 1)) continue; /* another took it, or a new job */
        fn(t, worker, arg);
        finish_task(ntasks);
    }
}

static void *worker_main(void *arg) {
    int32_t id = (int32_t)(intptr_t)arg;
    tg_place_worker_start(id);
    (void)tg_fp_env_ieee(); /* a worker inherits its creator's environment: start from IEEE's */
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t cur = spin_while_equal(&job_seq, seen);
        if (cur == seen) {
            pthread_mutex_lock(&state_lock);
            sleepers++, worker_asleep[id] = true;
            while ((cur = atomic_load(&job_seq)) == seen) pthread_cond_wait(&wake, &state_lock);
            sleepers--, worker_asleep[id] = false;
            pthread_mutex_unlock(&state_lock);
        }
        seen = cur;
        if (id > (int32_t)(cur & 0xffff)) continue; /* not needed for this job */
        tg_place_worker_job(id, atomic_load(&job_cpu));
        drain(id, cur >> 16);
    }
    return NULL;
}

static int32_t default_threads(void) {
    const char *env = getenv("TGRAD_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n >= 1 && n <= MAX_WORKERS) return (int32_t)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n > MAX_WORKERS ? MAX_WORKERS : n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int32_t)(n > MAX_WORKERS ? MAX_WORKERS : n) : 1;
}

static void pool_init(void) {
    nthreads = default_threads();
    tg_place_init();
}

/* Caller holds state_lock. Start workers 1..want-1 that do not exist yet. */
static void ensure_workers(int32_t want) {
    while (nstarted < want - 1) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &attr, worker_main, (void *)(intptr_t)(nstarted + 1));
        pthread_attr_destroy(&attr);
        if (rc) break; /* run with fewer workers; results do not depend on the count */
        nstarted++;
    }
}

static void run(int64_t ntasks, tg_task_fn fn, void *arg, bool exact) {
    pthread_once(&init_once, pool_init);
    if (ntasks <= 0) return;
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&state_lock);
    int32_t want = exact ? (int32_t)ntasks : nthreads;
    if (want > ntasks) want = (int32_t)ntasks;
    if (want > 1) ensure_workers(want);
    int32_t helpers = want - 1 < nstarted ? want - 1 : nstarted;
    if (exact && helpers < ntasks - 1) ntasks = helpers + 1; /* a task per thread that exists */
    uint_fast64_t epoch = (atomic_load(&job_seq) >> 16) + 1; /* from 1; 48 bits never wrap */
    /* Close the claim word first, under the new epoch: a straggler of the last job may hold a
     * stale (old epoch, next) and read the fields below as they change; its claim must fail. */
    atomic_store(&claim, CLAIM_EPOCH(epoch) << EPOCH_SHIFT | TASK_MASK);
    atomic_store(&job_fn, fn);
    atomic_store(&job_arg, arg);
    atomic_store(&job_ntasks, ntasks);
    atomic_store(&job_exact, exact);
    atomic_store(&tasks_done, 0);
    int cpu = tg_place_current_cpu();
    atomic_store(&job_cpu, cpu);
    atomic_store(&claim, CLAIM_EPOCH(epoch) << EPOCH_SHIFT); /* open: task 0 of this epoch next */
    atomic_store(&job_seq, (uint_fast64_t)epoch << 16 | (uint_fast64_t)(helpers > 0 ? helpers : 0));
    if (helpers > 0 && sleepers) {
        for (int32_t i = 1; i <= helpers; i++)
            if (worker_asleep[i]) tg_place_steer_sleeper(i, cpu);
        pthread_cond_broadcast(&wake);
    }
    pthread_mutex_unlock(&state_lock);
    drain(0, epoch);
    int64_t start = now_ns(), last = start;
    for (int i = 0; atomic_load(&tasks_done) < ntasks; i++) {
        if ((i & 255) == 255 && !keep_spinning(start, &last)) {
            pthread_mutex_lock(&state_lock);
            while (atomic_load(&tasks_done) < ntasks) pthread_cond_wait(&done, &state_lock);
            pthread_mutex_unlock(&state_lock);
            break;
        }
        CPU_RELAX();
    }
    pthread_mutex_unlock(&job_lock);
}

void tg_pool_run(int64_t ntasks, tg_task_fn fn, void *arg) { run(ntasks, fn, arg, false); }

void tg_pool_run_exact(int32_t ntasks, tg_task_fn fn, void *arg) {
    if (ntasks > MAX_WORKERS) ntasks = MAX_WORKERS;
    run(ntasks, fn, arg, true);
}

uint64_t tg_pool_jobs(void) { return (uint64_t)(atomic_load(&job_seq) >> 16); }

int32_t tg_pool_threads(void) {
    pthread_once(&init_once, pool_init);
    pthread_mutex_lock(&state_lock);
    int32_t n = nthreads;
    pthread_mutex_unlock(&state_lock);
    return n;
}

TGRAD_API tgrad_status tgrad_set_num_threads(int32_t n) {
    if (n < 1 || n > MAX_WORKERS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_num_threads: %d outside 1..%d", n, MAX_WORKERS);
    pthread_once(&init_once, pool_init);
    pthread_mutex_lock(&job_lock); /* not while a job runs */
    pthread_mutex_lock(&state_lock);
    nthreads = n;
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&job_lock);
    return TGRAD_OK;
}

TGRAD_API int32_t tgrad_num_threads(void) { return tg_pool_threads(); }
