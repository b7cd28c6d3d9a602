/* The exact sum of contiguous bf16 values with AVX512-BF16 (libtgrad/src/ops/reduce_exact.h).
 * Compiled alone with -mavx512bf16 (meson) and chosen at run time by cpuid.
 *
 * Per block of 4096 values: a first pass finds the largest magnitude M (exponent E) and the
 * smallest nonzero one (exponent Emin); the second pass reads the block again (now in L1).
 * vdpbf16ps(acc, x, s) computes, per fp32 lane, acc + x[2i+1] s + x[2i] s with each addition
 * rounded; here s = 2^k is a power of two, so each product is the value in units of a window's
 * bottom ulp u, an integer in (-2^21, 2^21) for every value whose exponent is in the window
 * [Etop - 13, Etop] (8 significant bits, at most 13 binades up). With acc = 1.5 2^23 every partial
 * sum is an integer in (2^23, 2^24): exact, and the fp32 bits are 0x4B400000 + the pair's sum. An
 * int32 lane adds those bits; after k vectors it holds k 0x4B400000 + the sum of its pairs modulo
 * 2^32, and the sum (|.| < k 2^22 <= 2^29 for k <= 128) is recovered exactly. Nothing rounds, so
 * neither the instruction's own rounding nor MXCSR matters; its DAZ is harmless because window
 * values are normal (Etop - 27 >= 7), and its FTZ because every result is at least 2^23.
 *   E - Emin <= 13: one window [E - 13, E], 2 instructions per 32 values.
 *   E - Emin <= 27: two windows, [E - 13, E] and [E - 27, E - 14], split by a mask.
 *   otherwise (and for inf/NaN or E < 34): tg_exact_add_portable takes the block.
 * The second pass prefetches the next block's lines (or those of `after`, what the caller sums
 * next), so that the memory streams while a block is summed from L1. */
#include <immintrin.h>

#include "ops/reduce_exact.h"
#include "reduce_avx512_prepass.h"

#define BLOCK 4096
#define MAGIC 0x4B400000 /* 1.5 * 2^23 */

/* The sum of the int32 lanes' pair sums: lane - k MAGIC, exact in int32, added in int64. */
static inline int64_t lanes_sum(__m512i acc, int64_t k) {
    __m512i v = _mm512_sub_epi32(acc, _mm512_set1_epi32((int32_t)((uint32_t)k * (uint32_t)MAGIC)));
    __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
    __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
    return _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
}
static inline __m512bh scale_vec(int k) { /* 2^k as bf16 in every lane */
    return (__m512bh)_mm512_set1_epi16((short)((k + 127) << 7));
}

static void block(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *next, int64_t next_n) {
    const __m512i magmask = _mm512_set1_epi16(0x7FFF);
    int64_t full = n & ~(int64_t)31;
    __mmask32 tail = (__mmask32)((UINT64_C(1) << (n - full)) - 1);
    uint32_t mx, mn; /* mn: the smallest nonzero magnitude (0x10000: none) */
    tg_prepass_bf16(x, n, &mx, &mn);
    int E = (int)(mx >> 7), Emin = (int)(mn >> 7);
    if (mx == 0 || E == 255 || E < 34 || E - Emin > 27) { /* zeros only, inf/NaN, tiny, wide */
        tg_exact_add_portable(a, x, TG_RDT_BF16, n, 1);
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    const __m512 magic = _mm512_castsi512_ps(_mm512_set1_epi32(MAGIC));
    const int64_t k = (n + 31) / 32; /* vectors added to each lane */
    /* window A: values with exponent >= E - 13, unit 2^(E - 147), scale 2^(147 - E) */
    const __m512bh sa = scale_vec(147 - E);
    __m512i acc_a = _mm512_setzero_si512();
    if (E - Emin <= 13) {
        for (int64_t i = 0; i < full; i += 32) {
            if (i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
            __m512bh v = (__m512bh)_mm512_loadu_si512(x + i);
            acc_a = _mm512_add_epi32(acc_a, _mm512_castps_si512(_mm512_dpbf16_ps(magic, v, sa)));
        }
        if (tail) {
            __m512bh v = (__m512bh)_mm512_maskz_loadu_epi16(tail, x + full);
            acc_a = _mm512_add_epi32(acc_a, _mm512_castps_si512(_mm512_dpbf16_ps(magic, v, sa)));
        }
        tg_exact_acc_add_scaled(a, lanes_sum(acc_a, k), E + 2);
        return;
    }
    /* window B: exponents E - 27 .. E - 14, unit 2^(E - 161), scale 2^(161 - E) */
    const __m512bh sb = scale_vec(161 - E);
    const __m512i thr = _mm512_set1_epi16((short)((E - 13) << 7));
    __m512i acc_b = _mm512_setzero_si512();
    for (int64_t i = 0; i <= full; i += 32) {
        if (i == full && !tail) break;
        if (i < next_n) _mm_prefetch((const char *)(next + i), _MM_HINT_T0);
        __m512i v = i < full ? _mm512_loadu_si512(x + i) : _mm512_maskz_loadu_epi16(tail, x + full);
        __mmask32 in_a = _mm512_cmpge_epu16_mask(_mm512_and_si512(v, magmask), thr);
        __m512bh va = (__m512bh)_mm512_maskz_mov_epi16(in_a, v), vb = (__m512bh)_mm512_maskz_mov_epi16(~in_a, v);
        acc_a = _mm512_add_epi32(acc_a, _mm512_castps_si512(_mm512_dpbf16_ps(magic, va, sa)));
        acc_b = _mm512_add_epi32(acc_b, _mm512_castps_si512(_mm512_dpbf16_ps(magic, vb, sb)));
    }
    tg_exact_acc_add_scaled(a, lanes_sum(acc_a, k), E + 2);
    tg_exact_acc_add_scaled(a, lanes_sum(acc_b, k), E - 12);
}

void tg_exact_add_bf16_avx512bf16(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after,
                                  int64_t after_n) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) { /* each block's second pass prefetches the next block */
        int64_t len = n - i < BLOCK ? n - i : BLOCK, rest = n - i - len;
        const uint16_t *next = rest ? x + i + len : after;
        int64_t next_n = rest ? rest : after ? after_n : 0;
        block(a, x + i, len, next, next_n < BLOCK ? next_n : BLOCK);
    }
}

int tg_exact_avx512bf16_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}
