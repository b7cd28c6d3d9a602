// The norms' fast path (rms_norm, layer_norm), as every GPU kernel libtgrad renders for the norm
// kind computes it. A device prelude: the renderer (libtgrad/src/gen/render_norm.c) copies this
// text, verbatim, into each norm kernel (OpenCL C and CUDA; MSL has no double).
//
// The CPU's doubles and bounds (kernels/cpu/norm_loops.h, libtgrad/src/ops/norm.c): an output is
// written only where its bound decides its rounding; otherwise the element is undecided (bit 32 of
// the tg_u64 returned) and the kernel flags its row, which the host recomputes with the CPU's own
// exact row code (tg_norm_rows_on_host). Same subset as kernels/gpu/softmax.h: double, uint,
// tg_u64, tg_i64 and the renderer's bit casts tg_d_bits, tg_d_of, tg_f_of; fabs on double.

// A bf16 value (its bits in the low 16) as a double (exact).
static inline double tg_nm_bf(uint b) {
    return (double)tg_f_of(b << 16);
}

// y's bf16 bits when |y| is a normal bf16 magnitude and no rounding midpoint lies within err of y
// (|low45 - 2^44| ulps of y to the nearest one; err 2^53 / |y| bounds err in ulps); else bit 32
// set (norm_loops.h, fast_round).
static inline tg_u64 tg_nm_fast(double y, double err) {
    const tg_u64 u = tg_d_bits(y);
    const tg_u64 e = (u >> 52) & (tg_u64)0x7ffu;
    const tg_u64 low = u & (((tg_u64)1 << 45) - (tg_u64)1);
    const double lowd = tg_d_of(((tg_u64)0x43300000u << 32) | low); // 2^52 + low, exact
    const double dist = fabs((lowd - 4503599627370496.0) - 17592186044416.0);
    const tg_u64 t = ((u & (~(tg_u64)0 >> 1)) + (((tg_u64)1 << 44) - (tg_u64)1) + ((u >> 45) & (tg_u64)1)) >> 45;
    const uint r = (uint)(((u >> 48) & (tg_u64)0x8000u) | (t - ((tg_u64)(1023 - 127) << 7))) & 0xffffu;
    const bool ok = e >= (tg_u64)(1023 - 125) && e <= (tg_u64)(1023 + 126) && dist * fabs(y) > err * 9007199254740992.0;
    return ok ? (tg_u64)r : ((tg_u64)r | ((tg_u64)1 << 32));
}
