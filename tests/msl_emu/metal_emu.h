// metal_emu.h: the Metal compute model, for the MSL subset tgrad emits (docs/msl-subset.md), as
// C++17 that g++ compiles and the CPU runs. Included through the fake <metal_stdlib> beside it.
//
// How a kernel runs (runtime.cpp): each thread of a threadgroup is a fiber; the scheduler resumes
// them in a chosen order (forward, reverse, seeded shuffle) and switches only at barriers and
// simdgroup collectives, so a missing barrier shows up as a read of stale or poisoned memory.
//  - threadgroup arrays (rewritten by the driver to MSL_EMU_THREADGROUP) live in thread-local
//    storage of the OS thread running the threadgroup, filled with 0xFF at every threadgroup start;
//  - threadgroup_barrier releases when every thread of the threadgroup reached the same barrier:
//    the same line *and* the same call site (the return addresses up the kernel's own frames, so a
//    barrier in a helper called from two places is two barriers); threads that returned or wait
//    elsewhere are reported (divergence, deadlock);
//  - simdgroup_matrix operations and simd_* functions are collectives: every lane posts its
//    arguments and call site, the operation runs once when all lanes arrived, and arguments that
//    must be uniform (pointers, strides, flags, the matrix variable itself) are checked to be;
//  - every load and store of the kernel is instrumented (compiled with -fsanitize=thread, whose
//    hooks runtime.cpp defines: no TSan runtime is linked); one that touches threadgroup memory is
//    checked against the last writer and readers of each byte in the current barrier interval, so
//    a read, write or overwrite of another thread's data with no threadgroup_barrier carrying
//    mem_flags::mem_threadgroup in between is a data race, reported whatever the fiber order;
//  - signed integer overflow traps (UBSan, -fsanitize-undefined-trap-on-error) and is reported;
//  - a simdgroup_matrix holds only this lane's share of the elements, as on the hardware;
//  - buffers end at a guard page (an out-of-bounds access faults and is reported), inputs are
//    read-only.
// Standard headers come first; the MSL keywords become macros only after them.
#ifndef MSL_EMU_METAL_EMU_H
#define MSL_EMU_METAL_EMU_H

#include "emu_runtime.h"

typedef unsigned char uchar;
typedef unsigned long ulong;
struct ulong2 {
    ulong x, y;
    ulong2(ulong v = 0) : x(v), y(v) {}
    ulong2(ulong a, ulong b) : x(a), y(b) {}
};

// bfloat (MSL 3.1): 16-bit storage, conversions from float round to nearest even.
struct bfloat {
    ushort bits;
    bfloat() = default;
    bfloat(float f) {
        uint u;
        __builtin_memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) bits = (ushort)((u >> 16) | 0x40u);
        else bits = (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    operator float() const {
        uint u = (uint)bits << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
};

// ---- the metal namespace ----------------------------------------------------------------------
namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((int)a | (int)b); }

template <class To, class From>
inline To as_type(From from) {
    static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
    To to;
    __builtin_memcpy(&to, &from, sizeof to);
    return to;
}

inline float fma(float a, float b, float c) { return msl_emu::flush(__builtin_fmaf(a, b, c)); }
inline float fabs(float x) { return __builtin_fabsf(x); }
inline float copysign(float x, float y) { return __builtin_copysignf(x, y); }
// clz of MSL's integer functions (metal_integer); clz(0) is the width.
inline uint clz(uint x) { return x ? (uint)__builtin_clz(x) : 32u; }
// min/max: the subset has the overloads MSL 2.3 surely defines (integers of 32 bits or fewer,
// float). On long/ulong they are refused here: docs/msl-subset.md could not establish them.
#define MSL_EMU_NO_64BIT_MINMAX \
    "min/max on a 64-bit integer is outside the MSL subset (docs/msl-subset.md): write the comparison out"
template <class T>
inline T min(T a, T b) {
    static_assert(sizeof(T) <= 4, MSL_EMU_NO_64BIT_MINMAX);
    return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
    static_assert(sizeof(T) <= 4, MSL_EMU_NO_64BIT_MINMAX);
    return a < b ? b : a;
}

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
    static_assert(Cols * Rows % 32 == 0, "a simdgroup matrix spreads over 32 lanes");
    static constexpr int per_lane = Cols * Rows / 32;
    T e[per_lane];  // elements lane*per_lane .. +per_lane-1 of the row-major matrix
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(const T value) {
    simdgroup_matrix<T, Cols, Rows> m;
    for (int i = 0; i < m.per_lane; i++) m.e[i] = value;
    return m;
}

}  // namespace metal

namespace msl_emu {
using metal::simdgroup_matrix;

template <class T, int C, int R>
inline T &element(collective *const *all, int slot, int row, int col) {
    const int i = row * C + col, n = C * R / 32;
    return static_cast<simdgroup_matrix<T, C, R> *>(all[i / n]->mat[slot])->e[i % n];
}

template <class T, int C, int R>
void sg_load(uint64_t site, int line, simdgroup_matrix<T, C, R> &d, const T *src, ulong elements_per_row = C,
             ulong2 origin = ulong2(0), bool transpose = false) {
    collective c{};
    c.op = OP_LOAD, c.line = line, c.site = site, c.ptr = src, c.nmat = 1, c.mat[0] = &d;
    c.u[0] = elements_per_row, c.u[1] = origin.x, c.u[2] = origin.y, c.u[3] = transpose;
    if (collective *const *all = msl_emu_simd_arrive(&c)) {
        const T *base = src + origin.y * elements_per_row + origin.x;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++)
                element<T, C, R>(all, 0, r, k) = transpose ? base[k * elements_per_row + r] : base[r * elements_per_row + k];
        msl_emu_simd_release();
    }
}

template <class T, int C, int R>
void sg_store(uint64_t site, int line, const simdgroup_matrix<T, C, R> &m, T *dst, ulong elements_per_row = C,
              ulong2 origin = ulong2(0), bool transpose = false) {
    collective c{};
    c.op = OP_STORE, c.line = line, c.site = site, c.ptr = dst, c.nmat = 1, c.mat[0] = const_cast<simdgroup_matrix<T, C, R> *>(&m);
    c.u[0] = elements_per_row, c.u[1] = origin.x, c.u[2] = origin.y, c.u[3] = transpose;
    if (collective *const *all = msl_emu_simd_arrive(&c)) {
        T *base = dst + origin.y * elements_per_row + origin.x;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++)
                (transpose ? base[k * elements_per_row + r] : base[r * elements_per_row + k]) = element<T, C, R>(all, 0, r, k);
        msl_emu_simd_release();
    }
}

// d = a * b + c, computed once per simdgroup in fp32. The order of the additions is the device's
// and unknown: msl_emu_mma_order picks a model, 0: c, then the products k = 0..K-1 by fma;
// 1: the same from k = K-1 down; 2: the K exact products summed exactly, c added, one rounding.
// tgrad's tc route must meet its error bound under every model (docs/kernels.md).
template <class TD, class TA, class TB, class TC, int K, int C, int R>
void sg_mma(uint64_t site, int line, simdgroup_matrix<TD, C, R> &d, const simdgroup_matrix<TA, K, R> &a,
            const simdgroup_matrix<TB, C, K> &b, const simdgroup_matrix<TC, C, R> &c) {
    collective p{};
    p.op = OP_MMA, p.line = line, p.site = site, p.nmat = 4;
    p.mat[0] = &d, p.mat[1] = const_cast<simdgroup_matrix<TA, K, R> *>(&a);
    p.mat[2] = const_cast<simdgroup_matrix<TB, C, K> *>(&b), p.mat[3] = const_cast<simdgroup_matrix<TC, C, R> *>(&c);
    if (collective *const *all = msl_emu_simd_arrive(&p)) {
        if (msl_emu_mma_order == 3) msl_emu_fail("the mma model truncate is CUDA's (tests/cuda_emu), not Metal's");
        float A[R][K], B[K][C], out[R][C];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) A[r][k] = (float)element<TA, K, R>(all, 1, r, k);
        for (int k = 0; k < K; k++)
            for (int col = 0; col < C; col++) B[k][col] = (float)element<TB, C, K>(all, 2, k, col);
        for (int r = 0; r < R; r++)
            for (int col = 0; col < C; col++) {
                float acc = (float)element<TC, C, R>(all, 3, r, col);
                if (msl_emu_mma_order == 2) {
                    double s = (double)acc;  // K <= 8 products of fp32 values: exact in double
                    for (int k = 0; k < K; k++) s += (double)A[r][k] * (double)B[k][col];
                    acc = flush((float)s);
                } else {
                    for (int i = 0; i < K; i++) {
                        const int k = msl_emu_mma_order == 1 ? K - 1 - i : i;
                        acc = flush(__builtin_fmaf(A[r][k], B[k][col], acc));
                    }
                }
                out[r][col] = acc;
            }
        for (int r = 0; r < R; r++)
            for (int col = 0; col < C; col++) element<TD, C, R>(all, 0, r, col) = (TD)out[r][col];
        msl_emu_simd_release();
    }
}

template <class T>
inline uint64_t bits_of(T v) {
    uint64_t u = 0;
    __builtin_memcpy(&u, &v, sizeof v);
    return u;
}
template <class T>
inline T from_bits(uint64_t u) {
    T v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
}

template <class T>
T simd_collective(uint64_t site, int line, int op, T value, uint lane, int lane_uniform) {
    collective c{};
    c.op = op, c.line = line, c.site = site, c.value = bits_of(value), c.lane_arg = lane, c.lane_arg_uniform = lane_uniform;
    if (collective *const *all = msl_emu_simd_arrive(&c)) {
        int n = 0;
        while (n < 32 && all[n]) n++;
        for (int i = 0; i < n; i++) {
            T r{};
            if (op == OP_SUM) {
                for (int j = 0; j < n; j++) r = r + from_bits<T>(all[j]->value);  // lane order
            } else if (op == OP_BROADCAST || op == OP_SHUFFLE) {
                if (all[i]->lane_arg >= (uint)n) msl_emu_fail("simd_shuffle/simd_broadcast: source lane out of range");
                r = from_bits<T>(all[all[i]->lane_arg]->value);
            }
            all[i]->result = bits_of(r);
        }
        msl_emu_simd_release();
    }
    return from_bits<T>(c.result);
}

}  // namespace msl_emu

namespace metal {
template <class T>
inline T msl_emu_simd_sum(uint64_t site, int line, T v) {
    return msl_emu::simd_collective(site, line, msl_emu::OP_SUM, v, 0, 1);
}
template <class T>
inline T msl_emu_simd_broadcast(uint64_t site, int line, T v, ushort lane) {
    return msl_emu::simd_collective(site, line, msl_emu::OP_BROADCAST, v, lane, 1);
}
template <class T>
inline T msl_emu_simd_shuffle(uint64_t site, int line, T v, ushort lane) {
    return msl_emu::simd_collective(site, line, msl_emu::OP_SHUFFLE, v, lane, 0);
}
}  // namespace metal

// ---- keywords and collectives as macros, after every standard header -------------------------
#define kernel
#define device
#define constant
#define thread
// Shared arrays must be `threadgroup T name[N]...;` at kernel scope: the driver rewrites those to
// MSL_EMU_THREADGROUP (emu_runtime.h); any other use of the keyword fails to compile with this name.
#define threadgroup msl_emu_threadgroup_is_only_supported_for_kernel_scope_array_declarations

#define threadgroup_barrier(flags) msl_emu_barrier(__LINE__, (int)(flags), __builtin_frame_address(0))
#define simdgroup_barrier(flags)                                \
    do {                                                        \
        ::msl_emu::collective msl_emu_c_{};                     \
        msl_emu_c_.op = ::msl_emu::OP_SIMD_BARRIER;             \
        msl_emu_c_.line = __LINE__;                             \
        msl_emu_c_.site = MSL_EMU_SITE;                         \
        if (msl_emu_simd_arrive(&msl_emu_c_)) msl_emu_simd_release(); \
    } while (0)
#define simdgroup_load(...) ::msl_emu::sg_load(MSL_EMU_SITE, __LINE__, __VA_ARGS__)
#define simdgroup_store(...) ::msl_emu::sg_store(MSL_EMU_SITE, __LINE__, __VA_ARGS__)
#define simdgroup_multiply_accumulate(...) ::msl_emu::sg_mma(MSL_EMU_SITE, __LINE__, __VA_ARGS__)
#define simd_sum(v) msl_emu_simd_sum(MSL_EMU_SITE, __LINE__, v)
#define simd_broadcast(v, lane) msl_emu_simd_broadcast(MSL_EMU_SITE, __LINE__, v, lane)
#define simd_shuffle(v, lane) msl_emu_simd_shuffle(MSL_EMU_SITE, __LINE__, v, lane)

#endif
