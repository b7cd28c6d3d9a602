// The normal distribution's fast path on a GPU (docs/random.md, "On GPU devices"): Box-Muller of
// one pair of Philox words in double, as libtgrad/src/ops/random.c's normal_pair computes it, with
// the kernel language's log, sqrt, sin and cos. The renderer (libtgrad/src/gen/render_random.c)
// copies this text, verbatim, after kernels/gpu/philox.h and kernels/gpu/softmax.h (tg_sm_round),
// into each normal kernel (OpenCL C, CUDA and MSL).
//
// Each value is decided as the CPU decides it: the interval y -+ e with e = 2 FAST_Z |sd z| +
// 2^-52 |y|, FAST_Z = 2^-46, must round one way (round to nearest even is monotonic). The CPU's
// bound covers libm's errors with a margin of 16; the kernel languages promise less: OpenCL C 1.2
// bounds log within 3 ulps, sin and cos within 4, sqrt correctly rounded (CUDA: 1, 2, 2 and 0),
// which keep z within about 7.5 ulps (2^-49.1) of its exact value, still 8 times inside the window.
// A value the window does not decide sets bit 32 of the result: the kernel flags its call, and
// the host draws that call again with the CPU's own code (a binary128 slow path). So every value
// is the exact mean + sd z rounded once, the CPU's bytes, whatever the device's libm.
//
// MSL has no double: there the arithmetic is kernels/gpu/softdouble.h's (the same IEEE bits) and
// log, sin and cos are kernels/gpu/softmath.h's, within 2 ulps each (the angle's |a| <= pi/4 needs
// no reduction), inside the window as the kernel languages' own are.
//
// Binary64 in the function-call form over tg_f64 (kernels/gpu/softmax.h's subset), with tg_dm_log,
// tg_dm_sin and tg_dm_cos (the language's log, sin and cos, or softmath.h's), uint, tg_u64 and
// tg_i64, no pointers.

// Value jj (0: the cosine's, 1: the sine's) of the pair (w0, w1), as float32 (bf16 == 0u) or
// bfloat16 bits in the low word; bit 32 set when it is undecided. u = (w0 + 1) 2^-32 in (0, 1],
// r = sqrt(-2 ln u); the angle 2 pi w1 2^-32 taken as the nearest quarter turn q plus the reduced
// turn m 2^-32 (|m| <= 2^29, exact), its cosine and sine rotated by q quarters.
static inline tg_u64 tg_normal_value(uint w0, uint w1, uint jj, tg_f64 mean, tg_f64 sd, uint bf16) {
    const tg_f64 TWO_M32 = tg_dk(2.3283064365386963e-10, 0x3df0000000000000ul); // 2^-32, exactly
    // the double 2 pi 2^-32 (M_PI 2^-31), as the CPU's
    const tg_f64 TURN = tg_dk(1.4629180792671596e-09, 0x3e1921fb54442d18ul);
    const tg_f64 FAST_Z = tg_dk(1.4210854715202004e-14, 0x3d10000000000000ul); // 2^-46
    const tg_f64 U52 = tg_dk(2.220446049250313e-16, 0x3cb0000000000000ul);     // 2^-52
    const uint q4 = (uint)(((tg_u64)w1 + ((tg_u64)1 << 29)) >> 30); // 0 .. 4
    const uint q = q4 & 3u;
    const tg_i64 m = (tg_i64)w1 - ((tg_i64)q4 << 30);
    // the exact value is mean: sd = 0, u = 1 (ln u = 0), or the trig factor is 0 (cos of an odd
    // quarter, sin of an even one)
    const bool zero = w0 == 0xffffffffu || (m == (tg_i64)0 && ((jj == 0u) == ((q & 1u) != 0u)));
    if (tg_deq(sd, tg_dk(0.0, 0x0000000000000000ul)) || zero)
        return (tg_u64)tg_sm_round(mean, bf16);
    const tg_f64 u = tg_dmul(tg_dadd(tg_d_i64((tg_i64)w0), tg_dk(1.0, 0x3ff0000000000000ul)), TWO_M32);
    const tg_f64 r = tg_dsqrt(tg_dmul(tg_dk(-2.0, 0xc000000000000000ul), tg_dm_log(u)));
    const tg_f64 a = tg_dmul(tg_d_i64(m), TURN);
    const tg_f64 c = tg_dm_cos(a), s = tg_dm_sin(a);
    // rotated by q quarter turns: (c, s), (-s, c), (-c, -s), (s, -c)
    const tg_f64 cz = q == 0u ? c : q == 1u ? tg_dneg(s) : q == 2u ? tg_dneg(c) : s;
    const tg_f64 sz = q == 0u ? s : q == 1u ? c : q == 2u ? tg_dneg(s) : tg_dneg(c);
    const tg_f64 z = tg_dmul(r, jj == 0u ? cz : sz);
    const tg_f64 sz_ = tg_dmul(sd, z), y = tg_dadd(mean, sz_);
    // e = 2 FAST_Z |sd z| + 2^-52 |y|
    const tg_f64 ez = tg_dmul(tg_dmul(tg_dabs(sz_), tg_dk(2.0, 0x4000000000000000ul)), FAST_Z);
    const tg_f64 e = tg_dadd(ez, tg_dmul(tg_dabs(y), U52));
    const uint lo = tg_sm_round(tg_dsub(y, e), bf16), hi = tg_sm_round(tg_dadd(y, e), bf16);
    return lo == hi ? (tg_u64)lo : ((tg_u64)lo | ((tg_u64)1 << 32));
}
