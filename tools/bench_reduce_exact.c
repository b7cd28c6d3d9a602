/* The exact sum's speed on one thread, against the machine's read bandwidth (docs/performance.md):
 * a correctly rounded sum over 64 MiB of bf16, and the sum of each row of a [4096, 4096] bf16
 * matrix (tg_exact_rows: one accumulator, add and rounding per row, the next row prefetched), both
 * with the kernel tg_exact_acc_add picks and with the portable loops, interleaved with
 * a plain vectorized read of the same 64 MiB. Prints the median and the
 * fastest of each and its paired fraction of the read bandwidth; one row summed 4096 times from
 * L1, the kernel's compute-bound speed (its headroom over the memory); the AVX-512F kernel on the
 * same bf16 data (what CPUs without AVX512-BF16 run); and 64 MiB of float32 (the same values).
 *
 *   ninja -C build tests/c/bench_reduce_exact && build/tests/c/bench_reduce_exact [reps]
 *   TGRAD_CPU_ISA=avx2 build/tests/c/bench_reduce_exact   (the AVX2 kernels as "best")
 *
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: on a shared VM the
 * wall clock also runs while other processes hold the core.
 * Linked from libtgrad's objects (the engine is hidden in the shared library). The data are
 * normal-like (a sum of four uniforms, rounded to bf16), the common case the window covers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../libtgrad/src/ops/reduce_exact.h"

/* CPU time of this thread: on a shared machine wall time also counts other processes' slices
 * (docs/performance.md); a memory-bound loop's CPU time still includes its stalls. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static volatile uint32_t sink;
static uint32_t rows_out[4096];
static volatile uint64_t read_sink;

/* A plain read of every byte, four independent 16-byte chains (loads, not XORs, set the pace).
 * (tgrad_cpu_read_run on one thread is not used: its result has no use the compiler must keep.) */
typedef uint64_t vec2 __attribute__((vector_size(16)));
static void read_all(const void *data, int64_t bytes) {
    const unsigned char *p = data;
    vec2 x0 = { 0 }, x1 = { 0 }, x2 = { 0 }, x3 = { 0 }, v;
    int64_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
        memcpy(&v, p + i, 16), x0 ^= v;
        memcpy(&v, p + i + 16, 16), x1 ^= v;
        memcpy(&v, p + i + 32, 16), x2 ^= v;
        memcpy(&v, p + i + 48, 16), x3 ^= v;
    }
    x0 ^= x1 ^ x2 ^ x3;
    read_sink = x0[0] ^ x0[1];
}

enum { READ, SUM_BEST, SUM_PORTABLE, ROWS_BEST, ROWS_PORTABLE, ROW_L1, ROW_L1_PORTABLE, SUM_BF16_F, SUM_F32, COLS, NCASES };
static const char *const names[NCASES] = { "read bandwidth (plain read loop)", "exact sum, 64 MiB, best kernel",
                                           "exact sum, 64 MiB, portable", "row sums [4096,4096], best kernel",
                                           "row sums [4096,4096], portable",
                                           "one 4096 row x 4096, in L1, best kernel",
                                           "one 4096 row x 4096, in L1, portable",
                                           "exact sum, 64 MiB, avx512f kernel (bf16)",
                                           "exact sum, 64 MiB float32, best kernel",
                                           "column sums [4096,4096] (tg_exact_cols)" };

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1) reps = 1;
    const int64_t n = (int64_t)32 << 20; /* 64 MiB of bf16 */
    uint16_t *x = aligned_alloc(64, (size_t)n * 2);
    if (!x) return 2;
    uint64_t s = 88172645463325252u;
    for (int64_t i = 0; i < n; i++) {
        double u = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            u += (double)(s >> 11) * 0x1p-53;
        }
        float f = (float)(u - 2.0);
        uint32_t b;
        memcpy(&b, &f, 4);
        x[i] = (uint16_t)((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
    }
    tg_exact_bf16_kernel best = tg_exact_bf16_kernel_for_selection();
    uint32_t *wide = aligned_alloc(64, (size_t)n * 2); /* the first half, as float32: 64 MiB */
    if (!wide) return 2;
    for (int64_t i = 0; i < n / 2; i++) wide[i] = (uint32_t)x[i] << 16;
    double *t[NCASES];
    for (int c = 0; c < NCASES; c++) t[c] = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < NCASES; c++) {
            tg_exact_acc a;
            double t0 = now_s();
            if (c == COLS) {
                tg_exact_cols(x, TG_RDT_BF16, 4096, 4096, 4096, 1, 0, TG_RDT_BF16, rows_out);
                sink = rows_out[4095];
            } else if (c == SUM_BF16_F || c == SUM_F32) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
                tg_exact_acc_init(&a);
                if (c == SUM_BF16_F && tg_exact_avx512f_available()) tg_exact_add_bf16_avx512f(&a, x, n, NULL, 0);
                else if (c == SUM_F32) tg_exact_f32_kernel_for_selection()(&a, wide, n / 2, NULL, 0);
                sink = tg_exact_acc_round(&a, TG_RDT_BF16);
#endif
            } else if (c == READ) {
                read_all(x, n * 2);
            } else if (c == SUM_BEST || c == SUM_PORTABLE) {
                tg_exact_acc_init(&a);
                if (c == SUM_BEST) best(&a, x, n, NULL, 0);
                else tg_exact_add_portable(&a, x, TG_RDT_BF16, n, 1);
                sink = tg_exact_acc_round(&a, TG_RDT_BF16);
            } else if (c == ROW_L1) { /* compute-bound: the same row again and again */
                for (int64_t row = 0; row < 4096; row++) {
                    tg_exact_acc_init(&a);
                    best(&a, x, 4096, NULL, 0);
                    sink = tg_exact_acc_round(&a, TG_RDT_BF16);
                }
            } else if (c == ROW_L1_PORTABLE) {
                for (int64_t row = 0; row < 4096; row++) {
                    tg_exact_acc_init(&a);
                    tg_exact_add_portable(&a, x, TG_RDT_BF16, 4096, 1);
                    sink = tg_exact_acc_round(&a, TG_RDT_BF16);
                }
            } else if (c == ROWS_BEST) { /* as a reduction over axis -1 runs: the next row prefetched */
                tg_exact_rows(x, TG_RDT_BF16, 4096, 4096, 4096, 1, 0, TG_RDT_BF16, rows_out);
                sink = rows_out[4095];
            } else {
                for (int64_t row = 0; row < 4096; row++) {
                    tg_exact_acc_init(&a);
                    tg_exact_add_portable(&a, x + row * 4096, TG_RDT_BF16, 4096, 1);
                    sink = tg_exact_acc_round(&a, TG_RDT_BF16);
                }
            }
            t[c][r] = now_s() - t0;
        }
    double bytes[NCASES] = { (double)n * 2, (double)n * 2, (double)n * 2, 4096.0 * 4096 * 2, 4096.0 * 4096 * 2,
                             4096.0 * 4096 * 2, 4096.0 * 4096 * 2, (double)n * 2, (double)n * 2, 4096.0 * 4096 * 2 };
    double med[NCASES], *ratio = calloc((size_t)reps, sizeof(double));
    printf("kernels: the CPU variant selection's (%s%s; TGRAD_CPU_ISA=avx2 or portable picks those)\n",
           tgrad_cpu_isa_forced() ? "forced " : "auto, ", tgrad_cpu_isa_forced() ? tgrad_cpu_isa() : "the most capable");
    printf("single thread, %d repetitions, interleaved, thread CPU time; 'of read': the median over\n"
           "repetitions of read time / case time (paired, so that the machine's drift cancels)\n", reps);
    for (int c = 0; c < NCASES; c++) {
        for (int r = 0; r < reps; r++) ratio[r] = (t[READ][r] / bytes[READ]) / (t[c][r] / bytes[c]);
        qsort(ratio, (size_t)reps, sizeof(double), by_value);
        double paired = ratio[reps / 2];
        qsort(t[c], (size_t)reps, sizeof(double), by_value);
        med[c] = t[c][reps / 2];
        printf("%-40s median %8.3f ms  %6.2f GB/s   fastest %8.3f ms  %6.2f GB/s", names[c], med[c] * 1e3,
               bytes[c] / med[c] * 1e-9, t[c][0] * 1e3, bytes[c] / t[c][0] * 1e-9);
        if (c != READ) printf("   %.2f of read", paired);
        printf("\n");
    }
    free(ratio);
    for (int c = 0; c < NCASES; c++) free(t[c]);
    free(x);
    free(wide);
    return 0;
}
