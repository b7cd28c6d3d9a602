/* Kernel generation (private): route declarations + a problem -> kernel source + launch.
 *
 * One emitter (render.c) writes every language; what differs between languages is data
 * (lang.c): qualifiers, address spaces, barrier, thread-index builtins, bit casts. Rendering is a
 * pure function of (route, language, problem): no clocks, no addresses, no locale, so the same
 * problem gives the same bytes and tgrad_launch.source_hash can key a compiled-kernel cache. */
#ifndef TGRAD_GEN_H
#define TGRAD_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* ---- growing text (text.c) ---- */
typedef struct tg_text {
    char *data; /* NUL-terminated while !failed */
    size_t len, cap;
    bool failed; /* an allocation failed: the text is incomplete */
    bool discard; /* write nothing: a render for its launch and bindings alone (render_cache.h) */
} tg_text;

TG_HIDDEN void tg_text_free(tg_text *t);
TG_HIDDEN void tg_text_printf(tg_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* FNV-1a, 64 bits. */
TG_HIDDEN uint64_t tg_fnv1a64(const void *data, size_t len);

/* ---- languages (lang.c) ---- */
/* Thread-position builtins the emitter may ask for; each becomes `const int <var> = ...;`. */
enum tg_builtin {
    TG_B_GROUP_X, TG_B_GROUP_Y, TG_B_LOCAL_X, TG_B_LOCAL_Y, TG_B_LOCAL_INDEX, TG_B_SIMDGROUP, TG_B_GROUP_Z,
    TG_B_COUNT_
};
/* Kernel parameters that carry builtins (MSL); a builtin names the one it reads. */
enum tg_builtin_param { TG_P_GROUP_POS, TG_P_LOCAL_POS, TG_P_LOCAL_INDEX, TG_P_SIMDGROUP_INDEX, TG_P_COUNT_ };

typedef struct tg_lang {
    int32_t id;
    const char *name;
    const char *preamble;         /* first lines of every kernel file */
    const char *kernel_prefix;    /* before the entry point's name */
    const char *function_prefix;  /* before helper functions */
    const char *global_in;        /* address space of read-only buffers */
    const char *global_out;       /* address space of the written buffer */
    const char *buffer_suffix;    /* printf format with %d (binding index) after a buffer parameter */
    const char *local_decl;       /* declares shared (threadgroup / work-group) arrays */
    const char *barrier;          /* threadgroup barrier on shared memory, a statement */
    const char *bits_to_float;    /* call that reinterprets a uint as float: NAME(x) */
    const char *float_to_bits;    /* ... a float as uint */
    const char *builtin_param[TG_P_COUNT_]; /* kernel parameter declaring it; NULL: not a parameter */
    int32_t builtin_uses_param[TG_B_COUNT_]; /* which parameter each builtin reads (-1: none) */
    const char *builtin_expr[TG_B_COUNT_];   /* expression of type uint; NULL: unavailable */
    bool simdgroup_matrix;        /* 8x8 simdgroup matrices (the tc route, MSL's emitter) */
    bool warp_mma;                /* warp-level bf16 mma.sync m16n8k16, sm_80+ (the tc route, CUDA's
                                     emitter render_tc_cuda.c) */
    const char *matrix_type;      /* fp32 8x8 simdgroup matrix type */
    /* The tc route's matrix operations, printf formats: fill with zeros (%d, %d: the fragment's
     * shape); load / store (%s: the fragment, %s: the first element's lvalue, %d: its row pitch);
     * multiply-accumulate (%s: acc, a, b) as acc = a * b + acc. */
    const char *matrix_zero, *matrix_load, *matrix_store, *matrix_mma;
    const char *u64;              /* a 64-bit unsigned integer type (the reductions' tg_u64) */
    const char *constant_decl;    /* a program-scope read-only array with an initializer (random's table) */
    /* binary64 for the double kinds (softmax, norms, rope, normal draws): lines that enable it and
     * define tg_i64 (a 64-bit signed integer), the bit casts and the function-call API over tg_f64
     * that their kernels are written in (tg_dadd, tg_dk, ...: lang.c's TG_NATIVE_F64_API), pasted
     * before the tg_u64 typedef; NULL: the language has none, and those kernels are refused. */
    const char *f64;
    /* the language has no double: the API is kernels/gpu/softdouble.h and softmath.h, binary64 in
     * integers, pasted after the tg_u64 typedef (MSL) */
    bool soft_f64;
} tg_lang;

TG_HIDDEN const tg_lang *tg_lang_find(int32_t id);

/* ---- routes (kernels/routes.h) ---- */
typedef struct tg_route {
    int32_t id;
    const char *name;
    int32_t kind;
    int32_t tile_m, tile_n, tile_k, threads_x, threads_y;
    int32_t min_m, min_k, min_n;
    bool simdgroup_matrix;
    const char *summary;
} tg_route;

TG_HIDDEN const tg_route *tg_route_find(int32_t id);

/* ---- problems ---- */
typedef struct tg_gen_operand {
    int64_t offset;    /* elements from the buffer's first element */
    int64_t stride[2]; /* elements per step along rows, columns (any sign, 0 for expanded axes) */
} tg_gen_operand;

/* ---- elementwise ops in kernels (ew.c) ----
 * A chain: elementwise ops applied in order to a running bf16 value (a matmul's rounded result,
 * or the first operand of a standalone elementwise kernel). Each op is data: a device function of
 * the prelude kernels/gpu/elementwise.h (integer arithmetic, the CPU's bytes), or a lookup in the
 * op's 65,536-entry table (the transcendentals and rsqrt), which the kernel takes as a buffer. */
enum { TG_GEN_MAX_CHAIN = 9 }; /* a base elementwise op and 8 fused ones */

typedef struct tg_gen_ew_op {
    tgrad_op op;
    bool value_right; /* binary: op(operand, value) rather than op(value, operand) */
    tg_view operand;  /* binary: the other operand, a view over the output's shape */
} tg_gen_ew_op;

typedef struct tg_gen_chain {
    int32_t n;
    tg_gen_ew_op ops[TG_GEN_MAX_CHAIN];
    const char *tag; /* NULL, or a prefix of its buffers' names (a kernel with two chains: "p") */
    bool f32;        /* the running value and the operands are float32 bits (kernels/gpu/elementwise_f32.h;
                        a standalone elementwise kernel only), not bf16 */
} tg_gen_chain;

/* The buffers a chain adds to a kernel, after the base op's: for op `op` of the chain its
 * operand, or (table) its table. One table per distinct op: a unary op's 65,536 results, or a
 * derivative op's table of f'(x) (gelu's, gelu_tanh's, silu's: bound besides its operand), so at
 * most TG_GEN_MAX_BINDINGS. */
enum { TG_GEN_MAX_BINDINGS = TG_GEN_MAX_CHAIN + 3 };
typedef struct tg_gen_binding {
    int32_t op;
    bool table;
} tg_gen_binding;

TG_HIDDEN int32_t tg_gen_chain_bindings(const tg_gen_chain *c, tg_gen_binding out[TG_GEN_MAX_BINDINGS]);
/* Whether the GPU routes render op in float32 (the arithmetic and bit ops and relu_backward in
 * integers; the transcendental and derivative ops and pow in binary64: every op of the registry
 * since 2026-12-06): asked by tgrad_unary and tgrad_binary before a float32 node on a device is
 * made. */
TG_HIDDEN bool tg_gen_f32_renders(tgrad_op op);
/* Whether a float32 chain evaluates an op in binary64 (kernels/gpu/transcendental_f32.h): its
 * kernel then writes a flag per element (binding f, last), set where the op's bound leaves the
 * element undecided, which the host reruns (tg_ew_on_host). */
TG_HIDDEN bool tg_gen_chain_flags(const tg_gen_chain *c);
/* Whether op in dtype evaluates in binary64 on the GPU routes (the float32 transcendentals, pow in
 * either dtype): its kernel runs it alone (the scheduler fuses it with nothing, on every device,
 * so that the CPU's steps are the GPU's). */
TG_HIDDEN bool tg_gen_ew_runs_alone(tgrad_op op, int32_t dtype);

/* A batched product's batch axes: at most the dimensions before the two matrix axes. */
enum { TG_GEN_MAX_BATCH = TGRAD_MAX_DIMS - 2 };
/* Threadgroups along a grid's z axis (CUDA's gridDim.z limit; kept on every device): a batch of
 * more products is not eligible. */
enum { TG_GEN_MAX_GRID_Z = 65535 };

typedef struct tg_gen_matmul {
    int64_t m, k, n;
    tg_gen_operand a, b, c; /* a [M, K], b [K, N], c [M, N] (the output's layout) */
    /* torch.matmul's batch (docs/kernels.md, "Batched products"): nbatch axes before the matrix
     * axes (0: a 2-D product), their extents (the output's) and each operand's stride along them
     * (0: broadcast); one product per threadgroup z, its operands' first elements moved by the
     * batch's offsets. The offsets above are those of batch 0. */
    int32_t nbatch;
    int64_t batch[TG_GEN_MAX_BATCH];
    int64_t batch_stride[3][TG_GEN_MAX_BATCH]; /* a, b, c */
    const tg_gen_chain *epilogue; /* NULL or empty: none; operands are views over [batch..., M, N] */
    int32_t order;                /* TGRAD_MATMUL_ORDER_*: naive and tiled render either; tc ignores it */
    /* c holds the fp32 accumulators' bits (any NaN as 0x7fc00000, tgrad_matmul_ex's float32
     * result), not bf16: naive and tiled only, no epilogue */
    bool out_f32;
} tg_gen_matmul;

/* The problem of a @ b for views a [batch..., M, K] and b [batch..., K, N] of one rank (2 or
 * more; broadcast batch axes have stride 0, as tg_view_matmul_batched makes them), the output
 * compact row-major; no epilogue (the caller sets one). */
TG_HIDDEN tg_gen_matmul tg_gen_matmul_of(const tg_view *a, const tg_view *b);
/* The number of products of a batched problem (1 for a 2-D one). */
TG_HIDDEN int64_t tg_gen_matmul_batches(const tg_gen_matmul *p);

/* A standalone elementwise kernel: out (compact row-major, the shape of `first`) = the chain over
 * the first operand. */
typedef struct tg_gen_elementwise {
    tg_view first;
    tg_gen_chain chain;
} tg_gen_elementwise;

/* Eligibility: TGRAD_OK or TGRAD_ERR_ROUTE_NOT_ELIGIBLE with the reason recorded. */
TG_HIDDEN tgrad_status tg_gen_check_matmul(const tg_route *r, const tg_lang *l, const tg_gen_matmul *p);
TG_HIDDEN tgrad_status tg_gen_check_copy(const tg_lang *l, const tg_view *src);
/* Render (after a passing check). On success t holds the source and *launch is filled. */
TG_HIDDEN tgrad_status tg_gen_render_matmul(const tg_route *r, const tg_lang *l, const tg_gen_matmul *p,
                                            tg_text *t, struct tgrad_launch *launch);
TG_HIDDEN tgrad_status tg_gen_check_elementwise(const tg_lang *l, const tg_gen_elementwise *p);
TG_HIDDEN tgrad_status tg_gen_render_elementwise(const tg_lang *l, const tg_gen_elementwise *p, tg_text *t,
                                                 struct tgrad_launch *launch);
/* elem_bytes: 2 (bf16, moved as ushort) or 4 (float32 or int32, moved as uint) */
TG_HIDDEN tgrad_status tg_gen_render_copy(const tg_lang *l, const tg_view *src, int32_t elem_bytes, tg_text *t,
                                          struct tgrad_launch *launch);
/* The cast of src's view (dtype from) into a compact buffer of dtype to: bfloat16 <-> float32. */
TG_HIDDEN tgrad_status tg_gen_check_cast(const tg_lang *l, const tg_view *src, int32_t from, int32_t to);
TG_HIDDEN tgrad_status tg_gen_render_cast(const tg_lang *l, const tg_view *src, int32_t from, int32_t to, tg_text *t,
                                          struct tgrad_launch *launch);

/* ---- reductions (render_reduce.c) ----
 * out[o] (compact row-major over the kept axes) = the reduction `op` (TGRAD_REDUCE_*) of the
 * elements of `in` along the axes reduced[d], exactly as the CPU (kernels/gpu/reduce.h): one
 * threadgroup per output, its threads striding over the reduced elements, partial results
 * combined by a tree in threadgroup memory. With a prologue the values are the chain over `in`
 * (bf16, its operands views over in's shape); the epilogue runs on a bf16 result (operands views
 * over out's shape). */
typedef struct tg_gen_reduce {
    int32_t op;
    int32_t in_dtype, out_dtype; /* TGRAD_DTYPE_*; in_dtype is bf16 with a prologue */
    tg_view in;
    bool reduced[TGRAD_MAX_DIMS];
    tg_view out;
    const tg_gen_chain *prologue, *epilogue; /* NULL or empty: none */
} tg_gen_reduce;

TG_HIDDEN tgrad_status tg_gen_check_reduce(const tg_lang *l, const tg_gen_reduce *p);
TG_HIDDEN tgrad_status tg_gen_render_reduce(const tg_lang *l, const tg_gen_reduce *p, tg_text *t,
                                            struct tgrad_launch *launch);

/* ---- the selecting copies (render_select.c) ----
 * gather: out (compact row-major, x.shape[:axis] + index.shape + x.shape[axis+1:]) = numpy's take
 * of x along `axis` by the int32 indices read through `index`'s view (negative ones count from
 * the end; the caller checked their range); concat: out = the n operands joined along `axis`,
 * each read through its view. Elements of esize bytes (1, 2, 4, 8) are moved bit for bit. */
enum { TG_GEN_MAX_CONCAT = TGRAD_LAUNCH_MAX_BUFFERS - 1 }; /* operands of one concat kernel */

typedef struct tg_gen_take {
    int32_t esize, axis;
    tg_view x, index, out;
} tg_gen_take;

typedef struct tg_gen_concat {
    int32_t esize, axis, n;
    tg_view in[TG_GEN_MAX_CONCAT];
    tg_view out;
} tg_gen_concat;

/* slice_scatter with its start in an int32 buffer (tgrad_slice_scatter_at): out = dst with src's
 * block written from the position read through `start`'s one-element view, along `axis` (the
 * caller checked that it fits); the kernel's text does not depend on the position. */
typedef struct tg_gen_slice_at {
    int32_t esize, axis;
    tg_view dst, src, start, out;
} tg_gen_slice_at;

TG_HIDDEN tgrad_status tg_gen_check_take(const tg_lang *l, const tg_gen_take *p);
TG_HIDDEN tgrad_status tg_gen_render_take(const tg_lang *l, const tg_gen_take *p, tg_text *t, struct tgrad_launch *launch);
TG_HIDDEN tgrad_status tg_gen_check_concat(const tg_lang *l, const tg_gen_concat *p);
TG_HIDDEN tgrad_status tg_gen_render_concat(const tg_lang *l, const tg_gen_concat *p, tg_text *t,
                                            struct tgrad_launch *launch);
TG_HIDDEN tgrad_status tg_gen_check_slice_at(const tg_lang *l, const tg_gen_slice_at *p);
TG_HIDDEN tgrad_status tg_gen_render_slice_at(const tg_lang *l, const tg_gen_slice_at *p, tg_text *t,
                                              struct tgrad_launch *launch);

/* ---- the gradient's transposes (render_scatter.c) ----
 * place: out (numel elements, compact) = +0, except that element i of `src` (read through its view)
 * lands, bit for bit, at offset + sum(i[d] * strides[d]) (grad/place.c); the landing strides must
 * nest (each larger than the reach of the smaller ones), else the route is not eligible.
 * scatter_add: out (compact, pre + [n] + post) at [a, j, b] = the exact sum of g[a, q, b] over the
 * indices q (row-major over `index`) that name j, rounded once to dtype; g (pre + index.shape + post)
 * and the int32 indices compact, their range checked by the caller (grad/scatter_add.c). */
typedef struct tg_gen_place {
    int32_t esize;
    tg_view src;
    int64_t strides[TGRAD_MAX_DIMS], offset, numel;
} tg_gen_place;

typedef struct tg_gen_scatter_add {
    int32_t dtype, axis;
    tg_view g, index, out;
} tg_gen_scatter_add;

TG_HIDDEN tgrad_status tg_gen_check_place(const tg_lang *l, const tg_gen_place *p);
TG_HIDDEN tgrad_status tg_gen_render_place(const tg_lang *l, const tg_gen_place *p, tg_text *t, struct tgrad_launch *launch);
TG_HIDDEN tgrad_status tg_gen_check_scatter_add(const tg_lang *l, const tg_gen_scatter_add *p);
TG_HIDDEN tgrad_status tg_gen_render_scatter_add(const tg_lang *l, const tg_gen_scatter_add *p, tg_text *t,
                                                 struct tgrad_launch *launch);

/* ---- the optimizer step (render_optim.c) ----
 * out (compact, the inputs' shape, float32) = output `which` (TGRAD_OPTIM_OUT_*) of one SGD or AdamW
 * step (algo, flags: TGRAD_OPTIM_*) of the n float32 inputs read through their views, the CPU's
 * bytes (ops/optim_arith.h); the scalars are the launch's words (tg_gen_optim_words). */
enum { TG_GEN_OPTIM_INPUTS = 5 };
typedef struct tg_gen_optim {
    int32_t algo, flags, n, which;
    tg_view in[TG_GEN_OPTIM_INPUTS], out;
} tg_gen_optim;

TG_HIDDEN tgrad_status tg_gen_check_optim(const tg_lang *l, const tg_gen_optim *p);
TG_HIDDEN tgrad_status tg_gen_render_optim(const tg_lang *l, const tg_gen_optim *p, tg_text *t, struct tgrad_launch *launch);
/* The launch's words (binding q): the eight scalars' float32 bits. */
TG_HIDDEN void tg_gen_optim_words(const float *scalars, uint32_t words[8]);

/* ---- compare and where (render_compare.c) ----
 * out (compact row-major) = in[0] <cmp> in[1] (bool bytes 0/1, exact comparisons of the values in
 * any pair of dtypes) for cmp = TGRAD_COMPARE_*, or (cmp 0) in[0] != 0 ? in[1] : in[2] (where: a
 * bool condition, two operands of one dtype, bits copied). The operands' views are broadcast to
 * the output's shape (their ranks equal its). */
typedef struct tg_gen_pointwise {
    int32_t cmp, n; /* n: 2 (compare) or 3 (where) */
    int32_t dtype[3];
    tg_view in[3], out;
} tg_gen_pointwise;

TG_HIDDEN tgrad_status tg_gen_check_pointwise(const tg_lang *l, const tg_gen_pointwise *p);
TG_HIDDEN tgrad_status tg_gen_render_pointwise(const tg_lang *l, const tg_gen_pointwise *p, tg_text *t,
                                               struct tgrad_launch *launch);

/* ---- the counter-based generator (render_random.c) ----
 * out (compact, numel elements of dtype) = the draw of docs/random.md for (seed, offset): uniform,
 * randint and normal (in double: not MSL), the CPU's bytes; float32 uniform(low, high) off [0, 1)
 * is refused. */
typedef struct tg_gen_random {
    int32_t dist, dtype; /* TGRAD_RANDOM_*, TGRAD_DTYPE_* */
    uint64_t seed, offset;
    int64_t numel;
    double p0, p1;
} tg_gen_random;

/* Whether a draw renders in kernel language `lang` (TGRAD_ERR_BACKEND_UNAVAILABLE with the reason
 * if not): asked by tgrad_random before a GPU node is made, and by the check below. */
TG_HIDDEN tgrad_status tg_gen_random_renders(int32_t lang, int32_t dist, int32_t dtype, double p0, double p1);
TG_HIDDEN tgrad_status tg_gen_check_random(const tg_lang *l, const tg_gen_random *p);
/* Does the draw's kernel run one Philox call per thread, in binary64, with a flag per call for
 * the host to redraw (normal, float32 uniform(low, high) off [0, 1))? */
TG_HIDDEN bool tg_gen_random_flagged(const tg_gen_random *p);
/* The kernel's second buffer `q`, set per launch (the text leaves them out, so draws of one
 * shape share a compiled program): the offset's low and high words, the seed's. */
TG_HIDDEN void tg_gen_random_words(const tg_gen_random *p, uint32_t words[4]);
TG_HIDDEN tgrad_status tg_gen_render_random(const tg_lang *l, const tg_gen_random *p, tg_text *t,
                                            struct tgrad_launch *launch);

/* ---- the softmax kind (render_softmax.c) ----
 * softmax, log_softmax or logsumexp (TGRAD_SOFTMAX_*) of `in` along `axis`, correctly rounded to
 * out_dtype as on the CPU: one thread per row, the CPU's doubles and bounds (kernels/gpu/softmax.h);
 * out is compact row-major (softmax, log_softmax: in's shape; logsumexp: the axis dropped); flags
 * (a uint per row, written by every row's thread) is 1 where the row holds an element that only
 * the CPU's exact row code decides (the host reruns it, tg_softmax_rows_on_host), else 0. */
typedef struct tg_gen_softmax {
    int32_t op, axis;
    int32_t in_dtype, out_dtype; /* bf16 or float32 each */
    tg_view in;
} tg_gen_softmax;

/* ---- the softmax kind's derivatives (render_softmax_backward.c) ----
 * softmax_backward (op TGRAD_SOFTMAX_SOFTMAX: y_i (g_i - sum_j g_j y_j)) or log_softmax_backward
 * (TGRAD_SOFTMAX_LOG_SOFTMAX: g_i - exp(z_i) sum_j g_j, z in y) along `axis`, correctly rounded
 * as on the CPU (ops/softmax_backward.c): one thread per row in double, out compact row-major in
 * y's shape, and a flag per row as the forward's (tg_softmax_backward_rows_on_host reruns it). */
typedef struct tg_gen_softmax_backward {
    int32_t op, axis;
    int32_t y_dtype, g_dtype, out_dtype; /* bf16 or float32 each */
    tg_view y, g;
} tg_gen_softmax_backward;

TG_HIDDEN tgrad_status tg_gen_check_softmax_backward(const tg_lang *l, const tg_gen_softmax_backward *p);
TG_HIDDEN tgrad_status tg_gen_render_softmax_backward(const tg_lang *l, const tg_gen_softmax_backward *p, tg_text *t,
                                                      struct tgrad_launch *launch);

/* ---- the norm kind (render_norm.c) ----
 * rms_norm or layer_norm (TG_NORM_*) of bf16 x over its last naxes axes, weight w and bias b (views
 * of those axes' shape, when has_w / has_b), correctly rounded to bf16 as on the CPU: one thread
 * per row, the CPU's doubles and bounds (kernels/gpu/norm.h); out compact row-major; flags as for
 * softmax (the host reruns a flagged row, tg_norm_rows_on_host). */
typedef struct tg_gen_norm {
    int32_t op, naxes;
    double eps;
    bool has_w, has_b;
    tg_view x, w, b;
} tg_gen_norm;

/* The norms' input gradients (render_norm_backward.c): rms_norm_backward or layer_norm_backward
 * (op TG_NORM_*_BACKWARD) of x with gradient g and the optional weight w over the last naxes
 * axes, correctly rounded to out_dtype as on the CPU (ops/norm_backward.c): one thread per row in
 * double, a flag per row as the forward's (tg_norm_backward_rows_on_host reruns it). */
typedef struct tg_gen_norm_backward {
    int32_t op, naxes;
    double eps;
    bool has_w;
    int32_t x_dtype, g_dtype, w_dtype, out_dtype; /* bf16 or float32 each */
    tg_view x, g, w;
} tg_gen_norm_backward;

TG_HIDDEN tgrad_status tg_gen_check_norm_backward(const tg_lang *l, const tg_gen_norm_backward *p);
TG_HIDDEN tgrad_status tg_gen_render_norm_backward(const tg_lang *l, const tg_gen_norm_backward *p, tg_text *t,
                                                   struct tgrad_launch *launch);
TG_HIDDEN tgrad_status tg_gen_check_norm(const tg_lang *l, const tg_gen_norm *p);
TG_HIDDEN tgrad_status tg_gen_render_norm(const tg_lang *l, const tg_gen_norm *p, tg_text *t,
                                          struct tgrad_launch *launch);

/* ---- the rope kind (render_rope.c) ----
 * rope (or rope_backward: the frequencies negated) of bf16 x [..., L, d] at int32 positions ([L], or
 * [B, L] with `batched`: x's first axis is B), rotating the first rd features' pairs (halves, or
 * neighbours when interleaved) by theta = p f_i; f_i from inv_freq (float32, has_f) or the CPU's
 * pow(base, -2i / rd) baked in. One thread per (row, position), the CPU's doubles (kernels/gpu/
 * norm.h's fast rounding), a device bound for sin and cos; flags as for softmax (the host reruns
 * a flagged position, tg_rope_rows_on_host). */
typedef struct tg_gen_rope {
    int32_t rd, interleaved, batched, backward;
    bool has_f;
    double base;
    tg_view x, pos, f;
} tg_gen_rope;

TG_HIDDEN tgrad_status tg_gen_check_rope(const tg_lang *l, const tg_gen_rope *p);
TG_HIDDEN tgrad_status tg_gen_render_rope(const tg_lang *l, const tg_gen_rope *p, tg_text *t,
                                          struct tgrad_launch *launch);

TG_HIDDEN tgrad_status tg_gen_check_softmax(const tg_lang *l, const tg_gen_softmax *p);
TG_HIDDEN tgrad_status tg_gen_render_softmax(const tg_lang *l, const tg_gen_softmax *p, tg_text *t,
                                             struct tgrad_launch *launch);

#endif
