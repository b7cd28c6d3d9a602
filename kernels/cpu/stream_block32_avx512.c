/* The block32 order's one-row products (rowvec) on AVX-512F: B streamed in place, as the
 * pairwise variants stream it, so that a block32 product of one row (a decoding step) reads B
 * once instead of packing it for AMX. Each output keeps the order's two chains per block of 32
 * k (the even elements' products in one fp32 accumulator, the odd elements' in another, fp32
 * FMAs: exact product, one rounding, MXCSR's FTZ flushing after rounding and DAZ zeroing
 * subnormal inputs, as contract_step.h's step), then acc + (even + odd) (docs/numerics.md, "The
 * block32 order"). A block's missing elements past K are +0 products, which only turn a chain of
 * -0 into +0: the partial last block adds +0 to both chains. A arrives as pack_a_bf16's pair
 * words (even k low, odd k high). Compiled alone with -mavx512f -mavx512bw (meson). */
#include <immintrin.h>

#define NR 32
#include "pack_bf16_pairs.h"
#include "store_bf16_avx512.h"
#include "pack_avx512.h"
#include "contract_step.h" /* lo_half, hi_half */
#include "fp_env.h"


enum { PAIRS = 16 }; /* pair words per block */

/* Row-major B: 64 columns at a time through all of K (three accumulators per 16 columns in
 * registers), each pair's two rows read 128 bytes at a time, fetched a few pairs ahead. */
static void rowvec_rows(const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    enum { G = 4, AHEAD = 8 };
    int64_t kp = (K + 1) / 2;
    const uint16_t *b = B->base + n0;
    int64_t ldb = B->s0;
    for (int64_t j0 = 0; j0 < nb; j0 += 16 * G) {
        __mmask16 m[G];
        __m512 acc[G], ev[G], od[G];
        for (int g = 0; g < G; g++) m[g] = col_mask((int32_t)(nb - j0 - 16 * g)), acc[g] = _mm512_setzero_ps();
        for (int64_t p0 = 0; p0 < kp; p0 += PAIRS) {
            for (int g = 0; g < G; g++) ev[g] = _mm512_setzero_ps(), od[g] = _mm512_setzero_ps();
            int64_t p1 = p0 + PAIRS < kp ? p0 + PAIRS : kp;
            for (int64_t p = p0; p < p1; p++) {
                const uint16_t *even = b + 2 * p * ldb + j0, *odd = even + ldb;
                _mm_prefetch((const char *)(even + 2 * AHEAD * ldb), TG_PREFETCH_HINT);
                _mm_prefetch((const char *)(even + 2 * AHEAD * ldb + 32), TG_PREFETCH_HINT);
                __m512 ae = _mm512_set1_ps(lo_half(a[p])), ao = _mm512_set1_ps(hi_half(a[p]));
                bool has_odd = 2 * p + 1 < K;
                for (int g = 0; g < G; g++) {
                    ev[g] = _mm512_fmadd_ps(ae, widen16(_mm256_maskz_loadu_epi16(m[g], even + 16 * g)), ev[g]);
                    if (has_odd)
                        od[g] = _mm512_fmadd_ps(ao, widen16(_mm256_maskz_loadu_epi16(m[g], odd + 16 * g)), od[g]);
                }
            }
            bool padded = 2 * p0 + 2 * PAIRS > K; /* +0 products past K: -0 chains become +0 */
            for (int g = 0; g < G; g++) {
                if (padded) ev[g] = _mm512_add_ps(ev[g], _mm512_setzero_ps()), od[g] = _mm512_add_ps(od[g], _mm512_setzero_ps());
                acc[g] = _mm512_add_ps(acc[g], _mm512_add_ps(ev[g], od[g]));
            }
        }
        for (int g = 0; g < G; g++)
            if (j0 + 16 * g < nb) store_bf16x16(out + j0 + 16 * g, acc[g], m[g]);
    }
}

/* Column-major B (column j's pairs are adjacent words): per 16 columns and block, one 16 x 16
 * word transpose gives each pair's 16 columns in a vector (pack_avx512.h; pairs past K are zero
 * there, and A's entries past K are taken as +0 here). */
static void rowvec_cols(const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    int64_t kp = (K + 1) / 2, full = K / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += 32) {
        __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
        for (int64_t p0 = 0; p0 < kp; p0 += PAIRS) {
            __m512 ev[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() }, od[2] = { ev[0], ev[0] };
            for (int h = 0; h < 2; h++) {
                int64_t cols = nb - j0 - 16 * h;
                cols = cols < 0 ? 0 : cols > 16 ? 16 : cols;
                __m512i r[16];
                const uint16_t *col = B->base + (n0 + j0 + 16 * h) * B->s1;
                if (cols == 16 && p0 + PAIRS <= full) { /* whole: plain loads, each column fetched ahead */
#pragma GCC unroll 16
                    for (int c = 0; c < 16; c++) {
                        const uint16_t *src = col + c * B->s1 + 2 * p0;
                        _mm_prefetch((const char *)(src + 256), TG_PREFETCH_HINT);
                        r[c] = daz16(_mm512_loadu_si512((const void *)src));
                    }
                    transpose16(r);
                } else {
                    load_pairs_transposed(cols ? col : B->base, B->s1, cols, p0, kp, full, r);
                }
                for (int p = 0; p < PAIRS; p++) {
                    uint32_t w = p0 + p < kp ? a[p0 + p] : 0u;
                    ev[h] = _mm512_fmadd_ps(_mm512_set1_ps(lo_half(w)), even_f32(r[p]), ev[h]);
                    od[h] = _mm512_fmadd_ps(_mm512_set1_ps(hi_half(w)), odd_f32(r[p]), od[h]);
                }
                acc[h] = _mm512_add_ps(acc[h], _mm512_add_ps(ev[h], od[h]));
            }
        }
        store_bf16x16(out + j0, acc[0], col_mask((int32_t)(nb - j0)));
        store_bf16x16(out + j0 + 16, acc[1], col_mask((int32_t)(nb - j0 - 16)));
    }
}

static bool rowvec(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    if (B->s1 != 1 && B->s0 != 1) return false;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    if (B->s1 == 1) rowvec_rows(apairs, B, K, n0, nb, out);
    else rowvec_cols(apairs, B, K, n0, nb, out);
    _mm_setcsr(csr);
    return true;
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* Streaming only: the frame calls pack_a (one row) and rowvec; products of more rows take the
 * block32 packed variant. */
const tg_ukernel tg_ukernel_avx512f_block32_stream = {
    .name = "avx512f_block32", .mr = 1, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = 256,
    .pack_a = pack_a_bf16, .rowvec = rowvec, .available = available, .order = TG_UK_ORDER_BLOCK32 };
