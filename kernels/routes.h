/* The GPU kernel routes, declared once: name, tiles, threadgroup shape, eligibility.
 *
 * The renderer (libtgrad/src/gen/) turns one of these declarations plus a problem (M, K, N, the
 * operands' views, the output layout) into kernel source; the router, the docs
 * (docs/kernels.md) and the tests read the same table. Route codes are the public
 * TGRAD_ROUTE_* of tgrad.h.
 *
 * X(code, name, kind, tile_m, tile_n, tile_k, threads_x, threads_y, min_m, min_k, min_n,
 *   simdgroup_matrix, summary)
 *   kind          TG_ROUTE_MATMUL, TG_ROUTE_COPY, TG_ROUTE_ELEMENTWISE, TG_ROUTE_REDUCE, TG_ROUTE_CAST,
 *                 TG_ROUTE_GATHER, TG_ROUTE_CONCAT, TG_ROUTE_WHERE, TG_ROUTE_COMPARE, TG_ROUTE_RANDOM or
 *                 TG_ROUTE_SOFTMAX, TG_ROUTE_NORM, TG_ROUTE_ROPE, TG_ROUTE_PLACE, TG_ROUTE_SCATTER_ADD,
 *                 TG_ROUTE_OPTIM
 *   tile_m/_n     outputs per threadgroup (rows, columns); copy, elementwise: elements per
 *                 threadgroup in tile_m; reduce: 1 (threads_x threads share each output); cast,
 *                 gather, concat, where, compare: elements per threadgroup in tile_m; softmax: rows
 *                 per threadgroup (one thread each) in tile_m; place, scatter_add, optim_step: output elements
 *                 per threadgroup in tile_m
 *   tile_k        k-depth staged in threadgroup memory per step (0: no staging); even, so a k-pair
 *                 never straddles two stages
 *   threads_x/_y  threadgroup shape; threads_x * threads_y is a multiple of 32 (a simdgroup)
 *   min_m/k/n     eligibility: smallest extents the route takes (every larger extent, multiple of
 *                 the tile or not, is handled by bounds checks in the kernel)
 *   simdgroup_matrix  the route needs matrix hardware: 8x8 simdgroup matrices (MSL) or warp-level
 *                 bf16 mma.sync m16n8k16 (CUDA, sm_80+); OpenCL C has neither
 *
 * Numerics: naive and tiled follow the canonical order of docs/numerics.md exactly (bit-identical
 * to the oracle); tc uses the hardware's 8x8 multiply-accumulate order and is held to the error
 * bound of docs/kernels.md. */
#ifndef TGRAD_KERNELS_ROUTES_H
#define TGRAD_KERNELS_ROUTES_H

enum { TG_ROUTE_MATMUL = 1, TG_ROUTE_COPY = 2, TG_ROUTE_ELEMENTWISE = 3, TG_ROUTE_REDUCE = 4, TG_ROUTE_CAST = 5,
       TG_ROUTE_GATHER = 6, TG_ROUTE_CONCAT = 7, TG_ROUTE_WHERE = 8, TG_ROUTE_COMPARE = 9,
       TG_ROUTE_RANDOM = 10, TG_ROUTE_SOFTMAX = 11, TG_ROUTE_NORM = 12, TG_ROUTE_ROPE = 13,
       TG_ROUTE_PLACE = 14, TG_ROUTE_SCATTER_ADD = 15, TG_ROUTE_OPTIM = 16 };

#define TG_ROUTE_LIST(X)                                                                          \
    X(TGRAD_ROUTE_NAIVE, naive, TG_ROUTE_MATMUL, 16, 16, 0, 16, 16, 0, 0, 0, 0,                  \
      "one thread per output, canonical order, operands read straight from device memory")        \
    X(TGRAD_ROUTE_TILED, tiled, TG_ROUTE_MATMUL, 32, 32, 16, 16, 16, 0, 0, 0, 0,                 \
      "32x32 outputs per threadgroup, 2x2 per thread, k staged 16 deep in threadgroup memory, "   \
      "canonical order")                                                                           \
    X(TGRAD_ROUTE_TC, tc, TG_ROUTE_MATMUL, 32, 32, 16, 128, 1, 8, 8, 8, 1,                       \
      "32x32 outputs per threadgroup of 4 simdgroups, each 2x2 8x8 fp32 simdgroup matrices, "     \
      "hardware accumulation order")                                                               \
    X(TGRAD_ROUTE_COPY, copy, TG_ROUTE_COPY, 256, 1, 0, 256, 1, 0, 0, 0, 0,                      \
      "bit-preserving gather of a view into compact row-major, one element per thread")         \
    X(TGRAD_ROUTE_ELEMENTWISE, elementwise, TG_ROUTE_ELEMENTWISE, 256, 1, 0, 256, 1, 0, 0, 0, 0, \
      "an elementwise chain over views, one output element per thread, correctly rounded (the "   \
      "integer ops of kernels/gpu/elementwise.h and 65,536-entry tables)")                          \
    X(TGRAD_ROUTE_REDUCE, reduce, TG_ROUTE_REDUCE, 1, 1, 0, 64, 1, 0, 0, 0, 0,                   \
      "one threadgroup per output: exact sum/mean (a 384-bit fixed-point integer per thread, "     \
      "combined by a tree, rounded once) or exact extrema (kernels/gpu/reduce.h)")                \
    X(TGRAD_ROUTE_CAST, cast, TG_ROUTE_CAST, 256, 1, 0, 256, 1, 0, 0, 0, 0,                       \
      "bfloat16 <-> float32 of a view into compact row-major, one element per thread, integers only") \
    X(TGRAD_ROUTE_GATHER, gather, TG_ROUTE_GATHER, 256, 1, 0, 256, 1, 0, 0, 0, 0,                   \
      "take along one axis: int32 indices (checked on the host before launch) select the source's "    \
      "slices, copied bit for bit (1, 2, 4 or 8-byte elements), one output element per thread")        \
    X(TGRAD_ROUTE_CONCAT, concat, TG_ROUTE_CONCAT, 256, 1, 0, 256, 1, 0, 0, 0, 0,                   \
      "up to 15 operands joined along one axis, each read through its view, copied bit for bit "       \
      "(1, 2, 4 or 8-byte elements), one output element per thread")                               \
    X(TGRAD_ROUTE_WHERE, where, TG_ROUTE_WHERE, 256, 1, 0, 256, 1, 0, 0, 0, 0,                      \
      "cond != 0 ? a : b over broadcast views, the chosen element's bits copied, one per thread")     \
    X(TGRAD_ROUTE_COMPARE, compare, TG_ROUTE_COMPARE, 256, 1, 0, 256, 1, 0, 0, 0, 0,                \
      "an exact comparison of two broadcast views of any dtypes as 64-bit integer keys of their "      \
      "values (no float instruction), a bool byte per thread")                                    \
    X(TGRAD_ROUTE_RANDOM, random, TG_ROUTE_RANDOM, 256, 1, 0, 256, 1, 0, 0, 0, 0,                   \
      "the counter-based generator's uniform and randint draws (Philox-4x32-10, integers only), one " \
      "element per thread, the CPU's bytes for the same seed and offset")                          \
    X(TGRAD_ROUTE_SOFTMAX, softmax, TG_ROUTE_SOFTMAX, 64, 1, 0, 64, 1, 0, 0, 0, 0,                   \
      "softmax, log_softmax and logsumexp, one thread per row in double (the CPU's loops and bounds, " \
      "kernels/gpu/softmax.h); rows with an undecided element are flagged and rerun on the host") \
    X(TGRAD_ROUTE_NORM, norm, TG_ROUTE_NORM, 64, 1, 0, 64, 1, 0, 0, 0, 0,                            \
      "rms_norm and layer_norm, one thread per row in double (the CPU's loops and bounds, "        \
      "kernels/gpu/norm.h); rows with an undecided element are flagged and rerun on the host") \
    X(TGRAD_ROUTE_ROPE, rope, TG_ROUTE_ROPE, 64, 1, 0, 64, 1, 0, 0, 0, 0,                            \
      "rope and rope_backward, one thread per (row, position) in double (the CPU's operations, a "  \
      "device bound for sin and cos); positions with an undecided value are rerun on the host")    \
    X(TGRAD_ROUTE_PLACE, place, TG_ROUTE_PLACE, 256, 1, 0, 256, 1, 0, 0, 0, 0,                      \
      "a view's transpose (its gradient): each element of a zeroed buffer finds by division the "   \
      "view element that lands on it, if one does, and takes its bits, one element per thread")    \
    X(TGRAD_ROUTE_SCATTER_ADD, scatter_add, TG_ROUTE_SCATTER_ADD, 256, 1, 0, 256, 1, 0, 0, 0, 0,    \
      "a gather's transpose (take's gradient): each output element the exact sum of the values "    \
      "whose index names it (kernels/gpu/reduce.h's 384-bit integer), rounded once, one per thread") \
    X(TGRAD_ROUTE_OPTIM_STEP, optim_step, TG_ROUTE_OPTIM, 256, 1, 0, 256, 1, 0, 0, 0, 0,               \
      "an SGD or AdamW step's output, one element per thread: the CPU's float32 operations (fma "     \
      "one rounding) on float32 bits in integers (kernels/gpu/optim.h), the scalars the launch's")

/* The tc route's simdgroup layout: 4 simdgroups as 2 x 2, each owning a 16 x 16 block of the
 * 32 x 32 tile as 2 x 2 fragments of 8 x 8. */
enum { TG_TC_SIMDGROUP_ROWS = 2, TG_TC_SIMDGROUP_COLS = 2, TG_TC_FRAGMENT = 8 };

#endif
