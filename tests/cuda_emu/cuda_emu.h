// cuda_emu.h: the CUDA compute model, for the CUDA C++ subset tgrad renders (docs/msl-subset.md,
// "The CUDA subset"), as C++17 that g++ compiles and the CPU runs on the MSL emulator's runtime
// (tests/msl_emu/runtime.cpp, through emu_runtime.h). The driver (driver.py) includes this header
// first, so a kernel runs under the same model and checks as a generated MSL one:
//  - a block is a threadgroup, a thread a fiber; a warp is 32 threads by linear thread index
//    (x + y * blockDim.x + z * blockDim.x * blockDim.y), as on the hardware and as the runtime
//    forms simdgroups;
//  - __shared__ arrays (rewritten by the driver to MSL_EMU_THREADGROUP) are poisoned with 0xFF at
//    every block start and every access is race-checked between __syncthreads();
//  - __syncthreads() is a barrier that orders shared and global memory: every thread of the block
//    must reach the same one (line and call site), or the launch fails as divergent;
//  - tg_mma_m16n8k16_bf16, the tc route's one tensor-core operation (mma.sync.aligned.m16n8k16
//    .row.col.f32.bf16.bf16.f32), is a warp collective: each lane posts its fragments, the last
//    to arrive assembles A, B and C by the PTX ISA's fragment layout, multiplies in the chosen
//    summation order and hands each lane its D fragment; the driver removes the kernel's own
//    definition (inline PTX) so this one is used;
//  - buffers end at guard pages, inputs are read-only, signed overflow traps (driver flags).
// Standard headers come first (emu_runtime.h); the CUDA keywords become macros only after them.
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include "emu_runtime.h"

// ---- builtins: the running thread's ids, from the runtime --------------------------------------
#define threadIdx (msl_emu_ids()->thread_position_in_threadgroup)
#define blockIdx (msl_emu_ids()->threadgroup_position_in_grid)
#define blockDim (msl_emu_ids()->threads_per_threadgroup)
#define gridDim (msl_emu_ids()->threadgroups_per_grid)
constexpr int warpSize = 32;

// ---- device functions of the subset ----------------------------------------------------------------
// Float overloads, and the double ones the softmax kind's kernels use (kernels/gpu/softmax.h:
// fma, fabs, fmin, log1p on double, the norm kind's sqrt, rope's sin and cos, the normal draw's log, IEEE binary64 as on the GPU; log1p is the host's, within
// CUDA's documented 1 ulp as the kernels' bound assumes 2^-50 relative). A float kernel's mixed
// call (fma(a, b, 0.0) with float a, b) matches both overloads equally and fails to compile,
// where CUDA would quietly compute in double; copysign stays float only.
inline float fma(float a, float b, float c) { return msl_emu::flush(__builtin_fmaf(a, b, c)); }  // fused
inline float fmaf(float a, float b, float c) { return fma(a, b, c); }
inline float fabs(float x) { return __builtin_fabsf(x); }
inline float fabsf(float x) { return __builtin_fabsf(x); }
inline float copysign(float x, float y) { return __builtin_copysignf(x, y); }
inline float copysignf(float x, float y) { return __builtin_copysignf(x, y); }
inline double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }  // fused, no flush
inline double fabs(double x) { return __builtin_fabs(x); }
inline double fmin(double a, double b) { return __builtin_fmin(a, b); }
inline double log1p(double x) { return __builtin_log1p(x); }
inline double log(double x) { return __builtin_log(x); }  // the host's (glibc: within 1 ulp; CUDA's 1), normal's Box-Muller
inline double sqrt(double x) { return __builtin_sqrt(x); }  // correctly rounded, as CUDA's
inline double sin(double x) { return __builtin_sin(x); }  // the host's (glibc: within 1 ulp)
inline double cos(double x) { return __builtin_cos(x); }
double copysign(double, double) = delete;
// min/max: both arguments of one type (CUDA's mixed signed/unsigned overloads are left out).
template <class T>
inline T min(T a, T b) {
    return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
    return a < b ? b : a;
}

// Reinterpreting casts (the bits unchanged) and the integer intrinsics.
inline float __uint_as_float(uint u) {
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
inline uint __float_as_uint(float f) {
    uint u;
    __builtin_memcpy(&u, &f, 4);
    return u;
}
inline float __int_as_float(int i) { return __uint_as_float((uint)i); }
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline int __clz(int x) { return x ? __builtin_clz((uint)x) : 32; }  // __clz(0) is 32
inline long long __double_as_longlong(double d) {
    long long u;
    __builtin_memcpy(&u, &d, 8);
    return u;
}
inline double __longlong_as_double(long long u) {
    double d;
    __builtin_memcpy(&d, &u, 8);
    return d;
}

// ---- the warp-wide bf16 multiply-accumulate ---------------------------------------------------------
namespace cuda_emu {

// What one lane posts: its D (in: C) fragment and its A and B registers, two bf16 each, the
// lower-numbered element in the low 16 bits.
struct mma_lane {
    float *d;
    uint a[4];
    uint b[2];
};

inline float bf16_half(uint reg, int high) {
    return __uint_as_float((high ? reg >> 16 : reg & 0xffffu) << 16);
}

// The PTX ISA's m16n8k16 fragments (floating-point .bf16 A and B, .f32 C and D), for a lane with
// groupID g = lane >> 2 and threadID_in_group t = lane % 4:
//   A (16 x 16, row): element i of 8 (register i / 2): row g for i in {0,1,4,5}, g + 8 otherwise;
//                     column t * 2 + (i & 1), plus 8 for i >= 4;
//   B (16 x 8, col):  element i of 4 (register i / 2): row t * 2 + (i & 1), plus 8 for i >= 2;
//                     column g;
//   C, D (16 x 8):    element i of 4: row g for i < 2, g + 8 otherwise; column t * 2 + (i & 1).
inline int a_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
inline int a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
inline int b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
inline int b_col(int lane) { return lane >> 2; }
inline int c_row(int lane, int i) { return (lane >> 2) + (i >= 2 ? 8 : 0); }
inline int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

// The exact sum of C and the 16 products, rounded once to fp32 (nearest even). Every term is an
// integer multiple of 2^-300 (bf16 products: of 2^-266; fp32: of 2^-149) below 2^257, so a
// 640-bit two's complement fixed-point accumulator holds the sum exactly whatever the exponents.
// An infinite or NaN term (from C) makes the sum IEEE's, in double.
struct exact_sum {
    static constexpr int kLimbs = 10, kUnit = 300;  // value = N * 2^-kUnit
    uint64_t n[kLimbs] = {};
    bool all_negative_zero = true, nonfinite = false;
    double ieee = 0.0;

    void add_at(int limb, uint64_t v, bool negative) {
        for (int i = limb; i < kLimbs && v; i++) {
            const uint64_t old = n[i];
            n[i] = negative ? old - v : old + v;
            v = negative ? (old < v) : (n[i] < old);  // borrow or carry
        }
    }
    // The bit index (in units of 2^-kUnit) of a finite non-zero term's leading bit.
    static int lead(double t) {
        uint64_t u;
        __builtin_memcpy(&u, &t, 8);
        return (int)((u >> 52) & 0x7ff) - 1023 + kUnit;
    }
    // t: a multiple of 2^-300 below 2^300, or not finite. With `cut`, the bits of |t| below bit
    // index `cut` are dropped first (truncation toward zero, as a tensor core's alignment does).
    void add(double t, int cut = 0) {
        uint64_t u;
        __builtin_memcpy(&u, &t, 8);
        const bool negative = u >> 63;
        const int e = (int)((u >> 52) & 0x7ff);  // normal: every finite term is above 2^-1022
        ieee += t;
        nonfinite = nonfinite || e == 0x7ff;
        all_negative_zero = all_negative_zero && t == 0.0 && negative;
        if (t == 0.0 || e == 0x7ff) return;
        uint64_t mant = (u & ((1ull << 52) - 1)) | (1ull << 52);
        int shift = e - 1075 + kUnit;
        const int tz = __builtin_ctzll(mant);
        mant >>= tz, shift += tz;
        if (shift < 0) msl_emu_fail("cuda_emu: an mma term below 2^-300");
        if (shift < cut) {
            mant = cut - shift >= 64 ? 0 : mant >> (cut - shift);
            shift = cut;
            if (!mant) return;
        }
        const int limb = shift / 64, off = shift % 64;
        add_at(limb, mant << off, negative);
        if (off && (mant >> (64 - off))) add_at(limb + 1, mant >> (64 - off), negative);
    }
    int bit(int i) const { return (int)((n[i / 64] >> (i % 64)) & 1); }
    // To fp32: nearest even, or toward zero with `truncate`.
    float rounded(bool truncate = false) {
        if (nonfinite) return (float)ieee;
        const bool negative = n[kLimbs - 1] >> 63;
        if (negative) {  // |N|: two's complement negation
            uint64_t carry = 1;
            for (int i = 0; i < kLimbs; i++) {
                n[i] = ~n[i] + carry;
                carry = carry && n[i] == 0;
            }
        }
        int top = kLimbs * 64 - 1;
        while (top >= 0 && !bit(top)) top--;
        if (top < 0) return all_negative_zero ? -0.0f : 0.0f;
        // Keep 24 bits from the top, or down to 2^-149 (fp32 subnormals): bit `low` is the last.
        const int low = top - 23 > kUnit - 149 ? top - 23 : kUnit - 149;
        uint64_t q = 0;
        for (int i = top; i >= low; i--) q = q << 1 | (uint64_t)bit(i);
        bool sticky = false;
        for (int i = low - 2; i >= 0 && !sticky; i--) sticky = bit(i);
        if (!truncate && low >= 1 && bit(low - 1) && (sticky || (q & 1))) q++;
        // q * 2^(low - kUnit): exact in double; to float exactly, or to inf past the fp32 range
        const uint64_t scale_bits = (uint64_t)(low - kUnit + 1023) << 52;
        double scale;
        __builtin_memcpy(&scale, &scale_bits, 8);
        const float r = (float)((double)q * scale);
        return negative ? -r : r;
    }
};

// D = A * B + C in fp32, once per warp. The tensor core's order of the additions is unknown, so
// msl_emu_mma_order picks a model, as for the MSL simdgroup multiply-accumulate: 0: C, then the
// products k = 0..15 by fma; 1: the same from k = 15 down; 2: the exact sum of C and the 16
// products rounded once (exact_sum); 3 ("truncate"), the tensor cores' behaviour measured by Fasi,
// Higham, Mikaitis and Pranesh (2021) and Khattak and Mikaitis (2025), docs/kernels.md: the
// products in blocks of 8, each block's terms (the accumulator and 8 exact products) aligned to
// the largest one's leading bit with the bits past fp32's 24 cut off, summed, and the sum cut
// (toward zero) to fp32. tgrad's tc route must meet its error bound under every model.
inline float truncated_block(float acc, const float *a_row, const float (*B)[8], int col, int k0) {
    double terms[9];
    terms[0] = (double)acc;
    for (int k = 0; k < 8; k++) terms[k + 1] = (double)a_row[k0 + k] * (double)B[k0 + k][col];  // exact
    int top = -1;
    for (double t : terms)
        if (t != 0.0 && t - t == 0.0 && exact_sum::lead(t) > top) top = exact_sum::lead(t);  // finite
    exact_sum s;
    for (double t : terms) s.add(t, top - 23);
    return msl_emu::flush(s.rounded(true));
}

inline void mma_m16n8k16_bf16(uint64_t site, int line, float *d, uint a0, uint a1, uint a2, uint a3, uint b0,
                              uint b1) {
    mma_lane mine{ d, { a0, a1, a2, a3 }, { b0, b1 } };
    msl_emu::collective c{};
    c.op = msl_emu::OP_WARP_MMA, c.line = line, c.site = site;
    c.value = (uint64_t)(uintptr_t)&mine;  // per lane: read by the executing lane while this one waits
    msl_emu::collective *const *all = msl_emu_simd_arrive(&c);
    if (!all) return;
    float A[16][16], B[16][8], C[16][8];
    const mma_lane *lanes[32];
    for (int lane = 0; lane < 32; lane++) {
        const mma_lane *p = lanes[lane] = (const mma_lane *)(uintptr_t)all[lane]->value;
        for (int i = 0; i < 8; i++) A[a_row(lane, i)][a_col(lane, i)] = bf16_half(p->a[i / 2], i & 1);
        for (int i = 0; i < 4; i++) B[b_row(lane, i)][b_col(lane)] = bf16_half(p->b[i / 2], i & 1);
        for (int i = 0; i < 4; i++) C[c_row(lane, i)][c_col(lane, i)] = p->d[i];
    }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const int r = c_row(lane, i), col = c_col(lane, i);
            float acc = C[r][col];
            if (msl_emu_mma_order == 3) {
                acc = truncated_block(truncated_block(acc, A[r], B, col, 0), A[r], B, col, 8);
            } else if (msl_emu_mma_order == 2) {
                exact_sum s;
                s.add((double)acc);
                for (int k = 0; k < 16; k++) s.add((double)A[r][k] * (double)B[k][col]);  // exact
                acc = msl_emu::flush(s.rounded());
            } else {
                for (int j = 0; j < 16; j++) {
                    const int k = msl_emu_mma_order == 1 ? 15 - j : j;
                    acc = msl_emu::flush(__builtin_fmaf(A[r][k], B[k][col], acc));
                }
            }
            lanes[lane]->d[i] = acc;
        }
    msl_emu_simd_release();
}

}  // namespace cuda_emu

// ---- keywords, barrier and collective as macros, after every standard header -------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
// a program-scope read-only table (`__constant__ const T name[N] = {...};`, the random route's):
// an ordinary const array here
#define __constant__
// __shared__ must be `__shared__ T name[N]...;` at kernel scope: the driver rewrites those to
// MSL_EMU_THREADGROUP; any other use of the keyword fails to compile with this name.
#define __shared__ cuda_emu_shared_is_only_supported_for_kernel_scope_array_declarations
// __syncthreads orders shared and global memory.
#define __syncthreads() \
    msl_emu_barrier(__LINE__, ::msl_emu::MEM_THREADGROUP | ::msl_emu::MEM_DEVICE, __builtin_frame_address(0))
#define tg_mma_m16n8k16_bf16(...) ::cuda_emu::mma_m16n8k16_bf16(MSL_EMU_SITE, __LINE__, __VA_ARGS__)

#endif
