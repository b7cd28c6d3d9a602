// The normal distribution's fast path on a GPU (docs/random.md, "On GPU devices"): Box-Muller of
// one pair of Philox words in double, as libtgrad/src/ops/random.c's normal_pair computes it, with
// the kernel language's log, sqrt, sin and cos. The renderer (libtgrad/src/gen/render_random.c)
// copies this text, verbatim, after kernels/gpu/philox.h and kernels/gpu/softmax.h (tg_sm_round),
// into each normal kernel (OpenCL C and CUDA; MSL has no double).
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
// The common subset of OpenCL C 1.2 (cl_khr_fp64) and CUDA: double, uint, tg_u64 and tg_i64,
// log, sqrt, sin, cos and fabs on double, no pointers.

// Value jj (0: the cosine's, 1: the sine's) of the pair (w0, w1), as float32 (bf16 == 0u) or
// bfloat16 bits in the low word; bit 32 set when it is undecided. u = (w0 + 1) 2^-32 in (0, 1],
// r = sqrt(-2 ln u); the angle 2 pi w1 2^-32 taken as the nearest quarter turn q plus the reduced
// turn m 2^-32 (|m| <= 2^29, exact), its cosine and sine rotated by q quarters.
static inline tg_u64 tg_normal_value(uint w0, uint w1, uint jj, double mean, double sd, uint bf16) {
    const double TWO_M32 = 2.3283064365386963e-10;  // 2^-32, exactly
    const double TURN = 1.4629180792671596e-09;     // the double 2 pi 2^-32 (M_PI 2^-31), as the CPU's
    const double FAST_Z = 1.4210854715202004e-14;   // 2^-46
    const double U52 = 2.220446049250313e-16;       // 2^-52
    const uint q4 = (uint)(((tg_u64)w1 + ((tg_u64)1 << 29)) >> 30); // 0 .. 4
    const uint q = q4 & 3u;
    const tg_i64 m = (tg_i64)w1 - ((tg_i64)q4 << 30);
    // the exact value is mean: sd = 0, u = 1 (ln u = 0), or the trig factor is 0 (cos of an odd
    // quarter, sin of an even one)
    const bool zero = w0 == 0xffffffffu || (m == (tg_i64)0 && ((jj == 0u) == ((q & 1u) != 0u)));
    if (sd == 0.0 || zero)
        return (tg_u64)tg_sm_round(mean, bf16);
    const double u = ((double)w0 + 1.0) * TWO_M32;
    const double r = sqrt(-2.0 * log(u));
    const double a = (double)m * TURN;
    const double c = cos(a), s = sin(a);
    // rotated by q quarter turns: (c, s), (-s, c), (-c, -s), (s, -c)
    const double cz = q == 0u ? c : q == 1u ? -s : q == 2u ? -c : s;
    const double sz = q == 0u ? s : q == 1u ? c : q == 2u ? -s : -c;
    const double z = r * (jj == 0u ? cz : sz);
    const double sz_ = sd * z, y = mean + sz_;
    const double e = fabs(sz_) * 2.0 * FAST_Z + fabs(y) * U52;
    const uint lo = tg_sm_round(y - e, bf16), hi = tg_sm_round(y + e, bf16);
    return lo == hi ? (tg_u64)lo : ((tg_u64)lo | ((tg_u64)1 << 32));
}
