/* The block32 order on AVX2 FMAs (x86 CPUs without AVX-512; docs/numerics.md, "The block32
 * order"): 3 rows x 16 columns; per block of 32 k each output keeps two fp32 chains in registers
 * (12 ymm: the even elements' products and the odd elements'), each step one FMA (exact product,
 * one rounding; MXCSR's FTZ flushes after rounding and DAZ zeroes subnormal inputs, as
 * contract_step.h's step), then acc + (even + odd) into the tile's accumulators, kept in L1. A and
 * B are packed as exact fp32 widenings (pack_block32.h), padded with +0 to whole blocks, so the
 * kernel only loads and broadcasts. Compiled alone with -mavx2 -mfma (meson). */
#include <immintrin.h>

#include "fp_env.h"

#define MR 3
#define NR 16
#include "avx2_bf16.h" /* transpose8 */
#include "pack_block32.h"

/* A pair's 8 words (even k low, odd k high) as the two rows of exact fp32 widenings, DAZ'd as
 * b32_daz: an element whose exponent is 0 becomes its signed zero. */
static inline void widen_pair(__m256i w, float *even, float *odd) {
    const __m256i expo = _mm256_set1_epi32(0x7f800000), sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i e = _mm256_slli_epi32(w, 16), o = _mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u));
    __m256i ez = _mm256_cmpeq_epi32(_mm256_and_si256(e, expo), _mm256_setzero_si256());
    __m256i oz = _mm256_cmpeq_epi32(_mm256_and_si256(o, expo), _mm256_setzero_si256());
    e = _mm256_blendv_epi8(e, _mm256_and_si256(e, sign), ez);
    o = _mm256_blendv_epi8(o, _mm256_and_si256(o, sign), oz);
    _mm256_storeu_si256((__m256i *)even, e);
    _mm256_storeu_si256((__m256i *)odd, o);
}

/* pack_b_block32_f32 for a column-major B (x @ W.T: each column one of W's rows, its pairs
 * adjacent words): per 8 columns and block, two 8 x 8 word transposes give each pair's 8 columns
 * in a vector, widened and DAZ'd in registers; the same floats as the scalar packing, which the
 * edges (columns past nb, a block past kc) still take. Else the scalar packing. */
static void pack_b(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    if (B->s0 != 1) {
        pack_b_block32_f32(B, k0, kc, n0, nb, dst_);
        return;
    }
    float *dst = dst_;
    int64_t kp = b32_pairs(kc), whole = kc / (2 * B32_PAIRS) * B32_PAIRS; /* pairs in whole blocks inside kc */
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * 2 * NR) {
        if (nb - j0 < NR) { /* the last, narrower panel: scalar */
            pack_b_block32_f32(B, k0, kc, n0 + j0, nb - j0, dst);
            continue;
        }
        for (int h = 0; h < NR / 8; h++) { /* each 8 columns of the panel: their (pair, column) floats */
            const uint16_t *col = B->base + k0 + (n0 + j0 + 8 * h) * B->s1;
            for (int64_t p0 = 0; p0 < whole; p0 += B32_PAIRS) {
                __m256i r[16];
                for (int c = 0; c < 8; c++) {
                    r[c] = _mm256_loadu_si256((const __m256i *)(col + c * B->s1 + 2 * p0));
                    r[8 + c] = _mm256_loadu_si256((const __m256i *)(col + c * B->s1 + 2 * p0 + 16));
                }
                transpose8(r), transpose8(r + 8);
                for (int p = 0; p < B32_PAIRS; p++) {
                    float *d = dst + (p0 + p) * 2 * NR + 8 * h;
                    widen_pair(r[p], d, d + NR);
                }
            }
        }
        if (whole < kp) /* the last, partial block: scalar, its pairs after the whole blocks' */
            pack_b_block32_f32(B, k0 + 2 * whole, kc - 2 * whole, n0 + j0, NR, dst + whole * 2 * NR);
    }
}

/* Per pair, the even elements' two B vectors times each row's even A value, then the odd ones'
 * (each broadcast feeds two FMAs: 10 loads for 12 FMAs, where 6 x 8 tiles needed 14, over the
 * two loads a cycle of a Zen 2 core: +10-15% on the prefill's products, docs/performance.md
 * "Session 26"), the 12 chains in registers. */
static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_, *b = b_;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    float acc[MR][NR] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2; h++)
            _mm256_store_ps(acc[r] + 8 * h, t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc + 8 * h) : _mm256_setzero_ps());
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
        __m256 e0[MR], e1[MR], o0[MR], o1[MR];
#pragma GCC unroll 3
        for (int r = 0; r < MR; r++) e0[r] = e1[r] = o0[r] = o1[r] = _mm256_setzero_ps();
        for (int64_t p = p0; p < p0 + B32_PAIRS; p++) {
            const float *bp = b + p * 2 * NR, *ap = a + p * 2 * MR;
            __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 3
            for (int r = 0; r < MR; r++) {
                __m256 x = _mm256_broadcast_ss(ap + 2 * r + 1);
                e0[r] = _mm256_fmadd_ps(x, b0, e0[r]), e1[r] = _mm256_fmadd_ps(x, b1, e1[r]);
            }
            b0 = _mm256_loadu_ps(bp + NR), b1 = _mm256_loadu_ps(bp + NR + 8);
#pragma GCC unroll 3
            for (int r = 0; r < MR; r++) {
                __m256 x = _mm256_broadcast_ss(ap + 2 * r);
                o0[r] = _mm256_fmadd_ps(x, b0, o0[r]), o1[r] = _mm256_fmadd_ps(x, b1, o1[r]);
            }
        }
#pragma GCC unroll 3
        for (int r = 0; r < MR; r++) {
            _mm256_store_ps(acc[r], _mm256_add_ps(_mm256_load_ps(acc[r]), _mm256_add_ps(e0[r], o0[r])));
            _mm256_store_ps(acc[r] + 8, _mm256_add_ps(_mm256_load_ps(acc[r] + 8), _mm256_add_ps(e1[r], o1[r])));
        }
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
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2; h++) _mm256_storeu_ps(t->acc + r * t->ldacc + 8 * h, _mm256_load_ps(acc[r] + 8 * h));
    }
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

_Static_assert(256 % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");
const tg_ukernel tg_ukernel_avx2_block32 = {
    .name = "avx2_block32", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 8, .kc = 256,
    .pack_a = pack_a_block32_f32, .pack_b = pack_b, .kernel = kernel, .available = available,
    .peak = tg_avx2_fma_peak, .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
