/* The GPU kernels' float32 elementwise ops (kernels/gpu/elementwise_f32.h, integers only) against
 * the CPU's (tgrad_debug_elementwise_f32: src/ops/elementwise_f32.c, double under IEEE rules): the
 * same text the renderer pastes into every float32 elementwise kernel, compiled here as C, must
 * give the CPU's bytes.
 *   test_gpu_elementwise_f32          unary ops on every 509th input and every special; binary
 *                                     ops on the specials against each other, then 2^21 pairs
 *                                     drawn to reach every path: exponents a few binades apart
 *                                     (cancellation, the sticky alignment), subnormal operands
 *                                     and results, overflow, quotients and products at the
 *                                     rounding ties' neighbours
 *   test_gpu_elementwise_f32 all      unary ops on every input, 2^26 pairs per binary op
 *                                     (suite long)
 * Prints "N passed, N failed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef uint32_t uint;
typedef uint64_t tg_u64;
#define clz(x) ((uint)__builtin_clz(x))
#include "../../kernels/gpu/elementwise_f32.h"
#undef clz

typedef struct {
    const char *name;
    tgrad_op op;
    uint (*gpu)(uint, uint);
} binary_case;

static const binary_case binaries[] = {
    { "add", TGRAD_OP_ADD, tg_f32_add },         { "sub", TGRAD_OP_SUB, tg_f32_sub },
    { "mul", TGRAD_OP_MUL, tg_f32_mul },         { "div", TGRAD_OP_DIV, tg_f32_div },
    { "maximum", TGRAD_OP_MAXIMUM, tg_f32_maximum }, { "minimum", TGRAD_OP_MINIMUM, tg_f32_minimum },
    { "relu_backward", TGRAD_OP_RELU_BACKWARD, tg_f32_relu_backward },
};

typedef struct {
    const char *name;
    tgrad_op op;
    uint (*gpu)(uint);
} unary_case;

static const unary_case unaries[] = {
    { "relu", TGRAD_OP_RELU, tg_f32_relu }, { "neg", TGRAD_OP_NEG, tg_f32_neg },
    { "abs", TGRAD_OP_ABS, tg_f32_abs },    { "square", TGRAD_OP_SQUARE, tg_f32_square },
    { "sqrt", TGRAD_OP_SQRT, tg_f32_sqrt }, { "rsqrt", TGRAD_OP_RSQRT, tg_f32_rsqrt },
};

static const uint32_t specials[] = {
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000002, 0x007fffff, 0x807fffff, 0x00800000, 0x80800000,
    0x00800001, 0x00ffffff, 0x3f800000, 0xbf800000, 0x3f800001, 0x3f7fffff, 0x3fffffff, 0x40000000, 0x7f7fffff,
    0xff7fffff, 0x7f000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x01000000,
    0x0d800000, 0x34000000, 0x33800000, 0x4b000000, 0x4b800000, 0x5f800000, 0x1f800000, 0x20000000, 0x3effffff,
    0x3f000000, 0x3f000001, 0x00400000, 0x00000003, 0x4f800000, 0x2f800000,
};
enum { NSPECIAL = sizeof specials / sizeof specials[0], BATCH = 4096 };

static uint64_t state = 0x9e3779b97f4a7c15u;
static uint32_t next32(void) { /* xorshift64* */
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return (uint32_t)((state * 0x2545f4914f6cdd1du) >> 32);
}

/* A random float of a random sign and fraction whose biased exponent is `e` (0 .. 255). */
static uint32_t with_exp(uint32_t e) { return (next32() & 0x807fffffu) | (e << 23); }

/* A pair drawn to reach one path (k cycles through them). */
static void draw_pair(uint32_t k, uint32_t *a, uint32_t *b) {
    uint32_t r = next32();
    switch (k % 8) {
    case 0: *a = r, *b = next32(); break;                                   /* anything, NaNs and infs too */
    case 1: *a = with_exp(1 + r % 254), *b = with_exp(1 + (r % 254 + next32() % 40) % 254); break; /* near binades */
    case 2: *a = with_exp(r % 3), *b = with_exp(next32() % 3); break;        /* subnormal operands */
    case 3: *a = with_exp(64 + r % 16), *b = with_exp(48 + next32() % 16); break; /* products near underflow */
    case 4: *a = with_exp(190 + r % 40), *b = with_exp(100 + next32() % 30); break; /* quotients near overflow */
    case 5: *a = with_exp(127 + r % 4), *b = *a ^ 0x80000000u ^ (next32() & 7u); break; /* cancellation */
    case 6: *a = with_exp(1 + r % 30), *b = with_exp(1 + next32() % 30) ^ ((r >> 8) & 0x80000000u); break; /* sums near 0 */
    default: *a = specials[r % NSPECIAL], *b = with_exp(next32() % 256); break;
    }
}

/* Report the first mismatch of one op, and count the op once. */
static void verdict(const char *name, uint64_t bad, uint32_t a, uint32_t b, uint32_t want, uint32_t got) {
    if (bad) fprintf(stderr, "FAIL %s: %llu mismatches, first %08x, %08x: cpu %08x gpu %08x\n", name,
                     (unsigned long long)bad, a, b, want, got);
    CHECK(bad == 0);
}

typedef struct {
    uint64_t bad;
    uint32_t a, b, want, got;
} tally;

static void compare(tally *t, uint32_t a, uint32_t b, uint32_t want, uint32_t got) {
    if (want != got && t->bad++ == 0) t->a = a, t->b = b, t->want = want, t->got = got;
}

static void binary_batch(const binary_case *c, const uint32_t *a, const uint32_t *b, int n, tally *t) {
    uint32_t want[BATCH];
    CHECK(tgrad_debug_elementwise_f32(c->op, a, b, want, n) == TGRAD_OK);
    for (int i = 0; i < n; i++) compare(t, a[i], b[i], want[i], c->gpu(a[i], b[i]));
}

static void check_binary(const binary_case *c, uint64_t pairs) {
    static uint32_t a[BATCH], b[BATCH];
    tally t = { 0 };
    int n = 0;
    for (int i = 0; i < NSPECIAL; i++)
        for (int j = 0; j < NSPECIAL; j++) a[n] = specials[i], b[n++] = specials[j];
    binary_batch(c, a, b, n, &t);
    for (uint64_t done = 0; done < pairs; done += BATCH) {
        for (int i = 0; i < BATCH; i++) draw_pair((uint32_t)i, &a[i], &b[i]);
        binary_batch(c, a, b, BATCH, &t);
    }
    verdict(c->name, t.bad, t.a, t.b, t.want, t.got);
}

static void unary_batch(const unary_case *c, const uint32_t *x, int n, tally *t) {
    uint32_t want[BATCH];
    CHECK(tgrad_debug_elementwise_f32(c->op, x, NULL, want, n) == TGRAD_OK);
    for (int i = 0; i < n; i++) compare(t, x[i], 0, want[i], c->gpu(x[i]));
}

static void check_unary(const unary_case *c, uint32_t stride) {
    static uint32_t x[BATCH];
    tally t = { 0 };
    unary_batch(c, specials, NSPECIAL, &t);
    int n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride) {
        x[n++] = (uint32_t)u;
        if (n == BATCH) unary_batch(c, x, n, &t), n = 0;
    }
    unary_batch(c, x, n, &t);
    verdict(c->name, t.bad, t.a, 0, t.want, t.got);
}

int main(int argc, char **argv) {
    /* `all [STRIDE]`: every STRIDE-th unary input (default 1: all 2^32, about 3.5 minutes of one
     * core), and 2^26 drawn pairs per binary op */
    bool all = argc > 1 && strcmp(argv[1], "all") == 0;
    uint32_t stride = all ? (argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1u) : 509u;
    if (stride == 0) stride = 1;
    for (size_t i = 0; i < sizeof unaries / sizeof unaries[0]; i++) check_unary(&unaries[i], stride);
    for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++) check_binary(&binaries[i], all ? 1u << 26 : 1u << 21);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
