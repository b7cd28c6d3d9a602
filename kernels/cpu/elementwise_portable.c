/* The portable elementwise variant: elementwise_loops.h in plain C with the baseline target
 * flags (SSE2 on x86-64, Advanced SIMD on aarch64). Always built, always available. */
#include "elementwise_loops.h"

static int available(void) { return 1; }

const tg_ew_variant tg_ew_portable = {
    .name = "portable", .available = available, .lookup = ew_lookup, .unary = ew_unary, .binary = ew_binary,
    .store_stream = ew_store_stream };
