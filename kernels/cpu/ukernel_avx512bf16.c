/* AVX512-BF16 micro-kernel: 12 rows x 32 columns, 24 zmm accumulators. vdpbf16ps computes, per
 * fp32 lane, acc + odd product (rounded, flushed) + even product (rounded, flushed), with subnormal
 * inputs as zero: exactly the contract's step order, so this kernel is the contract in hardware.
 * Built only into the object compiled with -mavx512bf16; chosen at run time by cpuid. */
#include <immintrin.h>

#include "ukernel.h"

enum { MR = 12, NR = 32 };

static void kernel(int64_t kpairs, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, int accumulate) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < kpairs; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(b + p * NR));
        __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + p * NR + 16));
        const uint32_t *ap = a + p * MR;
        for (int r = 0; r < MR; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

const tg_ukernel tg_ukernel_avx512bf16 = { "avx512bf16", MR, NR, kernel, available };
