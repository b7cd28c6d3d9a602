/* The AVX-512 AdamW loop (kernels/cpu/optim_avx512f.c), used by optim_many.c: n contiguous
 * elements, a multiple of 16 of them done (the count returned; the caller finishes the rest).
 * flags: TG_OPTIM_*_FLAG (tgrad.h's TGRAD_OPTIM_MAXIMIZE and _DECAY; amsgrad is not taken). */
#ifndef TGRAD_OPS_OPTIM_AVX512F_H
#define TGRAD_OPS_OPTIM_AVX512F_H

#include "../internal.h"

enum { TG_OPTIM_MAXIMIZE_FLAG = 1, TG_OPTIM_DECAY_FLAG = 2 }; /* == TGRAD_OPTIM_MAXIMIZE, _DECAY */

TG_HIDDEN int64_t tg_optim_adamw_avx512f(int64_t n, int32_t flags, const float *s, const float *P, const void *G,
                                         int32_t grad_bf16,
                                         const float *M, const float *V, float *oP, float *oM, float *oV,
                                         uint16_t *oB);
TG_HIDDEN int tg_optim_avx512f_available(void);

#endif
