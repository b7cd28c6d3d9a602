/* AVX512F variant (CPUs without the bf16 dot instruction): 12 rows x 32 columns of fp32 FMAs,
 * two per k-pair in the contract's order (odd product, then even). Operands are packed as exact
 * fp32 widenings; MXCSR's FTZ (tininess after rounding on x86, as the contract says) and DAZ are
 * set for the kernel's duration and restored. */
#include <immintrin.h>

#define MR 12
#define NR 32
#include "pack_f32_pairs.h"
#include "store_bf16_avx512.h"

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_, *b = b_;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) {
        acc[r][0] = t->load ? _mm512_loadu_ps(t->acc + r * t->ldacc) : _mm512_setzero_ps();
        acc[r][1] = t->load ? _mm512_loadu_ps(t->acc + r * t->ldacc + 16) : _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < kpairs; p++) {
        const float *bp = b + p * 2 * NR, *ap = a + p * 2 * MR;
        __m512 bo0 = _mm512_loadu_ps(bp), bo1 = _mm512_loadu_ps(bp + 16);
        __m512 be0 = _mm512_loadu_ps(bp + NR), be1 = _mm512_loadu_ps(bp + NR + 16);
        for (int r = 0; r < MR; r++) {
            __m512 ao = _mm512_set1_ps(ap[2 * r]), ae = _mm512_set1_ps(ap[2 * r + 1]);
            acc[r][0] = _mm512_fmadd_ps(ae, be0, _mm512_fmadd_ps(ao, bo0, acc[r][0]));
            acc[r][1] = _mm512_fmadd_ps(ae, be1, _mm512_fmadd_ps(ao, bo1, acc[r][1]));
        }
    }
    if (t->out) {
        __mmask16 m0 = col_mask(t->cols), m1 = col_mask(t->cols - 16);
        for (int r = 0; r < MR && r < t->rows; r++) {
            store_bf16x16(t->out + r * t->ldout, acc[r][0], m0);
            store_bf16x16(t->out + r * t->ldout + 16, acc[r][1], m1);
        }
    } else {
        for (int r = 0; r < MR; r++) {
            _mm512_storeu_ps(t->acc + r * t->ldacc, acc[r][0]);
            _mm512_storeu_ps(t->acc + r * t->ldacc + 16, acc[r][1]);
        }
    }
    _mm_setcsr(csr);
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static double peak(int64_t iters) {
    __m512 acc[24];
#pragma GCC unroll 32
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i); /* distinct: no chain merges */
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-9f);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < 24; i++) acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
        __asm__ volatile("" : "+v"(x));
    }
    __m512 s = acc[0];
#pragma GCC unroll 32
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 24 * 32;
}

const tg_ukernel tg_ukernel_avx512f = {
    .name = "avx512f", .mr = MR, .nr = NR, .entry_bytes = 8, .kc = 256, .pack_a = pack_a, .pack_b = pack_b,
    .kernel = kernel, .available = available, .peak = peak };
