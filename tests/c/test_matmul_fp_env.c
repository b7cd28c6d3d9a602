/* A product's bytes do not depend on the caller's floating-point environment: every CPU variant
 * this machine runs, both matmul orders, 1 and 2 threads and the routes (packed, few rows, one row,
 * one column, a column-major B), each run under the default environment and under hostile ones
 * (round toward zero, toward +inf, FTZ and DAZ set), through the public ABI only. The kernels must
 * install their own MXCSR (FPCR on Arm) rounding mode, not only their flush bits. Prints
 * "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static uint64_t env_get(void) { return _mm_getcsr(); }
static void env_set(uint64_t v) { _mm_setcsr((unsigned)v); }
/* exceptions masked; then: round toward zero; toward +inf; toward zero with FTZ and DAZ */
static const uint64_t hostile[] = { 0x7f80u, 0x5f80u, 0xffc0u };
#elif defined(__aarch64__)
static uint64_t env_get(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return v; }
static void env_set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v) : "memory"); }
/* RMode toward zero; toward +inf; toward zero with FZ */
static const uint64_t hostile[] = { 3u << 22, 1u << 22, (1u << 24) | (3u << 22) };
#else
static uint64_t env_get(void) { return 0; }
static void env_set(uint64_t v) { (void)v; }
static const uint64_t hostile[] = { 0 };
#endif
#define NHOSTILE ((int)(sizeof hostile / sizeof hostile[0]))

typedef struct { int64_t m, k, n; int b_cols; const char *what; } shape;

/* values whose sums round: mixed signs, exponents over a few binades */
static uint16_t value(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    uint32_t r = *seed >> 8;
    return (uint16_t)(((0x3c00u + (r % 0x700u)) ^ ((r >> 12) & 1u ? 0x8000u : 0u)) & 0xffffu);
}

/* out = a @ b (b from a [n, k] buffer transposed when b_cols), run under environment env */
static tgrad_status product(const shape *s, const uint16_t *a, const uint16_t *b, uint64_t env, uint16_t *out) {
    int64_t sa[2] = { s->m, s->k }, sb[2] = { s->b_cols ? s->n : s->k, s->b_cols ? s->k : s->n };
    tgrad_tensor_t ta = 0, tb = 0, tbt = 0, c = 0;
    tgrad_status st = tgrad_tensor_from_bf16(a, 2, sa, &ta);
    if (!st) st = tgrad_tensor_from_bf16(b, 2, sb, &tb);
    if (!st && s->b_cols) st = tgrad_tensor_transpose(tb, 0, 1, &tbt);
    uint64_t saved = env_get();
    env_set(env);
    if (!st) st = tgrad_matmul(ta, s->b_cols ? tbt : tb, &c);
    if (!st) st = tgrad_tensor_realize(c);
    env_set(saved);
    if (!st) st = tgrad_tensor_read_bf16(c, out, (size_t)(s->m * s->n));
    if (c) tgrad_tensor_release(c);
    if (tbt) tgrad_tensor_release(tbt);
    if (tb) tgrad_tensor_release(tb);
    if (ta) tgrad_tensor_release(ta);
    return st;
}

int main(void) {
    const shape shapes[] = {
        { 64, 300, 70, 0, "packed" },          { 6, 300, 70, 0, "few rows" },
        { 1, 300, 700, 0, "one row" },          { 1, 300, 700, 1, "one row, column-major B" },
        { 90, 300, 1, 0, "one column" },        { 16, 600, 96, 1, "column-major B" },
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    uint64_t ieee = env_get();
    for (int si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
        uint16_t *a = malloc(na * 2), *b = malloc(nb * 2), *want = malloc(nc * 2), *got = malloc(nc * 2);
        if (!a || !b || !want || !got) return 2;
        uint32_t seed = 12345u + (uint32_t)si;
        for (size_t i = 0; i < na; i++) a[i] = value(&seed);
        for (size_t i = 0; i < nb; i++) b[i] = value(&seed);
        for (int32_t v = 0;; v++) {
            int32_t avail = 0;
            const char *isa = tgrad_cpu_isa_name(v, &avail);
            if (!isa) break;
            if (!avail) continue;
            for (int32_t order = 0; order < 2; order++)
                for (int32_t threads = 1; threads <= 2; threads++) {
                    CHECK(tgrad_set_cpu_isa(isa) == TGRAD_OK);
                    CHECK(tgrad_set_matmul_order(order) == TGRAD_OK);
                    CHECK(tgrad_set_num_threads(threads) == TGRAD_OK);
                    CHECK(product(s, a, b, ieee, want) == TGRAD_OK);
                    for (int h = 0; h < NHOSTILE; h++) {
                        memset(got, 0, nc * 2);
                        CHECK(product(s, a, b, hostile[h], got) == TGRAD_OK);
                        size_t differ = 0;
                        for (size_t i = 0; i < nc; i++) differ += got[i] != want[i];
                        if (differ)
                            fprintf(stderr, "%s, %s order, %d threads, %s %lldx%lldx%lld: %zu of %zu outputs "
                                    "differ under environment %#llx\n", isa, order ? "block32" : "pairwise",
                                    (int)threads, s->what, (long long)s->m, (long long)s->k, (long long)s->n,
                                    differ, nc, (unsigned long long)hostile[h]);
                        CHECK(differ == 0);
                    }
                }
        }
        free(a), free(b), free(want), free(got);
    }
    CHECK(tgrad_set_cpu_isa("auto") == TGRAD_OK);
    CHECK(env_get() == ieee); /* nothing left changed */
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
