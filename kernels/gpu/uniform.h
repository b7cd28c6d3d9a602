// float32 uniform(low, high) on a GPU (docs/random.md, "On GPU devices"): a value of the draw as
// libtgrad/src/ops/random.c's uniform_value computes it, y = low + (high - low) k 2^-24 in binary64
// (k the word's top 24 bits), decided within the CPU's window or left to the host. The renderer
// (libtgrad/src/gen/render_random.c) copies this text, verbatim, after kernels/gpu/philox.h and
// kernels/gpu/softmax.h (tg_sm_round) into each such kernel (OpenCL C, CUDA and MSL, whose doubles
// are kernels/gpu/softdouble.h's).
//
// k 2^-24 is exact and the difference, the product and the sum are rounded once each, within
// 2^-53 of their results: (|low| + |high| + |y|) 2^-50 bounds y's distance from the exact value (the
// CPU's bound). When both ends of that window round to the same float32 (round to nearest even is
// monotonic), that is the exact value's rounding; otherwise bit 32 of the result is set, the kernel
// flags the value's Philox call, and the host draws the call again with the CPU's code (its exact
// path, a 3-limb integer sum). So the bytes are the CPU's.
//
// Binary64 in the function-call form over tg_f64 (kernels/gpu/softmax.h's subset), uint, tg_u64,
// tg_i64, no pointers.

// The value of Philox word `word` as float32 bits in the low word, bit 32 set when undecided.
static inline tg_u64 tg_uniform_value(uint word, tg_f64 low, tg_f64 high) {
    const tg_f64 u = tg_dmul(tg_d_i64((tg_i64)(word >> 8)), tg_dk(5.9604644775390625e-08, 0x3e70000000000000ul));
    const tg_f64 y = tg_dadd(low, tg_dmul(tg_dsub(high, low), u));
    const tg_f64 mag = tg_dadd(tg_dadd(tg_dabs(low), tg_dabs(high)), tg_dabs(y));
    const tg_f64 e = tg_dmul(mag, tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul)); // 2^-50
    const uint lo = tg_sm_round(tg_dsub(y, e), 0u), hi = tg_sm_round(tg_dadd(y, e), 0u);
    return lo == hi ? (tg_u64)lo : ((tg_u64)lo | ((tg_u64)1 << 32));
}
