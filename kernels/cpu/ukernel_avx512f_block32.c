/* The block32 order on AVX-512F FMAs (CPUs without AMX; docs/numerics.md, "The block32 order"):
 * 6 rows x 32 columns; per block of 32 k each output keeps two fp32 chains in registers (the
 * even elements' products, the odd elements'), 24 zmm, each step one FMA (exact product, one
 * rounding; MXCSR's FTZ flushes after rounding and DAZ zeroes subnormal inputs, as
 * contract_step.h's step), then acc + (even + odd) into the tile's accumulators, kept in L1. A is
 * packed as exact fp32 widenings per pair (odd, even; broadcast from memory by the FMAs), B as
 * bf16 pair words (pack_block32_avx512.h) widened in the kernel; both padded with +0 to whole
 * blocks. Compiled alone with -mavx512f -mavx512bw (meson). */
#include <immintrin.h>

#include "fp_env.h"

#define MR 6
#define NR 32
#include "pack_bf16_pairs.h"
#include "store_bf16_avx512.h"
#include "pack_avx512.h"
#include "pack_block32.h"
#include "pack_block32_avx512.h"


static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_;
    const uint32_t *b = b_;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    float acc[MR][NR] __attribute__((aligned(64)));
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2; h++)
            _mm512_store_ps(acc[r] + 16 * h, t->load ? _mm512_loadu_ps(t->acc + r * t->ldacc + 16 * h) : _mm512_setzero_ps());
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
        __m512 e[MR][2], o[MR][2];
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) e[r][0] = e[r][1] = o[r][0] = o[r][1] = _mm512_setzero_ps();
        for (int64_t p = p0; p < p0 + B32_PAIRS; p++) {
            __m512i w0 = _mm512_loadu_si512(b + p * NR), w1 = _mm512_loadu_si512(b + p * NR + 16);
            __m512 be0 = even_f32(w0), bo0 = odd_f32(w0), be1 = even_f32(w1), bo1 = odd_f32(w1);
            const float *ap = a + p * 2 * MR;
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                __m512 ao = _mm512_set1_ps(ap[2 * r]), ae = _mm512_set1_ps(ap[2 * r + 1]);
                e[r][0] = _mm512_fmadd_ps(ae, be0, e[r][0]);
                e[r][1] = _mm512_fmadd_ps(ae, be1, e[r][1]);
                o[r][0] = _mm512_fmadd_ps(ao, bo0, o[r][0]);
                o[r][1] = _mm512_fmadd_ps(ao, bo1, o[r][1]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2; h++)
                _mm512_store_ps(acc[r] + 16 * h, _mm512_add_ps(_mm512_load_ps(acc[r] + 16 * h), _mm512_add_ps(e[r][h], o[r][h])));
    }
    _mm_setcsr(csr);
    if (t->out) {
        __mmask32 cols = col_mask32(t->cols);
        for (int32_t r = 0; r < t->rows; r++)
            store_bf16x32(t->out + r * t->ldout, _mm512_load_ps(acc[r]), _mm512_load_ps(acc[r] + 16), cols, t->stream);
    } else {
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2; h++) _mm512_storeu_ps(t->acc + r * t->ldacc + 16 * h, _mm512_load_ps(acc[r] + 16 * h));
    }
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

_Static_assert(256 % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");
const tg_ukernel tg_ukernel_avx512f_block32 = {
    .name = "avx512f_block32", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 4, .kc = 256, .pack_a = pack_a_block32_f32,
    .pack_b = pack_b_block32_avx512, .kernel = kernel, .available = available, .peak = tg_avx512f_fma_peak,
    .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
