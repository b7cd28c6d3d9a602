/* The AVX2 elementwise variant: elementwise_loops.h compiled with -mavx2 (8 fp32 or 16 bf16 lanes
 * a vector), the same source as the portable variant, so the same bytes. */
#include "elementwise_loops.h"

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

const tg_ew_variant tg_ew_avx2 = {
    .name = "avx2", .available = available, .lookup = ew_lookup, .unary = ew_unary, .binary = ew_binary,
    .store_stream = ew_store_stream };
