/* The reference micro-kernel in portable C: always built, always available, and the definition
 * the SIMD variants are tested against (with the independent numpy oracle above them all).
 * Each step is computed in double, where the bf16 x bf16 product is exact and the single rounding
 * to fp32 is correctly rounded (double has more than 2x24+2 bits); the flush then follows the
 * contract, including the one boundary case where rounding reached 2^-126 from below. */
#include <float.h>
#include <math.h>

#include "ukernel.h"

enum { MR = 4, NR = 16 };

static inline float bf16_lo(uint32_t w) { union { uint32_t u; float f; } x = { w << 16 }; return x.f; }
static inline float bf16_hi(uint32_t w) { union { uint32_t u; float f; } x = { w & 0xffff0000u }; return x.f; }

static inline float step(float acc, float a, float b) {
    double d = (double)acc + (double)a * (double)b;
    float r = (float)d;
    float m = fabsf(r);
    if (m < FLT_MIN || (m == FLT_MIN && fabs(d) < 0x1p-126 - 0x1p-151)) return copysignf(0.0f, (float)d);
    return r;
}

static void kernel(int64_t kpairs, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, int accumulate) {
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
    for (int64_t p = 0; p < kpairs; p++) {
        const uint32_t *ap = a + p * MR, *bp = b + p * NR;
        for (int r = 0; r < MR; r++) {
            float ao = bf16_hi(ap[r]), ae = bf16_lo(ap[r]);
            for (int j = 0; j < NR; j++) {
                float v = step(acc[r][j], ao, bf16_hi(bp[j]));
                acc[r][j] = step(v, ae, bf16_lo(bp[j]));
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) c[r * ldc + j] = acc[r][j];
}

static int always(void) { return 1; }

const tg_ukernel tg_ukernel_portable = { "portable", MR, NR, kernel, always };
