/* Elementwise chains on the CPU: the ops a step applies to the values it produces, either as a
 * matmul's epilogue (on each finished bf16 block of the output, by the worker that wrote it) or as
 * an elementwise pass over memory (the first operand gathered, then the chain). One code path for
 * both, so a fused op computes exactly what the op computes alone: each op reads bf16 values and
 * rounds its result to bf16 (the loops of kernels/cpu/elementwise_loops.h). */
#ifndef TGRAD_CPU_EPILOGUE_H
#define TGRAD_CPU_EPILOGUE_H

#include "../schedule.h"

struct tg_ew_variant;

typedef struct tg_chain_op {
    tgrad_op op;
    bool binary;
    bool value_right;     /* binary: op(operand, value) */
    const uint16_t *data; /* binary: the operand's buffer, read through view (the output's shape) */
    tg_view view;
} tg_chain_op;

/* The output's shape with size-1 axes dropped and neighbouring axes merged where every operand
 * steps through them as one (so a broadcast bias over [M, N] is two axes, a same-shape operand
 * one): runs along the last axis are as long as they can be. */
typedef struct tg_chain {
    const struct tg_ew_variant *v;
    int32_t n;
    tg_chain_op ops[1 + TG_MAX_FUSED];
    int32_t ndim;
    int64_t shape[TGRAD_MAX_DIMS], pitch[TGRAD_MAX_DIMS]; /* pitch: elements per step of the axis */
    /* the first operand of an elementwise pass (gathered into the output, then the chain runs) */
    const uint16_t *first;
    tg_view first_view;
    /* Added to every position the appliers are given (0 from tg_chain_from_step): a batched
     * matmul applies one product's block at a time, with its positions counted from its own
     * start, through a copy whose lin0 is where that product starts in the whole output. */
    int64_t lin0;
} tg_chain;

/* The chain of a decided step over its realized operands: the base elementwise op (when the step
 * is one) and the fused ops, in order. */
TG_HIDDEN void tg_chain_from_step(const tg_step *st, tg_chain *c);
/* The chain read by an anchor (a reduction's prologue): the elementwise op st->pro_base over its
 * realized operands, then the step's prologue ops, in order. */
TG_HIDDEN void tg_chain_prologue(const tg_step *st, tg_chain *c);
/* Apply the chain in place to out[lin .. lin + n), positions of the compact output. Thread-safe,
 * allocates nothing. */
TG_HIDDEN void tg_chain_apply(const tg_chain *c, uint16_t *out, int64_t lin, int64_t n);
/* The chain's values at positions lin .. lin + n of its compact output, into dst[0 .. n) (a chain
 * with a first operand, such as a prologue, which reads nothing from dst). */
TG_HIDDEN void tg_chain_eval(const tg_chain *c, uint16_t *dst, int64_t lin, int64_t n);
/* ... to the block of rows x cols at (row0, col0) of a row-major output with ld elements a row
 * (a matmul's finished block). NULL or an empty chain: nothing. */
TG_HIDDEN void tg_chain_apply_block(const tg_chain *c, uint16_t *out, int64_t ld, int64_t row0, int64_t col0,
                                    int64_t rows, int64_t cols);
/* The elementwise pass: out (numel elements, compact) = the chain over the first operand,
 * threaded over the pool for big outputs. */
TG_HIDDEN void tg_chain_pass(const tg_chain *c, uint16_t *out, int64_t numel);

#endif
