/* The block32 order on AVX2 FMAs (x86 CPUs without AVX-512; docs/numerics.md, "The block32
 * order"): 6 rows x 8 columns; per block of 32 k each output keeps two fp32 chains in registers
 * (12 ymm: the even elements' products and the odd elements'), each step one FMA (exact product,
 * one rounding; MXCSR's FTZ flushes after rounding and DAZ zeroes subnormal inputs, as
 * contract_step.h's step), then acc + (even + odd) into the tile's accumulators, kept in L1. A and
 * B are packed as exact fp32 widenings (pack_block32.h), padded with +0 to whole blocks, so the
 * kernel only loads and broadcasts. Compiled alone with -mavx2 -mfma (meson). */
#include <immintrin.h>

#include "fp_env.h"

#define MR 6
#define NR 8
#include "pack_block32.h"

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_, *b = b_;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    float acc[MR][NR] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++)
        _mm256_store_ps(acc[r], t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc) : _mm256_setzero_ps());
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
        __m256 e[MR], o[MR];
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) e[r] = o[r] = _mm256_setzero_ps();
        for (int64_t p = p0; p < p0 + B32_PAIRS; p++) {
            __m256 be = _mm256_loadu_ps(b + p * 2 * NR), bo = _mm256_loadu_ps(b + p * 2 * NR + NR);
            const float *ap = a + p * 2 * MR;
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                o[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + 2 * r), bo, o[r]);
                e[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + 2 * r + 1), be, e[r]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) _mm256_store_ps(acc[r], _mm256_add_ps(_mm256_load_ps(acc[r]), _mm256_add_ps(e[r], o[r])));
    }
    _mm_setcsr(csr);
    if (t->out) {
        for (int32_t r = 0; r < t->rows; r++)
            for (int32_t j = 0; j < t->cols; j++) {
                union { float f; uint32_t u; } x = { acc[r][j] };
                t->out[r * t->ldout + j] = (x.u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fc0
                                                                              : (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
            }
    } else {
        for (int r = 0; r < MR; r++) _mm256_storeu_ps(t->acc + r * t->ldacc, _mm256_load_ps(acc[r]));
    }
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

_Static_assert(256 % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");
const tg_ukernel tg_ukernel_avx2_block32 = {
    .name = "avx2_block32", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 8, .kc = 256,
    .pack_a = pack_a_block32_f32, .pack_b = pack_b_block32_f32, .kernel = kernel, .available = available,
    .peak = tg_avx2_fma_peak, .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
