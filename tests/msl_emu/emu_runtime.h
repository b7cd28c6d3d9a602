// emu_runtime.h: what an emulated kernel and the runtime (runtime.cpp) share, whichever language
// the kernel was written in: the thread ids, a collective's posting, and the runtime's entry
// points. metal_emu.h (MSL) and tests/cuda_emu/cuda_emu.h (CUDA C++) each map their language's
// builtins, barriers and collectives onto these; runtime.cpp includes only this file.
#ifndef MSL_EMU_EMU_RUNTIME_H
#define MSL_EMU_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned short ushort;
typedef unsigned int uint;

struct uint2 {
    uint x, y;
};
struct uint3 {
    uint x, y, z;
};

// ---- the runtime's side (runtime.cpp) -------------------------------------------------------
namespace msl_emu {

// A builtin value converts to the type the kernel declares for it (uint, ushort, uint2, uint3).
struct builtin {
    uint x, y, z;
    operator uint() const { return x; }
    operator ushort() const { return (ushort)x; }
    operator uint2() const { return uint2{ x, y }; }
    operator uint3() const { return uint3{ x, y, z }; }
};

struct thread_ids {
    builtin thread_position_in_grid, thread_position_in_threadgroup, threadgroup_position_in_grid;
    builtin threads_per_threadgroup, threadgroups_per_grid, threads_per_grid;
    builtin thread_index_in_threadgroup, thread_index_in_simdgroup, simdgroup_index_in_threadgroup;
    builtin threads_per_simdgroup, simdgroups_per_threadgroup;
};

enum op : int { OP_LOAD = 1, OP_STORE, OP_MMA, OP_SUM, OP_BROADCAST, OP_SHUFFLE, OP_SIMD_BARRIER, OP_WARP_MMA };

// A barrier's memory flags (msl_emu_barrier): only MEM_THREADGROUP orders threadgroup memory, so
// only a barrier carrying it ends the race check's interval. Metal's mem_flags values.
enum barrier_flags : int { MEM_DEVICE = 1, MEM_THREADGROUP = 2 };

// What one lane posts at a collective. Fields marked uniform must be equal on every lane
// (matrices: the same variable, i.e. the same offset from the top of each lane's stack).
struct collective {
    int op, line;
    uint64_t site;      // uniform: the call site (msl_emu_site), beyond the line
    const void *ptr;    // uniform: the memory a load/store reads or writes
    uint64_t u[4];      // uniform: elements per row, origin x, origin y, transpose
    int nmat;
    void *mat[4];       // uniform variables: d, a, b, c
    uint64_t value;     // per lane: the operand of simd_sum / broadcast / shuffle (bits)
    uint64_t result;    // per lane: written by the executing lane
    uint lane_arg;      // simd_broadcast: uniform; simd_shuffle: per lane
    int lane_arg_uniform;
};

}  // namespace msl_emu

extern "C" {
const msl_emu::thread_ids *msl_emu_ids(void);
// `frame` is __builtin_frame_address(0) of the calling kernel code (compiled with frame pointers):
// with the return address it names the call site, up the kernel's frames to its entry stub.
void msl_emu_barrier(int line, int flags, void *frame);
uint64_t msl_emu_site(void *frame);
void msl_emu_set_entry_frame(void *frame);
// Post this lane's arguments. The last lane to arrive gets every lane's posting (lane order) and
// must run the operation then call msl_emu_simd_release(); the others get NULL once released.
msl_emu::collective *const *msl_emu_simd_arrive(msl_emu::collective *c);
void msl_emu_simd_release(void);
void msl_emu_register_threadgroup(void *p, size_t bytes, const char *name);
void msl_emu_fail(const char *message);
// Device behaviour chosen per launch: flush fp32 subnormal results of fma and the simdgroup
// multiply-accumulate to zero (1) or keep them (0); the multiply-accumulate's order (see
// simdgroup_multiply_accumulate below).
extern int msl_emu_ftz;
extern int msl_emu_mma_order;
}

namespace msl_emu {

struct tg_region {
    tg_region(void *p, size_t bytes, const char *name) { msl_emu_register_threadgroup(p, bytes, name); }
};

inline float flush(float r) {
    if (msl_emu_ftz && r != 0.0f && __builtin_fabsf(r) < 1.17549435e-38f) return __builtin_copysignf(0.0f, r);
    return r;
}

}  // namespace msl_emu

// A threadgroup (CUDA: __shared__) array, which the drivers rewrite kernel-scope declarations to:
// storage of the OS thread running the threadgroup, registered for poisoning and the race check.
#define MSL_EMU_THREADGROUP(T, name, dims) \
    static thread_local T name dims;      \
    static thread_local ::msl_emu::tg_region name##_msl_emu_region_(&name, sizeof(name), #name)

// The call site of a barrier or collective: this line's return address and the kernel's frames.
#define MSL_EMU_SITE msl_emu_site(__builtin_frame_address(0))

#endif
