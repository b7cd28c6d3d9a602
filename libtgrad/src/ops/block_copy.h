/* Copying views into pieces of one compact output, bit for bit: the executors of concat and
 * gather (take) describe their output as `units` blocks, each a view of an input copied whole
 * into a compact run of the output; this runs them, threaded when the output is large. Any
 * element size (the bytes are moved, never read as numbers). */
#ifndef TGRAD_OPS_BLOCK_COPY_H
#define TGRAD_OPS_BLOCK_COPY_H

#include "../internal.h"

typedef struct tg_block {
    const void *src; /* the input buffer's data */
    tg_view view;    /* what is read, in elements of src */
    void *dst;       /* where its compact row-major copy goes */
} tg_block;

/* Fill *b with block `unit` (0 <= unit < units) of the output. Called from worker threads. */
typedef void (*tg_block_fn)(int64_t unit, const void *ctx, tg_block *b);

/* Copy every block; esize: bytes per element; total_bytes: the output's size (threads only
 * past a threshold; a block may then be split into parts along its first axis longer than 1). */
TG_HIDDEN void tg_copy_blocks(int64_t units, int32_t esize, int64_t total_bytes, tg_block_fn fn, const void *ctx);

#endif
