/* The random kind: tgrad_random checks and records a node with no inputs; tg_random_execute draws
 * each element from (seed, offset + i) alone (kernels/gpu/philox.h), threaded over chunks, so the
 * bytes are the same for every thread count and chunking. Each floating value is the exact
 * transform of its words rounded once (docs/random.md): a double evaluation with an error bound
 * decides almost every value (Ziv); the rest take a slow path (uniform: exact integer arithmetic;
 * normal: binary128), counted for tgrad_debug_random_slow_path. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h" /* and gen/gen.h, through schedule.h */

typedef uint32_t uint;
typedef uint64_t tg_u64;
#define clz(x) ((uint)__builtin_clz(x))
#include "../../../kernels/gpu/philox.h"
#undef clz

#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 xf;
#define XLOG logq
#define XSQRT sqrtq
#define XSIN sinq
#define XCOS cosq
#define XPI M_PIq
#define XWINDOW 0x1p-100Q /* the binary128 evaluation's relative bound, with a margin (docs) */
#else
#include <float.h>
typedef long double xf; /* binary128 on aarch64 Linux; x87's 64 bits on x86; double on macOS */
#define XLOG logl
#define XSQRT sqrtl
#define XSIN sinl
#define XCOS cosl
#define XPI 3.141592653589793238462643383279502884L
#define XWINDOW ((xf)ldexp(1.0, 13 - LDBL_MANT_DIG))
#endif

/* The double evaluation of z = r * trig is within 2^-46 of z (relative; at most ~2^-50 proven in
 * docs/random.md): a margin of 16 over libm's documented bounds. */
#define FAST_Z 0x1p-46

/* ---- the registry ---- */
#define TG_RANDOM_NAME_(code, NAME, name) [code] = #name,
static const char *const names[TGRAD_RANDOM_END_] = { TGRAD_RANDOM_LIST(TG_RANDOM_NAME_) };
#undef TG_RANDOM_NAME_

TGRAD_API const char *tgrad_random_name(int32_t dist) {
    return dist > 0 && dist < TGRAD_RANDOM_END_ ? names[dist] : "unknown_random";
}

static _Atomic int64_t counters[TGRAD_RANDOM_END_][TGRAD_DEBUG_RANDOM_COUNT];
static inline void count(int32_t dist, int32_t what) {
    atomic_fetch_add_explicit(&counters[dist][what], 1, memory_order_relaxed);
}

/* ---- rounding once ---- */
static inline uint32_t bits_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
/* The output dtype's bits (bf16 in the low 16) of the double y, rounded to nearest even once. */
static inline uint32_t round_d(double y, int32_t dtype) {
    return dtype == TGRAD_DTYPE_F32 ? bits_f32((float)y) : tg_f64_to_bf16(y);
}
/* The same for a slow value: float32 directly (binary128 -> binary32 rounds once); bf16 through
 * a double rounded to odd (53 bits >= 8 + 2: the second rounding is then exact). */
static inline uint32_t round_x(xf y, int32_t dtype) {
    if (dtype == TGRAD_DTYPE_F32) return bits_f32((float)y);
    double d = (double)y;
    if ((xf)d != y && isfinite(d)) {
        if (((xf)d < 0 ? -(xf)d : (xf)d) > (y < 0 ? -y : y)) d = nextafter(d, 0.0);
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        u |= 1u;
        memcpy(&d, &u, sizeof d);
    }
    return tg_f64_to_bf16(d);
}
/* True (and *out, the rounding of y) when every value within e of y rounds alike. In the normal
 * range of the output, by y's bits: its distance to the nearest rounding midpoint of its binade,
 * in units of y's last bit, must exceed e in those units plus one, and so must a quarter of the
 * output's spacing (the distance from a power of two down to the binade below's top midpoint).
 * Elsewhere (tiny, huge, zero): the two ends of the interval
 * must round alike (RNE is monotonic). */
static inline bool decide_d(double y, double e, int32_t dtype, uint32_t *out) {
    double a = fabs(y);
    if (a >= 0x1p-120 && a < 0x1p126) {
        uint64_t u;
        memcpy(&u, &y, sizeof u);
        int32_t keep = dtype == TGRAD_DTYPE_F32 ? 23 : 7, drop = 52 - keep;
        uint64_t mag = u & ~((uint64_t)1 << 63), half = (uint64_t)1 << (drop - 1);
        uint64_t rest = mag & ((half << 1) - 1), dist = rest > half ? rest - half : half - rest;
        int32_t ex = (int32_t)(mag >> 52) - 1023; /* a = 1.f 2^ex; y's last bit is 2^(ex - 52) */
        uint64_t scale_bits = (uint64_t)(1023 + 52 - ex) << 52;
        double scale;
        memcpy(&scale, &scale_bits, sizeof scale);
        double reach = e * scale + 1; /* the lower binade's top midpoint is half/2 below a power of two */
        if (!((double)dist > reach && (double)(half >> 1) > reach)) return false;
        uint64_t r = ((mag + half) >> drop) - ((uint64_t)(1023 - 127) << keep); /* not a tie: up is RNE */
        *out = (uint32_t)((u >> 63) << (keep + 8)) | (uint32_t)r;
        return true;
    }
    *out = round_d(y - e, dtype);
    return *out == round_d(y + e, dtype);
}
static inline bool decide_x(xf y, xf e, int32_t dtype, uint32_t *out) {
    *out = round_x(y - e, dtype);
    return *out == round_x(y + e, dtype);
}

/* ---- uniform: low + (high - low) k 2^-b, exactly rounded ---- */
/* The exact value times 2^b is low (2^b - k) + high k: a sum of two doubles times integers below
 * 2^25, held as a two's complement fixed-point integer whose least significant bit is 2^-1126
 * (the lowest bit of a subnormal double's integer significand) and whose top covers 2^1024 2^25. */
enum { LIMBS = 37, LSB = 1126 };

static void big_add(uint64_t *L, double x, uint64_t j) {
    if (x == 0 || j == 0) return;
    int e;
    double m = frexp(fabs(x), &e);
    unsigned __int128 v = (unsigned __int128)(uint64_t)ldexp(m, 53) * j; /* |x| j = v 2^(e - 53) */
    int32_t p = e - 53 + LSB;                                              /* >= 0 */
    int32_t limb = p / 64, sh = p % 64;
    uint64_t v0 = (uint64_t)v, v1 = (uint64_t)(v >> 64); /* v1 < 2^14 */
    uint64_t parts[3] = { v0 << sh, (sh ? v0 >> (64 - sh) : 0) | (v1 << sh), sh ? v1 >> (64 - sh) : 0 };
    bool neg = x < 0;
    unsigned carry = 0;
    for (int32_t i = limb; i < LIMBS; i++) {
        uint64_t add = i - limb < 3 ? parts[i - limb] : 0;
        if (!neg) {
            uint64_t s = L[i] + add, s2 = s + carry;
            carry = (s < add) + (s2 < s);
            L[i] = s2;
        } else {
            uint64_t d = L[i] - add, d2 = d - carry;
            carry = (L[i] < add) + (d < (uint64_t)carry);
            L[i] = d2;
        }
        if (i - limb >= 2 && !carry) break;
    }
}

static uint32_t uniform_exact(double low, double high, uint32_t k, int32_t b, int32_t dtype) {
    uint64_t L[LIMBS] = { 0 };
    big_add(L, low, ((uint64_t)1 << b) - k);
    big_add(L, high, k);
    bool neg = L[LIMBS - 1] >> 63;
    if (neg) { /* magnitude: two's complement negation */
        unsigned carry = 1;
        for (int32_t i = 0; i < LIMBS; i++) {
            uint64_t v = ~L[i] + carry;
            carry = carry && v == 0;
            L[i] = v;
        }
    }
    int32_t top = LIMBS - 1;
    while (top >= 0 && L[top] == 0) top--;
    if (top < 0) return 0; /* exactly zero: +0 */
    int32_t lead = top * 64 + 63 - __builtin_clzll(L[top]); /* index of the leading bit */
    /* The 53 bits from the leading one down, the rest as a sticky bit (round to odd). */
    uint64_t mant = 0;
    bool sticky = false;
    int32_t low_bit = lead - 52 > 0 ? lead - 52 : 0;
    for (int32_t bit = lead; bit >= low_bit; bit--) mant = (mant << 1) | ((L[bit / 64] >> (bit % 64)) & 1u);
    for (int32_t i = 0; i <= low_bit / 64 && !sticky; i++) {
        uint64_t w = L[i];
        if (i == low_bit / 64) w &= low_bit % 64 ? (((uint64_t)1 << (low_bit % 64)) - 1) : 0;
        sticky = w != 0;
    }
    if (sticky) mant |= 1u;
    /* Below 2^-1000 the value rounds to a signed zero in both dtypes whatever ldexp does. */
    double d = ldexp((double)mant, low_bit - LSB - b);
    return round_d(neg ? -d : d, dtype);
}

static inline uint32_t uniform_value(double low, double high, uint32_t k, int32_t b, int32_t dtype) {
    double u = (double)k * (b == 24 ? 0x1p-24 : 0x1p-8), y = low + (high - low) * u;
    /* three roundings, each within 2^-53 of its result: (|low| + |high| + |y|) 2^-50 bounds them */
    uint32_t r;
    if (decide_d(y, (fabs(low) + fabs(high) + fabs(y)) * 0x1p-50, dtype, &r)) return r;
    count(TGRAD_RANDOM_UNIFORM, TGRAD_DEBUG_RANDOM_SLOW);
    return uniform_exact(low, high, k, b, dtype);
}

uint32_t tg_random_uniform_bits(double low, double high, uint32_t k, int32_t dtype) {
    return uniform_value(low, high, k, dtype == TGRAD_DTYPE_F32 ? 24 : 8, dtype);
}

/* ---- normal: mean + std z, Box-Muller ---- */
/* For words (w0, w1): r = sqrt(-2 ln u), u = (w0 + 1) 2^-32 in (0, 1]; the angle is 2 pi t,
 * t = w1 2^-32 turns. cos and sin of 2 pi t are taken on the reduced turn m 2^-32, m = w1 - q 2^30
 * with q the nearest quarter (|m| <= 2^29, exact), so the argument's relative error is tiny. */
typedef struct { int32_t q, m; } turn;
static inline turn reduce_turn(uint32_t w1) {
    int32_t q = (int32_t)(((uint64_t)w1 + ((uint64_t)1 << 29)) >> 30); /* 0 .. 4 */
    return (turn){ q & 3, (int32_t)((int64_t)w1 - ((int64_t)q << 30)) };
}
/* cos and sin of 2 pi (q/4 + m 2^-32) from c = cos(a), s = sin(a), a = 2 pi m 2^-32. */
#define ROTATE(T, q, c, s, cosv, sinv)                      \
    do {                                                    \
        T c_ = (c), s_ = (s);                               \
        switch (q) {                                        \
        case 0: cosv = c_, sinv = s_; break;                \
        case 1: cosv = -s_, sinv = c_; break;               \
        case 2: cosv = -c_, sinv = -s_; break;              \
        default: cosv = s_, sinv = -c_; break;              \
        }                                                   \
    } while (0)

/* The exact z of element j (0: the cosine, 1: the sine) is zero: u = 1, or the trig factor is. */
static inline bool z_is_zero(uint32_t w0, turn t, int32_t j) {
    if (w0 == UINT32_MAX) return true;
    return t.m == 0 && ((j == 0) == (t.q & 1)); /* cos of an odd quarter, sin of an even one */
}

static void normal_pair(uint32_t w0, uint32_t w1, double mean, double sd, int32_t dtype, uint32_t out[2]) {
    turn t = reduce_turn(w1);
    double u = ldexp((double)w0 + 1, -32), r = sqrt(-2 * log(u));
    double a = (double)t.m * (2 * M_PI * 0x1p-32), cz, sz;
    ROTATE(double, t.q, cos(a), sin(a), cz, sz);
    double z[2] = { r * cz, r * sz };
    for (int32_t j = 0; j < 2; j++) {
        if (sd == 0 || z_is_zero(w0, t, j)) { /* the value is mean exactly */
            out[j] = round_d(mean, dtype);
            continue;
        }
        double sz_ = sd * z[j], y = mean + sz_;
        if (decide_d(y, fabs(sz_) * 2 * FAST_Z + fabs(y) * 0x1p-52, dtype, &out[j])) continue;
        count(TGRAD_RANDOM_NORMAL, TGRAD_DEBUG_RANDOM_SLOW);
        xf ux = (xf)u, rx = XSQRT(-2 * XLOG(ux)), ax = (xf)t.m * (2 * XPI) / (xf)4294967296.0, cx, sx;
        ROTATE(xf, t.q, XCOS(ax), XSIN(ax), cx, sx);
        xf zx = rx * (j ? sx : cx), px = (xf)sd * zx, yx = (xf)mean + px;
        xf ex = (px < 0 ? -px : px) * XWINDOW + (yx < 0 ? -yx : yx) * XWINDOW * (xf)0x1p-10;
        if (!decide_x(yx, ex, dtype, &out[j])) count(TGRAD_RANDOM_NORMAL, TGRAD_DEBUG_RANDOM_UNDECIDED);
    }
}

/* ---- the constructor ---- */
static tgrad_status check_params(int32_t dist, double p0, double p1, int32_t *dtype) {
    const char *fn = tgrad_random_name(dist);
    bool fl = *dtype == TGRAD_DTYPE_BF16 || *dtype == TGRAD_DTYPE_F32;
    if (dist == TGRAD_RANDOM_RANDINT) {
        if (*dtype == 0) *dtype = TGRAD_DTYPE_I32;
        if (*dtype != TGRAD_DTYPE_I32)
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "randint: gives int32 (%d), not %s", TGRAD_DTYPE_I32,
                           tg_dtype_name(*dtype));
        if (!(p0 == floor(p0) && p1 == floor(p1) && p0 >= -0x1p31 && p1 <= 0x1p31 && p0 < p1 && p1 - p0 < 0x1p32))
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT,
                           "randint: low %.17g and high %.17g must be integers with -2^31 <= low < high <= 2^31 "
                           "and high - low < 2^32", p0, p1);
        return TGRAD_OK;
    }
    if (*dtype == 0) *dtype = TGRAD_DTYPE_BF16, fl = true;
    if (!fl)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: gives bfloat16 (%d) or float32 (%d), not %s", fn,
                       TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32, tg_dtype_name(*dtype));
    if (dist == TGRAD_RANDOM_UNIFORM && !(isfinite(p0) && isfinite(p1) && p0 <= p1 && isfinite(p1 - p0)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "uniform: low %g and high %g must be finite with low <= high", p0,
                       p1);
    if (dist == TGRAD_RANDOM_NORMAL && !(isfinite(p0) && isfinite(p1) && p1 >= 0))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "normal: mean %g and std %g must be finite with std >= 0", p0, p1);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_random(int32_t dist, uint64_t seed, uint64_t offset, int32_t ndim, const int64_t *shape,
                                    int32_t dtype, double p0, double p1, int32_t device, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "random: out is NULL");
    if (dist <= 0 || dist >= TGRAD_RANDOM_END_)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "random: %d is not a distribution (uniform %d, normal %d, randint %d)",
                       (int)dist, TGRAD_RANDOM_UNIFORM, TGRAD_RANDOM_NORMAL, TGRAD_RANDOM_RANDINT);
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: shape is NULL", tgrad_random_name(dist));
    if (device < TGRAD_DEVICE_CPU || device > TGRAD_DEVICE_CUDA)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d is not a device code", tgrad_random_name(dist), (int)device);
    tgrad_status s = check_params(dist, p0, p1, &dtype);
    if (!s) s = tg_kind_check_device(TG_OP_RANDOM, device, tgrad_random_name(dist));
    /* a GPU device draws what its kernels give exactly (gen/render_random.c) */
    if (!s && device != TGRAD_DEVICE_CPU) s = tg_gen_random_renders(tg_device_lang(device), dist, dtype, p0, p1);
    if (!s) s = tg_device_ready(device);
    tg_view ov;
    int64_t numel = 0;
    if (!s) s = tg_view_contiguous(ndim, shape, &ov);
    if (!s) s = tg_view_numel(&ov, &numel);
    if (!s && (uint64_t)numel > UINT64_MAX - offset)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: offset %llu + %lld elements passes 2^64", tgrad_random_name(dist),
                       (unsigned long long)offset, (long long)numel);
    if (!s) s = tg_check_bytes(numel, dtype, tgrad_random_name(dist));
    if (!s) s = tg_memory_admit_typed(numel, tg_dtype_size(dtype), tgrad_random_name(dist));
    if (s) return s;
    tg_node *n = tg_node_new(TG_OP_RANDOM, 0);
    if (!n) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a graph node", tgrad_random_name(dist));
    n->out = ov;
    n->dtype = dtype;
    n->params.random.dist = dist;
    n->params.random.seed = seed;
    n->params.random.offset = offset;
    n->params.random.p0 = p0;
    n->params.random.p1 = p1;
    tg_buffer *b = NULL;
    if ((s = tg_buffer_new_typed(numel, dtype, n, &b))) {
        free(n);
        return s;
    }
    b->device = device;
    if ((s = tg_handle_new_tensor(b, &ov, out))) tg_buffer_release(b);
    return s;
}

/* ---- the executor ---- */
enum { CHUNK = 1 << 14 }; /* elements per task (a multiple of 4) */

typedef struct {
    const tg_node_params *p;
    int32_t dtype;
    int64_t numel;
    void *out;
} random_job;

/* The words of Philox call c of the draw: counter (c mod 2^32, c / 2^32, dist, 0), key = seed. */
static inline tg_philox_words call(const tg_node_params *p, uint64_t c) {
    return tg_philox4x32_10((uint)c, (uint)(c >> 32), (uint)p->random.dist, 0u, (uint)p->random.seed,
                            (uint)(p->random.seed >> 32));
}

/* The four normal values of one Philox call's words: words (0, 1) and (2, 3) as Box-Muller pairs. */
static void normal_call(const tg_node_params *p, tg_philox_words w, int32_t dtype, uint32_t out[4]) {
    normal_pair(w.w[0], w.w[1], p->random.p0, p->random.p1, dtype, out);
    normal_pair(w.w[2], w.w[3], p->random.p0, p->random.p1, dtype, out + 2);
}

static inline void store(const random_job *J, int64_t i, uint32_t bits) {
    if (J->dtype == TGRAD_DTYPE_BF16) ((uint16_t *)J->out)[i] = (uint16_t)bits;
    else ((uint32_t *)J->out)[i] = bits;
}

static void task(int64_t t, int32_t worker, void *arg) {
    (void)worker;
    const random_job *J = arg;
    const tg_node_params *p = J->p;
    uint64_t off = p->random.offset;
    int64_t lo = t * CHUNK, hi = lo + CHUNK < J->numel ? lo + CHUNK : J->numel;
    int32_t per = p->random.dist == TGRAD_RANDOM_RANDINT ? 2 : 4; /* elements per Philox call */
    bool unit = p->random.p0 == 0 && p->random.p1 == 1;
    int32_t b = J->dtype == TGRAD_DTYPE_F32 ? 24 : 8;
    uint64_t g = off + (uint64_t)lo, c = g / (uint64_t)per; /* element lo's call and word */
    int32_t j = (int32_t)(g % (uint64_t)per);
    tg_philox_words w = call(p, c);
    uint32_t normals[4] = { 0 };
    bool normal = p->random.dist == TGRAD_RANDOM_NORMAL;
    if (normal) normal_call(p, w, J->dtype, normals);
    for (int64_t i = lo; i < hi; i++) {
        switch (p->random.dist) {
        case TGRAD_RANDOM_UNIFORM:
            if (unit) store(J, i, J->dtype == TGRAD_DTYPE_F32 ? tg_philox_unit_f32(w.w[j]) : tg_philox_unit_bf16(w.w[j]));
            else store(J, i, uniform_value(p->random.p0, p->random.p1, w.w[j] >> (32 - b), b, J->dtype));
            break;
        case TGRAD_RANDOM_NORMAL: store(J, i, normals[j]); break;
        default: {
            uint32_t n = (uint32_t)(p->random.p1 - p->random.p0);
            ((int32_t *)J->out)[i] = (int32_t)((int64_t)p->random.p0 + tg_philox_below(w.w[2 * j], w.w[2 * j + 1], n));
        }
        }
        if (++j == per && i + 1 < hi) { /* the next call (no division per element) */
            j = 0, w = call(p, ++c);
            if (normal) normal_call(p, w, J->dtype, normals);
        }
    }
}

tgrad_status tg_random_execute(const tg_step *st) {
    random_job J = { .p = &st->base->params, .dtype = st->buf->dtype, .numel = st->buf->numel, .out = st->buf->data };
    int64_t tasks = (J.numel + CHUNK - 1) / CHUNK;
    if (tasks <= 1 || tg_pool_threads() <= 1)
        for (int64_t t = 0; t < tasks; t++) task(t, 0, &J);
    else
        tg_pool_run(tasks, task, &J);
    return TGRAD_OK;
}

/* After a GPU normal or float32 uniform(low, high) kernel (gen/render_random.c): each flagged
 * thread's Philox call drawn again with the CPU's code into the device's values. */
tgrad_status tg_random_calls_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    const tg_node_params *p = &st->base->params;
    const tg_buffer *ob = st->buf;
    const tg_gen_random drawn = { .dist = p->random.dist, .dtype = ob->dtype, .p0 = p->random.p0, .p1 = p->random.p1 };
    if (!tg_gen_random_flagged(&drawn)) /* the renderer's rule for the kernels that flag calls */
        return tg_fail(TGRAD_ERR_INTERNAL, "random: flags from a %s kernel", tgrad_random_name(p->random.dist));
    const bool normal = p->random.dist == TGRAD_RANDOM_NORMAL;
    size_t esize = (size_t)tg_dtype_size(ob->dtype), bytes = (size_t)ob->numel * esize;
    void *out = tg_calloc(bytes ? bytes : 1, 1);
    if (!out)
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot stage %lld flagged calls on the host",
                       tgrad_random_name(p->random.dist), (long long)flagged);
    random_job J = { .p = p, .dtype = ob->dtype, .numel = ob->numel, .out = out };
    tgrad_status s = tg_device_download(st->device, ob->dev_mem, out, bytes);
    uint64_t off = p->random.offset, last_call = (UINT64_C(1) << 62) - 1;
    for (int64_t t = 0; !s && t < nflags; t++) {
        if (!flags[t]) continue;
        uint64_t c = ((off >> 2) + (uint64_t)t) & last_call;
        uint32_t v[4];
        tg_philox_words w = call(p, c);
        if (normal) normal_call(p, w, J.dtype, v);
        else
            for (int32_t j = 0; j < 4; j++) v[j] = uniform_value(p->random.p0, p->random.p1, w.w[j] >> 8, 24, J.dtype);
        for (uint64_t j = 0; j < 4; j++) {
            uint64_t i = (c << 2 | j) - off;
            if (i < (uint64_t)J.numel) store(&J, (int64_t)i, v[j]);
        }
    }
    if (!s) s = tg_device_upload(st->device, ob->dev_mem, out, bytes);
    free(out);
    return s;
}

/* ---- debug ---- */
TGRAD_API tgrad_status tgrad_debug_philox(const uint32_t *counter, const uint32_t *key, uint32_t *out) {
    if (!counter || !key || !out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_philox: a pointer is NULL");
    tg_philox_words w = tg_philox4x32_10(counter[0], counter[1], counter[2], counter[3], key[0], key[1]);
    memcpy(out, w.w, sizeof w.w);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_random_slow_path(int32_t dist, int64_t *counts, int32_t count_) {
    if (dist <= 0 || dist >= TGRAD_RANDOM_END_)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_random_slow_path: %d is not a distribution", (int)dist);
    if (!counts || count_ < 1 || count_ > TGRAD_DEBUG_RANDOM_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_random_slow_path: counts is NULL or count %d is not 1 .. %d",
                       (int)count_, TGRAD_DEBUG_RANDOM_COUNT);
    for (int32_t i = 0; i < count_; i++) counts[i] = atomic_load_explicit(&counters[dist][i], memory_order_relaxed);
    return TGRAD_OK;
}
