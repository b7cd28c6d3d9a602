/* The norms' hot loops for AVX-512 (kernels/cpu/norm_loops.h compiled with AVX-512 F, BW and VL:
 * the same source as the portable build, and the same bytes, since each output is decided by a
 * rigorous bound or flagged for the exact path). */
#include "ops/norm_exact.h"

#define NORM_FN(name) tg_##name##_avx512f
#include "norm_loops.h"

int tg_norm_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
