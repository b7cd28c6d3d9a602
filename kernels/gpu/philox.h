// Philox-4x32-10, the counter-based generator behind tgrad's random numbers (docs/random.md), and
// the integer-only maps from its words to uniform values and bounded integers.
// A pure function (counter, key) -> 4 words: libtgrad's CPU executor (src/ops/random.c) includes
// this file as C, and a GPU emitter (issue 37) can paste the same text into MSL, OpenCL C or CUDA,
// so every device gives the same bits for the same (seed, element).
//
// Philox-4x32-10: J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011; the reference is Random123's philox.h. Ten rounds; each round
// multiplies counter words 0 and 2 by M0 = 0xD2511F53 and M1 = 0xCD9E8D57 (the 64-bit products
// split into high and low words) and mixes in the key; the key is bumped by the Weyl constants
// W0 = 0x9E3779B9 (golden ratio) and W1 = 0xBB67AE85 (sqrt(3) - 1) between rounds.
//
// The common subset of C99, OpenCL C 1.2, MSL 2.3 and CUDA: the types uint and tg_u64 (a 64-bit
// unsigned integer the includer typedefs before this text), clz (count leading zeros of a
// non-zero uint), structs passed by value, no pointers, no floating point.

typedef struct tg_philox_words {
    uint w[4];
} tg_philox_words;

// One round: (c0, c1, c2, c3) -> (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)).
static inline tg_philox_words tg_philox_round(tg_philox_words c, uint k0, uint k1) {
    tg_u64 p0 = (tg_u64)0xD2511F53u * (tg_u64)c.w[0];
    tg_u64 p1 = (tg_u64)0xCD9E8D57u * (tg_u64)c.w[2];
    tg_philox_words r;
    r.w[0] = (uint)(p1 >> 32) ^ c.w[1] ^ k0;
    r.w[1] = (uint)p1;
    r.w[2] = (uint)(p0 >> 32) ^ c.w[3] ^ k1;
    r.w[3] = (uint)p0;
    return r;
}

// Philox-4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1).
static inline tg_philox_words tg_philox4x32_10(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1) {
    tg_philox_words c;
    c.w[0] = c0;
    c.w[1] = c1;
    c.w[2] = c2;
    c.w[3] = c3;
    for (int i = 0; i < 10; i++) {
        if (i > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        c = tg_philox_round(c, k0, k1);
    }
    return c;
}

// The float32 bits of (w >> 8) * 2^-24: a multiple of 2^-24 in [0, 1), exact.
static inline uint tg_philox_unit_f32(uint w) {
    uint k = w >> 8;
    if (k == 0u)
        return 0u;
    int top = 31 - (int)clz(k); // k = 1.f * 2^top, top <= 23
    return ((uint)(127 + top - 24) << 23) | ((k << (23 - top)) & 0x7fffffu);
}

// The bfloat16 bits of (w >> 24) * 2^-8: a multiple of 2^-8 in [0, 1), exact.
static inline uint tg_philox_unit_bf16(uint w) {
    uint k = w >> 24;
    if (k == 0u)
        return 0u;
    int top = 31 - (int)clz(k); // top <= 7
    return ((uint)(127 + top - 8) << 7) | ((k << (7 - top)) & 0x7fu);
}

// floor(x * n / 2^64) for the 64-bit x = hi * 2^32 + lo and 1 <= n < 2^32: an integer in [0, n)
// (Lemire's multiply-shift without rejection; each value's probability is within 2^-64 of 1/n).
static inline uint tg_philox_below(uint lo, uint hi, uint n) {
    tg_u64 mid = (tg_u64)hi * (tg_u64)n + (((tg_u64)lo * (tg_u64)n) >> 32);
    return (uint)(mid >> 32);
}
