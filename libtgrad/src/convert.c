/* Host float -> bf16 conversions: round to nearest even, NaN kept quiet with its sign. */
#include <math.h>
#include <string.h>

#include "internal.h"

uint16_t tg_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* One rounding, straight from f64: first narrow to f32 rounding to odd (truncate, then set the
 * last bit when inexact), which keeps enough information for the final RNE to bf16 to be exact,
 * since f32 carries more than bf16's 8 significant bits + 2. */
uint16_t tg_f64_to_bf16(double d) {
    if (isnan(d)) {
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
        uint16_t payload = (uint16_t)((u >> 45) & 0x7fu); /* top 7 mantissa bits */
        return (uint16_t)(sign | 0x7f80u | 0x0040u | payload);
    }
    float f = (float)d;
    if ((double)f != d) {
        if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f); /* truncate toward zero */
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u |= 1u; /* sticky: round to odd */
        memcpy(&f, &u, sizeof u);
    }
    return tg_f32_to_bf16(f);
}
