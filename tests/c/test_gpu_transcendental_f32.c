/* The GPU kernels' float32 transcendental and derivative ops and pow (kernels/gpu/transcendental_f32.h
 * and derivatives_pow.h, binary64 with a bound) against the CPU's (tgrad_debug_elementwise_f32: src/ops/elementwise_f32.c, Ziv's
 * strategy): the same text the renderer pastes into every float32 kernel of exp, log, log1p, sin,
 * cos, tanh, sigmoid, silu and gelu_tanh, compiled here as C on the host's doubles (the mapping
 * OpenCL C and CUDA use, libtgrad/src/gen/lang.c: the device's log, log1p, sin and cos are libm's
 * here), and, built with -DTG_SOFTMATH, with kernels/gpu/softmath.h's log, log1p, sin and cos
 * (MSL's, whose software double gives these bits: tests/c/test_gpu_softdouble.c). Every element
 * the text decides must be the CPU's float32; the undecided ones (the host reruns them) must be
 * rare among the sample's ordinary inputs (normal, |x| <= 2^20, results out of float32's
 * subnormal range), where a bound too loose would send work to the host.
 * The derivative ops (sigmoid's, tanh's, rsqrt's, sqrt's, silu's and gelu_tanh's: x or y, then
 * g) the same way, each x with a drawn g, and pow (the base, then a drawn exponent), and bf16
 * pow: every base against drawn exponents (16; all: 4096 / S + 1).
 *   test_gpu_transcendental_f32          every 1021st input of each op (every 4084th x of each
 *                                        derivative op), 2^16 consecutive inputs around each
 *                                        op's thresholds, the specials (3 s a mapping)
 *   test_gpu_transcendental_f32 all [S]  every S-th input (default 1: every float32; 15 ops,
 *                                        some 80 minutes of one core a mapping; S = 61, the
 *                                        suite long: 2 minutes)
 * Build with -ffp-contract=off and -lm. Prints "N passed, N failed". */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "float_bits.h"

typedef uint32_t uint;
typedef uint64_t tg_u64;
typedef int64_t tg_i64;

/* A tg_dk whose literal is not its bits: counted where evaluated. */
static int dk_bad;
static double dk_checked(double v, uint64_t b) {
    dk_bad += bits_of(v) != b;
    return v;
}

/* The native mapping (libtgrad/src/gen/lang.c's TG_NATIVE_F64_API). */
#include "native_f64.h"
#define tg_dk(v, b) dk_checked(v, b)
#define tg_d_of(u) double_of(u)
#define tg_d_bits(d) bits_of(d)
#define tg_d_f32(u) ((double)float_of(u))
#define tg_f32_d(d) float_bits((float)(d))
#ifdef TG_SOFTMATH
#include "../../kernels/gpu/softmath.h" /* tg_dm_log1p, tg_dm_log, tg_dm_sin, tg_dm_cos: MSL's */
#define MAPPING "softmath.h"
#else
#define tg_dm_log1p(x) log1p(x)
#define tg_dm_log(x) log(x)
#define tg_dm_sin(x) sin(x)
#define tg_dm_cos(x) cos(x)
#define MAPPING "libm"
#endif
#include "../../kernels/gpu/softmax.h"
#include "../../kernels/gpu/transcendental_f32.h"
#include "../../kernels/gpu/derivatives_pow.h"

typedef struct {
    const char *name;
    tgrad_op op;
    tg_u64 (*gpu)(uint);
    float around[4]; /* thresholds of the op's paths, searched densely (0: none) */
} op_case;

static const op_case ops[] = {
    { "exp", TGRAD_OP_EXP, tg_tf_exp, { 88.72f, -87.3f, -103.9f, 1e-3f } },
    { "log", TGRAD_OP_LOG, tg_tf_log, { 1.0f, 2.0f, 0.5f, 1e-38f } },
    { "log1p", TGRAD_OP_LOG1P, tg_tf_log1p, { -0.29f, 0.41f, -1.0f, 1e-5f } },
    { "sin", TGRAD_OP_SIN, tg_tf_sin, { 0.75f, 3.14159274f, 1e-4f, 1e5f } },
    { "cos", TGRAD_OP_COS, tg_tf_cos, { 0.75f, 1.57079637f, 1e-4f, 1e5f } },
    { "tanh", TGRAD_OP_TANH, tg_tf_tanh, { 0.0625f, -0.0625f, 9.0f, 1e-4f } },
    { "sigmoid", TGRAD_OP_SIGMOID, tg_tf_sigmoid, { 0.0f, -103.9f, -30.0f, 17.0f } },
    { "silu", TGRAD_OP_SILU, tg_tf_silu, { -120.0f, -87.0f, 1e-30f, -1e-30f } },
    { "gelu_tanh", TGRAD_OP_GELU_TANH, tg_tf_gelu_tanh, { -12.0f, -9.0f, 1e-30f, 3.0f } },
    { "gelu", TGRAD_OP_GELU, tg_tf_gelu, { -15.0f, -2.1213203f, 2.1213203f, -0.75f } },
};

typedef struct {
    uint64_t seen, bad, undecided, ordinary, ordinary_undecided;
    uint x, want, got;
} tally;

enum { BATCH = 4096 };

/* Ordinary: a normal float32 of magnitude at most 2^20 whose result is not a float32 subnormal
 * (the CPU's result, want, which the host gives where the kernel leaves one undecided). */
static bool ordinary(uint x, uint want) {
    uint e = (x >> 23) & 0xffu, w = want & 0x7fffffffu;
    return e != 0u && e <= 127u + 20u && (w == 0u || w >= 0x00800000u);
}

/* An op's line and checks: every decided element the CPU's; of the sample's ordinary ones (seen,
 * open of them undecided), fewer than one in a thousand left to the host. */
static void verdict(const char *name, const tally *t, uint64_t seen, uint64_t open) {
    double share = seen ? (double)open / (double)seen : 0;
    printf("%-18s %s: %llu inputs, %llu undecided (of the sample's %llu ordinary ones %llu: %.2g)%s\n", name, MAPPING,
           (unsigned long long)t->seen, (unsigned long long)t->undecided, (unsigned long long)seen,
           (unsigned long long)open, share, t->bad ? "" : ", every decided one the CPU's");
    if (t->bad)
        fprintf(stderr, "FAIL %s (%s): %llu decided differently, first x %08x: cpu %08x gpu %08x\n", name, MAPPING,
                (unsigned long long)t->bad, t->x, t->want, t->got);
    CHECK(t->bad == 0);
    CHECK(share < 1e-3); /* the bound decides almost every ordinary input */
}

static void batch(const op_case *c, const uint *x, int n, tally *t) {
    uint want[BATCH];
    CHECK(tgrad_debug_elementwise_f32(c->op, x, NULL, want, n) == TGRAD_OK);
    for (int i = 0; i < n; i++) {
        tg_u64 r = c->gpu(x[i]);
        bool open = (r >> 32) != 0u, o = ordinary(x[i], want[i]);
        t->seen++, t->ordinary += o;
        if (open) {
            t->undecided++, t->ordinary_undecided += o;
        } else if ((uint)r != want[i] && t->bad++ == 0) {
            t->x = x[i], t->want = want[i], t->got = (uint)r;
        }
    }
}

static const uint specials[] = {
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x80800000, 0x00800001, 0x3f800000,
    0xbf800000, 0x3f800001, 0x3f7fffff, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00123,
    0x7f800001, 0x3d800000, 0xbd800000, 0x3d7fffff, 0xbd7fffff, 0x3f400000, 0xbf400000, 0xc2f00000, 0xc2f00001,
    0xc1400000, 0xc1400001, 0x42b17218, 0x42b17217, 0xc2cff1b5, 0x4f800000, 0x4f800001, 0xbf800001, 0xbf7fffff,
};

/* The op on every stride-th input, the specials and 2^16 inputs around each threshold. */
static void check_op(const op_case *c, uint64_t stride) {
    static uint x[BATCH];
    tally t = { 0 };
    batch(c, specials, (int)(sizeof specials / sizeof specials[0]), &t);
    int n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride) {
        x[n++] = (uint)u;
        if (n == BATCH) batch(c, x, n, &t), n = 0;
    }
    batch(c, x, n, &t), n = 0;
    const uint64_t ordinary_seen = t.ordinary, ordinary_open = t.ordinary_undecided; /* the sample's */
    for (int k = 0; k < 4; k++) {
        uint mid = float_bits(c->around[k]);
        for (uint d = 0; d < 65536u; d++) {
            x[n++] = mid - 32768u + d;
            if (n == BATCH) batch(c, x, n, &t), n = 0;
        }
    }
    batch(c, x, n, &t);
    verdict(c->name, &t, ordinary_seen, ordinary_open);
}

/* ---- the derivative ops: (x or y, g) ---------------------------------------------------------- */
typedef struct {
    const char *name;
    tgrad_op op;
    tg_u64 (*gpu)(uint, uint);
    float around[2]; /* thresholds of x searched densely (gelu_tanh's and silu's zero of f') */
} grad_case;

static const grad_case grads[] = {
    { "sigmoid_backward", TGRAD_OP_SIGMOID_BACKWARD, tg_tf_sigmoid_backward, { 1.0f, 0.5f } },
    { "tanh_backward", TGRAD_OP_TANH_BACKWARD, tg_tf_tanh_backward, { 1.0f, -1.0f } },
    { "rsqrt_backward", TGRAD_OP_RSQRT_BACKWARD, tg_tf_rsqrt_backward, { 1.0f, 1e-20f } },
    { "sqrt_backward", TGRAD_OP_SQRT_BACKWARD, tg_tf_sqrt_backward, { 1.0f, 1e30f } },
    { "silu_backward", TGRAD_OP_SILU_BACKWARD, tg_tf_silu_backward, { -1.27846456f, -30.0f } },
    { "gelu_tanh_backward", TGRAD_OP_GELU_TANH_BACKWARD, tg_tf_gelu_tanh_backward, { -0.7517916f, -5.0f } },
    { "gelu_backward", TGRAD_OP_GELU_BACKWARD, tg_tf_gelu_backward, { -0.7517916f, -2.1213203f } },
    { "pow", TGRAD_OP_POW, tg_tf_pow, { 1.0f, -2.0f } }, /* x the base, g the exponent (draw_b) */
};

static uint64_t state = 0x9e3779b97f4a7c15u;
static uint next32(void) { /* xorshift64* */
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return (uint)((state * 0x2545f4914f6cdd1du) >> 32);
}

/* A cotangent: any pattern one time in four, else a normal float of a moderate exponent. */
static uint draw_g(void) {
    uint r = next32();
    return (r & 3u) == 0u ? next32() : ((next32() & 0x807fffffu) | ((100u + r % 56u) << 23));
}

/* pow's exponent: a small integer (even or odd, either sign), a half, a value of a moderate or a
 * large exponent, or any pattern. */
static uint draw_b(void) {
    uint r = next32(), k = next32();
    switch (r % 5u) {
    case 0: return float_bits((float)((int)(k % 17u) - 8));
    case 1: return float_bits((float)((int)(k % 17u) - 8) * 0.5f);
    case 2: return (k & 0x807fffffu) | ((120u + r % 12u) << 23);
    case 3: return (k & 0x807fffffu) | ((127u + r % 30u) << 23);
    default: return k;
    }
}

static uint draw_second(const grad_case *c) { return c->op == TGRAD_OP_POW ? draw_b() : draw_g(); }

static void grad_batch(const grad_case *c, const uint *x, const uint *g, int n, tally *t) {
    uint want[BATCH];
    CHECK(tgrad_debug_elementwise_f32(c->op, x, g, want, n) == TGRAD_OK);
    for (int i = 0; i < n; i++) {
        tg_u64 r = c->gpu(x[i], g[i]);
        uint w = want[i] & 0x7fffffffu; /* a zero, subnormal or infinite result is the host's too */
        bool open = (r >> 32) != 0u, o = ordinary(x[i], want[i]) && ordinary(g[i], want[i]) && w > 0x00800000u &&
                                         w < 0x7f800000u;
        t->seen++, t->ordinary += o;
        if (open) {
            t->undecided++, t->ordinary_undecided += o;
        } else if ((uint)r != want[i] && t->bad++ == 0) {
            t->x = x[i], t->want = want[i], t->got = (uint)r;
        }
    }
}

/* The op on every stride-th x with a drawn g each, and 2^16 x around each threshold. */
static void check_grad(const grad_case *c, uint64_t stride) {
    static uint x[BATCH], g[BATCH];
    tally t = { 0 };
    int n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride) {
        x[n] = (uint)u, g[n++] = draw_second(c);
        if (n == BATCH) grad_batch(c, x, g, n, &t), n = 0;
    }
    grad_batch(c, x, g, n, &t), n = 0;
    const uint64_t ordinary_seen = t.ordinary, ordinary_open = t.ordinary_undecided;
    for (int k = 0; k < 2; k++) {
        uint mid = float_bits(c->around[k]);
        for (uint d = 0; d < 65536u; d++) {
            x[n] = mid - 32768u + d, g[n++] = draw_second(c);
            if (n == BATCH) grad_batch(c, x, g, n, &t), n = 0;
        }
    }
    grad_batch(c, x, g, n, &t);
    verdict(c->name, &t, ordinary_seen, ordinary_open);
}

/* bf16 pow (tg_tf_pow_bf16): every base against `per` drawn exponents (bf16 bits), against the
 * CPU's bf16 pow (tgrad_debug_elementwise). */
static void check_pow_bf16(int per) {
    static uint16_t a[BATCH], b[BATCH], want[BATCH];
    tally t = { 0 };
    int n = 0;
    for (uint32_t base = 0; base < 65536u; base++) {
        for (int k = 0; k < per; k++) {
            a[n] = (uint16_t)base, b[n++] = (uint16_t)(draw_b() >> 16);
            if (n < BATCH && !(base == 65535u && k == per - 1)) continue;
            CHECK(tgrad_debug_elementwise(TGRAD_OP_POW, a, b, want, n) == TGRAD_OK);
            for (int i = 0; i < n; i++) {
                tg_u64 r = tg_tf_pow_bf16(a[i], b[i]);
                uint w = want[i] & 0x7fffu;
                bool o = ordinary((uint)a[i] << 16, (uint)want[i] << 16) && ordinary((uint)b[i] << 16, 0x3f800000u) &&
                         w > 0x0080u && w < 0x7f80u;
                t.seen++, t.ordinary += o;
                if ((r >> 32) != 0u) t.undecided++, t.ordinary_undecided += o;
                else if ((uint16_t)r != want[i] && t.bad++ == 0) t.x = a[i], t.want = want[i], t.got = (uint16_t)r;
            }
            n = 0;
        }
    }
    verdict("pow (bf16)", &t, t.ordinary, t.ordinary_undecided);
}

int main(int argc, char **argv) {
    bool all = argc > 1 && strcmp(argv[1], "all") == 0;
    uint64_t stride = all ? (argc > 2 ? strtoull(argv[2], NULL, 10) : 1) : 1021;
    if (stride < 1) stride = 1;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) check_op(&ops[i], stride);
    for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++) check_grad(&grads[i], all ? stride : 4 * stride);
    check_pow_bf16(all ? (int)(4096 / stride + 1) : 16);
    if (dk_bad) fprintf(stderr, "FAIL: %d tg_dk evaluations whose literal is not their bits\n", dk_bad);
    CHECK(dk_bad == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
