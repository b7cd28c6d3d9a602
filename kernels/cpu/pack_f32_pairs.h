/* Packing into fp32 pairs for the FMA variants (no bf16 dot instruction): each entry is two
 * floats, the odd element then the even one, widened exactly from bf16 after DAZ (A panels are
 * mr rows high). For B the
 * entries of one pair are laid out as NR odd floats then NR even floats, so a vector load gets
 * one of them for NR columns. Define NR before including. */
#ifndef TGRAD_CPU_PACK_F32_PAIRS_H
#define TGRAD_CPU_PACK_F32_PAIRS_H
#include "ukernel.h"

static inline float tg_widen_daz(uint16_t h) {
    union { uint32_t u; float f; } x = { (uint32_t)((h & 0x7f80u) ? h : (h & 0x8000u)) << 16 };
    return x.f;
}

TG_PACK_FN void pack_a_f32(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst_) {
    float *dst = dst_;
    int64_t kp = (kc + 1) / 2;
    for (int64_t i0 = 0; i0 < mb; i0 += mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            float *d = dst + 2 * r;
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0 * A->s1;
            for (int64_t p = 0; p < kp; p++) {
                int has_odd = 2 * p + 1 < kc;
                d[p * 2 * mr] = (r < rows && has_odd) ? tg_widen_daz(row[(2 * p + 1) * A->s1]) : 0.0f;
                d[p * 2 * mr + 1] = r < rows ? tg_widen_daz(row[2 * p * A->s1]) : 0.0f;
            }
        }
        dst += kp * 2 * mr;
    }
}

TG_PACK_FN void pack_b_f32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    float *dst = dst_;
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += NR) {
        int64_t w = nb - j0 < NR ? nb - j0 : NR;
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + (n0 + j0) * B->s1;
            float *odd_out = dst + p * 2 * NR, *even_out = odd_out + NR;
            int has_odd = 2 * p + 1 < kc;
            for (int64_t j = 0; j < w; j++) {
                odd_out[j] = has_odd ? tg_widen_daz(even[B->s0 + j * B->s1]) : 0.0f;
                even_out[j] = tg_widen_daz(even[j * B->s1]);
            }
            for (int64_t j = w; j < NR; j++) odd_out[j] = even_out[j] = 0.0f;
        }
        dst += kp * 2 * NR;
    }
}

#endif
