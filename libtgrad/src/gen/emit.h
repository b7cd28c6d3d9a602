/* The emitter's shared parts (private to gen/): the text being written with its language and
 * index type, index expressions with the views' constants folded in, kernel signatures, launch
 * bookkeeping. render.c (the matmul routes), render_gather.c (copy and standalone elementwise
 * kernels) and ew.c (elementwise chains) write kernels with these. */
#ifndef TGRAD_GEN_EMIT_H
#define TGRAD_GEN_EMIT_H

#include "gen.h"

typedef struct emitter {
    tg_text *t;
    const tg_lang *l;
    const char *it; /* integer type of indices and loop variables: "int" or "long" */
    /* A batched matmul: the whole problem, whose first elements the kernel moves its operands to
     * per batch (the problem the route emitters see has offsets 0). NULL otherwise. */
    const tg_gen_matmul *batched;
} emitter;

#define E(...) tg_text_printf(e->t, __VA_ARGS__)

TG_HIDDEN int64_t tg_ceil_div(int64_t a, int64_t b);
TG_HIDDEN bool tg_fits_int(int64_t v);
/* Lowest and highest element index a view touches (extents > 0). False on overflow. */
TG_HIDDEN bool tg_span_view(const tg_view *v, int64_t *lo, int64_t *hi);
/* The launch's bindings for operands v[0 .. n) (NULL: a binding left out), each named and sized
 * to the highest element its view reaches, in order from launch->buffer_count; returns that
 * highest element over them all (0 for none). */
TG_HIDDEN int64_t tg_launch_operands(struct tgrad_launch *launch, const tg_view *const *v, const char *const *names,
                                     int32_t n);
/* A row kernel's last two bindings, after its operands: "c" (out_elements) and "f" (a flag per
 * row, which the host reads back), and its grid: one thread per row, `threads` to a group. */
TG_HIDDEN void tg_launch_flagged_rows(struct tgrad_launch *launch, int64_t out_elements, int64_t rows, int32_t threads);
/* |s| for any int64, INT64_MIN included (an empty operand's strides may be anything). */
TG_HIDDEN uint64_t tg_magnitude(int64_t s);
/* Append " + var * |s|" (or "- ...", or the bare term first) to an expression being built. */
TG_HIDDEN void tg_add_term(char *dst, size_t cap, bool *first, const char *var, int64_t s);
/* offset + v0 * s0 + v1 * s1, dropping terms that are always 0 (stride 0 or extent 1). */
TG_HIDDEN void tg_index_expr(char *dst, size_t cap, int64_t offset, const char *v0, int64_t s0, int64_t ext0,
                             const char *v1, int64_t s1, int64_t ext1);
/* offset + sum of coord[d] * strides[d] over the axes of v (extent > 1, stride != 0). */
TG_HIDDEN void tg_view_index(char *dst, size_t cap, const tg_view *v, const char *const *coord);
/* A buffer parameter: `<space> ushort *<name>` (no space before ushort when `space` is empty). */
TG_HIDDEN void tg_buffer_param(char *dst, size_t cap, const char *space, const char *name);
/* ... of element type `type` (tg_buffer_param: ushort, bf16 bits). */
TG_HIDDEN void tg_buffer_param_typed(char *dst, size_t cap, const char *space, const char *type, const char *name);
/* Kernel signature: buffers, then the builtin parameters the body reads; opens the body and
 * declares one `const <it> var = ...;` per builtin used (gx, gy, lx, ly, li, sg). */
TG_HIDDEN void tg_emit_signature(const emitter *e, const char *name, const char *const *bufs, int nbufs,
                                 const bool used[TG_B_COUNT_]);
/* A helper function `<it> <name>(<it> L)`: the buffer index of element L (row-major over v's
 * shape) of view v, its constants folded in (the norm and rope routes' operands). */
TG_HIDDEN void tg_emit_index_fn(const emitter *e, const char *name, const tg_view *v);
TG_HIDDEN tgrad_status tg_not_eligible(const char *route, const char *lang, const char *why, int64_t a, int64_t b,
                                       int64_t c);
TG_HIDDEN void tg_finish_launch(tg_text *t, struct tgrad_launch *launch);
/* One element per thread: grid (ceil(numel / tile_m), 1, 1) x threadgroup (threads_x, 1, 1). */
TG_HIDDEN void tg_launch_1d(const tg_route *r, int64_t numel, struct tgrad_launch *launch);
/* The kernel comment's "// Launch: grid ... ; buffers a, b, c." line, from the launch. */
TG_HIDDEN void tg_emit_launch_line(const emitter *e, const struct tgrad_launch *launch);
/* Append ";off=<offset>;<extent>:<stride>..." of view v to a kernel-name key. */
TG_HIDDEN void tg_key_view(char *key, size_t cap, const tg_view *v);
/* The double kinds' text after their comment: the language's preamble, its binary64 API (native,
 * or in MSL the software double), the tg_u64 typedef. */
TG_HIDDEN void tg_emit_double_head(const emitter *e);
/* The same without the preamble: the binary64 API and the tg_u64 typedef. */
TG_HIDDEN void tg_emit_double_api(const emitter *e);
/* A binary64 constant of the double kinds' text, `tg_dk(<literal>, 0x<bits>ul)` (the literal for
 * the native languages and the reader, the bits for the software double), in buf (TG_DK_TEXT
 * bytes); DK(v) gives one in a buffer that lives to the end of the enclosing block. */
/* `const tg_f64 dst = ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7));` of the array lanes[8]: the
 * double kinds' eight-lane sums, in the CPU's order. */
TG_HIDDEN void tg_emit_lane_sum(const emitter *e, const char *dst, const char *lanes);
#define TG_DK_TEXT 80
TG_HIDDEN const char *tg_dk_text(const emitter *e, char *buf, double v);
#define DK(v) tg_dk_text(e, (char[TG_DK_TEXT]){ 0 }, (v))
/* TGRAD_OK where language l has double, else the typed refusal of route's `kind` (MSL). */
TG_HIDDEN tgrad_status tg_gen_need_double(const tg_lang *l, const char *route, const char *kind);

/* ---- one element per thread over a compact output (render_select.c) ---- */
/* The unsigned type of an element of `esize` bytes in language l (NULL: no such size). */
TG_HIDDEN const char *tg_elem_type(const tg_lang *l, int32_t esize);
/* Declare o<d>, the coordinates of output element i, for the axes needed[d] marks (each of
 * extent > 1), from the innermost axis out; an unneeded axis only divides the rest. */
TG_HIDDEN void tg_emit_out_coords(const emitter *e, const tg_view *out, const bool *needed);

/* ---- the matmul routes' shared steps (render.c) ---- */
/* What staging writes to shared memory: the element type, its +0, and the device function that
 * turns a buffer's bf16 bits into it (with DAZ). */
typedef struct tg_stage_value {
    const char *type, *zero, *load;
} tg_stage_value;
TG_HIDDEN extern const tg_stage_value tg_stage_fp32; /* float, tg_load_bf16 */
/* Stage the [tile_m x tile_k] block of a at (m0, k0), or the [tile_k x tile_n] block of b at
 * (k0, n0), into `store` (a shared element in the local names r / kk / col), +0 outside the
 * matrix, `nthreads` threads sharing the work by their index `li`. */
TG_HIDDEN void tg_emit_stage_a(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *store,
                               int32_t nthreads, const tg_stage_value *val);
TG_HIDDEN void tg_emit_stage_b(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *store,
                               int32_t nthreads, const tg_stage_value *val);
/* The matmul signature (a, b, c, the epilogue's buffers) and the one store step of every route:
 * `acc` (fp32) of output (m, n) rounded to bf16, the epilogue run on it, then written. */
TG_HIDDEN void tg_matmul_signature(const emitter *e, const tg_gen_matmul *p, const char *name,
                                   const bool used[TG_B_COUNT_]);
TG_HIDDEN void tg_emit_store(const emitter *e, const tg_gen_matmul *p, const char *indent, const char *acc);

/* ---- the tc route in CUDA (render_tc_cuda.c) ---- */
TG_HIDDEN void tg_emit_tc_cuda(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *name);
/* Its static shared memory: the bf16 tiles of a and b. */
TG_HIDDEN uint32_t tg_tc_cuda_shared_bytes(const tg_route *r);

/* ---- elementwise chains (ew.c) ---- */
/* kernels/gpu/elementwise.h's text (generated into the build by embed_text.py) */
extern const char tg_gen_elementwise_prelude[];
/* kernels/gpu/elementwise_f32.h's text (the same), for float32 chains */
extern const char tg_gen_elementwise_f32_prelude[];
/* Each op has a kernel spelling and each operand view stays inside its buffer. */
TG_HIDDEN tgrad_status tg_gen_check_chain(const char *route, const tg_lang *l, const tg_gen_chain *c);
/* The highest element index the chain reads any of its buffers at (-1: no buffers). */
TG_HIDDEN int64_t tg_gen_chain_reach(const tg_gen_chain *c);
/* Append the chain's buffers (after the base op's) to launch: counts, sizes, names. */
TG_HIDDEN void tg_gen_chain_launch(const tg_gen_chain *c, struct tgrad_launch *launch);
/* Append the chain to a kernel-name key. */
TG_HIDDEN void tg_gen_chain_key(const tg_gen_chain *c, char *dst, size_t cap);
/* The chain's buffer parameters (decls[j] holds the text, ptrs[*n..] point at them). */
TG_HIDDEN void tg_gen_emit_chain_params(const emitter *e, const tg_gen_chain *c, char decls[][64], const char **ptrs,
                                        int *n);
/* A device prelude's text (kernels/gpu/<name>.h), its `static inline` in the language's spelling. */
TG_HIDDEN void tg_gen_emit_text(const emitter *e, const char *text);
/* kernels/gpu/reduce.h's text (generated into the build by embed_text.py) */
extern const char tg_gen_reduce_prelude[];
/* kernels/gpu/philox.h's text (the same), pasted into each random kernel */
extern const char tg_gen_philox_prelude[];
/* kernels/gpu/normal.h: Box-Muller in double for the normal distribution (after philox.h and
 * softmax.h's tg_sm_round) */
extern const char tg_gen_normal_prelude[];
/* kernels/gpu/uniform.h: float32 uniform(low, high) in binary64 (after philox.h and softmax.h) */
extern const char tg_gen_uniform_prelude[];
/* kernels/gpu/softmax.h's text (the same), pasted into each softmax kernel */
extern const char tg_gen_softmax_prelude[];
/* kernels/gpu/norm.h's text (the same), pasted into each norm kernel */
extern const char tg_gen_norm_prelude[];
/* kernels/gpu/softdouble.h and softmath.h: binary64 in integers, for a language without double (MSL) */
extern const char tg_gen_softdouble_prelude[];
extern const char tg_gen_softmath_prelude[];
/* kernels/gpu/transcendental_f32.h: the float32 transcendental ops in binary64 with their bounds
 * (after the double API and softmax.h) */
extern const char tg_gen_transcendental_f32_prelude[];
/* kernels/gpu/derivatives_pow.h: the float32 derivative ops and pow in binary64 (after it) */
extern const char tg_gen_derivatives_pow_prelude[];
/* kernels/gpu/optim.h's text (the same), pasted after the float32 one into each optimizer kernel */
extern const char tg_gen_optim_prelude[];
/* The elementwise prelude of the chain's dtype (float32: after the tg_u64 typedef), when it has ops. */
TG_HIDDEN void tg_gen_emit_prelude(const emitter *e, const tg_gen_chain *c);
/* `v = op(v, ...);` per op, operands indexed by the output coordinates coord[d]. */
TG_HIDDEN void tg_gen_emit_chain(const emitter *e, const tg_gen_chain *c, const char *indent, const char *const *coord);

#endif
