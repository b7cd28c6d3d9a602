/* The kernel languages, as data. One emitter (render.c) writes all of them; a language is the
 * table of spellings below (tinygrad's renderer/cstyle.py does the same for its devices).
 *
 * MSL: Metal Shading Language 2.3 (Apple GPU family 7+ for simdgroup matrices). bf16 lives in
 * buffers as ushort bits and is widened by bit operations, which every Metal version runs
 * (`bfloat` needs MSL 3.1). Builtins are kernel parameters with attributes.
 * OpenCL C 1.2: the same kernels with OpenCL spellings; builtins are function calls; no
 * simdgroup matrices and no warp-level mma, so no tc route.
 * CUDA C++: compiled by NVRTC at run time (or nvcc in CI) with no header: ushort, uint and clz are
 * defined in the preamble; entry points are extern "C" so the driver finds them by name; helper
 * functions are __device__. Warps of 32 threads; the tc route (sm_80+) is its own emitter
 * (render_tc_cuda.c) on bf16 mma.sync, as the simdgroup spellings here are MSL's. */
#include "gen.h"

/* binary64 in the function-call form the double kinds' kernels are written in (kernels/gpu/softmax.h,
 * norm.h, normal.h and the renderers' text): native doubles in OpenCL C and CUDA, one operation per
 * call (FP_CONTRACT is off; nvcc and NVRTC run with --fmad=false); MSL has no double and pastes
 * kernels/gpu/softdouble.h and softmath.h instead, which give the same IEEE bits in integers. */
#define TG_NATIVE_F64_API                                                                         \
    "typedef double tg_f64;\n"                                                                    \
    "#define tg_dk(v, b) (v)\n"                                                                   \
    "#define tg_dadd(a, b) ((a) + (b))\n"                                                         \
    "#define tg_dsub(a, b) ((a) - (b))\n"                                                         \
    "#define tg_dmul(a, b) ((a) * (b))\n"                                                         \
    "#define tg_ddiv(a, b) ((a) / (b))\n"                                                         \
    "#define tg_dfma(a, b, c) fma(a, b, c)\n"                                                     \
    "#define tg_dsqrt(a) sqrt(a)\n"                                                               \
    "#define tg_dneg(a) (-(a))\n"                                                                 \
    "#define tg_dabs(a) fabs(a)\n"                                                                \
    "#define tg_dmin(a, b) fmin(a, b)\n"                                                          \
    "#define tg_dlt(a, b) ((a) < (b))\n"                                                          \
    "#define tg_dle(a, b) ((a) <= (b))\n"                                                         \
    "#define tg_dgt(a, b) ((a) > (b))\n"                                                          \
    "#define tg_dge(a, b) ((a) >= (b))\n"                                                         \
    "#define tg_deq(a, b) ((a) == (b))\n"                                                         \
    "#define tg_dne(a, b) ((a) != (b))\n"                                                         \
    "#define tg_d_f32(u) ((double)tg_f_of(u))\n"                                                  \
    "#define tg_f32_d(d) tg_f_bits((float)(d))\n"                                                 \
    "#define tg_d_i64(v) ((double)(v))\n"                                                         \
    "#define tg_i64_d(d) ((tg_i64)(d))\n"                                                         \
    "#define tg_dm_log1p(x) log1p(x)\n"                                                           \
    "#define tg_dm_log(x) log(x)\n"                                                               \
    "#define tg_dm_sin(x) sin(x)\n"                                                               \
    "#define tg_dm_cos(x) cos(x)\n"

static const tg_lang langs[] = {
    {
        .id = TGRAD_LANG_MSL,
        .name = "msl",
        .preamble = "#include <metal_stdlib>\nusing namespace metal;\n",
        .kernel_prefix = "kernel void",
        .function_prefix = "static inline",
        .global_in = "device const",
        .global_out = "device",
        .buffer_suffix = " [[buffer(%d)]]",
        .local_decl = "threadgroup",
        .barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);",
        .bits_to_float = "as_type<float>",
        .float_to_bits = "as_type<uint>",
        .builtin_param = {
            [TG_P_GROUP_POS] = "uint3 group_pos [[threadgroup_position_in_grid]]",
            [TG_P_LOCAL_POS] = "uint3 local_pos [[thread_position_in_threadgroup]]",
            [TG_P_LOCAL_INDEX] = "uint local_index [[thread_index_in_threadgroup]]",
            [TG_P_SIMDGROUP_INDEX] = "uint simdgroup_index [[simdgroup_index_in_threadgroup]]",
        },
        .builtin_uses_param = {
            [TG_B_GROUP_X] = TG_P_GROUP_POS, [TG_B_GROUP_Y] = TG_P_GROUP_POS,
            [TG_B_LOCAL_X] = TG_P_LOCAL_POS, [TG_B_LOCAL_Y] = TG_P_LOCAL_POS,
            [TG_B_LOCAL_INDEX] = TG_P_LOCAL_INDEX, [TG_B_SIMDGROUP] = TG_P_SIMDGROUP_INDEX,
            [TG_B_GROUP_Z] = TG_P_GROUP_POS,
        },
        .builtin_expr = {
            [TG_B_GROUP_X] = "group_pos.x", [TG_B_GROUP_Y] = "group_pos.y",
            [TG_B_LOCAL_X] = "local_pos.x", [TG_B_LOCAL_Y] = "local_pos.y",
            [TG_B_LOCAL_INDEX] = "local_index", [TG_B_SIMDGROUP] = "simdgroup_index",
            [TG_B_GROUP_Z] = "group_pos.z",
        },
        .simdgroup_matrix = true,
        .matrix_type = "simdgroup_float8x8",
        .matrix_zero = "make_filled_simdgroup_matrix<float, %d, %d>(0.0f)",
        .matrix_load = "simdgroup_load(%s, &%s, %d);",
        .matrix_store = "simdgroup_store(%s, &%s, %d);",
        .matrix_mma = "simdgroup_multiply_accumulate(%s, %s, %s, %s);",
        .u64 = "ulong",
        .constant_decl = "constant",
        .f64 = "typedef long tg_i64;\n"
               "#define tg_dk(v, b) tg_d_of((tg_u64)(b))\n", /* the bits; the literal is for the reader */
        .soft_f64 = true,
    },
    {
        .id = TGRAD_LANG_OPENCL,
        .name = "opencl",
        .preamble = "",
        .kernel_prefix = "__kernel void",
        .function_prefix = "static inline",
        .global_in = "__global const",
        .global_out = "__global",
        .buffer_suffix = "",
        .local_decl = "__local",
        .barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
        .bits_to_float = "as_float",
        .float_to_bits = "as_uint",
        .builtin_param = { NULL, NULL, NULL, NULL },
        .builtin_uses_param = { -1, -1, -1, -1, -1, -1, -1 },
        .builtin_expr = {
            [TG_B_GROUP_X] = "get_group_id(0)", [TG_B_GROUP_Y] = "get_group_id(1)",
            [TG_B_LOCAL_X] = "get_local_id(0)", [TG_B_LOCAL_Y] = "get_local_id(1)",
            [TG_B_LOCAL_INDEX] = "(get_local_id(1) * get_local_size(0) + get_local_id(0))",
            [TG_B_SIMDGROUP] = NULL, [TG_B_GROUP_Z] = "get_group_id(2)",
        },
        .simdgroup_matrix = false,
        .matrix_type = NULL,
        .matrix_zero = NULL, .matrix_load = NULL, .matrix_store = NULL, .matrix_mma = NULL,
        .u64 = "ulong",
        .constant_decl = "__constant",
        .f64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
               "#pragma OPENCL FP_CONTRACT OFF\n"
               "typedef long tg_i64;\n"
               "#define tg_d_bits(d) as_ulong(d)\n"
               "#define tg_d_of(u) as_double(u)\n"
               "#define tg_f_bits(f) as_uint(f)\n"
               "#define tg_f_of(u) as_float(u)\n" TG_NATIVE_F64_API,
    },
    {
        .id = TGRAD_LANG_CUDA,
        .name = "cuda",
        .preamble = "typedef unsigned short ushort;\n"
                    "typedef unsigned int uint;\n"
                    "__device__ __forceinline__ uint clz(uint x) { return (uint)__clz((int)x); }\n",
        .kernel_prefix = "extern \"C\" __global__ void",
        .function_prefix = "__device__ __forceinline__",
        .global_in = "const",
        .global_out = "",
        .buffer_suffix = "",
        .local_decl = "__shared__",
        .barrier = "__syncthreads();",
        .bits_to_float = "__uint_as_float",
        .float_to_bits = "__float_as_uint",
        .builtin_param = { NULL, NULL, NULL, NULL },
        .builtin_uses_param = { -1, -1, -1, -1, -1, -1, -1 },
        .builtin_expr = {
            [TG_B_GROUP_X] = "blockIdx.x", [TG_B_GROUP_Y] = "blockIdx.y",
            [TG_B_LOCAL_X] = "threadIdx.x", [TG_B_LOCAL_Y] = "threadIdx.y",
            [TG_B_LOCAL_INDEX] = "(threadIdx.y * blockDim.x + threadIdx.x)",
            [TG_B_SIMDGROUP] = "((threadIdx.y * blockDim.x + threadIdx.x) / 32u)",
            [TG_B_GROUP_Z] = "blockIdx.z",
        },
        .simdgroup_matrix = false,
        .warp_mma = true,
        .matrix_type = NULL,
        .matrix_zero = NULL, .matrix_load = NULL, .matrix_store = NULL, .matrix_mma = NULL,
        .u64 = "unsigned long long",
        .constant_decl = "__constant__ const",
        .f64 = "typedef long long tg_i64;\n"
               "#define tg_d_bits(d) ((tg_u64)__double_as_longlong(d))\n"
               "#define tg_d_of(u) __longlong_as_double((long long)(u))\n"
               "#define tg_f_bits(f) __float_as_uint(f)\n"
               "#define tg_f_of(u) __uint_as_float(u)\n" TG_NATIVE_F64_API,
    },
};

const tg_lang *tg_lang_find(int32_t id) {
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++)
        if (langs[i].id == id) return &langs[i];
    return NULL;
}
