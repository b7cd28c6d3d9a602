/* The numerics contract in scalar C (docs/numerics.md), shared by the portable variant and the
 * exact fallback of the NEON variant. Each step is computed in double, where the bf16 x bf16
 * product is exact and one rounding to fp32 is correctly rounded (double has more than 2x24+2
 * bits); the flush then follows the contract, including the one boundary case where rounding
 * reached 2^-126 from below. */
#include <float.h>
#include <math.h>
#include <stdint.h>

static inline float lo_half(uint32_t w) { union { uint32_t u; float f; } x = { w << 16 }; return x.f; }
static inline float hi_half(uint32_t w) { union { uint32_t u; float f; } x = { w & 0xffff0000u }; return x.f; }

static inline float step(float acc, float a, float b) {
    double d = (double)acc + (double)a * (double)b;
    float r = (float)d;
    float m = fabsf(r);
    if (m < FLT_MIN || (m == FLT_MIN && fabs(d) < 0x1p-126 - 0x1p-151)) return copysignf(0.0f, (float)d);
    return r;
}

static inline uint16_t to_bf16(float f) {
    union { float f; uint32_t u; } x = { f };
    if ((x.u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
}

