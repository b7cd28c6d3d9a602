/* The softmax row loops (kernels/cpu/softmax_rows.h) vectorized for AVX2 (4 doubles a vector): the
 * same source as the portable loops, so the same doubles. */
#include "softmax_rows.h"

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
TG_SM_VARIANT(tg_sm_avx2, "avx2");
