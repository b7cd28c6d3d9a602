/* The one micro-kernel signature every CPU variant implements (BLIS-style).
 *
 *   c[r*ldc + j] (r < MR, j < NR)  =  (accumulate ? c : +0)  then, for p = 0 .. kpairs-1:
 *       c = step(c, A_odd * B_odd); c = step(c, A_even * B_even)
 *
 * a: kpairs x MR words, b: kpairs x NR words; a word holds one k-pair of bf16 values, the even
 * k in its low half and the odd k in its high half (the layout vdpbf16ps reads). Packing has
 * already flushed subnormal inputs to signed zero and padded K to even with +0 in both operands.
 * step() is the numerics contract: the exact sum rounded to nearest even fp32, then flushed to a
 * signed zero when its magnitude is below 2^-126 (tininess after rounding, as x86 does). */
#ifndef TGRAD_CPU_UKERNEL_H
#define TGRAD_CPU_UKERNEL_H

#include <stdint.h>

typedef void (*tg_ukernel_fn)(int64_t kpairs, const uint32_t *a, const uint32_t *b, float *c,
                              int64_t ldc, int accumulate);

typedef struct tg_ukernel {
    const char *name; /* variant name, also the file's: ukernel_<name>.c */
    int32_t mr, nr;
    tg_ukernel_fn fn;
    int (*available)(void); /* does this CPU run it */
} tg_ukernel;

extern const tg_ukernel tg_ukernel_portable;
#if defined(TGRAD_HAVE_AVX512BF16)
extern const tg_ukernel tg_ukernel_avx512bf16;
#endif

#endif
