/* The norms' backward loops for AVX-512: kernels/cpu/norm_backward_loops.h compiled with AVX-512
 * F, BW and VL (the same source as the portable build in libtgrad/src/ops/norm_backward.c). */
#define NB_FN(name) tg_##name##_avx512f
#include "norm_backward_loops.h"
