/* The GPU optimizer kernels' fused multiply-add (kernels/gpu/optim.h's tg_f32_fma, integers only)
 * against the C library's fmaf (IEEE's fusedMultiplyAdd, one rounding): the same text the renderer
 * pastes into every optim_step kernel, compiled here as C. Every triple of special values, then
 * 2^22 triples drawn to reach every path: a product and an addend a few binades apart (the sticky
 * alignment), exact and near cancellation, halfway products decided by a far smaller addend, subnormal operands, products and results, overflow,
 * addends far above or below the product. The step itself (tg_optim_value) is compared with the
 * CPU's bytes for every algorithm and flag by tests/python/test_gpu_grad_kinds.py (PoCL and both
 * emulators). Prints "N passed, N failed". */
#include <math.h>
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
#include "../../kernels/gpu/optim.h"
#undef clz

static const uint32_t specials[] = {
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x80800000, 0x3f800000,
    0xbf800000, 0x3f800001, 0x3f7fffff, 0x40000000, 0x7f7fffff, 0xff7fffff, 0x7f000000, 0x7f800000, 0xff800000,
    0x7fc00000, 0xffc00001, 0x34000000, 0x33800000, 0x4b000000, 0x5f800000, 0x1f800000, 0x3f000000, 0x00400000,
    0x2f800000, 0xb3800000, 0x0c000000,
};
enum { NSPECIAL = sizeof specials / sizeof specials[0] };

static uint64_t state = 0x2545f4914f6cdd1du;
static uint32_t next32(void) { /* xorshift64* */
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return (uint32_t)((state * 0x2545f4914f6cdd1du) >> 32);
}
static uint32_t with_exp(uint32_t e) { return (next32() & 0x807fffffu) | ((e & 0xffu) << 23); }

static uint32_t cpu_fma(uint32_t a, uint32_t b, uint32_t c) {
    float fa, fb, fc, r;
    memcpy(&fa, &a, 4), memcpy(&fb, &b, 4), memcpy(&fc, &c, 4);
    r = fmaf(fa, fb, fc);
    uint32_t u;
    memcpy(&u, &r, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u; /* the kernels' one NaN */
}

/* A triple drawn to reach one path (k cycles through them). */
static void draw(uint32_t k, uint32_t *a, uint32_t *b, uint32_t *c) {
    uint32_t r = next32();
    switch (k % 9) {
    case 0: *a = r, *b = next32(), *c = next32(); break;                                   /* anything */
    case 1: {                                                               /* the addend near the product */
        uint32_t ea = 64 + r % 128, eb = 64 + next32() % 128, ec = ea + eb - 127 + (next32() % 64) - 32;
        *a = with_exp(ea), *b = with_exp(eb), *c = with_exp(ec);
        break;
    }
    case 2: {                                                               /* cancellation: c = -round(ab) +- ulps */
        *a = with_exp(100 + r % 50), *b = with_exp(100 + next32() % 50);
        uint32_t p = tg_f32_mul(*a, *b);
        *c = (p ^ 0x80000000u) + (next32() % 5) - 2;
        break;
    }
    case 3: *a = with_exp(r % 3), *b = with_exp(100 + next32() % 60), *c = with_exp(next32() % 4); break; /* subnormals */
    case 4: *a = with_exp(40 + r % 30), *b = with_exp(40 + next32() % 30), *c = with_exp(next32() % 8); break; /* tiny products */
    case 5: *a = with_exp(200 + r % 55), *b = with_exp(120 + next32() % 20), *c = with_exp(240 + next32() % 15); break; /* overflow */
    case 6: *a = with_exp(127 + r % 8), *b = with_exp(127 + next32() % 8), *c = with_exp(next32() % 256); break; /* far addends */
    case 7: /* ties: 13-bit significands make products of 25 or 26 bits, often halfway; a small addend
             * (its bits all below the product's, many binades down) decides them by its sign alone */
        *a = 0x3f800000u | (r & 0xfffu) << 11 | (r & 0x80000000u), *b = 0x3f800000u | (next32() & 0xfffu) << 11;
        *c = with_exp(127 - 30 - next32() % 60);
        break;
    default: *a = specials[r % NSPECIAL], *b = with_exp(next32() % 256), *c = specials[next32() % NSPECIAL]; break;
    }
}

int main(void) {
    uint64_t bad = 0, n = 0;
    uint32_t fa = 0, fb = 0, fc = 0, fw = 0, fg = 0;
    for (int i = 0; i < NSPECIAL; i++)
        for (int j = 0; j < NSPECIAL; j++)
            for (int k = 0; k < NSPECIAL; k++) {
                uint32_t a = specials[i], b = specials[j], c = specials[k], w = cpu_fma(a, b, c), g = tg_f32_fma(a, b, c);
                n++;
                if (w != g && bad++ == 0) fa = a, fb = b, fc = c, fw = w, fg = g;
            }
    for (uint32_t t = 0; t < (1u << 22); t++) {
        uint32_t a, b, c;
        draw(t, &a, &b, &c);
        uint32_t w = cpu_fma(a, b, c), g = tg_f32_fma(a, b, c);
        n++;
        if (w != g && bad++ == 0) fa = a, fb = b, fc = c, fw = w, fg = g;
    }
    if (bad)
        fprintf(stderr, "FAIL fma: %llu of %llu differ, first %08x * %08x + %08x: fmaf %08x, kernel %08x\n",
                (unsigned long long)bad, (unsigned long long)n, fa, fb, fc, fw, fg);
    CHECK(bad == 0);
    /* nan_max: a NaN propagates, the first's first; -0 and +0 equal (the second kept) */
    CHECK(tg_optim_nan_max(0x7fc00001u, 0xffc00000u) == 0x7fc00001u);
    CHECK(tg_optim_nan_max(0x3f800000u, 0xffc00000u) == 0xffc00000u);
    CHECK(tg_optim_nan_max(0x00000000u, 0x80000000u) == 0x80000000u);
    CHECK(tg_optim_nan_max(0x80000000u, 0x00000000u) == 0x00000000u);
    CHECK(tg_optim_nan_max(0xbf800000u, 0x3f800000u) == 0x3f800000u);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
