/* Exact reductions: the fixed-point accumulator, its correct rounding (sum and mean), the portable
 * adding loops, exact extrema, and the tgrad_debug_* entry points. Integer arithmetic only: no
 * result depends on the floating-point environment. Exactness argument: docs/numerics.md. */
#include <string.h>

#include "reduce_exact.h"

#define NL TG_EXACT_LIMBS
/* Values per block of the portable loops: a block's in-window values add up in one int64. */
#define BLOCK 4096

/* ---- the accumulator ------------------------------------------------------------------------ */
void tg_exact_acc_init(tg_exact_acc *a) { memset(a, 0, sizeof *a); }

void tg_exact_acc_add_scaled(tg_exact_acc *a, int64_t v, int p) {
    if (!v) return;
    int w = p >> 6, s = p & 63;
    uint64_t ext = (uint64_t)(v >> 63); /* the sign extension: 0 or all ones */
    uint64_t lo = (uint64_t)v << s;
    uint64_t hi = s ? (uint64_t)(v >> (64 - s)) : ext;
    unsigned __int128 t = (unsigned __int128)a->limb[w] + lo;
    a->limb[w] = (uint64_t)t;
    t = (unsigned __int128)a->limb[w + 1] + hi + (uint64_t)(t >> 64);
    a->limb[w + 1] = (uint64_t)t;
    uint64_t c = (uint64_t)(t >> 64);
    for (int i = w + 2; i < NL && (c || ext); i++) {
        t = (unsigned __int128)a->limb[i] + ext + c;
        a->limb[i] = (uint64_t)t;
        c = (uint64_t)(t >> 64);
    }
}

void tg_exact_acc_merge(tg_exact_acc *dst, const tg_exact_acc *src) {
    uint64_t c = 0;
    for (int i = 0; i < NL; i++) {
        unsigned __int128 t = (unsigned __int128)dst->limb[i] + src->limb[i] + c;
        dst->limb[i] = (uint64_t)t;
        c = (uint64_t)(t >> 64);
    }
    dst->flags |= src->flags;
}

/* ---- one value at a time (specials, values outside a block's window) ------------------------ */
/* A finite value's integer significand and the position p of its unit (value = m 2^(p - 149)). */
static inline int64_t decode_bf16(uint32_t b, int *p) {
    uint32_t e = (b >> 7) & 0xFF, m = b & 0x7F;
    if (e) m |= 0x80;
    else e = 1;
    *p = (int)e + 15; /* unit 2^(e - 134) */
    return (b & 0x8000) ? -(int64_t)m : (int64_t)m;
}
static inline int64_t decode_f32(uint32_t b, int *p) {
    uint32_t e = (b >> 23) & 0xFF, m = b & 0x7FFFFF;
    if (e) m |= 0x800000;
    else e = 1;
    *p = (int)e - 1; /* unit 2^(e - 150) */
    return (b & 0x80000000u) ? -(int64_t)m : (int64_t)m;
}

static void add_one(tg_exact_acc *a, uint32_t b, int dtype) {
    uint32_t sign = dtype == TG_RDT_BF16 ? 0x8000u : 0x80000000u;
    uint32_t inf = dtype == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    uint32_t mag = b & ~sign;
    if (b != sign) a->flags |= TG_EXACT_NOT_NEGZERO;
    if (mag > inf) { a->flags |= TG_EXACT_NAN; return; }
    if (mag == inf) { a->flags |= (b & sign) ? TG_EXACT_NINF : TG_EXACT_PINF; return; }
    int p;
    int64_t m = dtype == TG_RDT_BF16 ? decode_bf16(b, &p) : decode_f32(b, &p);
    tg_exact_acc_add_scaled(a, m, p);
}

/* ---- the portable loops ----------------------------------------------------------------------
 * A block of at most BLOCK values: a first pass finds the largest magnitude (and any inf/NaN) and
 * the smallest nonzero one. Values whose exponent lies within W binades below the largest are
 * integers in units of the window's bottom ulp, below 2^(8 + 42) (bf16) or 2^(24 + 26) (float32),
 * so BLOCK = 2^12 of them sum in an int64 (< 2^62) exactly; each is its signed significand times
 * a per-exponent power of two from a table (0 below the window). A block with values below the
 * window (2^-42 or 2^-26 of the largest) adds those one at a time. One body for both dtypes:
 * P significand bits, W the window. */
static inline __attribute__((always_inline)) void block_portable(tg_exact_acc *a, const void *base, int dtype, int64_t n, int64_t s, const int P,
                                  const int W) {
    const uint16_t *x16 = base;
    const uint32_t *x32 = base;
    const uint32_t sign = 1u << (P + 7), magmask = sign - 1, inf = 0xFFu << (P - 1);
#define LOAD(i) (P == 8 ? (uint32_t)x16[(i) * s] : x32[(i) * s])
    uint32_t mx = 0, mn = ~0u;
    for (int64_t i = 0; i < n; i++) {
        uint32_t m = LOAD(i) & magmask;
        mx = m > mx ? m : mx;
        mn = m - 1 < mn ? m - 1 : mn; /* zero wraps to ~0: the smallest nonzero */
    }
    if (mx >= inf) { /* inf or NaN: every value through add_one */
        for (int64_t i = 0; i < n; i++) add_one(a, LOAD(i), dtype);
        return;
    }
    if (mx == 0) { /* only zeros: just the -0 bookkeeping */
        for (int64_t i = 0; i < n; i++)
            if (LOAD(i) != sign) { a->flags |= TG_EXACT_NOT_NEGZERO; break; }
        return;
    }
    a->flags |= TG_EXACT_NOT_NEGZERO;
    int top = (int)(mx >> (P - 1)) > 1 ? (int)(mx >> (P - 1)) : 1;
    int lo = top - W > 1 ? top - W : 1; /* the window's bottom exponent */
    int low = (int)((mn + 1) >> (P - 1)) < lo; /* a value below the window (or a subnormal, lo > 1) */
    int unit = P == 8 ? 15 : -1;              /* value = m 2^(e + unit - 149) */
    int64_t pow[256];
    for (int e = 0; e <= top; e++) pow[e] = (e > 0 ? e : 1) >= lo ? INT64_C(1) << ((e > 0 ? e : 1) - lo) : 0;
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = LOAD(i);
        uint32_t e = (b >> (P - 1)) & 0xFF;
        int64_t m = (int64_t)((b & ((1u << (P - 1)) - 1)) | ((uint32_t)(e != 0) << (P - 1)));
        int64_t neg = -(int64_t)(b >> (P + 7)); /* 0 or -1 */
        sum += ((m ^ neg) - neg) * pow[e];
        if (low && m && pow[e] == 0) tg_exact_acc_add_scaled(a, (m ^ neg) - neg, (e > 0 ? (int)e : 1) + unit);
    }
#undef LOAD
    tg_exact_acc_add_scaled(a, sum, lo + unit);
}

static void block_bf16(tg_exact_acc *a, const uint16_t *x, int64_t n, int64_t s) {
    block_portable(a, x, TG_RDT_BF16, n, s, 8, 42);
}
static void block_f32(tg_exact_acc *a, const uint32_t *x, int64_t n, int64_t s) {
    block_portable(a, x, TG_RDT_F32, n, s, 24, 26);
}

void tg_exact_add_portable(tg_exact_acc *a, const void *base, int dtype, int64_t n, int64_t stride) {
    if (n <= 0) return;
    a->flags |= TG_EXACT_NONEMPTY;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t len = n - i < BLOCK ? n - i : BLOCK;
        if (dtype == TG_RDT_BF16) block_bf16(a, (const uint16_t *)base + i * stride, len, stride);
        else block_f32(a, (const uint32_t *)base + i * stride, len, stride);
    }
}

static void add_bf16_portable(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after, int64_t after_n) {
    (void)after, (void)after_n;
    tg_exact_add_portable(a, x, TG_RDT_BF16, n, 1);
}

static void add_f32_portable(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after, int64_t after_n) {
    (void)after, (void)after_n;
    tg_exact_add_portable(a, x, TG_RDT_F32, n, 1);
}

#if defined(TGRAD_HAVE_X86_VARIANTS)
/* 0: no forced choice; 1: a forced name; the name in *name */
static int forced(const char **name) {
    if (!tgrad_cpu_isa_forced()) return 0;
    *name = tgrad_cpu_isa();
    return 1;
}
#endif

tg_exact_bf16_kernel tg_exact_bf16_kernel_for_selection(void) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *name = "";
    int f = forced(&name);
    if (tg_exact_avx512bf16_available() && (!f || strcmp(name, "avx512bf16") == 0)) return tg_exact_add_bf16_avx512bf16;
    if (tg_exact_avx512f_available() && (!f || strcmp(name, "avx512f") == 0 || strcmp(name, "avx512bf16") == 0))
        return tg_exact_add_bf16_avx512f;
    if (tg_exact_avx2_available() && (!f || strcmp(name, "avx2") == 0)) return tg_exact_add_bf16_avx2;
#endif
    return add_bf16_portable;
}

tg_exact_f32_kernel tg_exact_f32_kernel_for_selection(void) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *name = "";
    int f = forced(&name);
    if (tg_exact_avx512f_available() && (!f || strcmp(name, "avx512f") == 0 || strcmp(name, "avx512bf16") == 0))
        return tg_exact_add_f32_avx512f;
    if (tg_exact_avx2_available() && (!f || strcmp(name, "avx2") == 0)) return tg_exact_add_f32_avx2;
#endif
    return add_f32_portable;
}

void tg_exact_acc_add(tg_exact_acc *a, const void *base, int dtype, int64_t n, int64_t stride_elems) {
    if (n <= 0) return;
    if (stride_elems != 1) tg_exact_add_portable(a, base, dtype, n, stride_elems);
    else if (dtype == TG_RDT_BF16) tg_exact_bf16_kernel_for_selection()(a, base, n, NULL, 0);
    else tg_exact_f32_kernel_for_selection()(a, base, n, NULL, 0);
}

void tg_exact_rows(const void *base, int dtype, int64_t rows, int64_t row_stride, int64_t n, int64_t stride, int mean,
                   int out_dtype, uint32_t *out_bits) {
    int64_t es = dtype == TG_RDT_BF16 ? 2 : 4;
    tg_exact_bf16_kernel kb = stride == 1 && dtype == TG_RDT_BF16 ? tg_exact_bf16_kernel_for_selection() : NULL;
    tg_exact_f32_kernel kf = stride == 1 && dtype == TG_RDT_F32 ? tg_exact_f32_kernel_for_selection() : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const char *row = (const char *)base + r * row_stride * es;
        const char *next = r + 1 < rows ? row + row_stride * es : NULL; /* prefetched while this row is summed */
        tg_exact_acc a;
        tg_exact_acc_init(&a);
        if (kb && n > 0) kb(&a, (const uint16_t *)row, n, (const uint16_t *)next, n);
        else if (kf && n > 0) kf(&a, (const uint32_t *)row, n, (const uint32_t *)next, n);
        else tg_exact_add_portable(&a, row, dtype, n, stride);
        out_bits[r] = mean ? tg_exact_acc_round_div(&a, n, out_dtype) : tg_exact_acc_round(&a, out_dtype);
    }
}

/* ---- column sums: many accumulators, each row read once --------------------------------------
 * Chunks of COLS_W columns over blocks of BLOCK rows. Per column and block, as block_portable:
 * the largest and smallest nonzero magnitudes set the column's window; in-window values are
 * integers below 2^50 in its units, BLOCK of them below 2^62 in the column's int64; a column with
 * inf/NaN or only zeros goes value by value, values below a window one at a time. */
#define COLS_W 64
static inline __attribute__((always_inline)) void cols_block(tg_exact_acc *acc, const void *base, int dtype, int64_t h,
                                                             int64_t rs, int w, int64_t cs, const int P, const int W) {
    const uint16_t *x16 = base;
    const uint32_t *x32 = base;
    const uint32_t sign = 1u << (P + 7), magmask = sign - 1, inf = 0xFFu << (P - 1);
#define AT(r, c) (P == 8 ? (uint32_t)x16[(r) * rs + (c) * cs] : x32[(r) * rs + (c) * cs])
    uint32_t mx[COLS_W], mn[COLS_W];
    int lo[COLS_W], low[COLS_W];
    int64_t sum[COLS_W];
    const int unit = P == 8 ? 15 : -1; /* value = m 2^(e + unit - 149) */
    for (int c = 0; c < w; c++) mx[c] = 0, mn[c] = ~0u, sum[c] = 0;
    for (int64_t r = 0; r < h; r++)
        for (int c = 0; c < w; c++) {
            uint32_t m = AT(r, c) & magmask;
            mx[c] = m > mx[c] ? m : mx[c];
            mn[c] = m - 1 < mn[c] ? m - 1 : mn[c];
        }
    for (int c = 0; c < w; c++) {
        acc[c].flags |= TG_EXACT_NONEMPTY;
        lo[c] = 1000, low[c] = 0; /* skipped by the main loop: every shift is negative */
        if (mx[c] >= inf) {
            for (int64_t r = 0; r < h; r++) add_one(&acc[c], AT(r, c), dtype);
        } else if (mx[c] == 0) {
            for (int64_t r = 0; r < h; r++)
                if (AT(r, c) != sign) { acc[c].flags |= TG_EXACT_NOT_NEGZERO; break; }
        } else {
            acc[c].flags |= TG_EXACT_NOT_NEGZERO;
            int top = (int)(mx[c] >> (P - 1)) > 1 ? (int)(mx[c] >> (P - 1)) : 1;
            lo[c] = top - W > 1 ? top - W : 1;
            low[c] = (int)((mn[c] + 1) >> (P - 1)) < lo[c];
        }
    }
    for (int64_t r = 0; r < h; r++)
        for (int c = 0; c < w; c++) {
            uint32_t b = AT(r, c);
            uint32_t e = (b >> (P - 1)) & 0xFF;
            int64_t m = (int64_t)((b & ((1u << (P - 1)) - 1)) | ((uint32_t)(e != 0) << (P - 1)));
            int64_t neg = -(int64_t)(b >> (P + 7));
            int ee = e > 0 ? (int)e : 1, sh = ee - lo[c];
            int64_t v = sh >= 0 ? m << (sh & 63) : 0;
            sum[c] += (v ^ neg) - neg;
            if (low[c] && sh < 0 && m) tg_exact_acc_add_scaled(&acc[c], (m ^ neg) - neg, ee + unit);
        }
#undef AT
    for (int c = 0; c < w; c++)
        if (lo[c] != 1000) tg_exact_acc_add_scaled(&acc[c], sum[c], lo[c] + unit);
}

void tg_exact_cols(const void *base, int dtype, int64_t rows, int64_t row_stride, int64_t cols, int64_t col_stride,
                   int mean, int out_dtype, uint32_t *out_bits) {
    int64_t es = dtype == TG_RDT_BF16 ? 2 : 4;
#if defined(TGRAD_HAVE_X86_VARIANTS)
    if (col_stride == 1 && tg_exact_f32_kernel_for_selection() == tg_exact_add_f32_avx512f) {
        /* panels of whole-row segments; blocks of rows whose panel (<= 512 KiB) stays in L2 for
         * the kernel's second pass */
        int64_t rblock = (512 << 10) / (TG_EXACT_COLS_PANEL * es);
        tg_exact_acc acc[TG_EXACT_COLS_PANEL];
        for (int64_t c0 = 0; c0 < cols; c0 += TG_EXACT_COLS_PANEL) {
            int w = cols - c0 < TG_EXACT_COLS_PANEL ? (int)(cols - c0) : TG_EXACT_COLS_PANEL;
            for (int c = 0; c < w; c++) tg_exact_acc_init(&acc[c]);
            for (int64_t r0 = 0; r0 < rows; r0 += rblock)
                tg_exact_cols_avx512f(acc, (const char *)base + (r0 * row_stride + c0) * es, dtype,
                                      rows - r0 < rblock ? rows - r0 : rblock, row_stride, w);
            for (int c = 0; c < w; c++)
                out_bits[c0 + c] = mean ? tg_exact_acc_round_div(&acc[c], rows, out_dtype) : tg_exact_acc_round(&acc[c], out_dtype);
        }
        return;
    }
#endif
    tg_exact_acc acc[COLS_W];
    for (int64_t c0 = 0; c0 < cols; c0 += COLS_W) {
        int w = cols - c0 < COLS_W ? (int)(cols - c0) : COLS_W;
        for (int c = 0; c < w; c++) tg_exact_acc_init(&acc[c]);
        /* blocks of 512 rows: a chunk's block (<= 128 KiB) stays in L2 for the second pass even
         * when a power-of-two row stride maps its rows onto a sixteenth of L2's sets */
        for (int64_t r0 = 0; r0 < rows; r0 += 512) {
            int64_t h = rows - r0 < 512 ? rows - r0 : 512;
            const char *p = (const char *)base + (r0 * row_stride + c0 * col_stride) * es;
            if (dtype == TG_RDT_BF16) cols_block(acc, p, dtype, h, row_stride, w, col_stride, 8, 42);
            else cols_block(acc, p, dtype, h, row_stride, w, col_stride, 24, 26);
        }
        for (int c = 0; c < w; c++)
            out_bits[c0 + c] = mean ? tg_exact_acc_round_div(&acc[c], rows, out_dtype) : tg_exact_acc_round(&acc[c], out_dtype);
    }
}

/* ---- rounding --------------------------------------------------------------------------------- */
static int top_bit(const uint64_t *q, int nl) { /* -1 for zero */
    for (int i = nl - 1; i >= 0; i--)
        if (q[i]) return i * 64 + 63 - __builtin_clzll(q[i]);
    return -1;
}
static uint64_t bits_at(const uint64_t *q, int nl, int pos, int width) { /* width <= 32, pos >= 0 */
    int w = pos >> 6, s = pos & 63;
    unsigned __int128 t = w < nl ? q[w] : 0;
    if (w + 1 < nl) t |= (unsigned __int128)q[w + 1] << 64;
    return (uint64_t)(t >> s) & ((UINT64_C(1) << width) - 1);
}
static int any_below(const uint64_t *q, int pos) { /* a set bit below position pos */
    int w = pos >> 6, s = pos & 63;
    for (int i = 0; i < w; i++)
        if (q[i]) return 1;
    return s && (q[w] & ((UINT64_C(1) << s) - 1));
}

static uint32_t special_bits(int out, int which) { /* 0 NaN, 1 +inf, 2 -inf */
    if (out == TG_RDT_BF16) return which == 0 ? 0x7FC0u : which == 1 ? 0x7F80u : 0xFF80u;
    return which == 0 ? 0x7FC00000u : which == 1 ? 0x7F800000u : 0xFF800000u;
}

/* The nonzero magnitude q 2^L (plus a nonzero remainder below q's last bit when `sticky`), rounded
 * to nearest even in `out`'s format: p significant bits, exponents -126 .. 127, gradual underflow. */
static uint32_t round_magnitude(const uint64_t *q, int nl, int L, int sticky, int neg, int out) {
    const int p = out == TG_RDT_BF16 ? 8 : 24;
    const uint32_t sign = neg ? (out == TG_RDT_BF16 ? 0x8000u : 0x80000000u) : 0;
    int t = top_bit(q, nl);
    int ex = t + L; /* the value lies in [2^ex, 2^(ex + 1)) */
    if (ex > 127) return sign | special_bits(out, 1);
    int qe = (ex > -126 ? ex : -126) - (p - 1); /* the exponent of the result's ulp */
    int shift = qe - L;
    uint64_t kept;
    if (shift <= 0) {
        kept = bits_at(q, nl, 0, p) << -shift; /* exact: fewer than p bits */
    } else {
        kept = bits_at(q, nl, shift, p + 1 < 32 ? p + 1 : 32);
        int half = (int)bits_at(q, nl, shift - 1, 1);
        int rest = sticky || any_below(q, shift - 1);
        if (half && (rest || (kept & 1))) kept++;
    }
    /* ((F - 1) << (p - 1)) + kept encodes normal and subnormal values alike, carries included */
    int64_t f = qe + (p - 1) + 127; /* the biased exponent of a normal result */
    uint64_t bits = ((uint64_t)(f - 1) << (p - 1)) + kept;
    uint64_t inf = out == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    if (bits >= inf) bits = inf;
    return sign | (uint32_t)bits;
}

/* The specials' result, or -1 when the finite sum decides. */
static int64_t special_result(const tg_exact_acc *a, int out) {
    uint32_t f = a->flags;
    if ((f & TG_EXACT_NAN) || ((f & TG_EXACT_PINF) && (f & TG_EXACT_NINF))) return special_bits(out, 0);
    if (f & TG_EXACT_PINF) return special_bits(out, 1);
    if (f & TG_EXACT_NINF) return special_bits(out, 2);
    return -1;
}
static uint32_t zero_bits(const tg_exact_acc *a, int out) {
    int negzero = (a->flags & TG_EXACT_NONEMPTY) && !(a->flags & TG_EXACT_NOT_NEGZERO);
    return negzero ? (out == TG_RDT_BF16 ? 0x8000u : 0x80000000u) : 0;
}
static int magnitude(const tg_exact_acc *a, uint64_t *mag) { /* returns the sign */
    int neg = (int)(a->limb[NL - 1] >> 63);
    uint64_t c = 1;
    for (int i = 0; i < NL; i++) {
        uint64_t v = neg ? ~a->limb[i] : a->limb[i];
        if (neg) {
            v += c;
            c = c && v == 0;
        }
        mag[i] = v;
    }
    return neg;
}

uint32_t tg_exact_acc_round(const tg_exact_acc *a, int out_dtype) {
    int64_t sp = special_result(a, out_dtype);
    if (sp >= 0) return (uint32_t)sp;
    uint64_t mag[NL];
    int neg = magnitude(a, mag);
    if (top_bit(mag, NL) < 0) return zero_bits(a, out_dtype);
    return round_magnitude(mag, NL, -149, 0, neg, out_dtype);
}

uint32_t tg_exact_acc_round_div(const tg_exact_acc *a, int64_t n, int out_dtype) {
    if (n <= 0) return special_bits(out_dtype, 0);
    int64_t sp = special_result(a, out_dtype);
    if (sp >= 0) return (uint32_t)sp;
    /* q = floor(|sum| 2^128 / n) with the remainder as the sticky bit: a nonzero |sum| is at
     * least 1 unit, so q has at least 65 significant bits, more than the 26 rounding needs */
    uint64_t num[NL + 2] = { 0, 0 }, q[NL + 2];
    int neg = magnitude(a, num + 2);
    if (top_bit(num, NL + 2) < 0) return zero_bits(a, out_dtype);
    unsigned __int128 r = 0;
    for (int i = NL + 1; i >= 0; i--) {
        unsigned __int128 cur = (r << 64) | num[i];
        q[i] = (uint64_t)(cur / (uint64_t)n);
        r = cur % (uint64_t)n;
    }
    return round_magnitude(q, NL + 2, -149 - 128, r != 0, neg, out_dtype);
}

/* ---- extrema ---------------------------------------------------------------------------------
 * Each value maps to an int32 key ordered as the values, with -0.0 and +0.0 the same key; NaN is
 * found first (the first NaN is the answer). Blocks: the block's best key (a loop the compiler
 * vectorizes), then the first index holding the overall best key within the first block that has it. */
static inline int32_t key_of(uint32_t b, int dtype) {
    uint32_t sign = dtype == TG_RDT_BF16 ? 0x8000u : 0x80000000u;
    int32_t mag = (int32_t)(b & ~sign);
    return (b & sign) ? -mag : mag;
}
static inline uint32_t elem(const void *base, int dtype, int64_t i) {
    return dtype == TG_RDT_BF16 ? ((const uint16_t *)base)[i] : ((const uint32_t *)base)[i];
}

int tg_extrema(const void *base, int dtype, int64_t n, int64_t stride, int want_max, uint32_t *value_bits,
               int64_t *index) {
    if (n <= 0 || !base || !value_bits || !index || (dtype != TG_RDT_BF16 && dtype != TG_RDT_F32)) return -1;
    const uint32_t inf = dtype == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    const uint32_t magmask = dtype == TG_RDT_BF16 ? 0x7FFFu : 0x7FFFFFFFu;
    int32_t best = 0;
    int64_t best_block = -1;
    for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {
        int64_t len = n - i0 < BLOCK ? n - i0 : BLOCK;
        uint32_t mx = 0;
        int32_t kmax = INT32_MIN, kmin = INT32_MAX;
        for (int64_t i = i0; i < i0 + len; i++) {
            uint32_t b = elem(base, dtype, i * stride);
            uint32_t m = b & magmask;
            int32_t k = key_of(b, dtype);
            mx = m > mx ? m : mx;
            kmax = k > kmax ? k : kmax;
            kmin = k < kmin ? k : kmin;
        }
        if (mx > inf) { /* the first NaN */
            for (int64_t i = i0;; i++) {
                uint32_t b = elem(base, dtype, i * stride);
                if ((b & magmask) > inf) { *value_bits = b; *index = i; return 0; }
            }
        }
        int32_t k = want_max ? kmax : kmin;
        if (best_block < 0 || (want_max ? k > best : k < best)) { best = k; best_block = i0; }
    }
    for (int64_t i = best_block;; i++) {
        uint32_t b = elem(base, dtype, i * stride);
        if (key_of(b, dtype) == best) { *value_bits = b; *index = i; return 0; }
    }
}

/* ---- the debug entry points ------------------------------------------------------------------- */
static tgrad_status check_args(const char *fn, const void *data, int32_t dtype, int64_t n) {
    if (dtype != TG_RDT_BF16 && dtype != TG_RDT_F32)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: dtype %d is neither 1 (bfloat16) nor 2 (float32)", fn,
                       (int)dtype);
    if (n < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: n = %lld < 0", fn, (long long)n);
    if (!data && n > 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: data is NULL with n = %lld", fn, (long long)n);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_exact_sum(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t mean,
                                             int32_t out_dtype, uint32_t *out_bits) {
    tgrad_status s = check_args("debug_exact_sum", data, dtype, n);
    if (s) return s;
    if (out_dtype != TG_RDT_BF16 && out_dtype != TG_RDT_F32)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum: out_dtype %d is neither 1 (bfloat16) nor 2 (float32)",
                       (int)out_dtype);
    if (mean != 0 && mean != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum: mean = %d is neither 0 nor 1", (int)mean);
    if (!out_bits) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum: out_bits is NULL");
    tg_exact_acc a;
    tg_exact_acc_init(&a);
    /* a negative stride reads backwards from data: element i is data[i * stride] */
    tg_exact_acc_add(&a, data, dtype, n, stride);
    *out_bits = mean ? tg_exact_acc_round_div(&a, n, out_dtype) : tg_exact_acc_round(&a, out_dtype);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_exact_sum_2d(const void *data, int32_t dtype, int64_t rows, int64_t row_stride,
                                                int64_t cols, int64_t col_stride, int32_t axis, int32_t mean,
                                                int32_t out_dtype, uint32_t *out_bits) {
    if (rows < 0 || cols < 0)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum_2d: shape [%lld, %lld] has a negative extent",
                       (long long)rows, (long long)cols);
    tgrad_status s = check_args("debug_exact_sum_2d", data, dtype, rows && cols ? 1 : 0);
    if (s) return s;
    if (out_dtype != TG_RDT_BF16 && out_dtype != TG_RDT_F32)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT,
                       "debug_exact_sum_2d: out_dtype %d is neither 1 (bfloat16) nor 2 (float32)", (int)out_dtype);
    if (mean != 0 && mean != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum_2d: mean = %d is neither 0 nor 1", (int)mean);
    if (axis != 0 && axis != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum_2d: axis = %d is neither 0 nor 1", (int)axis);
    if (!out_bits && (axis ? rows : cols) > 0)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_exact_sum_2d: out_bits is NULL");
    if (axis == 1) tg_exact_rows(data, dtype, rows, row_stride, cols, col_stride, mean, out_dtype, out_bits);
    else tg_exact_cols(data, dtype, rows, row_stride, cols, col_stride, mean, out_dtype, out_bits);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_extrema(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t want_max,
                                           uint32_t *value_bits, int64_t *index) {
    tgrad_status s = check_args("debug_extrema", data, dtype, n);
    if (s) return s;
    if (n == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_extrema: no values (the extremum of nothing)");
    if (!value_bits || !index) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_extrema: NULL output");
    if (want_max != 0 && want_max != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_extrema: want_max = %d is neither 0 nor 1", (int)want_max);
    tg_extrema(data, dtype, n, stride, want_max, value_bits, index);
    return TGRAD_OK;
}
