/* The kind registry: everything about one node kind in one row (kinds.c), read by the scheduler
 * (route), realize (CPU executor), explain (names) and the device path (whether GPUs run it). No
 * other file switches over kinds. Adding a kind: a row in kinds_list.h, its row here in kinds.c
 * with its executor and route, its constructor (an ABI call that checks everything before it
 * allocates), tests and docs (docs/architecture.md, "Adding a kind"); test_kinds.c fails for a
 * kind that lacks a part. */
#ifndef TGRAD_KINDS_H
#define TGRAD_KINDS_H

#include "schedule.h"

struct tg_step_kernel;
struct tg_vjp;

typedef struct tg_kind {
    const char *name;
    tg_role role;
    /* Decide the step's route once (schedule.c calls it; it may fill the step's plan) and name it
     * in st->route. */
    void (*decide)(tg_step *st);
    /* Run a decided step into its allocated buffer (the caller holds the buffer's lock). */
    tgrad_status (*cpu_execute)(const tg_step *st);
    /* The GPU emitter (step_kernel.h): renders a decided step in MSL, OpenCL C or CUDA. NULL:
     * the GPU backends do not run the kind, and a node of it is refused on a GPU device when it
     * is made. gpu_route: the renderer's route of its kernel (0: the scheduler decides, as for a
     * matmul). */
    tgrad_status (*gpu_render)(const tg_step *st, const tg_route *route, const tg_lang *l, struct tg_step_kernel *k);
    int32_t gpu_route;
    /* Before a GPU launch of a step of this kind, on the host (NULL: nothing to check): a gather
     * reads its indices back and checks their range, so that nothing is written when one is out
     * of range, as on the CPU. */
    tgrad_status (*gpu_check)(const tg_step *st);
    /* A GPU launch's words made on the host from its step's data, for the kernel's binding
     * host_at (step_kernel.h; NULL: none): *count uint32 words, malloc'ed into *words, made after
     * gpu_check and before the render, so before anything is written: scatter_add's positions
     * grouped by the index they name (tg_scatter_add_positions, which checks the indices' range as
     * it reads them: the kind has no gpu_check). */
    tgrad_status (*gpu_host_words)(const tg_step *st, uint32_t **words, int64_t *count);
    /* After a GPU launch of a step of this kind whose kernel wrote a flag per row (step_kernel.h,
     * flags_at), on the host, with the flags read back, called only when `flagged` (> 0) of them
     * are set: the row kinds rerun their flagged rows with the CPU's row code. */
    tgrad_status (*gpu_finish)(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
    /* Why nothing is fused into this kind's GPU kernel, before or after it (NULL: chains may be,
     * as on the CPU): the softmax kind's host reruns rows without their chains. */
    const char *gpu_unfused;
    /* Why an elementwise op reading a result of this kind is not fused into its kernel (NULL: it
     * can be, as its epilogue). */
    const char *unfused;
    /* explain: the kernel's name for the step's base op ("matmul", "gelu", "sum", ...). */
    const char *(*base_name)(const tg_step *st);
    /* explain: more about the step's plan, written to dst ("" for nothing to add; NULL: never
     * anything), e.g. a batched matmul's batch count and how its threads share it. */
    void (*plan_detail)(const tg_step *st, char *dst, size_t cap);
    /* The gradient rule (vector-Jacobian product, grad/grad.h; rules in grad/vjp_<kind>.c). NULL:
     * the kind has no rule yet, and tgrad_grad refuses a path through it with
     * TGRAD_ERR_NO_GRADIENT_RULE naming it. */
    const struct tg_vjp *vjp;
    /* hmodel: the CPU executor allocates (or adopts) its buffer's storage itself; realize does
     * not allocate before it (slice_scatter may take its input's storage instead). */
    bool cpu_allocates;
} tg_kind;

TG_HIDDEN extern const tg_kind tg_kinds[TG_OP_COUNT_];
static inline const tg_kind *tg_kind_of(tg_op op) {
    return &tg_kinds[(op >= 0 && op < TG_OP_COUNT_ && tg_kinds[op].name) ? op : TG_OP_NONE]; /* a code not listed: none's row */
}

/* A node of `op` may be made on `device`: the CPU runs every kind, a GPU those whose row says
 * so; else TGRAD_ERR_BACKEND_UNAVAILABLE naming fn and the device. */
TG_HIDDEN tgrad_status tg_kind_check_device(tg_op op, int32_t device, const char *fn);

/* A constructor's inputs: each handle of h[0 .. n) into t[*have], in order, the first `need`
 * always (a 0 handle fails), the others only when nonzero; stops at the first failure. t and
 * *have then go to tg_kind_make, which releases what was taken when a check failed. */
TG_HIDDEN tgrad_status tg_kind_get_inputs(const tgrad_tensor_t *h, int32_t n, int32_t need, tg_tensor *t,
                                          int32_t *have);

/* An executor's input as `size`-byte elements in row-major order: its storage (`data`, the
 * input buffer's data) at the view's offset when the view is compact, else a copy into *owned
 * (the caller frees it; NULL returned: out of memory). */
TG_HIDDEN const void *tg_kind_input_compact(const tg_node_input *in, const void *data, int32_t size, void **owned);

/* The last part of a one-input kind's constructor, after every check passed (s == TGRAD_OK) or
 * failed (s != 0): check the result's byte count and admit it by the memory limit, make the node (t read through its view,
 * output view ov, dtype, params) and its buffer where t lives, and the handle. Takes t's reference
 * in every case: to the node on success, released on failure. */
/* The same for a kind of n inputs t[0 .. n) (each read through t[i].view; the result lives where
 * t[0] does): takes all n references, to the node on success, released on failure. */
TG_HIDDEN tgrad_status tg_kind_make(tgrad_status s, tg_op op, tg_tensor *t, int32_t n, const tg_view *ov, int32_t dtype,
                                    const tg_node_params *params, const char *fn, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_kind_make_unary(tgrad_status s, tg_op op, tg_tensor *t, const tg_view *ov, int32_t dtype,
                                          const tg_node_params *params, const char *fn, tgrad_tensor_t *out);

/* Executors and routes of the kinds that live in their own files. */
TG_HIDDEN tgrad_status tg_cast_execute(const tg_step *st);
/* The cast kind's gpu_finish: a float -> int32 kernel's flagged elements fail the cast (ops/cast.c). */
TG_HIDDEN tgrad_status tg_cast_flagged(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
TG_HIDDEN tgrad_status tg_reduce_execute(const tg_step *st);
TG_HIDDEN tgrad_status tg_gather_execute(const tg_step *st);
TG_HIDDEN tgrad_status tg_gather_device_check(const tg_step *st); /* ops/gather.c */
TG_HIDDEN tgrad_status tg_scatter_add_positions(const tg_step *st, uint32_t **words, int64_t *count); /* ops/gather.c */
/* The positions q of the Q indices idx (each in -n .. n - 1, negative ones counting from the end,
 * checked by the caller) grouped by the index j they name, a counting sort: pos[first[j]] ..
 * pos[first[j + 1] - 1] are j's, ascending; first has n + 1 entries, pos Q (grad/scatter_add.c:
 * the CPU executor's lists, and the GPU route's binding pos). */
TG_HIDDEN void tg_scatter_add_lists(const int32_t *idx, int64_t Q, int64_t n, int64_t *first, int64_t *pos);
TG_HIDDEN tgrad_status tg_slice_scatter_device_check(const tg_step *st); /* ops/slice_scatter.c */
TG_HIDDEN tgrad_status tg_concat_execute(const tg_step *st);
TG_HIDDEN tgrad_status tg_random_execute(const tg_step *st);
/* The bits (bf16 in the low 16) of uniform(low, high)'s value for k, the word's top 8 (bf16) or 24
 * (float32) bits: the exact low + (high - low) k 2^-b rounded once, as the executor computes it
 * (the GPU kernels' table, gen/render_random.c). */
TG_HIDDEN uint32_t tg_random_uniform_bits(double low, double high, uint32_t k, int32_t dtype);
/* After a GPU normal kernel: its flagged Philox calls drawn again on the host (ops/random.c). */
TG_HIDDEN tgrad_status tg_random_calls_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags,
                                               int64_t flagged);
TG_HIDDEN tgrad_status tg_compare_execute(const tg_step *st);
TG_HIDDEN tgrad_status tg_where_execute(const tg_step *st);
TG_HIDDEN tgrad_status tg_norm_execute(const tg_step *st); /* ops/norm.c */
/* The norm kind's backward ops (ops/norm_backward.c): their executor, and each norm_op's name. */
TG_HIDDEN tgrad_status tg_norm_backward_execute(const tg_step *st);
TG_HIDDEN const char *tg_norm_op_name(int32_t op);
/* The GPU route's slow path (ops/norm.c), as tg_softmax_rows_on_host; and whether a norm node may be
 * made on device (GPU: a language with double). */
TG_HIDDEN tgrad_status tg_norm_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
TG_HIDDEN tgrad_status tg_rope_execute(const tg_step *st); /* ops/rope.c */
/* The GPU route's slow path (ops/rope.c): the flagged positions ((row, l) pairs), rerun on the
 * host by the CPU's code; and f_i = pow(base, -2i / rd) as the CPU computes it (the kernels'
 * table). */
TG_HIDDEN tgrad_status tg_rope_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
TG_HIDDEN double tg_rope_freq(double base, int32_t i, int32_t rd);
TG_HIDDEN tgrad_status tg_softmax_execute(const tg_step *st);
/* The GPU route's slow path (ops/softmax.c): the rows flagged by the kernel, recomputed on the
 * host by the CPU's row code, read back from and written back to the device. */
TG_HIDDEN tgrad_status tg_softmax_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
/* --- hgsoft: the softmax kind's backward nodes (ops/softmax_backward.c): their executor, their
 * name for explain, and whether a node's softmax_op is one (a two-input node: y, then g). --- */
TG_HIDDEN tgrad_status tg_softmax_backward_execute(const tg_step *st);
TG_HIDDEN const char *tg_softmax_kind_name(int32_t op);
TG_HIDDEN bool tg_softmax_is_backward(int32_t op);
/* A backward node's forward op (TGRAD_SOFTMAX_SOFTMAX or _LOG_SOFTMAX) from its softmax_op. */
TG_HIDDEN int32_t tg_softmax_forward_op(int32_t op);
/* The GPU route's slow path of the backward ops (tg_softmax_rows_on_host hands them over). */
TG_HIDDEN tgrad_status tg_softmax_backward_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags,
                                                        int64_t flagged);
/* Add n to TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS (tgrad_debug_softmax_slow_path). */
TG_HIDDEN void tg_softmax_count_device_rows(int64_t n);
TG_HIDDEN tgrad_status tg_slice_scatter_execute(const tg_step *st); /* ops/slice_scatter.c */
TG_HIDDEN tgrad_status tg_optim_step_execute(const tg_step *st); /* ops/optim_step.c */
/* For a gpu_finish: st's buffers read back to host memory (device.c), host[i] and bytes[i] its
 * inputs 0-2 (NULL and 0 where it has none), host[3] its output; `what` names the step in the
 * out-of-memory message. On failure nothing stays allocated. Free with tg_device_staged_free. */
TG_HIDDEN tgrad_status tg_device_stage_step(const tg_step *st, void *host[4], size_t bytes[4], const char *what);
TG_HIDDEN void tg_device_staged_free(void *host[4]);

#endif
