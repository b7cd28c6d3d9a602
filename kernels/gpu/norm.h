// The norms' fast path (rms_norm, layer_norm), as every GPU kernel libtgrad renders for the norm
// kind computes it. A device prelude: the renderer (libtgrad/src/gen/render_norm.c) copies this
// text, verbatim, into each norm kernel (OpenCL C, CUDA and MSL).
//
// The CPU's doubles and bounds (kernels/cpu/norm_loops.h, libtgrad/src/ops/norm.c): an output is
// written only where its bound decides its rounding; otherwise the element is undecided (bit 32 of
// the tg_u64 returned) and the kernel flags its row, which the host recomputes with the CPU's own
// exact row code (tg_norm_rows_on_host). Same subset as kernels/gpu/softmax.h: binary64 in the
// function-call form over tg_f64 (kernels/gpu/softdouble.h's API), uint, tg_u64 and tg_i64.

// A bf16 value (its bits in the low 16) as a double (exact).
static inline tg_f64 tg_nm_bf(uint b) {
    return tg_d_f32(b << 16);
}

// y's bf16 bits when |y| is a normal bf16 magnitude and no rounding midpoint lies within err of y
// (|low45 - 2^44| ulps of y to the nearest one; err 2^53 / |y| bounds err in ulps); else bit 32
// set (norm_loops.h, fast_round).
static inline tg_u64 tg_nm_fast(tg_f64 y, tg_f64 err) {
    const tg_u64 u = tg_d_bits(y);
    const tg_u64 e = (u >> 52) & (tg_u64)0x7ffu;
    const tg_u64 low = u & (((tg_u64)1 << 45) - (tg_u64)1);
    const tg_f64 lowd = tg_d_of(((tg_u64)0x43300000u << 32) | low); // 2^52 + low, exact
    const tg_f64 low52 = tg_dsub(lowd, tg_dk(4503599627370496.0, 0x4330000000000000ul)); // low, exact
    const tg_f64 dist = tg_dabs(tg_dsub(low52, tg_dk(17592186044416.0, 0x42b0000000000000ul))); // |low - 2^44|
    const tg_u64 t = ((u & (~(tg_u64)0 >> 1)) + (((tg_u64)1 << 44) - (tg_u64)1) + ((u >> 45) & (tg_u64)1)) >> 45;
    const uint r = (uint)(((u >> 48) & (tg_u64)0x8000u) | (t - ((tg_u64)(1023 - 127) << 7))) & 0xffffu;
    const tg_f64 two53 = tg_dk(9007199254740992.0, 0x4340000000000000ul);
    const bool ok = e >= (tg_u64)(1023 - 125) && e <= (tg_u64)(1023 + 126) &&
                    tg_dgt(tg_dmul(dist, tg_dabs(y)), tg_dmul(err, two53));
    return ok ? (tg_u64)r : ((tg_u64)r | ((tg_u64)1 << 32));
}
