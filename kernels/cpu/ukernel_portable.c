/* The reference variant in portable C: always built, always available, the definition the SIMD
 * variants are tested against (with the independent numpy oracle above them all). Each step is
 * contract_step.h's exact scalar step. */

#define MR 4
#define NR 16
#include "pack_bf16_pairs.h"


#include "contract_step.h"

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const uint32_t *a = a_, *b = b_;
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = t->load ? t->acc[r * t->ldacc + j] : 0.0f;
    for (int64_t p = 0; p < kpairs; p++) {
        const uint32_t *ap = a + p * MR, *bp = b + p * NR;
        for (int r = 0; r < MR; r++) {
            float ao = hi_half(ap[r]), ae = lo_half(ap[r]);
            for (int j = 0; j < NR; j++) acc[r][j] = step(step(acc[r][j], ao, hi_half(bp[j])), ae, lo_half(bp[j]));
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
    static uint32_t a[8 * MR], b[8 * NR];
    for (int i = 0; i < 8 * MR; i++) a[i] = 0x3f803f80u;
    for (int i = 0; i < 8 * NR; i++) b[i] = 0x3f803f80u;
    float acc[MR * NR] = { 0 };
    tg_tile t = { .acc = acc, .ldacc = NR, .load = 1 }; /* each call continues the last: no shortcut */
    for (int64_t i = 0; i < iters; i++) kernel(8, a, b, &t);
    volatile float sink = acc[0];
    (void)sink;
    return (double)iters * 8 * 2 * MR * NR * 2;
}

const tg_ukernel tg_ukernel_portable = {
    .name = "portable", .mr = MR, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = 512, .pack_a = pack_a_bf16, .pack_b = pack_b_bf16,
    .kernel = kernel, .available = always, .peak = peak };
