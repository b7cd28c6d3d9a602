/* Packing into bf16 pair words (even k in the low half, odd k in the high half): the layout
 * vdpbf16ps reads, also used by the portable kernel, and the B layout of the x86 FMA variants
 * (which widen it to fp32 in the kernel). Included by each variant's file so the same code is
 * compiled with that variant's target flags (and vectorized for it). Define NR before
 * including; the A panel height is the mr argument. A variant may wrap pack_b_bf16 with fast
 * paths for common layouts. */
#ifndef TGRAD_CPU_PACK_BF16_PAIRS_H
#define TGRAD_CPU_PACK_BF16_PAIRS_H
#include "ukernel.h"

static inline uint32_t tg_daz(uint16_t h) { return (h & 0x7f80u) ? h : (uint32_t)(h & 0x8000u); }

TG_PACK_FN void pack_a_bf16(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst_) {
    uint32_t *dst = dst_;
    int64_t kp = (kc + 1) / 2, full = kc / 2;
    for (int64_t i0 = 0; i0 < mb; i0 += mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            uint32_t *d = dst + r;
            if (r >= rows) {
                for (int64_t p = 0; p < kp; p++) d[p * mr] = 0;
                continue;
            }
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0 * A->s1;
            int64_t s = A->s1;
            for (int64_t p = 0; p < full; p++)
                d[p * mr] = tg_daz(row[2 * p * s]) | tg_daz(row[(2 * p + 1) * s]) << 16;
            if (kp > full) d[full * mr] = tg_daz(row[2 * full * s]);
        }
        dst += kp * mr;
    }
}

TG_PACK_FN void pack_b_bf16(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    uint32_t *dst = dst_;
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += NR) {
        int64_t w = nb - j0 < NR ? nb - j0 : NR;
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + (n0 + j0) * B->s1;
            uint32_t *d = dst + p * NR;
            if (2 * p + 1 < kc) {
                const uint16_t *odd = even + B->s0;
                if (B->s1 == 1) {
                    for (int64_t j = 0; j < w; j++) d[j] = tg_daz(even[j]) | tg_daz(odd[j]) << 16;
                } else {
                    for (int64_t j = 0; j < w; j++) d[j] = tg_daz(even[j * B->s1]) | tg_daz(odd[j * B->s1]) << 16;
                }
            } else {
                for (int64_t j = 0; j < w; j++) d[j] = tg_daz(even[j * B->s1]);
            }
            for (int64_t j = w; j < NR; j++) d[j] = 0;
        }
        dst += kp * NR;
    }
}

#endif
