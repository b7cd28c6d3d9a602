/* Exact reductions (private): a correctly rounded sum and mean of bf16 or float32 values, and
 * exact extrema. The algorithm and its exactness argument: docs/numerics.md, "Reductions:
 * correctly rounded sum and mean".
 *
 * tg_exact_acc holds the exact sum of every finite value added so far as one fixed-point integer
 * (two's complement, 384 bits, least significant bit 2^-149: every bf16 and float32 value is an
 * integer multiple of 2^-149 below 2^128, so a sum of fewer than 2^106 of them fits), plus the
 * special values' bookkeeping. Adding is order-independent integer arithmetic, so any split of
 * the data over threads or blocks, merged in any order, gives the same accumulator and the same
 * rounded bytes. Nothing here uses the floating-point environment (MXCSR/FPCR) of the calling thread.
 * Nothing allocates or fails; an accumulator belongs to one thread at a time; tg_exact_cols uses
 * about 45 KiB of stack. */
#ifndef TGRAD_OPS_REDUCE_EXACT_H
#define TGRAD_OPS_REDUCE_EXACT_H

#include <stdint.h>

#include "internal.h"

/* Element and output dtypes of this engine: tgrad.h's frozen dtype codes (TGRAD_DTYPE_BF16 = 1,
 * TGRAD_DTYPE_F32 = 2), so that no caller translates. */
enum { TG_RDT_BF16 = 1, TG_RDT_F32 = 2 };
#if defined(TGRAD_DTYPE_BF16) && defined(TGRAD_DTYPE_F32)
_Static_assert(TG_RDT_BF16 == TGRAD_DTYPE_BF16 && TG_RDT_F32 == TGRAD_DTYPE_F32, "the engine's dtype codes are tgrad.h's");
#endif

#define TG_EXACT_LIMBS 6 /* 384 bits */
/* Bits of tg_exact_acc.flags */
#define TG_EXACT_NAN 1u         /* a NaN was added */
#define TG_EXACT_PINF 2u        /* +inf was added */
#define TG_EXACT_NINF 4u        /* -inf was added */
#define TG_EXACT_NONEMPTY 8u    /* at least one value was added */
#define TG_EXACT_NOT_NEGZERO 16u /* a value other than -0.0 was added */

typedef struct tg_exact_acc {
    uint64_t limb[TG_EXACT_LIMBS]; /* sum of the finite values / 2^-149, two's complement, little-endian */
    uint32_t flags;
} tg_exact_acc;

TG_HIDDEN void tg_exact_acc_init(tg_exact_acc *a);
/* Adds the n values base[i * stride_elems], i = 0 .. n-1 (stride may be negative or 0; n <= 0
 * adds nothing). dtype TG_RDT_BF16 (uint16_t bits) or TG_RDT_F32 (float bits). Contiguous values
 * take the fastest SIMD kernel the CPU variant selection allows; every path gives the same
 * accumulator. */
TG_HIDDEN void tg_exact_acc_add(tg_exact_acc *a, const void *base, int dtype, int64_t n, int64_t stride_elems);
/* dst += src (exact; flags combined). */
TG_HIDDEN void tg_exact_acc_merge(tg_exact_acc *dst, const tg_exact_acc *src);
/* The exact sum rounded once to out_dtype (RNE, gradual underflow, overflow to +-inf): its bits,
 * bf16 in the low 16 bits. NaN if a NaN or both infinities were added (canonical: 0x7FC0,
 * 0x7FC00000), else +-inf if one was; a zero sum is -0.0 when every value added was -0.0 (at
 * least one), else +0.0 (the empty sum too). */
TG_HIDDEN uint32_t tg_exact_acc_round(const tg_exact_acc *a, int out_dtype);
/* The exact sum / n rounded once (the mean of n values): as tg_exact_acc_round, and NaN for n <= 0. */
TG_HIDDEN uint32_t tg_exact_acc_round_div(const tg_exact_acc *a, int64_t n, int out_dtype);

/* Exact extrema: the maximum (want_max != 0) or minimum of the n values base[i * stride], its bits
 * in *value_bits and its index in *index. NaN propagates: the first NaN wins. Ties, -0.0 and +0.0
 * included (they compare equal), give the first index; the value is always the element at the
 * index, so max([-0.0, 0.0]) is -0.0 and max([0.0, -0.0]) is +0.0 (numpy's argmax index).
 * Returns 0, or -1 (outputs untouched) for n <= 0, a NULL pointer or an unknown dtype. */
TG_HIDDEN int tg_extrema(const void *base, int dtype, int64_t n, int64_t stride, int want_max, uint32_t *value_bits,
                         int64_t *index);

/* The sum (mean = 0) or mean (mean = 1) of each of `rows` rows, rounded to out_dtype: row r holds
 * the n values base[r * row_stride + i * stride] (strides in elements). out_bits[r] as from
 * tg_exact_acc_round(_div). Contiguous bf16 rows prefetch the next row while one is summed. */
TG_HIDDEN void tg_exact_rows(const void *base, int dtype, int64_t rows, int64_t row_stride, int64_t n, int64_t stride,
                             int mean, int out_dtype, uint32_t *out_bits);

/* The sum or mean over rows of each of `cols` columns: out_bits[c] reduces the `rows` values
 * base[r * row_stride + c * col_stride] (a reduction over a non-innermost axis: each row is read
 * once, in order, for many columns at a time; contiguous columns take the AVX-512F kernel where
 * the CPU variant selection allows it, as tg_exact_f32_kernel_for_selection does). */
TG_HIDDEN void tg_exact_cols(const void *base, int dtype, int64_t rows, int64_t row_stride, int64_t cols,
                             int64_t col_stride, int mean, int out_dtype, uint32_t *out_bits);

/* ---- kernels (the SIMD file and the tests) ---- */
/* The contiguous kernels tg_exact_acc_add uses (after, after_n: the contiguous values the caller
 * sums next, or NULL: a hint to prefetch, never read), by the tgrad_set_cpu_isa selection: with
 * no forced choice the most capable this CPU runs (bf16: AVX512-BF16, AVX-512F, AVX2; float32:
 * AVX-512F, AVX2); a forced "avx512bf16", "avx512f" or "avx2" that kernel where it exists
 * (float32 under "avx512bf16": AVX-512F); "portable" the portable loops. */
typedef void (*tg_exact_bf16_kernel)(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after,
                                     int64_t after_n);
typedef void (*tg_exact_f32_kernel)(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after,
                                    int64_t after_n);
TG_HIDDEN tg_exact_bf16_kernel tg_exact_bf16_kernel_for_selection(void);
TG_HIDDEN tg_exact_f32_kernel tg_exact_f32_kernel_for_selection(void);
/* The portable loops, always available: exact for any data. */
TG_HIDDEN void tg_exact_add_portable(tg_exact_acc *a, const void *base, int dtype, int64_t n, int64_t stride);
/* tg_exact_cols's panel: the columns one pass takes (every architecture; the AVX-512F kernel's
 * width too). */
#define TG_EXACT_COLS_PANEL 512
#if defined(TGRAD_HAVE_X86_VARIANTS)
/* kernels/cpu/reduce_avx512bf16.c: contiguous bf16 with vdpbf16ps; blocks it cannot take
 * exactly (inf/NaN, values below 2^-92, spreads over 2^27) go to tg_exact_add_portable. */
TG_HIDDEN void tg_exact_add_bf16_avx512bf16(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after,
                                            int64_t after_n);
TG_HIDDEN int tg_exact_avx512bf16_available(void);
/* kernels/cpu/reduce_avx512f.c: contiguous float32, and bf16 widened, through exact double FMAs
 * into int64 lanes; blocks it cannot take exactly go to tg_exact_add_portable. */
TG_HIDDEN void tg_exact_add_f32_avx512f(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after,
                                        int64_t after_n);
TG_HIDDEN void tg_exact_add_bf16_avx512f(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after,
                                         int64_t after_n);
TG_HIDDEN int tg_exact_avx512f_available(void);
/* w <= TG_EXACT_COLS_PANEL contiguous columns over h <= 2048 rows (row stride rs elements) into
 * acc[0 .. w-1]: tg_exact_cols's kernel, reading whole rows. */
TG_HIDDEN void tg_exact_cols_avx512f(tg_exact_acc *acc, const void *base, int dtype, int64_t h, int64_t rs, int w);
/* kernels/cpu/reduce_avx2.c: the same method on 256-bit vectors (AVX2 and FMA). */
TG_HIDDEN void tg_exact_add_f32_avx2(tg_exact_acc *a, const uint32_t *x, int64_t n, const uint32_t *after,
                                     int64_t after_n);
TG_HIDDEN void tg_exact_add_bf16_avx2(tg_exact_acc *a, const uint16_t *x, int64_t n, const uint16_t *after,
                                      int64_t after_n);
TG_HIDDEN int tg_exact_avx2_available(void);
#endif

/* Adds v * 2^(p - 149) to the accumulator (0 <= p <= 300, any int64 v). */
TG_HIDDEN void tg_exact_acc_add_scaled(tg_exact_acc *a, int64_t v, int p);

#endif
