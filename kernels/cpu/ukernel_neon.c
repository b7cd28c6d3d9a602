/* NEON variant (aarch64): 8 rows x 12 columns of fp32 FMAs (24 q-register accumulators), two per
 * k-pair in the contract's order (odd product, then even), operands packed as exact fp32
 * widenings (pack_f32_pairs.h, DAZ applied).
 *
 * Numerics. A fused multiply-add of a bf16 x bf16 product is the contract's step exactly, except
 * for the flush: Arm detects tininess before rounding, so with FPCR.FZ set a sum in
 * [2^-126 - 2^-151, 2^-126) becomes 0 where the contract (and x86) rounds it to 2^-126 first.
 * Every such flush sets FPSR.UFC, and so does every other flush, while a tile whose sums never
 * come near 2^-126 sets nothing. So the kernel runs with FZ set, and when UFC is raised during
 * a tile it computes that tile again with the exact scalar step (contract_step.h) from the tile's
 * starting accumulators: fast on ordinary data, exact on all. FEAT_BF16's BFDOT/BFMMLA are not
 * used: their intermediate rounding is not the contract's. */
#include <arm_neon.h>

#define MR 8
#define NR 12
#include "contract_step.h"
#include "fp_env.h"
#include "pack_f32_pairs.h"

#define FPSR_UFC (1u << 3)

/* The exact tile, one element at a time (packed fp32 pairs: A entries (odd, even) per row, B
 * NR odd floats then NR even floats per pair). */
static void tile_exact(int64_t kpairs, const float *a, const float *b, const tg_tile *t) {
    for (int r = 0; r < MR; r++) {
        for (int j = 0; j < NR; j++) {
            float acc = t->load ? t->acc[r * t->ldacc + j] : 0.0f;
            for (int64_t p = 0; p < kpairs; p++) {
                const float *ap = a + p * 2 * MR + 2 * r, *bp = b + p * 2 * NR;
                acc = step(step(acc, ap[0], bp[j]), ap[1], bp[NR + j]);
            }
            if (!t->out) t->acc[r * t->ldacc + j] = acc;
            else if (r < t->rows && j < t->cols) t->out[r * t->ldout + j] = to_bf16(acc);
        }
    }
}

static inline uint16x4_t bf16x4(float32x4_t v) { /* RNE; NaN -> 0x7fc0 */
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
    r = vbslq_u32(vceqq_f32(v, v), r, vdupq_n_u32(0x7fc0));
    return vmovn_u32(r);
}

#define R8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define K_DECL(r) float32x4_t c##r##0 = vdupq_n_f32(0), c##r##1 = vdupq_n_f32(0), c##r##2 = vdupq_n_f32(0);
#define K_LOAD(r) c##r##0 = vld1q_f32(t->acc + r * t->ldacc), c##r##1 = vld1q_f32(t->acc + r * t->ldacc + 4), \
                  c##r##2 = vld1q_f32(t->acc + r * t->ldacc + 8);
/* row r's element is lane r%4 of the A vector holding rows 4*(r/4) .. +3 */
#define K_FMA(r, AV, B0, B1, B2)                                                                    \
    c##r##0 = vfmaq_laneq_f32(c##r##0, B0, AV[(r) / 4], (r) % 4);                                   \
    c##r##1 = vfmaq_laneq_f32(c##r##1, B1, AV[(r) / 4], (r) % 4);                                   \
    c##r##2 = vfmaq_laneq_f32(c##r##2, B2, AV[(r) / 4], (r) % 4);
#define K_ODD(r) K_FMA(r, ao, b0, b1, b2)
#define K_EVEN(r) K_FMA(r, ae, b0, b1, b2)
#define K_ACC(r) vst1q_f32(t->acc + r * t->ldacc, c##r##0), vst1q_f32(t->acc + r * t->ldacc + 4, c##r##1), \
                 vst1q_f32(t->acc + r * t->ldacc + 8, c##r##2);
#define K_OUT(r)                                                                                    \
    if (r < t->rows) {                                                                              \
        uint16_t *o = t->out + r * t->ldout;                                                        \
        if (t->cols == NR) {                                                                        \
            vst1_u16(o, bf16x4(c##r##0)), vst1_u16(o + 4, bf16x4(c##r##1)), vst1_u16(o + 8, bf16x4(c##r##2)); \
        } else {                                                                                    \
            uint16_t tmp[NR];                                                                       \
            vst1_u16(tmp, bf16x4(c##r##0)), vst1_u16(tmp + 4, bf16x4(c##r##1)), vst1_u16(tmp + 8, bf16x4(c##r##2)); \
            for (int j = 0; j < t->cols; j++) o[j] = tmp[j];                                        \
        }                                                                                           \
    }

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_, *b = b_;
    uint64_t fpcr = tg_read_fpcr(), fpsr = tg_read_fpsr();
    tg_write_fpcr(tg_fpcr_fma(fpcr));
    tg_write_fpsr(fpsr & ~(uint64_t)FPSR_UFC);
    R8(K_DECL)
    if (t->load) { R8(K_LOAD) }
    for (int64_t p = 0; p < kpairs; p++) {
        const float *ap = a + p * 2 * MR, *bp = b + p * 2 * NR;
        float32x4x2_t lo = vld2q_f32(ap), hi = vld2q_f32(ap + 8); /* (odd, even) of rows 0-3, 4-7 */
        float32x4_t ao[2] = { lo.val[0], hi.val[0] }, ae[2] = { lo.val[1], hi.val[1] };
        float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8);
        R8(K_ODD)
        b0 = vld1q_f32(bp + NR), b1 = vld1q_f32(bp + NR + 4), b2 = vld1q_f32(bp + NR + 8);
        R8(K_EVEN)
    }
    bool flushed = (tg_read_fpsr() & FPSR_UFC) != 0;
    tg_write_fpsr(fpsr);
    tg_write_fpcr(fpcr);
    if (flushed) { /* a sum came near 2^-126: this tile again, exactly (see the top) */
        tile_exact(kpairs, a, b, t);
        return;
    }
    if (t->out) {
        R8(K_OUT)
    } else {
        R8(K_ACC)
    }
}

static int available(void) { return 1; } /* Advanced SIMD is part of every aarch64 CPU */

/* 24 independent FMA chains: the FMA pipes' throughput, 8 flops per 128-bit FMA (also the neon
 * block32 kernel's probe: the same pipes). */
double tg_neon_fma_peak(int64_t iters) {
    float32x4_t acc[24];
    for (int i = 0; i < 24; i++) acc[i] = vdupq_n_f32((float)i);
    float32x4_t x = vdupq_n_f32(1.0f), y = vdupq_n_f32(1e-9f);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < 24; i++) acc[i] = vfmaq_f32(acc[i], x, y);
        __asm__ volatile("" : "+w"(x));
    }
    float32x4_t s = acc[0];
    for (int i = 1; i < 24; i++) s = vaddq_f32(s, acc[i]);
    volatile float sink = vgetq_lane_f32(s, 0);
    (void)sink;
    return (double)iters * 24 * 8;
}

const tg_ukernel tg_ukernel_neon = {
    .name = "neon", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 8, .kc = 256, .pack_a = pack_a_f32, .pack_b = pack_b_f32,
    .kernel = kernel, .available = available, .peak = tg_neon_fma_peak };
