/* The AVX-512 elementwise variant: elementwise_loops.h compiled with AVX-512 F and BW (16 fp32 or
 * 32 bf16 lanes a vector, mask registers for the tails), the same source as the portable and AVX2
 * variants, so the same bytes. Forcing avx512f or avx512bf16 (TGRAD_CPU_ISA, tgrad_set_cpu_isa)
 * runs these loops (avx512bf16 has no loops of its own: its CPUs run these). */
#include "elementwise_loops.h"

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

const tg_ew_variant tg_ew_avx512f = { .name = "avx512f", .available = available, .lookup = ew_lookup,
                                     .unary = ew_unary, .binary = ew_binary, .store_stream = ew_store_stream };
