/* The softmax kind's row loops (kernels/cpu/softmax_rows.h), one set per CPU variant: the same
 * source compiled with each variant's flags. Every loop computes in double with FP contraction off,
 * so each variant's doubles may differ only where the compiler may choose (none: no reassociation),
 * and the bytes never depend on them anyway: an output is written only where the documented error
 * bound decides its rounding (docs/numerics.md, "softmax"); the others are flagged for the
 * binary128 path (ops/softmax.c). The AVX-512 variant's fused entries and outputs are intrinsics
 * (kernels/cpu/softmax_avx512.h) doing the plain loops' operations lane for lane: the same doubles. */
#ifndef TGRAD_OPS_SOFTMAX_KERNEL_H
#define TGRAD_OPS_SOFTMAX_KERNEL_H

#include <stdint.h>

/* What a row holds: its maximum, smallest finite value, finite count, and whether a NaN is there. */
typedef struct tg_sm_scan { double m, xmin; int64_t nfinite; int nan; } tg_sm_scan;

typedef struct tg_sm_variant {
    const char *name;
    int (*available)(void);
    /* x[j] = the j-th of n contiguous bf16 (bits) or float32 values, as doubles (exact). */
    void (*load_bf16)(const uint16_t *p, int64_t n, double *x);
    void (*load_f32)(const float *p, int64_t n, double *x);
    /* The row's summary (max -inf and xmin +inf for a row with no finite or larger value). */
    tg_sm_scan (*scan)(const double *x, int64_t n);
    /* e[j] = exp(x[j] - m) for j < n (0 where x[j] - m < -708, -inf included), within
     * TG_SM_EXP_REL of the exp of the computed difference. */
    void (*exp_rows)(const double *x, double m, double *e, int64_t n);
    /* The sum of e[j] over the j with x[j] < m, in eight interleaved accumulators (j mod 8) folded
     * ((0+1)+(2+3))+((4+5)+(6+7)): each term meets at most ceil(n/8) + 3 roundings; *ties = the
     * count of x[j] == m. */
    double (*sum_below)(const double *x, double m, const double *e, int64_t n, int64_t *ties);
    /* softmax outputs q = e[j] * inv, rounded to out_dtype (bf16 bits as uint16_t, float32 as
     * uint32_t) where q -+ thr double ulps of q's binade decide it (thr >= w 2^53 + 2 for the
     * relative bound w): flag[j] = 0 and out written; else flag[j] = 1 (out holds garbage there).
     * Results outside the output's normal range (but zero) are always flagged. Returns the count
     * flagged. */
    int64_t (*out_softmax)(const double *e, int64_t n, double inv, int64_t thr, int32_t out_dtype, void *out,
                           uint8_t *flag);
    /* log_softmax outputs q = (x[j] - m) - L, the same way. */
    int64_t (*out_log_softmax)(const double *x, int64_t n, double m, double L, int64_t thr, int32_t out_dtype,
                               void *out, uint8_t *flag);
    /* load_bf16 (load_f32) and scan fused: the same x and the same summary, one pass. */
    tg_sm_scan (*load_scan_bf16)(const uint16_t *p, int64_t n, double *x);
    tg_sm_scan (*load_scan_f32)(const float *p, int64_t n, double *x);
    /* exp_rows and sum_below fused: the same e, the same sum and ties, one pass. */
    double (*exp_sum)(const double *x, double m, double *e, int64_t n, int64_t *ties);
} tg_sm_variant;

/* The relative error bound of the row loops' exp (|r| < 0.3466 after the Cody-Waite reduction,
 * a degree-13 Taylor polynomial: truncation below 2^-55.9, Horner and reduction roundings below
 * 2^-50.5; tests/c/test_softmax.c measures it against expl on 2^20 points). */
#define TG_SM_EXP_REL 0x1p-48

extern const tg_sm_variant tg_sm_portable;
/* The loops of a softmax step's CPU variant (the forced one or the best; ops/softmax.c): every
 * variant gives the same doubles, so only the time depends on it. */
struct tg_step;
const tg_sm_variant *tg_sm_variant_for(const struct tg_step *st);
#if defined(TGRAD_HAVE_X86_VARIANTS)
extern const tg_sm_variant tg_sm_avx512f, tg_sm_avx2;
#endif

#endif
