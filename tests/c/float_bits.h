/* The bits of a double or a float and back (memcpy: no aliasing), for the tests that check device
 * preludes on the host. */
#ifndef TGRAD_TESTS_FLOAT_BITS_H
#define TGRAD_TESTS_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint64_t bits_of(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline double double_of(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
