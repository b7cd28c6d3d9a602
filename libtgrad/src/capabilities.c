/* The capability table (one row per backend and capability) and the backend list. This file is
 * the one place these facts live: docs/capabilities.md is generated from it and a test keeps the
 * two equal. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define TG_CAPABILITIES(X)                                                                                  \
    X("cpu", "matmul bf16 -> bf16", "bit-exact", "fp32 accumulation in a documented order (block32 by default since 0.2, or pairwise: tgrad_set_matmul_order) on every variant and thread count") \
    X("cpu", "batched matmul (torch.matmul's rule)", "bit-exact", "batch axes broadcast and read through views, 1-D operands promoted; each batch's bytes are its 2-D product's; small products spread over the threads; an A shared by every batch (x @ PackedLinear's panels) packed once; GPU devices: every route, one product per threadgroup z (up to 65,535 products; more: route_not_eligible)") \
    X("cpu", "matmul, block32 order (the default)", "bit-exact", "AMX's TDPBF16PS order, the default since 0.2 (0.1's pairwise order: tgrad_set_matmul_order): AMX tiles where the CPU and OS have them (route cpu.amx.gemm), else the pairwise packed variant's instruction: AVX512-BF16's vdpbf16ps (cpu.avx512bf16_block32.gemm) or AVX-512F, AVX2 or NEON FMAs (cpu.avx512f_block32.gemm, cpu.avx2_block32.gemm, cpu.neon_block32.gemm), else the portable reference (cpu.portable_block32.gemm); one-row products stream B (vdpbf16ps where the CPU has it: cpu.avx512bf16_block32.rowvec; else AVX-512 or AVX2 FMAs: cpu.avx512f_block32.rowvec, cpu.avx2_block32.rowvec); every thread count and blocking; GPU devices: the naive and tiled routes in MSL, OpenCL C and CUDA (tc, under bounded precision only, computes the hardware's order in either order)") \
    X("cpu", "route gemm", "bit-exact", "packed panels, per-ISA micro-kernels (avx512bf16, avx512f, avx2, neon, portable); the fastest by a rule from CPUID") \
    X("cpu", "route rowvec", "bit-exact", "one-row and one-column products stream the long operand once (avx512bf16, avx512f, avx2); without AMX, up to 16 rows times a column-major B of at most 2^17 elements (a decode step's attention scores) as that many one-row products, bf16 or float32 results") \
    X("cpu", "route skinny", "bit-exact", "2 to 16 rows with row-major B (up to 48 in passes when B is large, except on avx2): B read in place and streamed, only A packed (avx512bf16, avx512f, avx2)") \
    X("cpu", "route gemm_t", "bit-exact", "2 to 128 rows (a float32 result: 1 too where one row does not stream) times a column-major B (x @ W.T) on AMX, B with 2^16 elements or more: (W @ x.T).T, W's rows read in place and only x packed, the result written back transposed (each 32-row tile of W through all of K while x packed fits in 1 MiB); each output the same sum as on route gemm") \
    X("cpu", "route copy", "bit-exact", "bit-preserving gather that materializes a view")                   \
    X("cpu", "route concat (tgrad_concat: cat, stack)", "bit-exact", "any dtype; each operand read through its view into one compact result, threaded when large; on GPU devices the concat route (up to 15 operands a kernel; cat groups more)") \
    X("cpu", "route gather (tgrad_take: take, x[ids])", "bit-exact", "any dtype, int32 indices (negative count from the end) checked before anything is written; on GPU devices the gather route, its indices read back and checked on the host before the launch") \
    X("cpu", "elementwise ops (17, tgrad_unary/tgrad_binary)", "correctly rounded", "numpy broadcasting through views; one threaded pass (avx512f, avx2, portable loops)") \
    X("cpu", "fusion", "bit-exact", "a matmul's consumer ops as its epilogue on every route and variant; elementwise chains in one pass; TGRAD_FUSION=0 turns it off") \
    X("cpu", "programs (tgrad_program_capture/run: tgrad.capture)", "bit-exact", "the pending graph behind some outputs kept as data (kinds, params, views; the weights it reads retained) and made again over new inputs in one call: the same nodes, so the same schedule and bytes; nodes recording gradients or drawing random numbers refused; generate's decode steps run this way, their cache slot a tensor (on the CPU; slice_scatter with a tensor start has GPU kernels too)") \
    X("cpu", "comparisons and where (tgrad_compare, tgrad_where)", "exact", "bool results (1 byte, 0/1) of IEEE comparisons of exact values, any dtype pair; where copies bits; numpy broadcasting through views; threaded; on GPU devices the compare and where routes") \
    X("cpu", "host input float32", "yes", "rounded to nearest even; NaN kept quiet with its sign")          \
    X("cpu", "host input float64", "yes", "one rounding straight to bf16")                                  \
    X("cpu", "host input bf16", "yes", "bits copied unchanged")                                             \
    X("cpu", "view transpose/permute", "composed", "read in place by packing")                              \
    X("cpu", "view slice (any step, negative too)", "composed", "read in place by packing")                \
    X("cpu", "view expand (stride 0)", "composed", "read in place by packing")                              \
    X("cpu", "view reshape (strides express it)", "composed", "zero-copy view")                             \
    X("cpu", "view reshape (strides cannot)", "materialized", "a lazy bit-preserving copy; view() refuses instead") \
    X("cpu", "empty dimensions", "yes", "M or N = 0: empty result; K = 0: zeros")                           \
    X("cpu", "refusal before allocation", "yes", "shape, rank, permutation, expand, reshape, index, overflow") \
    X("cpu", "random numbers (uniform, normal, randint)", "bit-exact", "Philox-4x32-10, element i drawn from (seed, offset + i): the same bytes on every thread count and chunking; each value rounded once (docs/random.md); GPU devices: uniform, randint and normal by route random with the CPU's bytes") \
    X("metal", "backend", METAL_BUILT, "Objective-C behind src/backend.h (src/backend/metal.m); built on macOS only, never run by CI") \
    X("metal", "routes naive/tiled", "bit-exact", "the documented fp32 order with fma; bf16 results, or float32 ones (out_dtype: the accumulators, tc stores bf16 only); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "batched matmul (torch.matmul's rule)", "bit-exact", "naive and tiled, both orders: one product per threadgroup z, operands moved by their batch strides (0: broadcast); tc batched too (bounded), each product its 2-D kernel's bytes; verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "random numbers (uniform, normal, randint)", "bit-exact", "rendered kernels (route random: Philox-4x32-10 in integers; bf16 uniform(low, high) by a 256-entry table the CPU rounds; normal's Box-Muller and float32 uniform(low, high) on the software double of kernels/gpu/softdouble.h, undecided calls redrawn on the host); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "elementwise ops", "correctly rounded", "rendered kernels (integer ops, 65,536-entry tables; float32 transcendental and derivative ops and pow in either dtype on the software double with a bound, an undecided element rerun on the host); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "reductions (sum, mean, max, min, argmax, argmin)", "correctly rounded", "rendered kernels (route reduce: exact integer accumulators, one rounding; exact extrema); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "casts bfloat16 <-> float32", "bit-exact", "rendered kernels (route cast, integers only); int32 -> bfloat16 or float32 too (rounded once, integers only), and either to int32 (truncated; a NaN or out-of-range element fails the cast as on the CPU); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "gather and concat (take, cat, stack, slice_scatter)", "bit-exact", "rendered kernels (routes gather, concat: 1, 2 and 4-byte elements moved as integers; slice_scatter as the concat of dst's parts and src, or one kernel reading a start tensor); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "comparisons and where", "exact", "rendered kernels (route compare: 64-bit integer keys of the exact values, no float instruction; route where: bits copied); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "gradients (place, scatter_add, relu_backward, bf16 gelu, gelu_tanh, silu, rsqrt, sqrt, sigmoid and tanh backward)", "bit-exact", "rendered kernels (routes place: each element finds its view position by division; scatter_add: the exact integer sum over the positions the host lists for each index, rounded once; relu_backward an integer selection; the rsqrt, sqrt, sigmoid and tanh derivatives in bf16, exact in integers; gelu's, gelu_tanh's and silu's as g times f'(x) read from a host-built table of f'(x) intervals, exact in integers, refused where the build has no libquadmath); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "optimizer step (SGD, AdamW)", "bit-exact", "rendered kernels (route optim_step: the CPU's float32 operations on float32 bits in integers, fma one rounding; the scalars the launch's words); verified on the MSL emulation tier, not on Apple hardware") \
    X("metal", "softmax, log_softmax, logsumexp", "correctly rounded", "rendered kernels (route softmax: the OpenCL/CUDA text on the software double of kernels/gpu/softdouble.h, MSL having no double; rows with an undecided element rerun on the host), the CPU's bytes and the CUDA kernel's flags on the MSL emulation tier (tests/python/test_gpu_softmax.py), not on Apple hardware") \
    X("metal", "softmax_backward, log_softmax_backward", "correctly rounded", "rendered kernels (route softmax on the software double of kernels/gpu/softdouble.h; flagged rows rerun on the host), the CPU's bytes on the MSL emulation tier (tests/python/test_gpu_softmax_backward.py), not on Apple hardware") \
    X("metal", "rms_norm, layer_norm", "correctly rounded", "rendered kernels (route norm on the software double of kernels/gpu/softdouble.h; flagged rows rerun on the host), the CPU's bytes and the CUDA kernel's flags on the MSL emulation tier (tests/python/test_gpu_norm.py), not on Apple hardware") \
    X("metal", "rms_norm_backward, layer_norm_backward", "correctly rounded", "rendered kernels (route norm on the software double of kernels/gpu/softdouble.h; flagged rows rerun on the host), the CPU's bytes on the MSL emulation tier (tests/python/test_gpu_norm_backward.py), not on Apple hardware") \
    X("metal", "rope, rope_backward", "correctly rounded", "rendered kernels (route rope on the software double of kernels/gpu/softdouble.h with kernels/gpu/softmath.h's sin and cos; flagged positions rerun on the host), the CPU's bytes on the MSL emulation tier (tests/python/test_gpu_rope.py), not on Apple hardware") \
    X("metal", "fusion", "bit-exact", "epilogues on the naive, tiled and tc routes; elementwise chains in one kernel; TGRAD_FUSION=0 turns it off") \
    X("metal", "route tc", "bounded", "simdgroup 8x8 matrices (Apple GPU family 7+), within the bound of docs/kernels.md; only under tgrad_set_matmul_precision bounded (the default, exact, takes tiled)") \
    X("opencl", "backend", "built", "the ICD loader is dlopen'ed at run time; device from TGRAD_OPENCL_DEVICE") \
    X("opencl", "routes naive/tiled", "bit-exact", "bf16 results, or float32 ones (out_dtype: the accumulators, tests/python/test_gpu_matmul_f32.py); checked on PoCL in CI (conformance/scorecards/opencl.json), once on NVIDIA's driver (H200)") \
    X("opencl", "batched matmul (torch.matmul's rule)", "bit-exact", "naive and tiled, both orders, fused epilogues: one product per threadgroup z, operands moved by their batch strides (0: broadcast); the CPU's bytes on PoCL in CI (tests/python/test_gpu_batched.py)") \
    X("opencl", "random numbers (uniform, normal, randint)", "bit-exact", "rendered kernels (route random: Philox-4x32-10 in integers; bf16 uniform(low, high) by a 256-entry table the CPU rounds; normal's Box-Muller and float32 uniform(low, high) in binary64, a value its window leaves undecided redrawn with its call on the host by the CPU's code), the CPU's bytes on PoCL in CI (tests/python/test_gpu_random.py)") \
    X("opencl", "elementwise ops", "correctly rounded", "rendered kernels (integer ops, 65,536-entry tables; float32 transcendental and derivative ops and pow in either dtype in binary64 with a bound, an undecided element rerun on the host, tests/python/test_gpu_transcendental_f32.py); checked on PoCL in CI (conformance/scorecards/opencl.json)") \
    X("opencl", "reductions (sum, mean, max, min, argmax, argmin)", "correctly rounded", "rendered kernels (route reduce: exact integer accumulators, one rounding; exact extrema), the CPU's bytes on PoCL in CI (tests/python/test_gpu_reduce.py)") \
    X("opencl", "casts bfloat16 <-> float32", "bit-exact", "rendered kernels (route cast, integers only), the CPU's bytes on PoCL in CI; int32 -> bfloat16 or float32 too (rounded once, integers only), and either to int32 (truncated; a NaN or out-of-range element fails the cast with the CPU's error)") \
    X("opencl", "gather and concat (take, cat, stack, slice_scatter)", "bit-exact", "rendered kernels (routes gather, concat: elements moved as integers; slice_scatter as the concat of dst's parts and src, or one kernel reading a start tensor checked on the host first), the CPU's bytes on PoCL in CI (tests/python/test_gpu_select.py); indices checked on the host before the launch") \
    X("opencl", "comparisons and where", "exact", "rendered kernels (route compare: 64-bit integer keys of the exact values, no float instruction; route where: bits copied), the CPU's bytes on PoCL in CI (tests/python/test_gpu_compare.py)") \
    X("opencl", "gradients (place, scatter_add, relu_backward, bf16 gelu, gelu_tanh, silu, rsqrt, sqrt, sigmoid and tanh backward)", "bit-exact", "rendered kernels (routes place and scatter_add: an exact integer sum rounded once, scatter_add over the positions the host lists for each index; relu_backward an integer selection; the rsqrt, sqrt, sigmoid and tanh derivatives in bf16, exact in integers; gelu's, gelu_tanh's and silu's as g times f'(x) read from a host-built table of f'(x) intervals, exact in integers, refused where the build has no libquadmath), the CPU's bytes on PoCL in CI (tests/python/test_gpu_grad_kinds.py: views, repeated and negative indices, special values; an MLP, a gated silu MLP and an embedding classifier under cross-entropy trained with AdamW); the float32 derivative ops in binary64 with a bound, an undecided element rerun on the host") \
    X("opencl", "optimizer step (SGD, AdamW)", "bit-exact", "rendered kernels (route optim_step: float32 in integers, fma one rounding), every output of every flag combination the CPU's bytes on PoCL in CI (tests/python/test_gpu_grad_kinds.py); tgrad_optim_step_many stays on the CPU (a device's step runs lazy nodes)") \
    X("opencl", "softmax, log_softmax, logsumexp", "correctly rounded", "rendered kernels (route softmax: one thread per row in double, cl_khr_fp64, the CPU's loops and bounds; rows with an undecided element rerun on the host by the CPU's row code), the CPU's bytes on PoCL in CI (tests/python/test_gpu_softmax.py); not fused; the backward ops: the row below") \
    X("opencl", "softmax_backward, log_softmax_backward", "correctly rounded", "rendered kernels (route softmax: one thread per row in double, the CPU's sums and bounds; rows with an undecided element, a sum that is not finite or a z_i not below 0 rerun on the host by the CPU's row code), the CPU's bytes on PoCL in CI in every dtype mix (tests/python/test_gpu_softmax_backward.py)") \
    X("opencl", "rms_norm, layer_norm", "correctly rounded", "rendered kernels (route norm: one thread per row in double, cl_khr_fp64, the CPU's loops and bounds; rows with an undecided element rerun on the host by the CPU's row code), the CPU's bytes on PoCL in CI (tests/python/test_gpu_norm.py)") \
    X("opencl", "rms_norm_backward, layer_norm_backward", "correctly rounded", "rendered kernels (route norm: one thread per row in double, the CPU's sums, constants and bounds; rows with an open element, a sum that is not finite or no bound rerun on the host by the CPU's row code), the CPU's bytes on PoCL in CI in every dtype mix (tests/python/test_gpu_norm_backward.py); the weight's gradient is a float32 composition the elementwise and reduce routes run (float32 rsqrt exact in integers)") \
    X("opencl", "rope, rope_backward", "correctly rounded", "rendered kernels (route rope: one thread per position in double, the CPU's operations with a bound for the device's sin and cos (OpenCL's 4 ulp); positions with an undecided value rerun on the host by the CPU's code), the CPU's bytes on PoCL in CI (tests/python/test_gpu_rope.py)") \
    X("opencl", "fusion", "bit-exact", "epilogues on the naive and tiled routes; elementwise chains in one kernel; TGRAD_FUSION=0 turns it off") \
    X("opencl", "route tc", "refused", "OpenCL C 1.2 has no sub-group matrices: route_not_eligible") \
    X("cuda", "backend", CUDA_BUILT, "the driver API and NVRTC are dlopen'ed at run time; device from TGRAD_CUDA_DEVICE (docs/cuda.md)") \
    X("cuda", "routes naive/tiled", "bit-exact", "opencl's kernels in CUDA C++, NVRTC --fmad=false; float32 results too; the CPU's bytes on an NVIDIA H200 on 2026-12-04 (conformance/scorecards/cuda.json, tests/python/test_cuda_device.py; docs/cuda.md); compiled by NVRTC in CI") \
    X("cuda", "batched matmul (torch.matmul's rule)", "bit-exact", "naive and tiled (the opencl kernels, grid z over the batch), tc batched too (bounded); the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI") \
    X("cuda", "random numbers (uniform, normal, randint)", "bit-exact", "the opencl kernels; uniform and randint: the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py); normal and float32 uniform(low, high) not yet run on a GPU; all on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI") \
    X("cuda", "elementwise ops", "correctly rounded", "the opencl kernels' integer ops and tables; every op on all 65,536 bf16 inputs (binary: 131,072 pairs), float32 ops on 65,536 pairs: the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py); float32 transcendental and derivative ops and pow (binary64 with a bound) on the CUDA emulator only") \
    X("cuda", "reductions (sum, mean, max, min, argmax, argmin)", "correctly rounded", "the opencl kernels' integer accumulators; the CPU's bytes on the ci roster, fused and not, on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI; compiled by nvcc and ptxas in CI") \
    X("cuda", "casts bfloat16 <-> float32", "bit-exact", "the opencl kernel; the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI; int32 -> bfloat16 or float32 too (rounded once, integers only), and either to int32 on the CUDA emulator") \
    X("cuda", "gather and concat (take, cat, stack, slice_scatter)", "bit-exact", "the opencl kernels; slice_scatter as a concat, or one kernel reading a start tensor (not yet run on a GPU: the CUDA emulator); the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI") \
    X("cuda", "comparisons and where", "exact", "the opencl kernels; the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI") \
    X("cuda", "gradients (place, scatter_add, relu_backward, bf16 gelu, gelu_tanh, silu, rsqrt, sqrt, sigmoid and tanh backward)", "bit-exact", "the opencl kernels; the CPU's bytes on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI; not yet run on a GPU") \
    X("cuda", "optimizer step (SGD, AdamW)", "bit-exact", "the opencl kernel; the CPU's bytes on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI; not yet run on a GPU") \
    X("cuda", "softmax, log_softmax, logsumexp", "correctly rounded", "the opencl kernels in double, flagged rows rerun on the host; the CPU's bytes, adversarial rows included, on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI") \
    X("cuda", "softmax_backward, log_softmax_backward", "correctly rounded", "the opencl kernels in double, flagged rows rerun on the host; the CPU's bytes on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI; not yet run on a GPU") \
    X("cuda", "rms_norm, layer_norm", "correctly rounded", "the opencl kernels in double, flagged rows rerun on the host; the CPU's bytes on the norm tests' rows on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI") \
    X("cuda", "rms_norm_backward, layer_norm_backward", "correctly rounded", "the opencl kernels in double, flagged rows rerun on the host; the CPU's bytes on the CUDA emulator in CI; compiled by nvcc, ptxas and NVRTC in CI; not yet run on a GPU") \
    X("cuda", "rope, rope_backward", "correctly rounded", "the opencl kernels in double, CUDA's 2-ulp sin and cos inside the bound, flagged positions rerun on the host; the CPU's bytes on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device_kinds.py), on the CUDA emulator in CI") \
    X("cuda", "fusion", "bit-exact", "epilogues on the naive and tiled routes; elementwise chains in one kernel; the conformance graph cases' bytes fused and unfused on an NVIDIA H200 on 2026-12-04 (conformance/scorecards/cuda.json); TGRAD_FUSION=0 turns it off") \
    X("cuda", "route tc", "bounded", "bf16 mma.sync m16n8k16, chosen on sm_80+ where eligible under tgrad_set_matmul_precision bounded (the default, exact, takes tiled); within the bound of docs/kernels.md and deterministic on an NVIDIA H200 on 2026-12-04 (tests/python/test_cuda_device.py); compiled in CI") \
    X("msl-emu", "generated MSL executed on the CPU", "tests only", "an emulation of the Metal compute model used by the test suite, not a runtime backend")

#if defined(TGRAD_HAVE_CUDA)
#define CUDA_BUILT "built"
#else
#define CUDA_BUILT "not built"
#endif

#if defined(TGRAD_HAVE_METAL)
#define METAL_BUILT "built"
#else
#define METAL_BUILT "not built"
#endif


typedef struct { const char *backend, *capability, *value, *note; } row;
#define TG_ROW(b, c, v, n) { b, c, v, n },
static const row rows[] = { TG_CAPABILITIES(TG_ROW) };
#undef TG_ROW
enum { NROWS = (int)(sizeof rows / sizeof rows[0]) };

TGRAD_API tgrad_status tgrad_capability(int32_t index, const char **backend, const char **capability,
                                        const char **value, const char **note) {
    if (!backend || !capability || !value || !note)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "capability: an output pointer is NULL");
    if (index < 0 || index >= NROWS)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "capability: index %d outside 0..%d", index, NROWS - 1);
    *backend = rows[index].backend, *capability = rows[index].capability;
    *value = rows[index].value, *note = rows[index].note;
    return TGRAD_OK;
}

/* ---- backends ---- */
static char cpu_device[160];
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void read_cpu_model(void) {
    snprintf(cpu_device, sizeof cpu_device, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t') v++;
                snprintf(cpu_device, sizeof cpu_device, "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    }
    fclose(f);
}

TG_HIDDEN void tg_device_describe(int32_t device, int32_t *built, int32_t *available, const char **text);

TGRAD_API tgrad_status tgrad_backend(int32_t index, const char **name, int32_t *built, int32_t *available,
                                     const char **device) {
    if (!name || !built || !available || !device)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "backend: an output pointer is NULL");
    switch (index) {
    case 0:
        pthread_once(&cpu_once, read_cpu_model);
        *name = "cpu", *built = 1, *available = 1, *device = cpu_device;
        return TGRAD_OK;
    case TGRAD_DEVICE_METAL:
    case TGRAD_DEVICE_OPENCL:
    case TGRAD_DEVICE_CUDA:
        *name = tg_device_name(index);
        tg_device_describe(index, built, available, device);
        return TGRAD_OK;
    default:
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "backend: index %d outside 0..3", index);
    }
}
