/* The GPU kernels' exact reductions (kernels/gpu/reduce.h, the text every rendered reduction
 * carries) compiled as C against the CPU engine (tgrad_debug_exact_sum, tgrad_debug_extrema):
 * adversarial rows (cancellation, subnormals, sums that overflow, NaN/inf mixes, -0 and ties) in
 * bf16 and float32, each split over 1 to 64 "threads" whose partial results combine in a shuffled
 * order, must give the CPU's bytes for sum and mean (bf16 and float32 outputs) and for the
 * extrema's value and index. Prints "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef uint16_t ushort;
typedef uint32_t uint;
typedef uint64_t tg_u64;
#define clz(x) ((uint)__builtin_clz(x))
#include "../../kernels/gpu/reduce.h"
#undef clz

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* One value of a row of flavour f, as float32 bits (bf16 rows keep the top 16 bits). */
static uint32_t value(int f, uint32_t big) {
    uint32_t r = next(), sign = (next() & 1u) << 31;
    switch (f) {
    case 0: return r;                                             /* any bits: NaN, inf, subnormals */
    case 1: return sign | ((next() % 20u + 110u) << 23) | (r & 0x7fffffu); /* near 1 */
    case 2: return sign | (r & 0x807fffffu);                      /* subnormals and zeros */
    case 3: return next() % 4 ? big ^ (next() % 2 ? 0x80000000u : 0) : sign | (r & 0x3f7fffffu); /* cancellation */
    case 4: return sign | 0x7f000000u | (r & 0x7fffffu);          /* overflow */
    case 5: return next() % 3 ? 0x80000000u : (next() % 2 ? 0 : 0x3f800000u); /* -0, +0, ties of 1 */
    default: return (uint32_t[]){ 0x7f800000u, 0xff800000u, 0x7fc00001u, 0x3f800000u, 0x80000000u }[next() % 5];
    }
}

static void check_row(const uint32_t *f32, const uint16_t *b16, int bf16, int n) {
    int threads = 1 + (int)(next() % 64u);
    tg_acc acc[64];
    tg_ext ext[2][64];
    for (int t = 0; t < threads; t++) {
        acc[t] = tg_acc_zero();
        ext[0][t] = ext[1][t] = tg_ext_none();
        for (int j = t; j < n; j += threads) { /* thread t's elements, as the kernels stride */
            uint b = bf16 ? (uint)b16[j] << 16 : f32[j];
            acc[t] = tg_acc_add(acc[t], b);
            for (int mx = 0; mx < 2; mx++) ext[mx][t] = tg_ext_pick(ext[mx][t], tg_ext_of(b, j), (uint)mx);
        }
    }
    int order[64];
    for (int t = 0; t < threads; t++) order[t] = t;
    for (int t = threads - 1; t > 0; t--) {
        int u = (int)(next() % (uint32_t)(t + 1)), k = order[t];
        order[t] = order[u], order[u] = k;
    }
    tg_acc all = acc[order[0]];
    tg_ext best[2] = { ext[0][order[0]], ext[1][order[0]] };
    for (int t = 1; t < threads; t++) {
        all = tg_acc_merge(all, acc[order[t]]);
        for (int mx = 0; mx < 2; mx++) best[mx] = tg_ext_pick(best[mx], ext[mx][order[t]], (uint)mx);
    }
    const void *data = bf16 ? (const void *)b16 : (const void *)f32;
    for (int mean = 0; mean < 2; mean++)
        for (int out = 0; out < 2; out++) {
            uint32_t want = 0;
            EXPECT(tgrad_debug_exact_sum(data, bf16 ? 1 : 2, n, 1, mean, out ? 2 : 1, &want), TGRAD_OK);
            uint got = tg_acc_round(all, mean ? (uint)n : 1u, out == 0);
            if (got != want) fprintf(stderr, "bf16=%d n=%d mean=%d out=%d: got %08x, want %08x\n", bf16, n, mean, out, got, want);
            CHECK(got == want);
        }
    for (int mx = 0; mx < 2 && n > 0; mx++) {
        uint32_t want = 0;
        int64_t index = -1;
        EXPECT(tgrad_debug_extrema(data, bf16 ? 1 : 2, n, 1, mx, &want, &index), TGRAD_OK);
        uint got = bf16 ? best[mx].bits >> 16 : best[mx].bits;
        CHECK(best[mx].state != 0u && got == want && best[mx].index == index);
    }
}

int main(void) {
    enum { MAXN = 3000 };
    static uint32_t f32[MAXN];
    static uint16_t b16[MAXN];
    for (int row = 0; row < 3000; row++) {
        int f = row % 7, n = row % 50 == 0 ? (int)(next() % MAXN) : (int)(next() % 40u);
        uint32_t big = ((next() % 100u + 150u) << 23) | (next() & 0x7fffffu);
        for (int i = 0; i < n; i++) {
            f32[i] = value(f, big);
            b16[i] = (uint16_t)(value(f, big) >> 16);
        }
        check_row(f32, b16, 0, n);
        check_row(f32, b16, 1, n);
    }
    /* 1e30 + 1 - 1e30 in float32, and the mean of 3 values that is a tie only in exact arithmetic */
    uint32_t cancel[3] = { 0x7149f2cau, 0x3f800000u, 0xf149f2cau };
    check_row(cancel, (uint16_t[]){ 0x7149, 0x3f80, 0xf149 }, 0, 3);
    check_row(cancel, (uint16_t[]){ 0x7149, 0x3f80, 0xf149 }, 1, 3);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
