/* AVX512F variant (CPUs without the bf16 dot instruction): 12 rows x 32 columns of fp32 FMAs,
 * two per k-pair in the contract's order (odd product, then even). Operands are packed as exact
 * fp32 widenings; MXCSR's FTZ (tininess after rounding on x86, as the contract says) and DAZ are
 * set for the kernel's duration and restored. */
#include <immintrin.h>

#define MR 12
#define NR 32
#include "pack_f32_pairs.h"
#include "store_bf16_avx512.h"
#include "pack_avx512.h"

/* bf16 words (even element low, odd high) -> the odd and the even elements as fp32 */
static inline __m512 odd_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u))); }
static inline __m512 even_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }

/* Row-major A: 16 pairs of a panel's rows per transpose; each pair becomes mr (odd, even) fp32
 * entries. */
static void pack_a_rows(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, float *dst) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    int64_t kp = (kc + 1) / 2, full = kc / 2;
    __mmask16 rest = (__mmask16)((1u << (2 * mr - 16)) - 1u); /* entries of rows 8..mr-1 */
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * 2 * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            __m512i r[16];
            int64_t pairs = load_pairs_transposed(A->base + (m0 + i0) * A->s0 + k0, A->s0, rows, p0, kp, full, r);
            for (int64_t p = 0; p < pairs; p++) {
                __m512 o = odd_f32(r[p]), e = even_f32(r[p]);
                float *d = dst + (p0 + p) * 2 * mr;
                _mm512_storeu_ps(d, _mm512_permutex2var_ps(o, lo, e));
                _mm512_mask_storeu_ps(d + 16, rest, _mm512_permutex2var_ps(o, hi, e));
            }
        }
    }
}

/* Row-major B: 16 columns of rows 2p and 2p+1 widen to the odd and the even fp32 runs. */
static void pack_b_rows(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, float *dst) {
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * 2 * NR) {
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + n0 + j0;
            float *d = dst + p * 2 * NR;
            for (int h = 0; h < NR; h += 16) {
                int64_t w = nb - j0 - h;
                __mmask16 m = w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1u);
                __m512i e = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, even + h));
                __m512i o = 2 * p + 1 < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, even + B->s0 + h))
                                           : _mm512_setzero_si512();
                _mm512_storeu_ps(d + h, _mm512_castsi512_ps(_mm512_slli_epi32(daz16(o), 16)));
                _mm512_storeu_ps(d + NR + h, _mm512_castsi512_ps(_mm512_slli_epi32(daz16(e), 16)));
            }
        }
    }
}

static void pack_a_fast(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst) {
    if (A->s1 == 1 && mr > 8 && mr <= 16) pack_a_rows(A, m0, mb, k0, kc, mr, dst);
    else pack_a(A, m0, mb, k0, kc, mr, dst);
}

static void pack_b_fast(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows(B, k0, kc, n0, nb, dst);
    else pack_b(B, k0, kc, n0, nb, dst);
}

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
        __mmask32 m = col_mask32(t->cols);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
            if (r < t->rows) store_bf16x32(t->out + r * t->ldout, acc[r][0], acc[r][1], m, t->stream);
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
    .name = "avx512f", .mr = MR, .nr = NR, .entry_bytes = 8, .kc = 256, .pack_a = pack_a_fast, .pack_b = pack_b_fast,
    .kernel = kernel, .available = available, .peak = peak };
