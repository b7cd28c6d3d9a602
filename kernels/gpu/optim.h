// The optimizer step (SGD and AdamW), as every GPU kernel libtgrad renders for the optim_step kind
// computes it. A device prelude: the renderer (libtgrad/src/gen/render_optim.c) copies this text,
// verbatim, after kernels/gpu/elementwise_f32.h into each optimizer kernel (MSL, OpenCL C and CUDA
// alike), and tests/c/test_gpu_optim.c compiles the same text as C: fma against the C library's
// fmaf, the step against the CPU's (libtgrad/src/ops/optim_arith.h, through tgrad_optim_step).
//
// The CPU's arithmetic, operation for operation: every op one IEEE float32 operation, torch's fused
// multiply-adds one rounding (fmaf), here on float32 bits in integers (elementwise_f32.h's add, mul,
// div and sqrt, and tg_f32_fma below), so no device's division, square root, contraction or
// subnormal flushing can change a byte. The same subset as elementwise_f32.h: uint, int, tg_u64,
// clz, structs passed by value, no pointers.

// (-1)^sign * m * 2^(x - 150) with m's highest bit moved to bit 60 (m != 0): more room below for
// the alignment's sticky bit.
typedef struct tg_f32_wide {
    uint sign;
    int x;
    tg_u64 m;
} tg_f32_wide;

static inline tg_f32_wide tg_f32_wide_of(uint sign, int x, tg_u64 m) {
    int k = 61 - tg_f32_len64(m);
    tg_f32_wide w;
    w.sign = sign;
    w.x = x - k;
    w.m = m << (uint)k;
    return w;
}

// a * b + c, rounded once (nearest even): IEEE's fusedMultiplyAdd on float32 bits, any NaN made
// 0x7fc00000. The product is exact (48 bits); the smaller of it and c is aligned to the larger
// with a sticky bit, which can only be set 13 or more binades down, where a difference keeps at
// least 59 bits, so the sticky bit lies far below the rounding position (tg_f32_round's need).
static inline uint tg_f32_fma(uint a, uint b, uint c) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b) || tg_f32_is_nan(c))
        return 0x7fc00000u;
    uint sp = (a ^ b) >> 31, sc = c >> 31;
    uint ma = a & 0x7fffffffu, mb = b & 0x7fffffffu, mc = c & 0x7fffffffu;
    if (ma == 0x7f800000u || mb == 0x7f800000u) {   // an infinite product: inf * 0 is NaN,
        if (ma == 0u || mb == 0u)                    // inf - inf too
            return 0x7fc00000u;
        if (mc == 0x7f800000u && sc != sp)
            return 0x7fc00000u;
        return (sp << 31) | 0x7f800000u;
    }
    if (mc == 0x7f800000u)
        return c;
    if (ma == 0u || mb == 0u) {              // a zero product: c + (-1)^sp 0
        if (mc == 0u)
            return (sp & sc) << 31;
        return c;
    }
    tg_u64 prod = (tg_u64)tg_f32_sig(a) * (tg_u64)tg_f32_sig(b);
    int xp = tg_f32_exp(a) + tg_f32_exp(b) - 150;
    if (mc == 0u)                            // p + 0 = p (non-zero): its own rounding
        return tg_f32_round(sp, xp, prod);
    tg_f32_wide p = tg_f32_wide_of(sp, xp, prod);
    tg_f32_wide q = tg_f32_wide_of(sc, tg_f32_exp(c), (tg_u64)tg_f32_sig(c));
    tg_f32_wide hi = p.x >= q.x ? p : q;
    tg_f32_wide lo = p.x >= q.x ? q : p;
    int d = hi.x - lo.x;
    tg_u64 al;
    if (d >= 62) {
        al = (tg_u64)1u;                     // far below: only its sign and that it is not 0
    } else {
        al = lo.m >> (uint)d;
        if ((al << (uint)d) != lo.m)
            al = al | (tg_u64)1u;
    }
    if (hi.sign == lo.sign)
        return tg_f32_round(hi.sign, hi.x, hi.m + al);
    if (hi.m == al)                          // exact cancellation: +0 when rounding to nearest
        return 0u;
    if (hi.m > al)
        return tg_f32_round(hi.sign, hi.x, hi.m - al);
    return tg_f32_round(lo.sign, hi.x, al - hi.m); // d = 0: the one with the larger significand wins
}

// a > b as float32 values (no NaN here): -0 and +0 are equal.
static inline bool tg_f32_gt(uint a, uint b) {
    if ((a & 0x7fffffffu) == 0u && (b & 0x7fffffffu) == 0u)
        return false;
    return tg_f32_key(a) > tg_f32_key(b);
}

// torch.maximum as the CPU's nan_max: a NaN operand propagates (a's first).
static inline uint tg_optim_nan_max(uint a, uint b) {
    if (tg_f32_is_nan(a))
        return a;
    if (tg_f32_is_nan(b))
        return b;
    return tg_f32_gt(a, b) ? a : b;
}

// The step's scalars (optim_arith.h): SGD wd, momentum, 1 - dampening, -lr; AdamW 1 - lr wd,
// w = 1 - b1, w - 1, b2, 1 - b2, c2, eps, -step_size. The flags are TGRAD_OPTIM_*'s bits:
// 1 maximize, 2 decay, 4 momentum, 8 nesterov, 16 amsgrad.
typedef struct tg_optim_scalars {
    uint s0, s1, s2, s3, s4, s5, s6, s7;
} tg_optim_scalars;

// Output `which` (0 the parameter, 1 .. 3 the states) of one element: inputs p, g and the states
// x2, x3, x4 (n of the five are given), algo 1 SGD or 2 AdamW; the CPU's `every`, then any NaN
// made 0x7fc00000 (the CPU's canonical).
static inline uint tg_optim_value(int algo, uint flags, int n, int which, tg_optim_scalars s, uint p, uint g, uint x2,
                                  uint x3, uint x4) {
    uint r0 = 0u, r1 = 0u, r2 = 0u, r3 = 0u;
    if ((flags & 1u) != 0u)
        g = g ^ 0x80000000u;
    if (algo == 1) {
        if ((flags & 2u) != 0u)
            g = tg_f32_fma(p, s.s0, g);
        if ((flags & 4u) != 0u) {
            uint buf = n > 2 ? tg_f32_fma(g, s.s2, tg_f32_mul(x2, s.s1)) : g;
            r1 = buf;
            g = (flags & 8u) != 0u ? tg_f32_fma(buf, s.s1, g) : buf;
        }
        r0 = tg_f32_fma(g, s.s3, p);
    } else {
        if ((flags & 2u) != 0u)
            p = tg_f32_mul(p, s.s0);
        uint m = x2;
        uint d = tg_f32_sub(g, m);
        // |w| < 0.5 (NaN is not): the bits of |w| below those of 0.5
        m = (s.s1 & 0x7fffffffu) < 0x3f000000u ? tg_f32_fma(d, s.s1, m) : tg_f32_fma(d, s.s2, g);
        r1 = m;
        uint v = tg_f32_fma(tg_f32_mul(g, s.s4), g, tg_f32_mul(x3, s.s3));
        r2 = v;
        if ((flags & 16u) != 0u) {
            if (n > 4)
                v = tg_optim_nan_max(x4, v);
            r3 = v;
        }
        uint denom = tg_f32_add(tg_f32_div(tg_f32_sqrt(v), s.s5), s.s6);
        r0 = tg_f32_add(p, tg_f32_div(tg_f32_mul(m, s.s7), denom));
    }
    uint r = which == 0 ? r0 : which == 1 ? r1 : which == 2 ? r2 : r3;
    return tg_f32_is_nan(r) ? 0x7fc00000u : r;
}
