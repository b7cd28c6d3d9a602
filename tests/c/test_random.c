/* The random kind (tgrad_random; docs/random.md): Philox-4x32-10 against Random123's published
 * known answers, element i a function of (seed, offset + i) alone (the same bytes for 1, 2 and 3
 * threads, and a draw equal to two draws at the offsets that continue it), randint's range, and
 * the refusals (each before anything is allocated). Prints "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* Random123 1.14, kat_vectors: "philox4x32 10 <counter x4> <key x2> <output x4>". */
static void philox_known_answers(void) {
    static const uint32_t kat[3][10] = {
        { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
          0x6d5451fd },
        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
          0x24126ea1 },
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4] = { 0 };
        EXPECT(tgrad_debug_philox(kat[i], kat[i] + 4, out), TGRAD_OK);
        CHECK(memcmp(out, kat[i] + 6, sizeof out) == 0);
    }
    EXPECT(tgrad_debug_philox(NULL, kat[0], (uint32_t[4]){ 0 }), TGRAD_ERR_INVALID_ARGUMENT);
}

/* Draw n values of dist at (seed, offset) into dst (4-byte or 2-byte elements). */
static void draw(int32_t dist, uint64_t seed, uint64_t offset, int64_t n, int32_t dtype, double p0, double p1, void *dst) {
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_random(dist, seed, offset, 1, &n, dtype, p0, p1, TGRAD_DEVICE_CPU, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_read(t, dst, (size_t)n * (size_t)tgrad_dtype_size(dtype)), TGRAD_OK);
    tgrad_tensor_release(t);
}

enum { N = 100003 }; /* several tasks of the executor, and an odd tail */
static uint32_t a[N], b[N];

static void element_depends_on_its_counter_only(void) {
    static const struct { int32_t dist, dtype; double p0, p1; } cases[] = {
        { TGRAD_RANDOM_UNIFORM, TGRAD_DTYPE_F32, 0, 1 },  { TGRAD_RANDOM_UNIFORM, TGRAD_DTYPE_F32, -3, 0.1 },
        { TGRAD_RANDOM_NORMAL, TGRAD_DTYPE_F32, 0, 1 },   { TGRAD_RANDOM_NORMAL, TGRAD_DTYPE_F32, 5, 0.25 },
        { TGRAD_RANDOM_RANDINT, TGRAD_DTYPE_I32, -7, 1000 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t threads0 = tgrad_num_threads(), dist = cases[c].dist, dt = cases[c].dtype;
        double p0 = cases[c].p0, p1 = cases[c].p1;
        EXPECT(tgrad_set_num_threads(1), TGRAD_OK);
        draw(dist, 42, 5, N, dt, p0, p1, a);
        for (int32_t threads = 2; threads <= 3; threads++) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            draw(dist, 42, 5, N, dt, p0, p1, b);
            CHECK(memcmp(a, b, sizeof a) == 0);
        }
        /* the same elements as two draws: [5, 5 + 1001) then [5 + 1001, 5 + N) */
        draw(dist, 42, 5, 1001, dt, p0, p1, b);
        draw(dist, 42, 5 + 1001, N - 1001, dt, p0, p1, b + 1001);
        CHECK(memcmp(a, b, sizeof a) == 0);
        /* another seed, another offset: other values */
        draw(dist, 43, 5, N, dt, p0, p1, b);
        CHECK(memcmp(a, b, sizeof a) != 0);
        draw(dist, 42, 6, N, dt, p0, p1, b);
        CHECK(memcmp(a, b, sizeof a) != 0 && memcmp(a + 1, b, sizeof a - sizeof a[0]) == 0);
        EXPECT(tgrad_set_num_threads(threads0), TGRAD_OK);
    }
}

static void values_in_range(void) {
    draw(TGRAD_RANDOM_RANDINT, 7, 0, N, TGRAD_DTYPE_I32, -3, 4, a);
    int32_t lo = 99, hi = -99, seen[7] = { 0 };
    for (int i = 0; i < N; i++) {
        int32_t v = (int32_t)a[i];
        lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        if (v >= -3 && v < 4) seen[v + 3] = 1;
    }
    CHECK(lo == -3 && hi == 3);
    for (int i = 0; i < 7; i++) CHECK(seen[i]);
    draw(TGRAD_RANDOM_RANDINT, 7, 0, N, TGRAD_DTYPE_I32, -2147483648.0, 2147483647.0, a); /* the widest range */
    draw(TGRAD_RANDOM_UNIFORM, 7, 0, N, TGRAD_DTYPE_F32, 0, 1, a);
    float f[N];
    memcpy(f, a, sizeof f);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= f[i] >= 0.0f && f[i] < 1.0f;
    CHECK(ok);
    uint16_t h[N];
    draw(TGRAD_RANDOM_UNIFORM, 7, 0, N, TGRAD_DTYPE_BF16, 0, 1, h);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= h[i] < 0x3f80u; /* [0, 1): +0 up to 1 - 2^-8 */
    CHECK(ok);
}

static void refusals(void) {
    int64_t live = tgrad_live_tensors(), shape[2] = { 3, 4 }, neg[1] = { -1 };
    tgrad_tensor_t t = 0;
    const int32_t cpu = TGRAD_DEVICE_CPU;
    EXPECT(tgrad_random(0, 1, 0, 2, shape, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_END_, 1, 0, 2, shape, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, shape, 0, 0, 1, cpu, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, NULL, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 1, neg, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 9, shape, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, shape, TGRAD_DTYPE_I32, 0, 1, cpu, &t), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_random(TGRAD_RANDOM_RANDINT, 1, 0, 2, shape, TGRAD_DTYPE_F32, 0, 1, cpu, &t), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, shape, 0, 1, 0, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, shape, 0, -1e308, 1e308, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_NORMAL, 1, 0, 2, shape, 0, 0, -1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_NORMAL, 1, 0, 2, shape, 0, 0.0 / 0.0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_RANDINT, 1, 0, 2, shape, 0, 5, 5, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_RANDINT, 1, 0, 2, shape, 0, 0.5, 5, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_RANDINT, 1, 0, 2, shape, 0, -2147483648.0, 2147483648.0, cpu, &t),
           TGRAD_ERR_INVALID_ARGUMENT); /* 2^32 values */
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, UINT64_MAX - 5, 2, shape, 0, 0, 1, cpu, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 2, shape, 0, 0, 1, 17, &t), TGRAD_ERR_INVALID_ARGUMENT);
    /* GPU devices draw every distribution (gen/render_random.c; on Metal too: test_device_stub.c) */
    CHECK(t == 0 && tgrad_live_tensors() == live);
    CHECK(strcmp(tgrad_random_name(TGRAD_RANDOM_NORMAL), "normal") == 0);
    CHECK(strcmp(tgrad_random_name(99), "unknown_random") == 0);
    int64_t counts[2];
    EXPECT(tgrad_debug_random_slow_path(TGRAD_RANDOM_NORMAL, counts, 2), TGRAD_OK);
    EXPECT(tgrad_debug_random_slow_path(0, counts, 2), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_random_slow_path(TGRAD_RANDOM_NORMAL, counts, 3), TGRAD_ERR_INVALID_ARGUMENT);
    /* an empty draw at the very end of the counter space is fine */
    int64_t zero = 0;
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, UINT64_MAX, 1, &zero, 0, 0, 1, cpu, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(t), TGRAD_OK);
    tgrad_tensor_release(t);
}

/* Allocation failures (a -Dfault_injection=true build): every allocation of a draw and its
 * realize fails in turn with a clean TGRAD_ERR_OUT_OF_MEMORY and nothing left behind. */
static void allocation_failures(void) {
    int64_t fired = 0, shape[1] = { 40000 };
    if (tgrad_debug_fail_allocation(0, &fired) == TGRAD_ERR_BACKEND_UNAVAILABLE) return;
    int64_t tensors = tgrad_live_tensors(), buffers = tgrad_live_buffers();
    for (int64_t n = 1; n < 100; n++) {
        int64_t before = 0, after = 0;
        tgrad_tensor_t t = 0;
        tgrad_debug_fail_allocation(n, &before);
        tgrad_status s = tgrad_random(TGRAD_RANDOM_NORMAL, 3, 0, 1, shape, TGRAD_DTYPE_F32, 0, 1, TGRAD_DEVICE_CPU, &t);
        if (!s) s = tgrad_tensor_realize(t);
        tgrad_debug_fail_allocation(0, &after);
        tgrad_tensor_release(t);
        if (after == before) { /* every allocation was tried */
            CHECK(s == TGRAD_OK && n > 2);
            break;
        }
        CHECK(s == TGRAD_ERR_OUT_OF_MEMORY);
        tgrad_release_cached();
        CHECK(tgrad_live_tensors() == tensors && tgrad_live_buffers() == buffers);
    }
}

int main(void) {
    philox_known_answers();
    element_depends_on_its_counter_only();
    values_in_range();
    refusals();
    allocation_failures();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
