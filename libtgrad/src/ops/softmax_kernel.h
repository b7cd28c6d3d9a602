/* The softmax kind's row loops (kernels/cpu/softmax_rows.h), one set per CPU variant: the same
 * source compiled with each variant's flags. Every loop computes in double with FP contraction off,
 * so each variant's doubles may differ only where the compiler may choose (none: no reassociation),
 * and the bytes never depend on them anyway: an output is written only where the documented error
 * bound decides its rounding (docs/numerics.md, "softmax"); the others are flagged for the
 * binary128 path (ops/softmax.c). */
#ifndef TGRAD_OPS_SOFTMAX_KERNEL_H
#define TGRAD_OPS_SOFTMAX_KERNEL_H

#include <stdint.h>

typedef struct tg_sm_variant {
    const char *name;
    int (*available)(void);
    /* e[j] = exp(x[j] - m) for j < n (0 where x[j] - m < -708, -inf included), within
     * TG_SM_EXP_REL of the exp of the computed difference. */
    void (*exp_rows)(const double *x, double m, double *e, int64_t n);
    /* The sum of e[0 .. n) in eight interleaved accumulators (e[j] into j mod 8), folded
     * ((0+1)+(2+3))+((4+5)+(6+7)): each term meets at most ceil(n/8) + 3 roundings. */
    double (*sum)(const double *e, int64_t n);
    /* softmax outputs: q = e[j] * inv, written where q (1 - w) and q (1 + w) round alike to
     * out_dtype (bf16 bits as uint16_t, float32 as uint32_t); flag[j] = 1 elsewhere (out untouched
     * there). Returns the number flagged. */
    int64_t (*out_softmax)(const double *e, int64_t n, double inv, double w, int32_t out_dtype, void *out, uint8_t *flag);
    /* log_softmax outputs: y = (x[j] - m) - L, written where y -+ |y| w round alike (-inf for
     * x[j] = -inf); flagged elsewhere. */
    int64_t (*out_log_softmax)(const double *x, int64_t n, double m, double L, double w, int32_t out_dtype, void *out,
                               uint8_t *flag);
} tg_sm_variant;

/* The relative error bound of the row loops' exp (|r| < 0.3466 after the Cody-Waite reduction,
 * a degree-13 Taylor polynomial: truncation below 2^-55.9, Horner and reduction roundings below
 * 2^-50.5; tests/c/test_softmax.c measures it against expl on 2^20 points). */
#define TG_SM_EXP_REL 0x1p-48

extern const tg_sm_variant tg_sm_portable;
#if defined(TGRAD_HAVE_X86_VARIANTS)
extern const tg_sm_variant tg_sm_avx512f, tg_sm_avx2;
#endif

#endif
