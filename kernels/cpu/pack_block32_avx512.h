/* The block32 variants' B packer on AVX-512 (AMX, AVX512F): pack_avx512.h's pair layout per
 * 32-column panel (its vector paths for row- and column-major B), then +0 pairs to the block
 * boundary (pack_block32.h). Include after pack_avx512.h and pack_block32.h. */
#ifndef TGRAD_CPU_PACK_BLOCK32_AVX512_H
#define TGRAD_CPU_PACK_BLOCK32_AVX512_H
#include <string.h>

TG_PACK_FN void pack_b_block32_avx512(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst_) {
    uint32_t *dst = dst_;
    int64_t kp = (kc + 1) / 2, padded = b32_pairs(kc);
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += padded * NR) {
        pack_b_bf16_avx512(B, k0, kc, n0 + j0, nb - j0 < NR ? nb - j0 : NR, dst);
        memset(dst + kp * NR, 0, (size_t)((padded - kp) * NR) * 4u);
    }
}

#endif
