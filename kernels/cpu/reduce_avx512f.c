/* The exact sum of contiguous float32 values (and of bf16 values, widened, on CPUs without
 * AVX512-BF16) with AVX-512F (libtgrad/src/ops/reduce_exact.h). Compiled alone with AVX-512
 * flags (meson) and chosen at run time by cpuid.
 *
 * Per block of 4096 values: a first pass finds the largest magnitude's exponent E and the
 * smallest nonzero one's, Emin. With the window's bottom exponent Elo = max(E - W, 1) and its ulp
 * u (2^(Elo - 150) for float32, 2^(Elo - 134) for bf16), every value whose exponent is in
 * [Elo, E] is x = v u with v an integer, |v| < 2^(E - Elo + 24) <= 2^51 (float32, W = 27) or
 * 2^(E - Elo + 8) <= 2^51 (bf16, W = 43). Widened to double (exact: normal values only, so DAZ
 * cannot touch them), fma(x, 1/u, 1.5 2^52) is 1.5 2^52 + v exactly (an integer in (2^52, 2^53)):
 * nothing rounds, so neither MXCSR's rounding mode nor FTZ matters, and its bits are
 * 0x4338000000000000 + v. An int64 lane adds those bits; after k vectors, lane - k 0x4338...
 * (mod 2^64) is the exact sum of its values, below 2^(51 + 8) for k <= 256. A block with a value
 * outside the window (below 2^-W of the largest, or subnormal), inf/NaN, or only zeros goes to
 * tg_exact_add_portable. The second pass prefetches the next block (or `after`). */
#include <immintrin.h>

#include "ops/reduce_exact.h"
#include "reduce_avx512_prepass.h"

#define BLOCK 4096
#define MAGIC INT64_C(0x4338000000000000) /* 1.5 * 2^52 */

static inline int64_t lanes_sum(__m512i acc, int64_t k) {
    return _mm512_reduce_add_epi64(_mm512_sub_epi64(acc, _mm512_set1_epi64((int64_t)((uint64_t)k * (uint64_t)MAGIC))));
}
static inline __m512d pow2(int k) { return _mm512_castsi512_pd(_mm512_set1_epi64((int64_t)(k + 1023) << 52)); }

/* adds the 16 float32 lanes of v (as doubles, scaled by s, over the magic) into lo and hi */
#define ADD16(v)                                                                                                  \
    do {                                                                                                          \
        __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));                                                  \
        __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));           \
        lo = _mm512_add_epi64(lo, _mm512_castpd_si512(_mm512_fmadd_pd(d0, s, magic)));                            \
        hi = _mm512_add_epi64(hi, _mm512_castpd_si512(_mm512_fmadd_pd(d1, s, magic)));                            \
    } while (0)

static void block_f32(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *next, int64_t next_n) {
    uint32_t mx, mn;
    tg_prepass_f32(x, n, &mx, &mn);
    int E = (int)(mx >> 23), Emin = (int)(mn >> 23);
    int lo_e = E - 27 > 1 ? E - 27 : 1;
    if (mx == 0 || E == 255 || Emin < lo_e) { /* zeros only, inf/NaN, subnormal, wide */
        tg_exact_add_portable(a, x, TG_RDT_F32, n, 1);
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    const __m512d s = pow2(150 - lo_e), magic = _mm512_castsi512_pd(_mm512_set1_epi64(MAGIC));
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    int64_t full = n & ~(int64_t)15;
    for (int64_t i = 0; i < full; i += 16) {
        if (i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
        __m512 v = _mm512_loadu_ps(x + i);
        ADD16(v);
    }
    if (n > full) {
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - full)) - 1), x + full);
        ADD16(v);
    }
    int64_t k = (n + 15) / 16;
    tg_exact_acc_add_scaled(a, lanes_sum(lo, k), lo_e - 1);
    tg_exact_acc_add_scaled(a, lanes_sum(hi, k), lo_e - 1);
}

static void block_bf16(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *next, int64_t next_n) {
    uint32_t mx, mn;
    tg_prepass_bf16(x, n, &mx, &mn);
    int E = (int)(mx >> 7), Emin = (int)(mn >> 7);
    int lo_e = E - 43 > 1 ? E - 43 : 1;
    if (mx == 0 || E == 255 || Emin < lo_e) {
        tg_exact_add_portable(a, x, TG_RDT_BF16, n, 1);
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    const __m512d s = pow2(134 - lo_e), magic = _mm512_castsi512_pd(_mm512_set1_epi64(MAGIC));
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    int64_t full = n & ~(int64_t)15;
    for (int64_t i = 0; i < full; i += 16) {
        if ((i & 31) == 0 && i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
        __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i))), 16));
        ADD16(v);
    }
    if (n > full) {
        __m256i h = _mm256_maskz_loadu_epi16((__mmask16)((1u << (n - full)) - 1), x + full);
        __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        ADD16(v);
    }
    int64_t k = (n + 15) / 16;
    tg_exact_acc_add_scaled(a, lanes_sum(lo, k), lo_e + 15);
    tg_exact_acc_add_scaled(a, lanes_sum(hi, k), lo_e + 15);
}

void tg_exact_add_f32_avx512f(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after, int64_t after_n) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t len = n - i < BLOCK ? n - i : BLOCK, rest = n - i - len;
        const uint32_t *next = rest ? x + i + len : after;
        int64_t next_n = rest ? rest : after ? after_n : 0;
        block_f32(a, x + i, len, next, next_n < BLOCK ? next_n : BLOCK);
    }
}

void tg_exact_add_bf16_avx512f(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after, int64_t after_n) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t len = n - i < BLOCK ? n - i : BLOCK, rest = n - i - len;
        const uint16_t *next = rest ? x + i + len : after;
        int64_t next_n = rest ? rest : after ? after_n : 0;
        block_bf16(a, x + i, len, next, next_n < BLOCK ? next_n : BLOCK);
    }
}

int tg_exact_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* Column sums (tg_exact_cols): w <= TG_EXACT_COLS_PANEL contiguous columns over h <= 2048 rows
 * (row stride rs elements) into acc[0 .. w-1]. Rows are read whole (a row stride that is a power
 * of two would map a column walk onto a few cache sets); the per-column state lives in arrays,
 * one 16-lane vector per 16 columns. Each lane is one column, with its own window from a first
 * pass over the rows (bf16 widened to float32 bits; the window's ulp u is 2^(Elo - 150) for
 * float32, 2^(Elo - 134) for bf16, whose window is W = 43 as in the row kernel); |v| < 2^51 per
 * value and at most 2048 values per lane keep the int64 lane below 2^62. A column its window
 * cannot take (inf/NaN, a value below the window, a subnormal, only zeros) is masked out of the
 * loads and summed by tg_exact_add_portable over its stride. */
void tg_exact_cols_avx512f(tg_exact_acc *acc, const void *base, int dtype, int64_t h, int64_t rs, int w) {
    enum { NCH = TG_EXACT_COLS_PANEL / 16 };
    const int bf16 = dtype == TG_RDT_BF16, W = bf16 ? 43 : 27, es = bf16 ? 2 : 4;
    const int nch = (w + 15) / 16;
    const __m512i magmask = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
    __m512i vmax[NCH], vmin[NCH], a0[NCH], a1[NCH];
    __m512d s0[NCH], s1[NCH];
    __mmask16 wm[NCH], ok[NCH];
    for (int k = 0; k < nch; k++) {
        int left = w - 16 * k;
        wm[k] = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
        vmax[k] = _mm512_setzero_si512(), vmin[k] = _mm512_set1_epi32(-1);
        a0[k] = a1[k] = _mm512_setzero_si512();
    }
#define LOAD(row, k, mask)                                                                                         \
    (bf16 ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)(row) + 16 * (k))), 16) \
          : _mm512_maskz_loadu_epi32(mask, (const uint32_t *)(row) + 16 * (k)))
    for (int64_t r = 0; r < h; r += 4) { /* four rows per visit of a column's state */
        const char *row = (const char *)base + r * rs * es;
        int rows4 = h - r < 4 ? (int)(h - r) : 4;
        for (int k = 0; k < nch; k++) {
            __m512i mxk = vmax[k], mnk = vmin[k];
            for (int j = 0; j < rows4; j++) {
                __m512i m = _mm512_and_si512(LOAD(row + j * rs * es, k, wm[k]), magmask);
                mxk = _mm512_max_epu32(mxk, m);
                mnk = _mm512_min_epu32(mnk, _mm512_sub_epi32(m, one));
            }
            vmax[k] = mxk, vmin[k] = mnk;
        }
    }
    const int ulp0 = bf16 ? 134 : 150, unit = bf16 ? 15 : -1; /* u = 2^(lo - ulp0) = 2^(lo + unit - 149) */
    int32_t lo[TG_EXACT_COLS_PANEL];
    for (int k = 0; k < nch; k++) {
        uint32_t mx[16], mn[16];
        _mm512_storeu_si512(mx, vmax[k]);
        _mm512_storeu_si512(mn, vmin[k]);
        ok[k] = 0;
        for (int l = 0; l < 16 && 16 * k + l < w; l++) {
            int c = 16 * k + l, E = (int)(mx[l] >> 23), Emin = (int)((mn[l] + 1u) >> 23);
            lo[c] = E - W > 1 ? E - W : 1;
            if (mx[l] != 0 && E != 255 && mn[l] != ~0u && Emin >= lo[c]) {
                ok[k] |= (__mmask16)(1u << l);
                acc[c].flags |= TG_EXACT_NONEMPTY | TG_EXACT_NOT_NEGZERO;
            } else {
                lo[c] = 1;
                tg_exact_add_portable(&acc[c], (const char *)base + c * es, dtype, h, rs);
            }
        }
        for (int l = w - 16 * k; l < 16; l++) lo[16 * k + l] = 1; /* past the last column */
        /* per lane 1/u = 2^(ulp0 - lo) as a double: exponent field ulp0 - lo + 1023 */
        __m512i e = _mm512_sub_epi32(_mm512_set1_epi32(ulp0 + 1023), _mm512_loadu_si512(lo + 16 * k));
        s0[k] = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(e)), 52));
        s1[k] = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(e, 1)), 52));
    }
    const __m512d magic = _mm512_castsi512_pd(_mm512_set1_epi64(MAGIC));
    for (int64_t r = 0; r < h; r += 4) {
        const char *row = (const char *)base + r * rs * es;
        int rows4 = h - r < 4 ? (int)(h - r) : 4;
        for (int k = 0; k < nch; k++) {
            __m512i x0 = a0[k], x1 = a1[k];
            for (int j = 0; j < rows4; j++) {
                __m512 v = _mm512_castsi512_ps(LOAD(row + j * rs * es, k, ok[k]));
                __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
                x0 = _mm512_add_epi64(x0, _mm512_castpd_si512(_mm512_fmadd_pd(d0, s0[k], magic)));
                x1 = _mm512_add_epi64(x1, _mm512_castpd_si512(_mm512_fmadd_pd(d1, s1[k], magic)));
            }
            a0[k] = x0, a1[k] = x1;
        }
    }
#undef LOAD
    const __m512i km = _mm512_set1_epi64((int64_t)((uint64_t)h * (uint64_t)MAGIC));
    for (int k = 0; k < nch; k++) {
        if (!ok[k]) continue;
        int64_t sums[16];
        _mm512_storeu_si512(sums, _mm512_sub_epi64(a0[k], km));
        _mm512_storeu_si512(sums + 8, _mm512_sub_epi64(a1[k], km));
        for (int l = 0; l < 16; l++)
            if (ok[k] & (1u << l)) tg_exact_acc_add_scaled(&acc[16 * k + l], sums[l], lo[16 * k + l] + unit);
    }
}
