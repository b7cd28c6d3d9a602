/* The block32 order on NEON (aarch64; docs/numerics.md, "The block32 order"): 4 rows x 8 columns;
 * per block of 32 k each output keeps two fp32 chains in q-registers (16: the even elements'
 * products and the odd elements'), each step one fused multiply-add, then acc + (even + odd) into
 * the tile's accumulators. A and B are packed as exact fp32 widenings (pack_block32.h), padded
 * with +0 to whole blocks.
 *
 * Numerics, as the pairwise NEON kernel's (ukernel_neon.c): Arm detects tininess before
 * rounding, so with FPCR.FZ a sum in [2^-126 - 2^-151, 2^-126) flushes where the order keeps
 * 2^-126; every flush sets FPSR.UFC, so a tile that raised it is computed again with the exact
 * scalar step (contract_step.h) from its starting accumulators: fast on ordinary data, exact on
 * all. */
#include <arm_neon.h>
#include <stdbool.h>

#define MR 4
#define NR 8
#include "contract_step.h"
#include "fp_env.h"
#include "pack_block32.h"

#define FPSR_UFC (1u << 3)

/* The tile in the block32 order, one element at a time with the exact step, from acc. Packed A:
 * per pair, each row's (odd, even); packed B: per pair, NR even floats then NR odd ones. */
static void tile_exact(int64_t kpairs, const float *a, const float *b, float acc[MR][NR]) {
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
                float even = 0.0f, odd = 0.0f;
                for (int64_t p = p0; p < p0 + B32_PAIRS; p++) {
                    const float *ap = a + p * 2 * MR + 2 * r, *bp = b + p * 2 * NR;
                    even = step(even, ap[1], bp[j]);
                    odd = step(odd, ap[0], bp[NR + j]);
                }
                acc[r][j] = step(acc[r][j], step(even, odd, 1.0f), 1.0f);
            }
}

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_, *b = b_;
    float acc[MR][NR], start[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) start[r][j] = acc[r][j] = t->load ? t->acc[r * t->ldacc + j] : 0.0f;
    uint64_t fpcr = tg_read_fpcr(), fpsr = tg_read_fpsr();
    tg_write_fpcr(tg_fpcr_fma(fpcr));
    tg_write_fpsr(fpsr & ~(uint64_t)FPSR_UFC);
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS) {
        float32x4_t e[MR][2], o[MR][2];
        for (int r = 0; r < MR; r++) e[r][0] = e[r][1] = o[r][0] = o[r][1] = vdupq_n_f32(0.0f);
        for (int64_t p = p0; p < p0 + B32_PAIRS; p++) {
            float32x4x2_t av = vld2q_f32(a + p * 2 * MR); /* val[0]: rows' odd elements, val[1]: even */
            const float *bp = b + p * 2 * NR;
            float32x4_t be0 = vld1q_f32(bp), be1 = vld1q_f32(bp + 4), bo0 = vld1q_f32(bp + NR), bo1 = vld1q_f32(bp + NR + 4);
#define ROW(r)                                                                                      \
    e[r][0] = vfmaq_laneq_f32(e[r][0], be0, av.val[1], r), e[r][1] = vfmaq_laneq_f32(e[r][1], be1, av.val[1], r); \
    o[r][0] = vfmaq_laneq_f32(o[r][0], bo0, av.val[0], r), o[r][1] = vfmaq_laneq_f32(o[r][1], bo1, av.val[0], r);
            ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
        }
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2; h++)
                vst1q_f32(acc[r] + 4 * h, vaddq_f32(vld1q_f32(acc[r] + 4 * h), vaddq_f32(e[r][h], o[r][h])));
    }
    bool flushed = (tg_read_fpsr() & FPSR_UFC) != 0;
    tg_write_fpsr(fpsr);
    tg_write_fpcr(fpcr);
    if (flushed) { /* a sum came near 2^-126: this tile again, exactly (see the top) */
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] = start[r][j];
        tile_exact(kpairs, a, b, acc);
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            if (!t->out) t->acc[r * t->ldacc + j] = acc[r][j];
            else if (r < t->rows && j < t->cols) t->out[r * t->ldout + j] = to_bf16(acc[r][j]);
        }
}

static int available(void) { return 1; } /* Advanced SIMD is part of every aarch64 CPU */

_Static_assert(256 % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");
const tg_ukernel tg_ukernel_neon_block32 = {
    .name = "neon_block32", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 8, .kc = 256,
    .pack_a = pack_a_block32_f32, .pack_b = pack_b_block32_f32, .kernel = kernel, .available = available,
    .peak = tg_neon_fma_peak, .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
