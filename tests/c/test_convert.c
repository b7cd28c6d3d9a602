/* Every float32 bit pattern (2^32 of them) through tgrad_tensor_from_f32, compared with an
 * independent rounding: the nearest bf16 by distance in double arithmetic, ties to the even
 * significand; NaN must come back as a quiet NaN with its sign and top payload. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

static uint16_t reference(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t lo_bits = u & 0xffff0000u; /* truncation toward zero */
    if (lo_bits == u) return (uint16_t)(u >> 16);
    uint32_t hi_bits = lo_bits + 0x10000u; /* next bf16 away from zero (may be inf) */
    float lo, hi;
    memcpy(&lo, &lo_bits, 4);
    memcpy(&hi, &hi_bits, 4);
    double d_lo = fabs((double)f - (double)lo);
    double d_hi = isinf(hi) ? fabs((double)f - copysign(0x1p128, (double)f)) : fabs((double)hi - (double)f);
    if (d_lo < d_hi) return (uint16_t)(lo_bits >> 16);
    if (d_hi < d_lo) return (uint16_t)(hi_bits >> 16);
    return ((lo_bits >> 16) & 1) ? (uint16_t)(hi_bits >> 16) : (uint16_t)(lo_bits >> 16);
}

int main(int argc, char **argv) {
    const uint64_t chunk = 1u << 22;
    uint64_t stride = argc > 1 ? strtoull(argv[1], NULL, 10) : 1; /* 1: every pattern */
    float *src = malloc(chunk * 4);
    uint16_t *got = malloc(chunk * 2);
    uint64_t checked = 0, bad = 0;
    for (uint64_t start = 0; start < (1ull << 32); start += chunk * stride) {
        for (uint64_t i = 0; i < chunk; i++) {
            uint32_t u = (uint32_t)(start + i * stride);
            memcpy(&src[i], &u, 4);
        }
        tgrad_tensor_t t = 0;
        if (tgrad_tensor_from_f32(src, 1, (int64_t[]){ (int64_t)chunk }, &t) ||
            tgrad_tensor_read_bf16(t, got, chunk)) {
            fprintf(stderr, "tgrad call failed: %s\n", tgrad_last_error());
            return 1;
        }
        tgrad_tensor_release(t);
        for (uint64_t i = 0; i < chunk; i++) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            uint16_t want = reference(u);
            if (got[i] != want && bad++ < 10) fprintf(stderr, "0x%08x -> 0x%04x, expected 0x%04x\n", u, got[i], want);
        }
        checked += chunk;
    }
    free(src), free(got);
    printf("%llu float32 patterns checked, %llu wrong\n", (unsigned long long)checked, (unsigned long long)bad);
    printf("%d passed, %d failed\n", bad == 0, bad != 0);
    return bad != 0;
}
