/* The GPU kernels' elementwise ops (kernels/gpu/elementwise.h, integers only) against the CPU's
 * (kernels/cpu/elementwise_loops.h, fp32 under IEEE rules): the same text the renderer pastes into
 * every MSL and OpenCL kernel, compiled here as C, must give the CPU's bytes.
 *   test_gpu_elementwise            every unary input, and every first operand against 300 second
 *                                   operands (all specials, the subnormal and binade edges, a
 *                                   stride through the rest) for each binary op (the derivative
 *                                   ops: against tgrad_debug_elementwise, both operand orders;
 *                                   gelu's, gelu_tanh's and silu's read the library's table of
 *                                   f'(x), and each pair must also be decided: both ends of its
 *                                   interval round alike)
 *   test_gpu_elementwise all S [OP] every first operand against every S-th second operand (suite
 *                                   long: S = 7; S = 1 is all 2^32 pairs, six minutes of one core,
 *                                   and about 140 s more for each table derivative op),
 *                                   of every op or of OP alone (a derivative op: both orders, but
 *                                   one for S = 1, which covers every pair)
 * Prints "N passed, N failed"; a table derivative op, its pairs, differences and undecided pairs. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libtgrad/src/ops/elementwise_grad.h"
#include "check.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the loops' dispatchers: this test calls the ops */
#include "elementwise_loops.h"
#pragma GCC diagnostic pop

typedef uint16_t ushort;
typedef uint32_t uint;
#define clz(x) ((uint)__builtin_clz(x))
#include "../../kernels/gpu/elementwise.h"
#undef clz

typedef struct {
    const char *name;
    uint16_t (*cpu)(uint16_t, uint16_t);
    ushort (*gpu)(ushort, ushort);
} binary_case;

static const binary_case binaries[] = {
    { "add", ew_add, tg_bf_add }, { "sub", ew_sub, tg_bf_sub }, { "mul", ew_mul, tg_bf_mul },
    { "div", ew_div, tg_bf_div }, { "maximum", ew_max, tg_bf_maximum }, { "minimum", ew_min, tg_bf_minimum },
};

static uint16_t cpu_square(uint16_t h) { return ew_mul(h, h); }

typedef struct {
    const char *name;
    uint16_t (*cpu)(uint16_t);
    ushort (*gpu)(ushort);
} unary_case;

static const unary_case unaries[] = {
    { "relu", ew_relu, tg_bf_relu }, { "neg", ew_neg, tg_bf_neg }, { "abs", ew_abs, tg_bf_abs },
    { "square", cpu_square, tg_bf_square },
};

/* Report the first few mismatches of one op, and count the op once. */
static void verdict(const char *name, uint64_t bad, uint32_t a, uint32_t b, uint16_t want, uint16_t got) {
    if (bad) fprintf(stderr, "FAIL %s: %llu mismatches, first %04x, %04x: cpu %04x gpu %04x\n", name,
                     (unsigned long long)bad, a, b, want, got);
    CHECK(bad == 0);
}

static void second_operands(uint16_t *b, int *n) {
    static const uint16_t special[] = { 0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x00ff,
                                        0x3f80, 0xbf80, 0x3f81, 0x3fff, 0x4000, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
                                        0x7fc0, 0xffc0, 0x7f81, 0x0100, 0x0d80, 0x3400, 0x4b00, 0x5f80 };
    *n = 0;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) b[(*n)++] = special[i];
    for (uint32_t v = 3; v < 0x10000u && *n < 300; v += 227) b[(*n)++] = (uint16_t)v;
}

static void check_binary(const binary_case *c, bool all, uint32_t stride) {
    uint16_t bs[300];
    int nb = 0;
    if (!all) second_operands(bs, &nb);
    uint64_t bad = 0;
    uint32_t fa = 0, fb = 0;
    uint16_t fw = 0, fg = 0;
    for (uint32_t a = 0; a < 0x10000u; a++) {
        uint32_t count = all ? 0x10000u : (uint32_t)nb;
        for (uint32_t j = all ? a % stride : 0; j < count; j += all ? stride : 1) {
            uint16_t b = all ? (uint16_t)j : bs[j];
            uint16_t want = c->cpu((uint16_t)a, b), got = c->gpu((ushort)a, b);
            if (want != got && bad++ == 0) fa = a, fb = b, fw = want, fg = got;
        }
    }
    verdict(c->name, bad, fa, fb, fw, fg);
}

/* The derivative ops the prelude spells (relu's, rsqrt's, sqrt's, sigmoid's and tanh's) against
 * the library's CPU loop (tgrad_debug_elementwise): every x against the 300 second operands, both ways round (x's and
 * g's specials each meet every value), or every S-th second operand with `all`. */
/* gelu's, gelu_tanh's and silu's read their op's table (the library's, elementwise_grad_table.c,
 * as the launcher binds it): the interval's lower end, as the kernels round it, or its upper end. */
static ushort table_end(tgrad_op op, ushort x, ushort g, uint upper) {
    const uint16_t *t = tg_ew_grad_table(op) + (size_t)x * TG_EW_GRAD_ENTRY;
    return tg_bf_table_grad(x, g, t[0], t[1], t[2], t[3], t[4], t[5], t[6], upper);
}
static ushort gpu_gelu_backward(ushort x, ushort g) { return table_end(TGRAD_OP_GELU_BACKWARD, x, g, 0u); }
static ushort gpu_gelu_tanh_backward(ushort x, ushort g) { return table_end(TGRAD_OP_GELU_TANH_BACKWARD, x, g, 0u); }
static ushort gpu_silu_backward(ushort x, ushort g) { return table_end(TGRAD_OP_SILU_BACKWARD, x, g, 0u); }

typedef struct {
    const char *name;
    tgrad_op op;
    ushort (*gpu)(ushort, ushort);
} grad_case;

static const grad_case grads[] = {
    { "relu_backward", TGRAD_OP_RELU_BACKWARD, tg_bf_relu_backward },
    { "rsqrt_backward", TGRAD_OP_RSQRT_BACKWARD, tg_bf_rsqrt_backward },
    { "sqrt_backward", TGRAD_OP_SQRT_BACKWARD, tg_bf_sqrt_backward },
    { "sigmoid_backward", TGRAD_OP_SIGMOID_BACKWARD, tg_bf_sigmoid_backward },
    { "tanh_backward", TGRAD_OP_TANH_BACKWARD, tg_bf_tanh_backward },
    { "gelu_backward", TGRAD_OP_GELU_BACKWARD, gpu_gelu_backward },
    { "gelu_tanh_backward", TGRAD_OP_GELU_TANH_BACKWARD, gpu_gelu_tanh_backward },
    { "silu_backward", TGRAD_OP_SILU_BACKWARD, gpu_silu_backward },
};

/* A table op's pair is undecided when its interval's two ends round apart (the kernel would give
 * the lower end's rounding without knowing it exact): counted, and a failure. The lower end is
 * c->gpu's result, got. */
static uint64_t undecided_pairs(const grad_case *c, const uint16_t *xs, const uint16_t *gs, const uint16_t *got) {
    uint64_t n = 0;
    for (uint32_t a = 0; a < 0x10000u; a++) n += got[a] != table_end(c->op, xs[a], gs[a], 1u);
    return n;
}

static void check_grad(const grad_case *c, bool all, uint32_t stride) {
    static uint16_t xs[0x10000], gs[0x10000], want[0x10000], got[0x10000];
    bool table = tg_ew_grad_from_table(c->op);
    if (table && !tg_ew_grad_table(c->op)) { /* no binary128 in this build: the GPU routes refuse the op */
        printf("%s: no table in this build (no binary128), not checked\n", c->name);
#if defined(TGRAD_HAVE_QUADMATH)
        CHECK(!"the table of a build with libquadmath");
#endif
        return;
    }
    uint16_t bs[300];
    int nb = 0;
    second_operands(bs, &nb);
    uint32_t count = all ? 0x10000u / stride : (uint32_t)nb;
    uint64_t bad = 0, undecided = 0, pairs = 0;
    uint32_t fa = 0, fb = 0;
    uint16_t fw = 0, fg = 0;
    for (uint32_t j = 0; j < count; j++) {
        uint16_t b = all ? (uint16_t)(j * stride) : bs[j];
        for (int way = 0; way < (all && stride == 1 ? 1 : 2); way++) { /* all pairs: one order covers them */
            for (uint32_t a = 0; a < 0x10000u; a++) xs[a] = way ? b : (uint16_t)a, gs[a] = way ? (uint16_t)a : b;
            CHECK(tgrad_debug_elementwise(c->op, xs, gs, want, 0x10000) == TGRAD_OK);
            for (uint32_t a = 0; a < 0x10000u; a++) {
                got[a] = c->gpu(xs[a], gs[a]);
                if (want[a] != got[a] && bad++ == 0) fa = xs[a], fb = gs[a], fw = want[a], fg = got[a];
            }
            if (table) undecided += undecided_pairs(c, xs, gs, got);
            pairs += 0x10000u;
        }
    }
    if (table) printf("%s: %llu pairs, %llu differ from the CPU, %llu undecided\n", c->name,
                      (unsigned long long)pairs, (unsigned long long)bad, (unsigned long long)undecided);
    CHECK(undecided == 0);
    verdict(c->name, bad, fa, fb, fw, fg);
}

static void check_unary(const unary_case *c) {
    uint64_t bad = 0;
    uint32_t fa = 0;
    uint16_t fw = 0, fg = 0;
    for (uint32_t a = 0; a < 0x10000u; a++) {
        uint16_t want = c->cpu((uint16_t)a), got = c->gpu((ushort)a);
        if (want != got && bad++ == 0) fa = a, fw = want, fg = got;
    }
    verdict(c->name, bad, fa, 0, fw, fg);
}

int main(int argc, char **argv) {
    bool all = argc > 2 && strcmp(argv[1], "all") == 0;
    uint32_t stride = all ? (uint32_t)strtoul(argv[2], NULL, 10) : 1;
    const char *only = all && argc > 3 ? argv[3] : NULL; /* all S NAME: that op alone */
    if (all && stride == 0) stride = 1;
    tg_fp_env env = tg_fp_env_ieee(); /* the CPU side's fp32 arithmetic as its loops run it */
    for (size_t i = 0; i < sizeof unaries / sizeof unaries[0]; i++)
        if (!only || !strcmp(only, unaries[i].name)) check_unary(&unaries[i]);
    for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++)
        if (!only || !strcmp(only, binaries[i].name)) check_binary(&binaries[i], all, stride);
    for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++)
        if (!only || !strcmp(only, grads[i].name)) check_grad(&grads[i], all, stride);
    tg_fp_env_restore(env);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
