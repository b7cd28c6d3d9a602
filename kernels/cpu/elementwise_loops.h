/* The elementwise loops in plain C, written for the compiler to vectorize: a variant's file
 * includes this and compiles it with its own target flags (elementwise_kernel.h has the contract). One
 * loop per op, the op's switch outside it; the fp32 loops run in noinline functions between the
 * caller's fp_env.h save and restore, so no arithmetic is moved across the environment change. */
#include <string.h>

#include "elementwise_kernel.h"
#include "fp_env.h"

#define TG_EW_LOOP static __attribute__((noinline))

static inline float ew_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline int ew_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

/* fp32 -> bf16, round to nearest even (an overflow carries into the exponent: inf), NaN made
 * canonical. */
static inline uint16_t ew_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r;
}

/* A total order on bf16 bits as int16 (NaN aside): -0 below +0, negatives by magnitude reversed.
 * Its own inverse. */
static inline uint16_t ew_order_key(uint16_t h) { return h ^ ((uint16_t)((int16_t)h >> 15) & 0x7fffu); }

static inline uint16_t ew_max(uint16_t a, uint16_t b) {
    int16_t ka = (int16_t)ew_order_key(a), kb = (int16_t)ew_order_key(b);
    uint16_t m = ew_order_key((uint16_t)(ka > kb ? ka : kb));
    return ew_is_nan(a) | ew_is_nan(b) ? 0x7fc0u : m;
}

static inline uint16_t ew_min(uint16_t a, uint16_t b) {
    int16_t ka = (int16_t)ew_order_key(a), kb = (int16_t)ew_order_key(b);
    uint16_t m = ew_order_key((uint16_t)(ka < kb ? ka : kb));
    return ew_is_nan(a) | ew_is_nan(b) ? 0x7fc0u : m;
}

/* relu keeps -0 (as torch does: -0 is not below 0); a negative number becomes +0. */
static inline uint16_t ew_relu(uint16_t h) { return ew_is_nan(h) ? 0x7fc0u : (h > 0x8000u ? 0u : h); }
static inline uint16_t ew_neg(uint16_t h) { return ew_is_nan(h) ? 0x7fc0u : (uint16_t)(h ^ 0x8000u); }
static inline uint16_t ew_abs(uint16_t h) { return ew_is_nan(h) ? 0x7fc0u : (uint16_t)(h & 0x7fffu); }

static inline uint16_t ew_add(uint16_t a, uint16_t b) { return ew_round(ew_widen(a) + ew_widen(b)); }
static inline uint16_t ew_sub(uint16_t a, uint16_t b) { return ew_round(ew_widen(a) - ew_widen(b)); }
static inline uint16_t ew_mul(uint16_t a, uint16_t b) { return ew_round(ew_widen(a) * ew_widen(b)); }
static inline uint16_t ew_div(uint16_t a, uint16_t b) { return ew_round(ew_widen(a) / ew_widen(b)); }

TG_EW_LOOP void ew_lookup_loop(const uint16_t *table, const uint16_t *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = table[x[i]];
}

#define TG_EW_UNARY_LOOP(name, fn)                                                                 \
    TG_EW_LOOP void name(const uint16_t *x, uint16_t *y, int64_t n) {                                \
        for (int64_t i = 0; i < n; i++) y[i] = fn(x[i]);                                           \
    }
TG_EW_UNARY_LOOP(ew_relu_loop, ew_relu)
TG_EW_UNARY_LOOP(ew_neg_loop, ew_neg)
TG_EW_UNARY_LOOP(ew_abs_loop, ew_abs)

TG_EW_LOOP void ew_square_loop(const uint16_t *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ew_mul(x[i], x[i]);
}

/* Three loops per binary op (both arrays, a broadcast, b broadcast), so each one vectorizes. */
#define TG_EW_BINARY_LOOP(name, fn)                                                                \
    TG_EW_LOOP void name(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y, int64_t n) { \
        if (sa && sb) {                                                                            \
            for (int64_t i = 0; i < n; i++) y[i] = fn(a[i], b[i]);                                 \
        } else if (sb) {                                                                           \
            const uint16_t s = a[0];                                                               \
            for (int64_t i = 0; i < n; i++) y[i] = fn(s, b[i]);                                    \
        } else if (sa) {                                                                           \
            const uint16_t s = b[0];                                                               \
            for (int64_t i = 0; i < n; i++) y[i] = fn(a[i], s);                                    \
        } else {                                                                                   \
            const uint16_t r = fn(a[0], b[0]);                                                     \
            for (int64_t i = 0; i < n; i++) y[i] = r;                                              \
        }                                                                                          \
    }
TG_EW_BINARY_LOOP(ew_add_loop, ew_add)
TG_EW_BINARY_LOOP(ew_sub_loop, ew_sub)
TG_EW_BINARY_LOOP(ew_mul_loop, ew_mul)
TG_EW_BINARY_LOOP(ew_div_loop, ew_div)
TG_EW_BINARY_LOOP(ew_max_loop, ew_max)
TG_EW_BINARY_LOOP(ew_min_loop, ew_min)

/* Non-temporal stores of whole 64-byte lines, plain stores for the unaligned head and tail. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define EW_LINE_STORE(dst, src) _mm512_stream_si512((void *)(dst), _mm512_loadu_si512((const void *)(src)))
#elif defined(__AVX__)
#include <immintrin.h>
#define EW_LINE_STORE(dst, src)                                                                     \
    (_mm256_stream_si256((__m256i *)(dst), _mm256_loadu_si256((const __m256i *)(src))),               \
     _mm256_stream_si256((__m256i *)(dst) + 1, _mm256_loadu_si256((const __m256i *)(src) + 1)))
#elif defined(__SSE2__)
#include <emmintrin.h>
#define EW_LINE_STORE(dst, src)                                                                     \
    for (int q = 0; q < 4; q++) _mm_stream_si128((__m128i *)(dst) + q, _mm_loadu_si128((const __m128i *)(src) + q))
#endif

static void ew_store_stream(const uint16_t *x, uint16_t *y, int64_t n) {
#if defined(EW_LINE_STORE)
    int64_t head = (int64_t)((64 - ((uintptr_t)y & 63)) & 63) / 2;
    if ((uintptr_t)y & 1 || head > n) head = n; /* an odd address has no aligned lines */
    memcpy(y, x, (size_t)head * 2);
    int64_t i = head;
    for (; i + 32 <= n; i += 32) EW_LINE_STORE(y + i, x + i);
    memcpy(y + i, x + i, (size_t)(n - i) * 2);
#else
    memcpy(y, x, (size_t)n * 2);
#endif
}

static void ew_lookup(const uint16_t *table, const uint16_t *x, uint16_t *y, int64_t n) {
    ew_lookup_loop(table, x, y, n);
}

static void ew_unary(tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n) {
    switch (op) {
    case TGRAD_OP_RELU: ew_relu_loop(x, y, n); break;
    case TGRAD_OP_NEG: ew_neg_loop(x, y, n); break;
    case TGRAD_OP_ABS: ew_abs_loop(x, y, n); break;
    case TGRAD_OP_SQUARE: {
        tg_fp_env env = tg_fp_env_ieee();
        ew_square_loop(x, y, n);
        tg_fp_env_restore(env);
        break;
    }
    default: break;
    }
}

static void ew_binary(tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y,
                      int64_t n) {
    if (op == TGRAD_OP_MAXIMUM || op == TGRAD_OP_MINIMUM) {
        (op == TGRAD_OP_MAXIMUM ? ew_max_loop : ew_min_loop)(a, sa, b, sb, y, n);
        return;
    }
    tg_fp_env env = tg_fp_env_ieee();
    switch (op) {
    case TGRAD_OP_ADD: ew_add_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_SUB: ew_sub_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_MUL: ew_mul_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_DIV: ew_div_loop(a, sa, b, sb, y, n); break;
    default: break;
    }
    tg_fp_env_restore(env);
}
