/* Probes to pair with a matmul: the measured peak of the variant's core instruction, a run of a
 * given number of flops, a read of a given buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* ---- measured peak ---- */
typedef struct {
    const tg_ukernel *uk;
    int64_t iters;
    double flops[256];
} probe_job;

static void probe_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    probe_job *P = arg;
    P->flops[task] = P->uk->peak(P->iters);
}

/* The probes' thread count: 0 means the pool's; *n gets the count to run on. */
static tgrad_status probe_threads(int32_t threads, const char *what, int32_t *n) {
    if (threads < 0 || threads > 256)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: threads %d outside 0..256", what, threads);
    *n = threads ? threads : tg_pool_threads();
    return TGRAD_OK;
}

/* Tasks [0, n) of a probe, each on its own thread (the calling one alone for n == 1). */
static void run_probe(int32_t n, tg_task_fn fn, void *arg) {
    if (n == 1) fn(0, 0, arg);
    else tg_pool_run_exact(n, fn, arg);
}

TGRAD_API tgrad_status tgrad_cpu_peak_gflops(int32_t threads, double *gflops) {
    if (!gflops) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cpu_peak_gflops: output pointer is NULL");
    int32_t n = 1;
    tgrad_status s = probe_threads(threads, "cpu_peak_gflops", &n);
    if (s) return s;
    probe_job P = { .uk = tg_cpu_order_current() };
    /* size the run to ~20 ms per thread, then measure the best of three */
    P.iters = 1000;
    double t0 = tg_cpu_now_s();
    double f = P.uk->peak(P.iters);
    double dt = tg_cpu_now_s() - t0;
    if (dt > 0) P.iters = (int64_t)(P.iters * (0.02 / dt)) + 1;
    (void)f;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        t0 = tg_cpu_now_s();
        run_probe(n, probe_task, &P);
        dt = tg_cpu_now_s() - t0;
        double total = 0;
        for (int32_t i = 0; i < n; i++) total += P.flops[i];
        if (dt > 0 && total / dt > best) best = total / dt;
    }
    *gflops = best / 1e9;
    return TGRAD_OK;
}

/* ---- limits to pair with a matmul ---- */
TGRAD_API tgrad_status tgrad_cpu_peak_run(int32_t threads, double flops) {
    int32_t n = 1;
    tgrad_status s = probe_threads(threads, "cpu_peak_run", &n);
    if (s) return s;
    if (!(flops >= 0) || flops > 1e15)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cpu_peak_run: flops %g outside 0..1e15", flops);
    probe_job P = { .uk = tg_cpu_order_current() };
    double per_iter = P.uk->peak(1);
    double iters = flops / n / per_iter;
    P.iters = (int64_t)iters + ((double)(int64_t)iters < iters);
    if (P.iters > 0) run_probe(n, probe_task, &P);
    return TGRAD_OK;
}

typedef uint64_t read_vec __attribute__((vector_size(32)));
typedef struct {
    const unsigned char *data;
    int64_t bytes, part;
} read_job;
/* Where every read's result goes: a store the compiler must keep (a sink inside the job, never
 * read, let it drop the whole loop when the task ran inline at one thread). */
static _Atomic uint64_t read_sink;

static void read_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    read_job *R = arg;
    int64_t lo = task * R->part, hi = lo + R->part < R->bytes ? lo + R->part : R->bytes;
    const unsigned char *p = R->data;
    read_vec x0 = { 0 }, x1 = { 0 }, x2 = { 0 }, x3 = { 0 }, v;
    int64_t i = lo;
    for (; i + 128 <= hi; i += 128) { /* four independent chains: loads, not XORs, set the pace */
        memcpy(&v, p + i, 32), x0 ^= v;
        memcpy(&v, p + i + 32, 32), x1 ^= v;
        memcpy(&v, p + i + 64, 32), x2 ^= v;
        memcpy(&v, p + i + 96, 32), x3 ^= v;
    }
    x0 ^= x1 ^ x2 ^ x3;
    uint64_t s = x0[0] ^ x0[1] ^ x0[2] ^ x0[3];
    for (; i < hi; i++) s ^= p[i];
    atomic_fetch_xor_explicit(&read_sink, s, memory_order_relaxed); /* the loads have a use */
}

TGRAD_API tgrad_status tgrad_cpu_read_run(const void *data, int64_t bytes, int32_t threads) {
    int32_t n = 1;
    tgrad_status s = probe_threads(threads, "cpu_read_run", &n);
    if (s) return s;
    if (bytes < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cpu_read_run: bytes %lld is negative", (long long)bytes);
    if (!data && bytes) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cpu_read_run: data is NULL");
    if (!bytes) return TGRAD_OK;
    read_job job, *R = &job;
    /* contiguous parts, whole 64-byte lines each (the last takes the rest) */
    int64_t part = (bytes + n - 1) / n;
    part = (part + 63) / 64 * 64;
    *R = (read_job){ .data = data, .bytes = bytes, .part = part };
    run_probe((int32_t)((bytes + part - 1) / part), read_task, R);
    return TGRAD_OK;
}
