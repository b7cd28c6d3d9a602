/* AVX2+FMA variant: 6 rows x 16 columns of fp32 FMAs (12 ymm accumulators), two per k-pair in
 * the contract's order (odd product, then even); exact fp32 operands (A packed as fp32, B as
 * bf16 pair words widened in the kernel, as on AVX512F), MXCSR FTZ|DAZ for the kernel's
 * duration. */
#include <immintrin.h>

#define MR 6
#define NR 16
#include "pack_f32_pairs.h"
#include "pack_bf16_pairs.h"

/* ---- packing: vector paths for row-major A and row-major B ---- */

static inline __m256i daz16(__m256i w) { /* bf16 with a zero exponent -> signed zero */
    __m256i sub = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f80)), _mm256_setzero_si256());
    return _mm256_blendv_epi8(w, _mm256_and_si256(w, _mm256_set1_epi16((short)0x8000)), sub);
}

/* Row-major A: 8 pairs of a row per load, widened to (odd, even) fp32 entries, one 8-byte store
 * per pair; the pairs past the last multiple of 8 (and an odd K's last element) go one by one. */
static void pack_a_rows(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, float *dst) {
    int64_t kp = (kc + 1) / 2, full = kc / 2, vec = full / 8 * 8, step = 2 * mr;
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * step) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            float *d = dst + 2 * r;
            if (r >= rows) {
                for (int64_t p = 0; p < kp; p++) d[p * step] = d[p * step + 1] = 0.0f;
                continue;
            }
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0;
            for (int64_t p = 0; p < vec; p += 8) {
                __m256i w = daz16(_mm256_loadu_si256((const __m256i *)(row + 2 * p)));
                __m256 o = _mm256_castsi256_ps(_mm256_and_si256(w, odd_mask));
                __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
                /* (odd, even) of pairs 0 1 4 5 and 2 3 6 7 */
                __m256d lo = _mm256_castps_pd(_mm256_unpacklo_ps(o, e)), hi = _mm256_castps_pd(_mm256_unpackhi_ps(o, e));
                __m128d l0 = _mm256_castpd256_pd128(lo), l1 = _mm256_extractf128_pd(lo, 1);
                __m128d h0 = _mm256_castpd256_pd128(hi), h1 = _mm256_extractf128_pd(hi, 1);
                float *q = d + p * step;
                _mm_storel_pd((double *)q, l0), _mm_storeh_pd((double *)(q + step), l0);
                _mm_storel_pd((double *)(q + 2 * step), h0), _mm_storeh_pd((double *)(q + 3 * step), h0);
                _mm_storel_pd((double *)(q + 4 * step), l1), _mm_storeh_pd((double *)(q + 5 * step), l1);
                _mm_storel_pd((double *)(q + 6 * step), h1), _mm_storeh_pd((double *)(q + 7 * step), h1);
            }
            for (int64_t p = vec; p < kp; p++) {
                d[p * step] = 2 * p + 1 < kc ? tg_widen_daz(row[2 * p + 1]) : 0.0f;
                d[p * step + 1] = tg_widen_daz(row[2 * p]);
            }
        }
    }
}

/* Row-major B: the pair words of 16 columns from rows 2p and 2p+1 (two unpacks, one lane fix). */
static void pack_b_rows(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 + NR <= nb; j0 += NR, dst += kp * NR) {
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + n0 + j0;
            __m256i e = daz16(_mm256_loadu_si256((const __m256i *)even));
            __m256i o = 2 * p + 1 < kc ? daz16(_mm256_loadu_si256((const __m256i *)(even + B->s0))) : _mm256_setzero_si256();
            __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o); /* columns 0-3 8-11, 4-7 12-15 */
            _mm256_storeu_si256((__m256i *)(dst + p * NR), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256((__m256i *)(dst + p * NR + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
    }
    int64_t done = nb / NR * NR;
    if (done < nb) pack_b_bf16(B, k0, kc, n0 + done, nb - done, dst);
}

static void pack_a_fast(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst) {
    if (A->s1 == 1) pack_a_rows(A, m0, mb, k0, kc, mr, dst);
    else pack_a_f32(A, m0, mb, k0, kc, mr, dst);
}

static void pack_b_fast(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows(B, k0, kc, n0, nb, dst);
    else pack_b_bf16(B, k0, kc, n0, nb, dst);
}

/* ---- micro-kernel ---- */

static inline void store_bf16x8(uint16_t *dst, __m256 v, int32_t cols) {
    float f[8];
    _mm256_storeu_ps(f, v);
    for (int32_t j = 0; j < cols && j < 8; j++) {
        union { float f; uint32_t u; } x = { f[j] };
        dst[j] = (x.u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0
                                                   : (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
    }
}

static inline __m256i rne_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
}

static inline void store_row(uint16_t *o, __m256 lo, __m256 hi, int32_t cols) {
    if (cols >= NR) {
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rne_bf16(lo), rne_bf16(hi)), 0xd8);
        _mm256_storeu_si256((__m256i *)o, packed);
    } else {
        store_bf16x8(o, lo, cols);
        if (cols > 8) store_bf16x8(o + 8, hi, cols - 8);
    }
}

/* Accumulators are named variables (not an array) so that all 12 stay in the 16 ymm registers:
 * with an array GCC spills them every iteration. */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_;
    const uint32_t *b = b_;
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
#define DECL(r) __m256 c##r##0 = t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc) : _mm256_setzero_ps(), \
                     c##r##1 = t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc + 8) : _mm256_setzero_ps();
    ROWS(DECL)
    for (int64_t p = 0; p < kpairs; p++) {
        const uint32_t *bp = b + p * NR;
        const float *ap = a + p * 2 * MR;
        /* the odd elements are the words' high halves; the even ones, shifted up */
        __m256 b0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)bp), odd_mask));
        __m256 b1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(bp + 8)), odd_mask));
#define ODD(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * r); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
        ROWS(ODD)
        b0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)bp), 16));
        b1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(bp + 8)), 16));
#define EVEN(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * r + 1); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
        ROWS(EVEN)
    }
    _mm_setcsr(csr);
    if (t->out) {
#define OUT(r) if (r < t->rows) store_row(t->out + r * t->ldout, c##r##0, c##r##1, t->cols);
        ROWS(OUT)
    } else {
#define ACC(r) _mm256_storeu_ps(t->acc + r * t->ldacc, c##r##0), _mm256_storeu_ps(t->acc + r * t->ldacc + 8, c##r##1);
        ROWS(ACC)
    }
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static double peak(int64_t iters) {
    __m256 acc[12];
#pragma GCC unroll 32
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i); /* distinct: no chain merges */
    __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
        __asm__ volatile("" : "+x"(x));
    }
    __m256 s = acc[0];
#pragma GCC unroll 32
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    float f[8];
    _mm256_storeu_ps(f, s);
    volatile float sink = f[0];
    (void)sink;
    return (double)iters * 12 * 16;
}

const tg_ukernel tg_ukernel_avx2 = {
    .name = "avx2", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 4, .kc = 256, .pack_a = pack_a_fast, .pack_b = pack_b_fast,
    .kernel = kernel, .available = available, .peak = peak };
