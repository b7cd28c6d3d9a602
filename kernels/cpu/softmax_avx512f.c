/* The softmax row loops (kernels/cpu/softmax_rows.h) vectorized for AVX-512 (8 doubles a vector):
 * the same source as the portable loops, so the same doubles; the fused passes (load and scan, exp
 * and sum) and the bfloat16 outputs in intrinsics (kernels/cpu/softmax_avx512.h), lane for lane the
 * same operations. Forcing avx512f or avx512bf16 runs these. */
#include "softmax_rows.h"
#include "softmax_avx512.h"

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
const tg_sm_variant tg_sm_avx512f = { .name = "avx512f", .available = available, .load_bf16 = sm_load_bf16,
                                      .load_f32 = sm_load_f32, .scan = sm_scan, .exp_rows = sm_exp_rows,
                                      .sum_below = sm_sum_below, .out_softmax = sm5_out_softmax,
                                      .out_log_softmax = sm_out_log_softmax, .load_scan_bf16 = sm5_load_scan_bf16,
                                      .load_scan_f32 = sm5_load_scan_f32, .exp_sum = sm5_exp_sum };
