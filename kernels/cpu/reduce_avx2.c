/* The exact sum of contiguous float32 or bf16 values with AVX2 and FMA (libtgrad/src/ops/
 * reduce_exact.h): kernels/cpu/reduce_avx512f.c's method on 256-bit vectors. Compiled alone with
 * -mavx2 -mfma (meson) and chosen at run time by cpuid.
 *
 * Per block of 4096 values: a first pass finds the largest magnitude's exponent E and the
 * smallest nonzero one's, Emin; with Elo = max(E - W, 1) (W = 27 for float32, 43 for bf16) and
 * u the ulp of exponent Elo, every value is v u with |v| < 2^51 when Emin >= Elo; widened to
 * double (exact), fma(x, 1/u, 1.5 2^52) is 1.5 2^52 + v exactly, and int64 lanes add its bits
 * (at most 514 per lane: the sum stays below 2^61). Otherwise (inf/NaN, a subnormal, a value
 * below the window, only zeros) tg_exact_add_portable takes the block. The tail of a block is
 * copied into a zero-padded vector (AVX2 has no 16-bit masked loads; a zero adds nothing). */
#include <immintrin.h>
#include <string.h>

#include "ops/reduce_exact.h"

#define BLOCK 4096
#define MAGIC INT64_C(0x4338000000000000) /* 1.5 * 2^52 */

static inline uint32_t hmax_epu16(__m256i v) {
    __m128i b = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    b = _mm_xor_si128(b, _mm_set1_epi32(-1)); /* max = ~min(~x) */
    return 0xFFFFu & ~(uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(b));
}
static inline uint32_t hmin_epu16(__m256i v) {
    __m128i b = _mm_min_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return 0xFFFFu & (uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(b));
}
static inline uint32_t hmax_epu32(__m256i v) {
    __m128i b = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    b = _mm_max_epu32(b, _mm_shuffle_epi32(b, 0x4E));
    b = _mm_max_epu32(b, _mm_shuffle_epi32(b, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(b);
}
static inline uint32_t hmin_epu32(__m256i v) {
    __m128i b = _mm_min_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    b = _mm_min_epu32(b, _mm_shuffle_epi32(b, 0x4E));
    b = _mm_min_epu32(b, _mm_shuffle_epi32(b, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(b);
}
static inline int64_t lanes_sum(__m256i acc, int64_t k) {
    __m256i v = _mm256_sub_epi64(acc, _mm256_set1_epi64x((int64_t)((uint64_t)k * (uint64_t)MAGIC)));
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}
static inline __m256d pow2(int k) { return _mm256_castsi256_pd(_mm256_set1_epi64x((int64_t)(k + 1023) << 52)); }

/* 8 float32 lanes as doubles, scaled by s, over the magic, into lo and hi */
static inline void add8(__m256 v, __m256d s, __m256d magic, __m256i *lo, __m256i *hi) {
    __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    *lo = _mm256_add_epi64(*lo, _mm256_castpd_si256(_mm256_fmadd_pd(d0, s, magic)));
    *hi = _mm256_add_epi64(*hi, _mm256_castpd_si256(_mm256_fmadd_pd(d1, s, magic)));
}

static void block_f32(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *next, int64_t next_n) {
    int64_t full = n & ~(int64_t)7;
    uint32_t pad[8] = { 0 };
    memcpy(pad, x + full, (size_t)(n - full) * 4);
    const __m256i magmask = _mm256_set1_epi32(0x7FFFFFFF), one = _mm256_set1_epi32(1);
    __m256i vmax = _mm256_setzero_si256(), vmin = _mm256_set1_epi32(-1);
    for (int64_t i = 0; i <= full; i += 8) {
        __m256i m = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(i < full ? x + i : pad)), magmask);
        vmax = _mm256_max_epu32(vmax, m);
        vmin = _mm256_min_epu32(vmin, _mm256_sub_epi32(m, one)); /* 0 wraps: skipped */
    }
    uint32_t mx = hmax_epu32(vmax), mn = hmin_epu32(vmin) + 1u;
    int E = (int)(mx >> 23), Emin = mn ? (int)(mn >> 23) : 256;
    int lo_e = E - 27 > 1 ? E - 27 : 1;
    if (mx == 0 || E == 255 || Emin < lo_e) {
        tg_exact_add_portable(a, x, TG_RDT_F32, n, 1);
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    const __m256d s = pow2(150 - lo_e), magic = _mm256_castsi256_pd(_mm256_set1_epi64x(MAGIC));
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int64_t i = 0; i < full; i += 8) {
        if ((i & 15) == 0 && i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
        add8(_mm256_loadu_ps((const float *)(x + i)), s, magic, &lo, &hi);
    }
    add8(_mm256_loadu_ps((const float *)pad), s, magic, &lo, &hi);
    int64_t k = full / 8 + 1;
    tg_exact_acc_add_scaled(a, lanes_sum(lo, k), lo_e - 1);
    tg_exact_acc_add_scaled(a, lanes_sum(hi, k), lo_e - 1);
}

static void block_bf16(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *next, int64_t next_n) {
    int64_t full = n & ~(int64_t)15;
    uint16_t pad[16] = { 0 };
    memcpy(pad, x + full, (size_t)(n - full) * 2);
    const __m256i magmask = _mm256_set1_epi16(0x7FFF), one = _mm256_set1_epi16(1);
    __m256i vmax = _mm256_setzero_si256(), vmin = _mm256_set1_epi32(-1);
    for (int64_t i = 0; i <= full; i += 16) {
        __m256i m = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(i < full ? x + i : pad)), magmask);
        vmax = _mm256_max_epu16(vmax, m);
        vmin = _mm256_min_epu16(vmin, _mm256_sub_epi16(m, one));
    }
    uint32_t mx = hmax_epu16(vmax), mn = hmin_epu16(vmin) + 1; /* 0x10000: no nonzero value */
    int E = (int)(mx >> 7), Emin = (int)(mn >> 7);
    int lo_e = E - 43 > 1 ? E - 43 : 1;
    if (mx == 0 || E == 255 || Emin < lo_e) {
        tg_exact_add_portable(a, x, TG_RDT_BF16, n, 1);
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    const __m256d s = pow2(134 - lo_e), magic = _mm256_castsi256_pd(_mm256_set1_epi64x(MAGIC));
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int64_t i = 0; i < full; i += 8) {
        if ((i & 31) == 0 && i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16);
        add8(_mm256_castsi256_ps(w), s, magic, &lo, &hi);
    }
    for (int h = 0; h < 16; h += 8) { /* the zero-padded tail, always (zeros add nothing) */
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(pad + h))), 16);
        add8(_mm256_castsi256_ps(w), s, magic, &lo, &hi);
    }
    int64_t k = full / 8 + 2; /* vectors added to each lane: at most 514, so |sum| < 2^61 */
    tg_exact_acc_add_scaled(a, lanes_sum(lo, k), lo_e + 15);
    tg_exact_acc_add_scaled(a, lanes_sum(hi, k), lo_e + 15);
}

void tg_exact_add_f32_avx2(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after, int64_t after_n) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t len = n - i < BLOCK ? n - i : BLOCK, rest = n - i - len;
        const uint32_t *next = rest ? x + i + len : after;
        int64_t next_n = rest ? rest : after ? after_n : 0;
        block_f32(a, x + i, len, next, next_n < BLOCK ? next_n : BLOCK);
    }
}

void tg_exact_add_bf16_avx2(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after, int64_t after_n) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t len = n - i < BLOCK ? n - i : BLOCK, rest = n - i - len;
        const uint16_t *next = rest ? x + i + len : after;
        int64_t next_n = rest ? rest : after ? after_n : 0;
        block_bf16(a, x + i, len, next, next_n < BLOCK ? next_n : BLOCK);
    }
}

int tg_exact_avx2_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
