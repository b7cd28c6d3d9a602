/* Elementwise ops in rendered kernels: the ops as data, the buffers a chain adds, and the text
 * that applies a chain to the running value.
 *
 * Every language gets the same text: the prelude kernels/gpu/elementwise.h (pasted verbatim,
 * integer arithmetic only) defines one device function per computed op, and a table op reads its
 * 65,536-entry table, a buffer the launcher binds (the CPU's own table, tg_ew_table); gelu's,
 * gelu_tanh's and silu's derivatives read f'(x) from their op's table (an interval with a 64-bit
 * significand per x, tg_ew_grad_table) besides their operand. So the
 * bytes are the CPU's by construction for any device, whatever its fp32 subnormal handling,
 * division accuracy or fast-math setting (tests/c/test_gpu_elementwise.c compiles the prelude as C
 * against the CPU loops). A float32 chain (a standalone float32 elementwise kernel) uses the
 * prelude kernels/gpu/elementwise_f32.h the same way (integers only, no double: every language,
 * MSL included; tests/c/test_gpu_elementwise_f32.c). Its transcendental and derivative ops, and
 * pow in either dtype, evaluate in binary64 with a bound (kernels/gpu/transcendental_f32.h and
 * derivatives_pow.h, after the double kinds' head): an element the bound leaves undecided is
 * flagged and rerun on the host with the CPU's code (tg_gen_chain_flags;
 * tests/c/test_gpu_transcendental_f32.c). Ops with no spelling are refused (tg_gen_f32_renders). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "ops/elementwise.h"
#include "ops/elementwise_grad.h"

/* ---- the ops, as data ---------------------------------------------------------------------- */
typedef struct ew_spelling {
    tgrad_op op;
    const char *fn;  /* bf16: the prelude's device function; NULL: a table op */
    const char *f32; /* float32: elementwise_f32.h's device function (integers); NULL: see f64 */
    /* float32 in binary64: transcendental_f32.h's device function, which marks an element its
     * bound leaves undecided (the kernel's flags; the host reruns it); NULL: not rendered */
    const char *f64;
    const char *bf64; /* the same for bf16 (pow); NULL: fn or the table */
} ew_spelling;

static const ew_spelling spellings[] = {
    { TGRAD_OP_RELU, "tg_bf_relu", "tg_f32_relu", NULL, NULL },          { TGRAD_OP_NEG, "tg_bf_neg", "tg_f32_neg", NULL, NULL },
    { TGRAD_OP_ABS, "tg_bf_abs", "tg_f32_abs", NULL, NULL },             { TGRAD_OP_SQUARE, "tg_bf_square", "tg_f32_square", NULL, NULL },
    { TGRAD_OP_ADD, "tg_bf_add", "tg_f32_add", NULL, NULL },             { TGRAD_OP_SUB, "tg_bf_sub", "tg_f32_sub", NULL, NULL },
    { TGRAD_OP_MUL, "tg_bf_mul", "tg_f32_mul", NULL, NULL },             { TGRAD_OP_DIV, "tg_bf_div", "tg_f32_div", NULL, NULL },
    { TGRAD_OP_MAXIMUM, "tg_bf_maximum", "tg_f32_maximum", NULL, NULL }, { TGRAD_OP_MINIMUM, "tg_bf_minimum", "tg_f32_minimum", NULL, NULL },
    { TGRAD_OP_SQRT, NULL, "tg_f32_sqrt", NULL, NULL },
    /* the derivative ops integers reach exactly: relu's (a selection), and in bf16 rsqrt's (g y^3:
     * 32 bits), sqrt's (a quotient), sigmoid's and tanh's (two exact products' difference); gelu's,
     * gelu_tanh's and silu's: g times f'(x) from the op's table, exact in integers. In float32 (but
     * relu's) they evaluate in binary64 with a bound, as the transcendentals below */
    { TGRAD_OP_RELU_BACKWARD, "tg_bf_relu_backward", "tg_f32_relu_backward", NULL, NULL },
    { TGRAD_OP_RSQRT_BACKWARD, "tg_bf_rsqrt_backward", NULL, "tg_tf_rsqrt_backward", NULL },
    { TGRAD_OP_SQRT_BACKWARD, "tg_bf_sqrt_backward", NULL, "tg_tf_sqrt_backward", NULL },
    { TGRAD_OP_SIGMOID_BACKWARD, "tg_bf_sigmoid_backward", NULL, "tg_tf_sigmoid_backward", NULL },
    { TGRAD_OP_TANH_BACKWARD, "tg_bf_tanh_backward", NULL, "tg_tf_tanh_backward", NULL },
    { TGRAD_OP_GELU_BACKWARD, "tg_bf_table_grad", NULL, "tg_tf_gelu_backward", NULL },
    { TGRAD_OP_GELU_TANH_BACKWARD, "tg_bf_table_grad", NULL, "tg_tf_gelu_tanh_backward", NULL },
    { TGRAD_OP_SILU_BACKWARD, "tg_bf_table_grad", NULL, "tg_tf_silu_backward", NULL },
    /* the transcendentals read 65,536-entry tables in bf16; in float32 they evaluate in binary64
     * with a bound, an element it leaves undecided rerun on the host (transcendental_f32.h), but
     * rsqrt, whose exact value integers reach */
    { TGRAD_OP_GELU, NULL, NULL, "tg_tf_gelu", NULL },
    { TGRAD_OP_GELU_TANH, NULL, NULL, "tg_tf_gelu_tanh", NULL },
    { TGRAD_OP_SILU, NULL, NULL, "tg_tf_silu", NULL },
    { TGRAD_OP_SIGMOID, NULL, NULL, "tg_tf_sigmoid", NULL },
    { TGRAD_OP_TANH, NULL, NULL, "tg_tf_tanh", NULL },
    { TGRAD_OP_EXP, NULL, NULL, "tg_tf_exp", NULL },
    { TGRAD_OP_RSQRT, NULL, "tg_f32_rsqrt", NULL, NULL }, /* float32: exact in integers (elementwise_f32.h) */
    { TGRAD_OP_LOG, NULL, NULL, "tg_tf_log", NULL },
    { TGRAD_OP_LOG1P, NULL, NULL, "tg_tf_log1p", NULL },
    { TGRAD_OP_SIN, NULL, NULL, "tg_tf_sin", NULL },
    { TGRAD_OP_COS, NULL, NULL, "tg_tf_cos", NULL },
    /* pow, in either dtype: binary64 with a bound, as the transcendentals (the scheduler gives it
     * a kernel of its own on every device: tg_gen_ew_runs_alone) */
    { TGRAD_OP_POW, NULL, NULL, "tg_tf_pow", "tg_tf_pow_bf16" },
};

static const ew_spelling *spelling_of(tgrad_op op) {
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++)
        if (spellings[i].op == op) return &spellings[i];
    return NULL;
}

static bool is_binary(tgrad_op op) { return tgrad_op_arity(op) == 2; }

/* The device function of op in the chain's dtype; NULL: a table op (bf16) or none (float32). */
static const char *fn_of(const tg_gen_chain *c, const ew_spelling *sp) { return c->f32 ? sp->f32 : sp->fn; }

bool tg_gen_f32_renders(tgrad_op op) {
    const ew_spelling *sp = spelling_of(op);
    return sp && (sp->f32 || sp->f64);
}

/* op's binary64 device function in the chain's dtype (NULL: integers, a table, or none). */
static const char *binary64_fn(bool f32, const ew_spelling *sp) {
    if (!sp) return NULL;
    return f32 ? (sp->f32 ? NULL : sp->f64) : (sp->fn ? NULL : sp->bf64);
}

bool tg_gen_ew_runs_alone(tgrad_op op, int32_t dtype) {
    return binary64_fn(dtype == TGRAD_DTYPE_F32, spelling_of(op)) != NULL;
}

bool tg_gen_chain_flags(const tg_gen_chain *c) {
    for (int32_t i = 0; i < c->n; i++)
        if (binary64_fn(c->f32, spelling_of(c->ops[i].op))) return true;
    return false;
}

/* ---- buffers -------------------------------------------------------------------------------- */
/* Whether op reads a table in the chain's dtype (a unary table op, or a derivative op's f'(x)). */
static bool reads_table(const tg_gen_chain *c, tgrad_op op) {
    return !c->f32 && (tg_ew_from_table(op) || tg_ew_grad_from_table(op));
}

int32_t tg_gen_chain_bindings(const tg_gen_chain *c, tg_gen_binding out[TG_GEN_MAX_BINDINGS]) {
    int32_t n = 0;
    for (int32_t i = 0; i < c->n; i++) {
        tgrad_op op = c->ops[i].op;
        if (is_binary(op)) out[n++] = (tg_gen_binding){ i, false };
        if (reads_table(c, op)) {
            bool seen = false;
            for (int32_t j = 0; j < n; j++) seen |= out[j].table && c->ops[out[j].op].op == op;
            if (!seen) out[n++] = (tg_gen_binding){ i, true };
        }
    }
    return n;
}

/* The name a binding's buffer has in the kernel: e<op> (an operand) or t<op> (a table), after
 * the chain's tag. */
static void binding_name(const tg_gen_chain *c, const tg_gen_binding *b, char *dst, size_t cap) {
    snprintf(dst, cap, "%s%c%d", c->tag ? c->tag : "", b->table ? 't' : 'e', (int)b->op);
}

/* The chain's buffer of table op `op`. */
static int32_t table_binding(const tg_gen_chain *c, const tg_gen_binding *b, int32_t nb, tgrad_op op) {
    for (int32_t j = 0; j < nb; j++)
        if (b[j].table && c->ops[b[j].op].op == op) return j;
    return -1;
}

tgrad_status tg_gen_check_chain(const char *route, const tg_lang *l, const tg_gen_chain *c) {
    if (c->n > TG_GEN_MAX_CHAIN) return tg_not_eligible(route, l->name, "a chain of %lld ops (at most %lld)", c->n, TG_GEN_MAX_CHAIN, 0);
    for (int32_t i = 0; i < c->n; i++) {
        const tg_gen_ew_op *o = &c->ops[i];
        const ew_spelling *sp = spelling_of(o->op);
        if (!sp || (c->f32 && !sp->f32 && !sp->f64)) { /* the op's name in the message: what a user wrote */
            char why[160];
            snprintf(why, sizeof why, "op %%lld (%s) has no %skernel spelling%s", tgrad_op_name(o->op),
                     sp ? "float32 " : "", sp ? " (it runs in float32 on the CPU only)" : "");
            return tg_not_eligible(route, l->name, why, o->op, 0, 0);
        }
        if (binary64_fn(c->f32, sp) && (c->n != 1 || strcmp(route, "elementwise") != 0)) {
            /* its flags are the standalone kernel's: one op alone */
            char why[200];
            snprintf(why, sizeof why, "op %%lld (%s) evaluates in binary64 and runs as its own elementwise kernel, not "
                     "in a chain of %%lld ops or an epilogue", tgrad_op_name(o->op));
            return tg_not_eligible(route, l->name, why, o->op, c->n, 0);
        }
        if (!c->f32 && tg_ew_grad_from_table(o->op) && !tg_ew_grad_tables_here()) {
            char why[200];
            snprintf(why, sizeof why, "op %%lld (%s) reads a table of f'(x) built in binary128, which this build "
                     "lacks (no libquadmath): it runs on the CPU only", tgrad_op_name(o->op));
            return tg_not_eligible(route, l->name, why, o->op, 0, 0);
        }
        int64_t numel, lo, hi;
        if (!is_binary(o->op) || tg_view_numel(&o->operand, &numel) || numel == 0) continue;
        if (!tg_span_view(&o->operand, &lo, &hi) || lo < 0)
            return tg_not_eligible(route, l->name, "the operand of fused op %lld reaches outside its buffer", i, 0, 0);
    }
    return TGRAD_OK;
}

/* The highest element index any chain buffer is read at (-1: none), for the index type. */
int64_t tg_gen_chain_reach(const tg_gen_chain *c) {
    int64_t top = c->n ? 0xffff : -1, numel, lo, hi;
    for (int32_t i = 0; i < c->n; i++)
        if (is_binary(c->ops[i].op) && !tg_view_numel(&c->ops[i].operand, &numel) && numel > 0 &&
            tg_span_view(&c->ops[i].operand, &lo, &hi) && hi > top)
            top = hi;
    return top;
}

void tg_gen_chain_launch(const tg_gen_chain *c, struct tgrad_launch *launch) {
    tg_gen_binding b[TG_GEN_MAX_BINDINGS];
    int32_t nb = tg_gen_chain_bindings(c, b);
    for (int32_t j = 0; j < nb; j++) {
        uint32_t at = launch->buffer_count++;
        int64_t numel = 0, lo = 0, hi = -1;
        if (b[j].table) hi = tg_ew_device_table_len(c->ops[b[j].op].op) - 1;
        else if (!tg_view_numel(&c->ops[b[j].op].operand, &numel) && numel > 0)
            tg_span_view(&c->ops[b[j].op].operand, &lo, &hi);
        launch->buffer_elements[at] = (uint64_t)(hi + 1);
        binding_name(c, &b[j], launch->buffer_names[at], sizeof launch->buffer_names[at]);
    }
}

/* The chain, spelled out for a kernel's name hash: ops, sides and operand views. */
void tg_gen_chain_key(const tg_gen_chain *c, char *dst, size_t cap) {
    size_t n = strlen(dst);
    for (int32_t i = 0; i < c->n && n < cap; i++) {
        const tg_gen_ew_op *o = &c->ops[i];
        n += (size_t)snprintf(dst + n, cap - n, ";op%d%s%s@%" PRId64, (int)o->op, c->f32 ? "f" : "", o->value_right ? "r" : "",
                              o->operand.offset);
        for (int32_t d = 0; d < o->operand.ndim && n < cap; d++)
            n += (size_t)snprintf(dst + n, cap - n, ",%" PRId64 ":%" PRId64, o->operand.shape[d], o->operand.strides[d]);
    }
}

/* ---- text ----------------------------------------------------------------------------------- */
void tg_gen_emit_chain_params(const emitter *e, const tg_gen_chain *c, char decls[][64], const char **ptrs, int *n) {
    tg_gen_binding b[TG_GEN_MAX_BINDINGS];
    int32_t nb = tg_gen_chain_bindings(c, b);
    for (int32_t j = 0; j < nb; j++) {
        char name[8];
        binding_name(c, &b[j], name, sizeof name);
        tg_buffer_param_typed(decls[j], 64, e->l->global_in, c->f32 ? "uint" : "ushort", name);
        ptrs[(*n)++] = decls[j];
    }
}

/* A prelude, verbatim but for its functions' prefix: a line starting `static inline` gets the
 * language's function_prefix (the same words in MSL and OpenCL C; CUDA's are __device__). */
void tg_gen_emit_text(const emitter *e, const char *s) {
    static const char plain[] = "static inline", line[] = "\nstatic inline";
    if (e->t->discard) return; /* nothing is written: skip the scan */
    while (*s) {
        if (strncmp(s, plain, sizeof plain - 1) == 0) { /* the language's spelling */
            E("%s", e->l->function_prefix);
            s += sizeof plain - 1;
        }
        const char *next = strstr(s, line); /* the text up to the next such line, in one append */
        size_t len = next ? (size_t)(next - s) + 1 : strlen(s);
        E("%.*s", (int)len, s);
        s += len;
    }
    E("\n");
}

void tg_gen_emit_prelude(const emitter *e, const tg_gen_chain *c) {
    if (!c || !c->n) return;
    if (tg_gen_chain_flags(c)) { /* binary64: the double kinds' API, exp_neg, the ops */
        tg_emit_double_api(e);
        tg_gen_emit_text(e, tg_gen_softmax_prelude);
        tg_gen_emit_text(e, tg_gen_transcendental_f32_prelude);
        tg_gen_emit_text(e, tg_gen_derivatives_pow_prelude);
        return;
    }
    if (c->f32) E("typedef %s tg_u64;\n", e->l->u64);
    tg_gen_emit_text(e, c->f32 ? tg_gen_elementwise_f32_prelude : tg_gen_elementwise_prelude);
}

/* A derivative op g f'(x) with f'(x) from its table `t` (an entry of TG_EW_GRAD_ENTRY ushorts per
 * x): x is the running value or the operand `operand`, as the op's sides say. */
static void emit_table_grad(const emitter *e, const tg_gen_ew_op *o, const char *indent, const char *t,
                            const char *operand) {
    E("%s{ // %s: g f'(x), f'(x) from %s\n", indent, tgrad_op_name(o->op), t);
    E("%s    ushort gxv = %s, ggv = %s;\n", indent, o->value_right ? operand : "v", o->value_right ? "v" : operand);
    E("%s    uint gti = (uint)gxv * %du;\n", indent, (int)TG_EW_GRAD_ENTRY);
    E("%s    v = tg_bf_table_grad(gxv, ggv, %s[gti], %s[gti + 1u], %s[gti + 2u], %s[gti + 3u], %s[gti + 4u], "
      "%s[gti + 5u], %s[gti + 6u], 0u);\n", indent, t, t, t, t, t, t, t);
    E("%s}\n", indent);
}

void tg_gen_emit_chain(const emitter *e, const tg_gen_chain *c, const char *indent, const char *const *coord) {
    tg_gen_binding b[TG_GEN_MAX_BINDINGS];
    int32_t nb = tg_gen_chain_bindings(c, b);
    for (int32_t i = 0; i < c->n; i++) {
        const tg_gen_ew_op *o = &c->ops[i];
        const ew_spelling *sp = spelling_of(o->op);
        const char *fn = fn_of(c, sp), *d64 = binary64_fn(c->f32, sp);
        if (fn && reads_table(c, o->op)) { /* a derivative op with its table */
            char name[8], operand[TGRAD_MAX_DIMS * 48 + 48], idx[TGRAD_MAX_DIMS * 48 + 32];
            binding_name(c, &b[table_binding(c, b, nb, o->op)], name, sizeof name);
            tg_view_index(idx, sizeof idx, &o->operand, coord);
            snprintf(operand, sizeof operand, "%se%d[%s]", c->tag ? c->tag : "", (int)i, idx);
            emit_table_grad(e, o, indent, name, operand);
        } else if (d64) { /* binary64 with a bound: the element's flag (tg_gen_chain_flags) */
            if (is_binary(o->op)) {
                char idx[TGRAD_MAX_DIMS * 48 + 32], other[TGRAD_MAX_DIMS * 48 + 48];
                tg_view_index(idx, sizeof idx, &o->operand, coord);
                snprintf(other, sizeof other, "%se%d[%s]", c->tag ? c->tag : "", (int)i, idx);
                E("%s{\n%s    const tg_u64 r = %s(%s, %s);\n", indent, indent, d64, o->value_right ? other : "v",
                  o->value_right ? "v" : other);
            } else {
                E("%s{\n%s    const tg_u64 r = %s(v);\n", indent, indent, d64);
            }
            E("%s    v = (%s)r;\n%s    undecided |= (uint)(r >> 32);\n%s}\n", indent, c->f32 ? "uint" : "ushort", indent,
              indent);
        } else if (!fn) {
            char name[8];
            binding_name(c, &b[table_binding(c, b, nb, o->op)], name, sizeof name);
            E("%sv = %s[v]; // %s\n", indent, name, tgrad_op_name(o->op));
        } else if (!is_binary(o->op)) {
            E("%sv = %s(v);\n", indent, fn);
        } else {
            char idx[TGRAD_MAX_DIMS * 48 + 32];
            tg_view_index(idx, sizeof idx, &o->operand, coord);
            const char *tag = c->tag ? c->tag : "";
            if (o->value_right) E("%sv = %s(%se%d[%s], v);\n", indent, fn, tag, (int)i, idx);
            else E("%sv = %s(v, %se%d[%s]);\n", indent, fn, tag, (int)i, idx);
        }
    }
}
