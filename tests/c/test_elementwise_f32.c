/* float32 elementwise ops through the C ABI (the values are proven against mpmath and exact
 * rationals in tests/python/test_elementwise_f32_reference.py):
 *  - the loops give the same bytes under a hostile floating-point environment (x86: DAZ, FTZ,
 *    round toward zero; Arm: FZ, round toward zero) as under the default one, and leave the
 *    caller's environment as it was;
 *  - tgrad_binary promotes a bf16 operand meeting a float32 one (float32 out, equal to the op on the
 *    exactly widened values), keeps bf16 with bf16, and refuses int32 before allocating anything;
 *  - a graph of float32 ops gives the same bytes with fusion on and off. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "tgrad.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static uint64_t env_get(void) { return _mm_getcsr(); }
static void env_set(uint64_t v) { _mm_setcsr((unsigned)v); }
#define ENV_HOSTILE 0xffc0u /* exceptions masked, FTZ, round toward zero, DAZ */
#elif defined(__aarch64__)
static uint64_t env_get(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return v; }
static void env_set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v) : "memory"); }
#define ENV_HOSTILE ((1u << 24) | (3u << 22)) /* FZ, round toward zero */
#else
static uint64_t env_get(void) { return 0; }
static void env_set(uint64_t v) { (void)v; }
#define ENV_HOSTILE 0
#endif

enum { N = 4096 };

static uint32_t next_bits(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*state >> 32);
}

/* Inputs where the environment matters: subnormals, values whose results are subnormal or round
 * differently toward zero, ordinary values and random bit patterns. */
static void fill(uint32_t *x, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < N; i++) {
        uint32_t r = next_bits(&s);
        switch (i % 4) {
        case 0: x[i] = r; break;                                       /* any pattern */
        case 1: x[i] = (r & 0x807fffffu); break;                       /* subnormals */
        case 2: x[i] = (r & 0x80ffffffu) | 0x3e800000u; break;         /* [0.25, 1) */
        default: { float f = -110.0f + (float)(r % 2200000u) * 1e-4f; memcpy(&x[i], &f, 4); } /* [-110, 110) */
        }
    }
}

static void loops_ignore_the_callers_environment(void) {
    static uint32_t a[N], b[N], calm[N], hostile[N];
    fill(a, 1), fill(b, 2);
    int32_t count = tgrad_op_count();
    for (tgrad_op op = 1; op <= count; op++) {
        const uint32_t *second = tgrad_op_arity(op) == 2 ? b : NULL;
        EXPECT(tgrad_debug_elementwise_f32(op, a, second, calm, N), TGRAD_OK);
        uint64_t saved = env_get();
        env_set(ENV_HOSTILE);
        tgrad_status s = tgrad_debug_elementwise_f32(op, a, second, hostile, N);
        uint64_t after = env_get();
        env_set(saved);
        EXPECT(s, TGRAD_OK);
        CHECK(after == (uint64_t)ENV_HOSTILE);
        int wrong = 0;
        for (int i = 0; i < N; i++) wrong += calm[i] != hostile[i];
        if (wrong) printf("  %s: %d of %d differ under the hostile environment\n", tgrad_op_name(op), wrong, N);
        CHECK(wrong == 0);
    }
}

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void binary_promotes_and_refuses(void) {
    float av[4] = { 1.0f, 1e-40f, -3.5f, 1.0f + 0x1p-23f };
    uint16_t bv[4] = { 0x3f80, 0x0001, 0xc060, 0x3380 }; /* bf16: 1, a subnormal, -3.5, 2^-24 */
    int64_t shape[1] = { 4 };
    tgrad_tensor_t a = 0, b = 0, ab = 0, ba = 0, bb = 0, bad = 0, idx = 0;
    EXPECT(tgrad_tensor_from_host(av, TGRAD_DTYPE_F32, 1, shape, TGRAD_DTYPE_F32, &a), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(bv, TGRAD_DTYPE_BF16, 1, shape, TGRAD_DTYPE_BF16, &b), TGRAD_OK);
    EXPECT(tgrad_binary(TGRAD_OP_ADD, a, b, &ab), TGRAD_OK);
    EXPECT(tgrad_binary(TGRAD_OP_SUB, b, a, &ba), TGRAD_OK);
    EXPECT(tgrad_binary(TGRAD_OP_MUL, b, b, &bb), TGRAD_OK);
    int32_t d = 0;
    EXPECT(tgrad_tensor_dtype(ab, &d), TGRAD_OK);
    CHECK(d == TGRAD_DTYPE_F32);
    EXPECT(tgrad_tensor_dtype(ba, &d), TGRAD_OK);
    CHECK(d == TGRAD_DTYPE_F32);
    EXPECT(tgrad_tensor_dtype(bb, &d), TGRAD_OK);
    CHECK(d == TGRAD_DTYPE_BF16);
    float sum[4], diff[4];
    EXPECT(tgrad_tensor_read(ab, sum, sizeof sum), TGRAD_OK);
    EXPECT(tgrad_tensor_read(ba, diff, sizeof diff), TGRAD_OK);
    for (int i = 0; i < 4; i++) {
        double wide = f32_of((uint32_t)bv[i] << 16); /* bf16 widens exactly */
        CHECK(sum[i] == (float)(av[i] + wide));       /* one rounding of the exact sum (double is exact here) */
        CHECK(diff[i] == (float)(wide - av[i]));
    }
    CHECK(sum[3] == 1.0f + 0x1p-22f); /* 1 + 2^-23 + 2^-24: a tie, to even (up) */
    /* refusals: int32, before anything is allocated */
    int32_t iv[4] = { 1, 2, 3, 4 };
    EXPECT(tgrad_tensor_from_host(iv, TGRAD_DTYPE_I32, 1, shape, TGRAD_DTYPE_I32, &idx), TGRAD_OK);
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_binary(TGRAD_OP_ADD, a, idx, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_binary(TGRAD_OP_ADD, idx, b, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, idx, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    int64_t other[1] = { 3 };
    tgrad_tensor_t three = 0;
    EXPECT(tgrad_tensor_from_host(bv, TGRAD_DTYPE_BF16, 1, other, TGRAD_DTYPE_BF16, &three), TGRAD_OK);
    live = tgrad_live_tensors();
    EXPECT(tgrad_binary(TGRAD_OP_ADD, a, three, &bad), TGRAD_ERR_SHAPE_MISMATCH); /* mixed: checked before the cast */
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(ab), tgrad_tensor_release(ba);
    tgrad_tensor_release(bb), tgrad_tensor_release(idx), tgrad_tensor_release(three);
}

/* y = tanh(exp(x * w) + x) / 3, realized with fusion on and off. */
static void graph_bytes(int32_t fusion, float *out, int64_t n) {
    static float xv[1000], wv[1000];
    uint64_t s = 9;
    for (int64_t i = 0; i < n; i++) {
        xv[i] = (float)(int32_t)next_bits(&s) * 0x1p-29f;
        wv[i] = (float)(int32_t)next_bits(&s) * 0x1p-30f;
    }
    int64_t shape[2] = { 10, n / 10 };
    EXPECT(tgrad_set_fusion(fusion), TGRAD_OK);
    tgrad_tensor_t x = 0, w = 0, t1 = 0, t2 = 0, t3 = 0, t4 = 0, three = 0, y = 0;
    float third = 3.0f;
    EXPECT(tgrad_tensor_from_host(xv, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &x), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(wv, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &w), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(&third, TGRAD_DTYPE_F32, 0, NULL, TGRAD_DTYPE_F32, &three), TGRAD_OK);
    EXPECT(tgrad_binary(TGRAD_OP_MUL, x, w, &t1), TGRAD_OK);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, t1, &t2), TGRAD_OK);
    tgrad_tensor_release(t1);
    EXPECT(tgrad_binary(TGRAD_OP_ADD, t2, x, &t3), TGRAD_OK);
    tgrad_tensor_release(t2);
    EXPECT(tgrad_unary(TGRAD_OP_TANH, t3, &t4), TGRAD_OK);
    tgrad_tensor_release(t3);
    EXPECT(tgrad_binary(TGRAD_OP_DIV, t4, three, &y), TGRAD_OK);
    tgrad_tensor_release(t4);
    EXPECT(tgrad_tensor_read(y, out, sizeof(float) * (size_t)n), TGRAD_OK);
    tgrad_tensor_release(x), tgrad_tensor_release(w), tgrad_tensor_release(three), tgrad_tensor_release(y);
}

static void fusion_changes_no_byte(void) {
    static float on[1000], off[1000];
    int32_t was = tgrad_fusion_enabled();
    graph_bytes(1, on, 1000);
    graph_bytes(0, off, 1000);
    EXPECT(tgrad_set_fusion(was), TGRAD_OK);
    CHECK(memcmp(on, off, sizeof on) == 0);
}

/* Promotion makes two nodes (the cast, then the op): a failed allocation at any point of either
 * leaves nothing behind (only a -Dfault_injection=true build injects). */
static void promotion_survives_failed_allocations(void) {
    float av[3] = { 1.0f, 2.0f, 3.0f };
    uint16_t bv[3] = { 0x3f80, 0x4000, 0x4040 };
    int64_t shape[1] = { 3 };
    tgrad_tensor_t a = 0, b = 0;
    EXPECT(tgrad_tensor_from_host(av, TGRAD_DTYPE_F32, 1, shape, TGRAD_DTYPE_F32, &a), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(bv, TGRAD_DTYPE_BF16, 1, shape, TGRAD_DTYPE_BF16, &b), TGRAD_OK);
    if (tgrad_debug_fail_allocation(0, NULL) == TGRAD_ERR_BACKEND_UNAVAILABLE) {
        printf("  (no fault injection in this build)\n");
    } else {
        for (int64_t nth = 1; nth <= 12; nth++) {
            int64_t live = tgrad_live_tensors(), buffers = tgrad_live_buffers();
            tgrad_tensor_t out = 0;
            EXPECT(tgrad_debug_fail_allocation(nth, NULL), TGRAD_OK);
            tgrad_status s = tgrad_binary(TGRAD_OP_MUL, b, a, &out);
            EXPECT(tgrad_debug_fail_allocation(0, NULL), TGRAD_OK);
            CHECK(s == TGRAD_OK || s == TGRAD_ERR_OUT_OF_MEMORY);
            if (s == TGRAD_OK) {
                float got[3] = { 0 };
                tgrad_status r = tgrad_tensor_read(out, got, sizeof got);
                CHECK(r == TGRAD_OK || r == TGRAD_ERR_OUT_OF_MEMORY);
                if (r == TGRAD_OK) CHECK(got[0] == 1.0f && got[1] == 4.0f && got[2] == 9.0f);
                tgrad_tensor_release(out);
            } else {
                CHECK(out == 0);
            }
            CHECK(tgrad_live_tensors() == live && tgrad_live_buffers() == buffers);
        }
    }
    tgrad_tensor_release(a), tgrad_tensor_release(b);
}

int main(void) {
    loops_ignore_the_callers_environment();
    binary_promotes_and_refuses();
    promotion_survives_failed_allocations();
    fusion_changes_no_byte();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
