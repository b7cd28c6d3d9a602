/* The block32 order in portable C (docs/numerics.md, "The block32 order"): always built, always
 * available, the definition the AMX variant is tested against (with the numpy oracle above both).
 * Per output and per block of 32 K elements: two fp32 temporaries from +0, the even-k products
 * into one and the odd-k products into the other, ascending k, each step contract_step.h's exact
 * step (one rounding, flush after rounding); then acc = step(acc, even + odd), the sum itself one
 * step. That is TDPBF16PS as Intel's pseudocode defines it, one instruction per block. */

#define MR 4
#define NR 16
#include "pack_block32.h"

#include "contract_step.h"

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const uint32_t *a = a_, *b = b_;
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = t->load ? t->acc[r * t->ldacc + j] : 0.0f;
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
        const uint32_t *ab = a + p0 * MR, *bb = b + p0 * NR; /* this block's A rows and B pairs */
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) {
                float even = 0.0f, odd = 0.0f;
                for (int p = 0; p < B32_PAIRS; p++) {
                    uint32_t aw = ab[r * B32_PAIRS + p], bw = bb[p * NR + j];
                    even = step(even, lo_half(aw), lo_half(bw));
                    odd = step(odd, hi_half(aw), hi_half(bw));
                }
                acc[r][j] = step(acc[r][j], step(even, odd, 1.0f), 1.0f);
            }
    }
    if (t->out) {
        for (int r = 0; r < t->rows; r++)
            for (int j = 0; j < t->cols; j++) t->out[r * t->ldout + j] = to_bf16(acc[r][j]);
    } else {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) t->acc[r * t->ldacc + j] = acc[r][j];
    }
}

static int always(void) { return 1; }

static double peak(int64_t iters) {
    static uint32_t a[B32_PAIRS * MR], b[B32_PAIRS * NR];
    for (int i = 0; i < B32_PAIRS * MR; i++) a[i] = 0x3f803f80u;
    for (int i = 0; i < B32_PAIRS * NR; i++) b[i] = 0x3f803f80u;
    float acc[MR * NR] = { 0 };
    tg_tile t = { .acc = acc, .ldacc = NR, .load = 1 };
    for (int64_t i = 0; i < iters; i++) kernel(B32_PAIRS, a, b, &t);
    volatile float sink = acc[0];
    (void)sink;
    return (double)iters * B32_PAIRS * 2 * MR * NR * 2;
}

_Static_assert(512 % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");
const tg_ukernel tg_ukernel_portable_block32 = {
    .name = "portable_block32", .mr = MR, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = 512,
    .pack_a = pack_a_block32, .pack_b = pack_b_block32, .kernel = kernel, .available = always, .peak = peak,
    .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
