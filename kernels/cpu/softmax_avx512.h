/* The AVX-512 variant's fused softmax loops (kernels/cpu/softmax_avx512f.c), in intrinsics: the
 * compiler vectorizes the plain loops of softmax_rows.h one at a time but not fused. Each function
 * performs, lane for lane, the operations of the plain loops it replaces (the lanes j mod 8, the same
 * folds, exp_neg's operations in order with FMA where the plain code's MADD is FMA), so it computes
 * the same doubles: load_scan = load then scan, exp_sum = exp_rows then sum_below, and
 * out_softmax = SM_FAST. Included after softmax_rows.h, with -mavx512f -mavx512bw
 * -mavx512vl -mfma. */
#ifndef TGRAD_CPU_SOFTMAX_AVX512_H
#define TGRAD_CPU_SOFTMAX_AVX512_H

#include <immintrin.h>

/* the lanes of the last, partial group of 8 */
static inline __mmask8 sm5_tail(int64_t left) { return (__mmask8)((1u << left) - 1u); }

/* 8 bfloat16 (bits) as doubles (exact) */
static inline __m512d sm5_bf16x8(__m128i h) {
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    return _mm512_cvtps_pd(_mm256_castsi256_ps(w));
}

/* The summary from the lanes; a row not all finite (an infinity or a NaN makes v * 0 NaN) takes
 * sm_scan's own pass, which decides those rows. Otherwise sm_scan's lanes would hold the same max
 * and min (x86's max and min compare as its ternaries do) and count every element. */
static tg_sm_scan sm5_fold(__m512d vmx, __m512d vmn, __m512d vfin, const double *x, int64_t n) {
    double mx[8], mn[8], fin[8];
    _mm512_storeu_pd(mx, vmx), _mm512_storeu_pd(mn, vmn), _mm512_storeu_pd(fin, vfin);
    double f = ((fin[0] + fin[1]) + (fin[2] + fin[3])) + ((fin[4] + fin[5]) + (fin[6] + fin[7]));
    if (f != 0.0) return sm_scan(x, n); /* NaN != 0 too */
    tg_sm_scan r = { -INFINITY, INFINITY, n, 0 };
    for (int l = 0; l < 8; l++) {
        r.m = mx[l] > r.m ? mx[l] : r.m;
        r.xmin = mn[l] < r.xmin ? mn[l] : r.xmin;
    }
    return r;
}

#define SM5_SCAN_STEP(v, k)                                                           \
    do {                                                                              \
        vmx = _mm512_mask_max_pd(vmx, k, v, vmx); /* v > mx ? v : mx */               \
        vmn = _mm512_mask_min_pd(vmn, k, v, vmn); /* v < mn ? v : mn */               \
        vfin = _mm512_mask_add_pd(vfin, k, vfin, _mm512_mul_pd(v, _mm512_setzero_pd())); \
    } while (0)

static tg_sm_scan sm5_load_scan_bf16(const uint16_t *p, int64_t n, double *x) {
    __m512d vmx = _mm512_set1_pd(-INFINITY), vmn = _mm512_set1_pd(INFINITY), vfin = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d v = sm5_bf16x8(_mm_loadu_si128((const __m128i *)(p + j)));
        _mm512_storeu_pd(x + j, v);
        SM5_SCAN_STEP(v, (__mmask8)0xff);
    }
    if (j < n) {
        __mmask8 k = sm5_tail(n - j);
        __m512d v = sm5_bf16x8(_mm_maskz_loadu_epi16(k, p + j));
        _mm512_mask_storeu_pd(x + j, k, v);
        SM5_SCAN_STEP(v, k);
    }
    return sm5_fold(vmx, vmn, vfin, x, n);
}

static tg_sm_scan sm5_load_scan_f32(const float *p, int64_t n, double *x) {
    __m512d vmx = _mm512_set1_pd(-INFINITY), vmn = _mm512_set1_pd(INFINITY), vfin = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(p + j));
        _mm512_storeu_pd(x + j, v);
        SM5_SCAN_STEP(v, (__mmask8)0xff);
    }
    if (j < n) {
        __mmask8 k = sm5_tail(n - j);
        __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, p + j));
        _mm512_mask_storeu_pd(x + j, k, v);
        SM5_SCAN_STEP(v, k);
    }
    return sm5_fold(vmx, vmn, vfin, x, n);
}

/* exp_neg, lane for lane */
static inline __m512d sm5_exp_neg(__m512d d) {
    const __m512d L2E = _mm512_set1_pd(0x1.71547652b82fep0), SHIFT = _mm512_set1_pd(0x1.8p52);
    const __m512d C1 = _mm512_set1_pd(0x1.62e42fee00000p-1), C2 = _mm512_set1_pd(0x1.a39ef35793c76p-33);
    const __m512d LO = _mm512_set1_pd(-708.0);
    __m512d dd = _mm512_max_pd(LO, d); /* d < -708 ? -708 : d */
    __m512d t = _mm512_add_pd(_mm512_mul_pd(dd, L2E), SHIFT);
    __m512d k = _mm512_sub_pd(t, SHIFT);
    __m512d r = _mm512_sub_pd(_mm512_sub_pd(dd, _mm512_mul_pd(k, C1)), _mm512_mul_pd(k, C2));
    __m512d p = _mm512_set1_pd(1.0 / 6227020800.0);
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 479001600.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 39916800.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 3628800.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 362880.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 40320.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 5040.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 720.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 120.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 24.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 6.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(0.5));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
    __m512i ki = _mm512_sub_epi64(_mm512_castpd_si512(t), _mm512_castpd_si512(SHIFT));
    __m512d scale = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(ki, _mm512_set1_epi64(1023)), 52));
    __mmask8 under = _mm512_cmp_pd_mask(d, LO, _CMP_LT_OQ);
    return _mm512_maskz_mov_pd((__mmask8)~under, _mm512_mul_pd(p, scale));
}

/* a += x < m ? e : 0.0 and c += x == m ? 1.0 : 0.0 on the lanes of k (adding +0.0 to a sum of
 * terms >= 0 started at +0 changes nothing, so the masked add is the plain one) */
#define SM5_EXP_SUM_STEP(k)                                                                  \
    do {                                                                                     \
        __m512d ev = sm5_exp_neg(_mm512_sub_pd(v, vm));                                      \
        _mm512_mask_storeu_pd(e + j, k, ev);                                                 \
        a = _mm512_mask_add_pd(a, (k) & _mm512_cmp_pd_mask(v, vm, _CMP_LT_OQ), a, ev);       \
        c = _mm512_mask_add_pd(c, (k) & _mm512_cmp_pd_mask(v, vm, _CMP_EQ_OQ), c, one);      \
    } while (0)

/* Eight lanes whose x - m are all below -708 (a masked run: -inf scores) have exp 0 in every lane,
 * as sm5_exp_neg makes it, and add nothing (x < m, +0 terms): their e is stored as +0 and the
 * polynomial skipped (a causal mask's upper triangle, half of a prefill's scores). */
static double sm5_exp_sum(const double *x, double m, double *e, int64_t n, int64_t *ties) {
    __m512d a = _mm512_setzero_pd(), c = _mm512_setzero_pd(), vm = _mm512_set1_pd(m), one = _mm512_set1_pd(1.0);
    const __m512d LO = _mm512_set1_pd(-708.0);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d v = _mm512_loadu_pd(x + j);
        if (_mm512_cmp_pd_mask(_mm512_sub_pd(v, vm), LO, _CMP_LT_OQ) == 0xff) {
            _mm512_storeu_pd(e + j, _mm512_setzero_pd());
            continue;
        }
        SM5_EXP_SUM_STEP((__mmask8)0xff);
    }
    if (j < n) {
        __mmask8 k = sm5_tail(n - j);
        __m512d v = _mm512_maskz_loadu_pd(k, x + j);
        SM5_EXP_SUM_STEP(k);
    }
    double av[8], cv[8];
    _mm512_storeu_pd(av, a), _mm512_storeu_pd(cv, c);
    *ties = (int64_t)(((cv[0] + cv[1]) + (cv[2] + cv[3])) + ((cv[4] + cv[5]) + (cv[6] + cv[7])));
    return ((av[0] + av[1]) + (av[2] + av[3])) + ((av[4] + av[5]) + (av[6] + av[7]));
}

/* SM_FAST(BITS, ...) on 8 lanes, in fewer operations (BITS = 45 for bfloat16, 29 for float32):
 * returns the lanes not decided (flagged), the output bits in *bits' 64-bit lanes. With mb = |q|'s
 * bits and lo = its BITS bits below the output's: the exponent in range is mb in [897 2^52,
 * 1151 2^52); |lo - 2^(BITS-1)| > thr is (lo - 2^(BITS-1) + thr) > 2 thr unsigned (0 <= thr <
 * 2^(BITS-2)); a decided lane is not a tie, so rounding half up, (mb + 2^(BITS-1)) >> BITS, is
 * SM_FAST's rounding to nearest even, and the rebias (896 2^52 <= mb) folds into the added constant.
 * The sign goes to bit 60 - BITS (15 or 31). */
static inline __mmask8 sm5_round(__m512d q, __m512i thr_m, __m512i thr2, int bits_below, __m512i *bits) {
    const __m512i ABS = _mm512_set1_epi64(INT64_C(0x7fffffffffffffff));
    __m512i b = _mm512_castpd_si512(q), mb = _mm512_and_si512(b, ABS);
    __m512i lo = _mm512_and_si512(mb, _mm512_set1_epi64((INT64_C(1) << bits_below) - 1));
    __mmask8 far = _mm512_cmpgt_epu64_mask(_mm512_add_epi64(lo, thr_m), thr2);
    __mmask8 in = _mm512_cmpge_epu64_mask(mb, _mm512_set1_epi64(INT64_C(897) << 52)) &
                  _mm512_cmplt_epu64_mask(mb, _mm512_set1_epi64(INT64_C(1151) << 52));
    __mmask8 zero = _mm512_cmpeq_epi64_mask(mb, _mm512_setzero_si512());
    __m512i r = _mm512_srli_epi64(
        _mm512_add_epi64(mb, _mm512_set1_epi64((int64_t)((UINT64_C(1) << (bits_below - 1)) - (UINT64_C(896) << 52)))),
        (unsigned)bits_below);
    __m512i sign = _mm512_and_si512(_mm512_srli_epi64(b, (unsigned)(3 + bits_below)),
                                    _mm512_set1_epi64(INT64_C(1) << (60 - bits_below)));
    *bits = _mm512_or_si512(_mm512_maskz_mov_epi64((__mmask8)~zero, r), sign);
    return (__mmask8) ~((far & in) | zero);
}

static int64_t sm5_out_softmax(const double *e, int64_t n, double inv, int64_t thr, int32_t out_dtype, void *out,
                               uint8_t *flag) {
    int below = out_dtype == 1 ? 45 : 29;
    if ((out_dtype != 1 && out_dtype != 2) || thr < 0 || thr >= (INT64_C(1) << (below - 2)))
        return sm_out_softmax(e, n, inv, thr, out_dtype, out, flag);
    uint16_t *o = out;
    uint32_t *o32 = out;
    __m512d vinv = _mm512_set1_pd(inv);
    __m512i thr_m = _mm512_set1_epi64(thr - (INT64_C(1) << (below - 1))), thr2 = _mm512_set1_epi64(2 * thr);
    int64_t bad = 0, j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d ev = _mm512_loadu_pd(e + j);
        if (_mm512_cmpneq_epi64_mask(_mm512_castpd_si512(ev), _mm512_setzero_si512()) == 0) {
            /* eight +0 terms (a masked run): +0 out, decided (as sm5_round makes +0 of +0 q) */
            if (out_dtype == 1) _mm_storeu_si128((__m128i *)(o + j), _mm_setzero_si128());
            else _mm256_storeu_si256((__m256i *)(o32 + j), _mm256_setzero_si256());
            _mm_storel_epi64((__m128i *)(flag + j), _mm_setzero_si128());
            continue;
        }
        __m512i bits;
        __mmask8 f = out_dtype == 1 ? sm5_round(_mm512_mul_pd(ev, vinv), thr_m, thr2, 45, &bits)
                                    : sm5_round(_mm512_mul_pd(ev, vinv), thr_m, thr2, 29, &bits);
        if (out_dtype == 1) _mm_storeu_si128((__m128i *)(o + j), _mm512_cvtepi64_epi16(bits));
        else _mm256_storeu_si256((__m256i *)(o32 + j), _mm512_cvtepi64_epi32(bits));
        _mm_storel_epi64((__m128i *)(flag + j), _mm_maskz_set1_epi8(f, 1));
        bad += __builtin_popcount(f);
    }
    if (j < n) {
        __mmask8 k = sm5_tail(n - j);
        __m512i bits;
        __m512d q = _mm512_mul_pd(_mm512_maskz_loadu_pd(k, e + j), vinv);
        __mmask8 f = (out_dtype == 1 ? sm5_round(q, thr_m, thr2, 45, &bits) : sm5_round(q, thr_m, thr2, 29, &bits)) & k;
        if (out_dtype == 1) _mm_mask_storeu_epi16(o + j, k, _mm512_cvtepi64_epi16(bits));
        else _mm256_mask_storeu_epi32(o32 + j, k, _mm512_cvtepi64_epi32(bits));
        _mm_mask_storeu_epi8(flag + j, k, _mm_maskz_set1_epi8(f, 1));
        bad += __builtin_popcount(f);
    }
    return bad;
}

#endif
