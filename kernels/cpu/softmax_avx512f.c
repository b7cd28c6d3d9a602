/* The softmax row loops (kernels/cpu/softmax_rows.h) vectorized for AVX-512 (8 doubles a vector):
 * the same source as the portable loops, so the same doubles. Forcing avx512f or avx512bf16 runs
 * these. */
#include "softmax_rows.h"

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
TG_SM_VARIANT(tg_sm_avx512f, "avx512f");
