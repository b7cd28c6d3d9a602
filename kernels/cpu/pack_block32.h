/* Packing for the block32 order's kernels (docs/numerics.md, "The block32 order"): K in blocks of
 * 32 elements (16 pair words: even k in the low half, odd k in the high half, as vdpbf16ps and
 * AMX's TDPBF16PS read them), each K panel zero-padded to whole blocks, subnormal inputs made
 * signed zeros (DAZ). Two panel layouts:
 *  - A, "rows": per block, `mr` rows of 16 pair words each (an AMX A tile is 16 such rows, 64
 *    bytes apart);
 *  - B, "pairs": per pair, NR columns' words (pack_bf16_pairs.h's B layout: an AMX B tile is 16
 *    pair rows of 16 columns, NR * 4 bytes apart).
 * Define NR before including. Generic strides in scalar C; a variant may add fast paths. */
#ifndef TGRAD_CPU_PACK_BLOCK32_H
#define TGRAD_CPU_PACK_BLOCK32_H
#include "ukernel.h"

#define B32_PAIRS 16 /* pair words per block (32 elements of K) */

static inline int64_t b32_pairs(int64_t kc) { return (kc + 2 * B32_PAIRS - 1) / (2 * B32_PAIRS) * B32_PAIRS; }
static inline uint32_t b32_daz(uint16_t h) { return (h & 0x7f80u) ? h : (uint32_t)(h & 0x8000u); }

/* Element k of a line (row of A, column of B) at p with stride s, DAZ'd, +0 past kc. */
static inline uint32_t b32_at(const uint16_t *p, int64_t s, int64_t k, int64_t kc) {
    return k < kc ? b32_daz(p[k * s]) : 0u;
}

TG_PACK_FN void pack_a_block32(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr,
                               void *dst_) {
    uint32_t *dst = dst_;
    int64_t kp = b32_pairs(kc);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t blk = 0; blk < kp / B32_PAIRS; blk++) {
            uint32_t *d = dst + blk * B32_PAIRS * mr;
            for (int64_t r = 0; r < mr; r++, d += B32_PAIRS) {
                if (r >= rows) {
                    for (int p = 0; p < B32_PAIRS; p++) d[p] = 0;
                    continue;
                }
                const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0 * A->s1;
                for (int p = 0; p < B32_PAIRS; p++) {
                    int64_t k = 2 * (blk * B32_PAIRS + p);
                    d[p] = b32_at(row, A->s1, k, kc) | b32_at(row, A->s1, k + 1, kc) << 16;
                }
            }
        }
    }
}

TG_PACK_FN void pack_b_block32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    uint32_t *dst = dst_;
    int64_t kp = b32_pairs(kc);
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * NR) {
        int64_t w = nb - j0 < NR ? nb - j0 : NR;
        for (int64_t p = 0; p < kp; p++) {
            uint32_t *d = dst + p * NR;
            for (int64_t j = 0; j < NR; j++) {
                if (j >= w) {
                    d[j] = 0;
                    continue;
                }
                const uint16_t *col = B->base + k0 * B->s0 + (n0 + j0 + j) * B->s1;
                d[j] = b32_at(col, B->s0, 2 * p, kc) | b32_at(col, B->s0, 2 * p + 1, kc) << 16;
            }
        }
    }
}

/* A for the FMA kernels: per pair, the panel's mr rows, each the odd then the even element as
 * exact fp32 widenings (zero past K and past the panel's rows), blocks padded as above. */
TG_PACK_FN void pack_a_block32_f32(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr,
                                   void *dst_) {
    float *dst = dst_;
    int64_t kp = b32_pairs(kc);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * 2 * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            float *d = dst + 2 * r;
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0 * A->s1;
            for (int64_t p = 0; p < kp; p++) {
                uint32_t ev = r < rows ? b32_at(row, A->s1, 2 * p, kc) : 0u;
                uint32_t od = r < rows ? b32_at(row, A->s1, 2 * p + 1, kc) : 0u;
                union { uint32_t u; float f; } e = { ev << 16 }, o = { od << 16 };
                d[p * 2 * mr] = o.f, d[p * 2 * mr + 1] = e.f;
            }
        }
    }
}

/* B for the FMA kernels without an in-kernel widening: per pair, NR even elements then NR odd ones
 * as exact fp32 widenings (an entry, one (pair, column), is 8 bytes), blocks padded as above. */
TG_PACK_FN void pack_b_block32_f32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    float *dst = dst_;
    int64_t kp = b32_pairs(kc);
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * 2 * NR) {
        int64_t w = nb - j0 < NR ? nb - j0 : NR;
        for (int64_t p = 0; p < kp; p++) {
            float *even = dst + p * 2 * NR, *odd = even + NR;
            for (int64_t j = 0; j < NR; j++) {
                const uint16_t *col = B->base + k0 * B->s0 + (n0 + j0 + j) * B->s1;
                union { uint32_t u; float f; } e = { j < w ? b32_at(col, B->s0, 2 * p, kc) << 16 : 0u },
                                               o = { j < w ? b32_at(col, B->s0, 2 * p + 1, kc) << 16 : 0u };
                even[j] = e.f, odd[j] = o.f;
            }
        }
    }
}

#endif
