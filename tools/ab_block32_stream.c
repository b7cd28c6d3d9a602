/* A/B of the few-row hook (issue 38): the pairwise order's skinny kernel (avx512bf16) against the
 * block32 order's (avx512bf16_block32), which plan.c does not route to yet: each called directly
 * as the frame would (A packed by the variant's pack_a into a 16-row panel, then the hook over the
 * columns, split in halves between 2 threads), paired and interleaved in one process. Prints the median times, GFLOP/s, the paired median
 * ratio block32 / pairwise with its interquartile range, and the ratio of the best times.
 *
 *     meson setup build && ninja -C build
 *     cc -O2 -DTGRAD_HAVE_X86_VARIANTS -Ikernels/cpu tools/ab_block32_stream.c \
 *        build/libtgrad/libtgrad_avx512bf16.a build/libtgrad/libtgrad_avx512bf16_block32.a -lpthread -o ab_stream
 *     ./ab_stream 40        (rounds; a second argument picks one shape by index)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ukernel.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const tg_ukernel *uk;
    int64_t M, K, N, n0, n1;
    const uint16_t *a, *b;
    uint16_t *out;
    uint32_t *ap;
} job;

static void *work(void *p) {
    job *J = p;
    const tg_ukernel *uk = J->uk;
    tg_operand A = { J->a, J->K, 1 };
    uk->pack_a(&A, 0, J->M, 0, J->K, 16, J->ap);
    uk->skinny(J->K, J->ap, (int32_t)J->M, J->b + J->n0, J->N, (int32_t)(J->n1 - J->n0), J->out + J->n0, J->N);
    return NULL;
}

static double run(const tg_ukernel *uk, int threads, int64_t M, int64_t K, int64_t N, const uint16_t *a,
                  const uint16_t *b, uint16_t *out, uint32_t **ap) {
    job J[2];
    pthread_t th[2];
    double t0 = now();
    int64_t half = (N / threads + 31) / 32 * 32;
    for (int i = 0; i < threads; i++) {
        J[i] = (job){ uk, M, K, N, i * half, i == threads - 1 ? N : (i + 1) * half, a, b, out, ap[i] };
        if (i) pthread_create(&th[i], NULL, work, &J[i]);
    }
    work(&J[0]);
    for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
    return now() - t0;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    static const int64_t shapes[][3] = { { 16, 4096, 4096 }, { 16, 1024, 4096 }, { 16, 4096, 1024 },
                                         { 8, 4096, 4096 },  { 4, 4096, 4096 },  { 12, 2048, 2048 } };
    int reps = argc > 1 ? atoi(argv[1]) : 40, only = argc > 2 ? atoi(argv[2]) : -1;
    if (reps < 1 || reps > 400) reps = 40;
    const tg_ukernel *P = &tg_ukernel_avx512bf16, *Q = &tg_ukernel_avx512bf16_block32;
    if (!P->available() || !Q->available()) {
        printf("this CPU has no AVX512-BF16\n");
        return 0;
    }
    for (int threads = 2; threads >= 1; threads--)
        for (int s = 0; s < 6; s++) {
            if (only >= 0 && s != only) continue;
            int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            uint16_t *a = malloc((size_t)(M * K) * 2), *b = malloc((size_t)(K * N) * 2);
            uint16_t *o1 = malloc((size_t)(M * N) * 2), *o2 = malloc((size_t)(M * N) * 2);
            for (int64_t i = 0; i < M * K; i++) a[i] = (uint16_t)(0x3f80 ^ (i * 7 & 0x7f));
            for (int64_t i = 0; i < K * N; i++) b[i] = (uint16_t)(0x3c00 ^ (i * 13 & 0x7f));
            uint32_t *ap[2] = { aligned_alloc(64, (size_t)(16 * (K / 2 + 32)) * 4),
                                aligned_alloc(64, (size_t)(16 * (K / 2 + 32)) * 4) };
            double tp[400], tq[400], ratio[400];
            run(P, threads, M, K, N, a, b, o1, ap), run(Q, threads, M, K, N, a, b, o2, ap); /* warm */
            for (int r = 0; r < reps; r++) {
                for (int i = 0; i < 2; i++) /* alternating which goes first */
                    if ((r + i) & 1) tq[r] = run(Q, threads, M, K, N, a, b, o2, ap);
                    else tp[r] = run(P, threads, M, K, N, a, b, o1, ap);
                ratio[r] = tq[r] / tp[r];
            }
            qsort(tp, (size_t)reps, 8, cmp), qsort(tq, (size_t)reps, 8, cmp), qsort(ratio, (size_t)reps, 8, cmp);
            double flops = 2.0 * (double)(M * K * N);
            printf("threads %d %4lldx%lldx%lld: pairwise %.3f ms %.1f GFLOP/s | block32 %.3f ms %.1f GFLOP/s | "
                   "paired median %.3f [IQR %.3f, %.3f], best-of %.3f\n", threads, (long long)M, (long long)K,
                   (long long)N, tp[reps / 2] * 1e3, flops / tp[reps / 2] / 1e9,
                   tq[reps / 2] * 1e3, flops / tq[reps / 2] / 1e9, ratio[reps / 2], ratio[reps / 4],
                   ratio[3 * reps / 4], tq[0] / tp[0]);
            free(a), free(b), free(o1), free(o2), free(ap[0]), free(ap[1]);
        }
    return 0;
}
