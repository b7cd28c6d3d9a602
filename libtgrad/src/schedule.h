/* The schedule: what realizing a buffer runs, in which order, decided once (schedule.c). Realize
 * (buffer.c) runs its steps, explain (explain.c) prints them; the executors (buffer.c for the CPU,
 * device.c for devices) only execute a step as it was decided here. */
#ifndef TGRAD_SCHEDULE_H
#define TGRAD_SCHEDULE_H

#include "internal.h"
#include "gen/gen.h"
#include "step_index.h"

/* Elementwise ops a step applies to its result before storing it (its epilogue). */
/* A reduction may also read a chain of them (its prologue): the chain's first elementwise op and
 * up to TG_MAX_FUSED more. */
enum { TG_MAX_FUSED = 8, TG_MAX_READS = 2 + 2 * TG_MAX_FUSED };

/* One fused op: the running value (the base op's result, then each fused op's) goes through op,
 * as its only operand (unary) or with `operand` on the other side. */
typedef struct tg_fused_op {
    tgrad_op op;
    bool value_right;               /* binary: op(operand, value) rather than op(value, operand) */
    const tg_node_input *operand;   /* binary: the other operand (broadcast to the result); else NULL */
} tg_fused_op;

struct tg_ew_variant;

typedef struct tg_step {
    tg_buffer *buf;   /* what it computes; the schedule holds a reference until release_after */
    tg_op op;         /* the base op: matmul, copy, or elementwise (then `ew` names it) */
    tgrad_op ew;
    int32_t device;   /* buf->device */
    /* The base op's operands and how it reads them: the node of the first buffer of the fused
     * chain (buf's own node when nothing is fused). Valid while buf is pending: under
     * tg_graph_lock (explain), or under buf->lock with buf not yet realized (realize). */
    const tg_node *base;
    int32_t ninputs;
    const tg_node_input *inputs; /* base->inputs */
    const tg_view *out; /* the result's compact view (buf->node->out) */
    /* The route, decided once here: realize runs exactly this and records `route`. */
    char route[48];
    tg_cpu_matmul_plan cpu;      /* device CPU, op matmul */
    const tg_route *dev_route;   /* other devices, op matmul */
    int32_t precision;           /* other devices, op matmul: the matmul precision policy when planned */
    const struct tg_ew_variant *ew_variant; /* device CPU: the elementwise loops (base op or epilogue) */
    /* Fused elementwise ops, applied in order to the finished bf16 result of the base op: each
     * is an op of the graph whose intermediate result is never stored (fusion never changes a
     * byte: every op still rounds to bf16). Empty when fusion is off or nothing qualifies. */
    tg_fused_op epilogue[TG_MAX_FUSED];
    int32_t nfused;
    /* A reduction's prologue (NULL, 0: none): the pending elementwise node it reads is computed
     * inside its read instead of stored: pro_base (an elementwise node over its operands) then
     * prologue[0 .. npro), each op rounding to bf16 as alone. The reduction's own input is then
     * never stored; reads lists pro_base's inputs and the prologue's operands in its place. */
    const tg_node *pro_base;
    tg_fused_op prologue[TG_MAX_FUSED];
    int32_t npro;
    /* Why the op reading this step's result was not fused into it (NULL: it was, or none reads
     * it in this schedule); for explain. */
    const char *unfused;
    /* Every operand the step reads (the base inputs, then the fused ops' operands): read them
     * with tg_step_read. A step of more than TG_MAX_READS (a concat of many tensors) reads its
     * base inputs alone, nothing fused; reads[] holds the first TG_MAX_READS of them. */
    int32_t nreads;
    const tg_node_input *reads[TG_MAX_READS];
    /* Memory: the inputs whose last reader this is and that no handle holds (freed once this step
     * detaches its node), as free[first_free .. first_free + nfree) of the schedule. They are
     * named, not retained: only their ids may be read once the schedule is released. */
    int32_t first_free, nfree;
    /* The schedule's own reference to buf is dropped after this step runs (its last reader in
     * the schedule, or itself for the target), so intermediates die when they did before. */
    int32_t release_after;
    bool released;
} tg_step;

/* Operand i (0 <= i < nreads) of the step. */
static inline const tg_node_input *tg_step_read(const tg_step *st, int32_t i) {
    return i < TG_MAX_READS ? st->reads[i] : &st->inputs[i];
}

typedef struct tg_schedule {
    tg_step *steps; /* post order: every step after the steps it reads */
    int32_t n, cap;
    tg_buffer **free; /* see tg_step.first_free */
    int32_t nfree_total, free_cap;
    /* Every buffer the steps compute or read: its step, readers and last reader. */
    tg_step_index index;
    /* The steps whose release_after is r, in step order: release_order[release_start[r] ..
     * release_start[r + 1]) (in the block of `free`), so that running the steps drops each
     * reference once, O(n) in all (NULL for a schedule of a few steps: scanned instead);
     * released_through: the last r dropped (-1: none). */
    int32_t *release_start, *release_order;
    int32_t released_through;
    /* Work done (tgrad_debug_schedule_work; the probes are the index's). */
    int64_t reads, release_checks, build_ns;
} tg_schedule;

/* Walk b's pending graph once (under tg_graph_lock) and decide every step. On failure (out of
 * memory) nothing is held and *out is empty. A realized b has no steps. */
TG_HIDDEN tgrad_status tg_schedule_build(tg_buffer *b, tg_schedule *out);
/* The same for a caller that holds tg_graph_lock and reads the schedule before releasing it
 * (explain): no references are taken. */
TG_HIDDEN tgrad_status tg_schedule_build_locked(tg_buffer *b, tg_schedule *out);
/* The step that computes b, or -1 (realized before, or not part of this schedule). */
TG_HIDDEN int32_t tg_schedule_step_of(const tg_schedule *S, const tg_buffer *b);
/* Run the steps in order (buffer.c), each under its buffer's lock and skipped when realized
 * meanwhile; stops at the first failure. Every buffer a step computes records the step's route. */
TG_HIDDEN tgrad_status tg_schedule_run(tg_schedule *S);
/* Drop the references of the steps whose release_after is <= step (each once; called with step
 * 0, 1, 2, ... it visits each step once in all). */
TG_HIDDEN void tg_schedule_release_through(tg_schedule *S, int32_t step);
/* Drop every reference the schedule still holds and free it. */
TG_HIDDEN void tg_schedule_free(tg_schedule *S);
/* The route realizing pending b would record now, for its own step only (tgrad_tensor_route).
 * Caller holds tg_graph_lock. */
TG_HIDDEN void tg_schedule_route(const tg_buffer *b, char *dst, size_t cap);

/* The route tgrad_set_device_route forced, or 0 (the automatic choice). */
TG_HIDDEN int32_t tg_device_forced_route(void);
/* Device routes (device.c): the route a matmul of these operands takes on `device` now, under
 * `precision` (tgrad_matmul_precision(), read once by the caller and kept in the step). */
TG_HIDDEN const tg_route *tg_device_matmul_route(const tg_view *a, const tg_view *b, int32_t device,
                                                 int32_t precision);
/* explain's line for a GPU matmul step: the precision policy, the route it allows, tc's bound. */
TG_HIDDEN void tg_device_matmul_detail(const tg_step *st, char *dst, size_t cap);
/* Executors: run one decided step into its allocated buffer (the caller holds step->buf->lock). */
TG_HIDDEN tgrad_status tg_device_execute(const tg_step *step);

/* Fusion on or off (tgrad_set_fusion; TGRAD_FUSION=0 at start-up turns it off). */
TG_HIDDEN bool tg_fusion_on(void);

#endif
