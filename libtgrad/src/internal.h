/* Private declarations shared by libtgrad's translation units. Nothing here is ABI. */
#ifndef TGRAD_INTERNAL_H
#define TGRAD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgrad.h"

#define TG_HIDDEN __attribute__((visibility("hidden")))

/* ---- allocation (alloc.c): every heap allocation goes through these, so that a build with
 * -Dfault_injection=true can fail the n-th one (tgrad_debug_fail_allocation) ---- */
#include <stdlib.h>
#include <string.h>
#if defined(TGRAD_FAULT_INJECTION)
TG_HIDDEN bool tg_fault(void);
#else
static inline bool tg_fault(void) { return false; }
#endif
static inline void *tg_malloc(size_t n) { return tg_fault() ? NULL : malloc(n); }
static inline void *tg_calloc(size_t count, size_t n) { return tg_fault() ? NULL : calloc(count, n); }
static inline void *tg_realloc(void *p, size_t n) { return tg_fault() ? NULL : realloc(p, n); }
static inline void *tg_aligned_alloc(size_t align, size_t n) { return tg_fault() ? NULL : aligned_alloc(align, n); }
/* Orders this thread's non-temporal stores before what follows (a kernel's streamed output before
 * the task reports done). */
static inline void tg_store_fence(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_sfence();
#endif
}

/* ---- errors (status.c) ---- */
/* Record a failure for tgrad_last_error() and return it, so callers write `return tg_fail(...)`. */
TG_HIDDEN tgrad_status tg_fail(tgrad_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A probe's failure is not the caller's (a device that is not available while listing backends,
 * an ineligible route while choosing one): keep the calling thread's last error across it. */
typedef struct { tgrad_status status; char detail[512]; } tg_error_saved;
TG_HIDDEN void tg_error_save(tg_error_saved *saved);
TG_HIDDEN void tg_error_restore(const tg_error_saved *saved);

/* ---- views (view.c): pure shape/stride arithmetic, no allocation ---- */
typedef struct tg_view {
    int32_t ndim;
    int64_t shape[TGRAD_MAX_DIMS];
    int64_t strides[TGRAD_MAX_DIMS]; /* elements; may be 0 or negative */
    int64_t offset;                  /* elements from the buffer start */
} tg_view;

TG_HIDDEN tgrad_status tg_view_contiguous(int32_t ndim, const int64_t *shape, tg_view *out);
TG_HIDDEN tgrad_status tg_view_numel(const tg_view *v, int64_t *numel);
/* views[0 .. n), all of one shape, simplified together for a row-major walk: its axes of extent
 * 1 dropped, then each axis merged into the next where every view steps through the two as one
 * (stride[i] == stride[i + 1] * shape[i + 1]): the same elements in the same order, fewer and
 * longer runs (the CPU's elementwise chains, the copy kind). */
TG_HIDDEN void tg_views_coalesce(tg_view *const *views, int32_t n);
TG_HIDDEN bool tg_view_is_compact_rowmajor(const tg_view *v);
/* The element offset of element lin (row-major over v's shape, 0 <= lin < numel) in v's buffer. */
TG_HIDDEN int64_t tg_view_element_offset(const tg_view *v, int64_t lin);
TG_HIDDEN tgrad_status tg_view_transpose(const tg_view *v, int32_t axis0, int32_t axis1, tg_view *out);
TG_HIDDEN tgrad_status tg_view_permute(const tg_view *v, const int32_t *axes, int32_t naxes, tg_view *out);
TG_HIDDEN tgrad_status tg_view_expand(const tg_view *v, const int64_t *shape, int32_t ndim, tg_view *out);
TG_HIDDEN tgrad_status tg_view_slice(const tg_view *v, int32_t axis, int64_t start, int64_t stop,
                                     int64_t step, uint32_t flags, tg_view *out);
TG_HIDDEN tgrad_status tg_view_select(const tg_view *v, int32_t axis, int64_t index, tg_view *out);
/* Resolve a requested shape (one -1 allowed) against numel. */
TG_HIDDEN tgrad_status tg_view_resolve_shape(const tg_view *v, const int64_t *shape, int32_t ndim,
                                             int64_t *resolved);
/* Try to express `shape` (already resolved) as strides over v's buffer: TGRAD_OK or
 * TGRAD_ERR_VIEW_NOT_EXPRESSIBLE (no detail recorded). */
TG_HIDDEN tgrad_status tg_view_reshape_nocopy(const tg_view *v, const int64_t *shape, int32_t ndim,
                                              tg_view *out);
TG_HIDDEN int tg_format_shape(char *dst, size_t cap, const tg_view *v);
/* a [M, K] @ b [K, N]: rank and inner-dimension checks (messages name fn and both shapes) and the
 * compact [M, N] result view. */
TG_HIDDEN tgrad_status tg_view_matmul(const tg_view *a, const tg_view *b, const char *fn, tg_view *out);
/* torch.matmul's rule for tgrad_matmul: a [..., M, K] @ b [..., K, N] with the batch axes
 * broadcast (numpy's rule), a 1-D operand read as [1, K] (left) or [K, 1] (right). a and b: the
 * operands read as [batch..., M, K] and [batch..., K, N] (rank R = the larger rank, at least 2;
 * stride 0 along a broadcast axis); out: the compact [batch..., M, N] the product computes;
 * result: the same elements without the axis a 1-D operand added (what the caller gets).
 * TGRAD_ERR_RANK_MISMATCH for a 0-d operand, TGRAD_ERR_SHAPE_MISMATCH for batch axes that do not
 * broadcast or inner dimensions that differ (messages name fn and both shapes). */
typedef struct tg_matmul_views {
    tg_view a, b, out, result;
} tg_matmul_views;
TG_HIDDEN tgrad_status tg_view_matmul_batched(const tg_view *a, const tg_view *b, const char *fn, tg_matmul_views *mv);

/* ---- conversions (convert.c) ---- */
TG_HIDDEN uint16_t tg_f32_to_bf16(float f);
TG_HIDDEN uint16_t tg_f64_to_bf16(double d);
static inline float tg_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } x = { (uint32_t)h << 16 };
    return x.f;
}
/* fp32 accumulator -> output bf16: RNE, any NaN becomes the canonical 0x7FC0. */
static inline uint16_t tg_acc_to_bf16(float f) {
    union { float f; uint32_t u; } x = { f };
    if ((x.u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
}

/* ---- tensor storage (alloc.c) ---- */
/* Allocate at least `bytes`; *cap receives the block's real size, to be passed back to free.
 * Under poisoning the first `bytes` hold TG_POISON_BF16 words. */
TG_HIDDEN void *tg_storage_alloc(size_t bytes, size_t *cap);
TG_HIDDEN void tg_storage_free(void *p, size_t cap);
/* Poisoning (TGRAD_POISON_STORAGE=1, default in -Dfault_injection=true builds): new and reused
 * tensor storage, host and device, starts filled with a NaN no kernel writes (NaN outputs are the
 * canonical 0x7FC0), so that an element a kernel skips shows up in tests. */
#define TG_POISON_BF16 0x7fa5u
TG_HIDDEN bool tg_poison_enabled(void);
TG_HIDDEN void tg_poison_fill(void *p, size_t bytes);

/* ---- element types ---- */
/* Bytes of one element: bf16 2, f32 and i32 4, bool 1, f64 8 (host data only: no buffer holds
 * f64), 0 for anything else. */
static inline int32_t tg_dtype_size(int32_t dtype) {
    switch (dtype) {
    case TGRAD_DTYPE_BF16: return 2;
    case TGRAD_DTYPE_F32: case TGRAD_DTYPE_I32: return 4;
    case TGRAD_DTYPE_F64: return 8;
    case TGRAD_DTYPE_BOOL: return 1;
    default: return 0;
    }
}
static inline const char *tg_dtype_name(int32_t dtype) {
    switch (dtype) {
    case TGRAD_DTYPE_BF16: return "bfloat16";
    case TGRAD_DTYPE_F32: return "float32";
    case TGRAD_DTYPE_I32: return "int32";
    case TGRAD_DTYPE_F64: return "float64";
    case TGRAD_DTYPE_BOOL: return "bool";
    default: return "unknown dtype";
    }
}

/* ---- buffers and the lazy graph (tensor.c, buffer.c; schedule.c orders it) ---- */
/* The node kinds (kinds.h has the registry: one row per kind, with its executor). */
#include "kinds_list.h"
#define TG_KIND_ENUM_(code, NAME, name, role) TG_OP_##NAME = code,
typedef enum tg_op { TG_KIND_LIST(TG_KIND_ENUM_) TG_OP_COUNT_ } tg_op;
#undef TG_KIND_ENUM_

/* A node's parameter block: what its kind needs beyond the inputs (reduce: the op and axes in the
 * input's numbering; cast: nothing beyond the node's dtype; gather and concat: their axis as
 * axes[0], naxes 1). */
typedef struct tg_node_params {
    int32_t reduce_op;               /* TGRAD_REDUCE_* */
    int32_t naxes;
    int32_t axes[TGRAD_MAX_DIMS];    /* ascending, non-negative */
    struct {                         /* RANDOM (ops/random.c): element i is drawn from (seed, offset + i) */
        int32_t dist;                /* TGRAD_RANDOM_* */
        uint64_t seed, offset;
        double p0, p1;               /* the distribution's parameters (tgrad.h) */
    } random;
    int32_t compare_op;              /* COMPARE: TGRAD_COMPARE_* */
    int32_t matmul_order;            /* MATMUL: TGRAD_MATMUL_ORDER_* */
    /* --- hnorm: norm (rms/layer) and rope (ops/norm.c, ops/rope.c) --- */
    int32_t norm_op;                 /* TG_NORM_RMS, TG_NORM_LAYER or their _BACKWARD (inputs x, g, w) */
    int32_t has_weight, has_bias;    /* norm: inputs 1 (weight) and 2 (bias) when set; rope: inv_freq */
    int32_t norm_axes;               /* norm: the trailing axes normalized */
    int32_t rotary_dim, interleaved; /* rope */
    double eps;                      /* norm: eps; rope: base */
    int32_t softmax_op;              /* TGRAD_SOFTMAX_* (its axis is axes[0]) */
    /* --- hgcore: PLACE (grad/place.c): the input's element at index i lands at
     * offset + sum(i[d] * strides[d]) of the compact result; every other element is +0 --- */
    struct {
        int64_t strides[TGRAD_MAX_DIMS];
        int64_t offset;
    } place;
    /* --- hgsoft --- */
    int32_t rope_backward;           /* rope: 1 rotates by -theta (the transpose: rope's derivative) */
    /* --- hmodel: slice_scatter (ops/slice_scatter.c; its axis is axes[0]) --- */
    int64_t scatter_start;           /* where src's block begins along the axis */
    struct {                         /* --- hgoptim: OPTIM_STEP (ops/optim_step.c) --- */
        int32_t algo, which, flags;  /* TGRAD_OPTIM_* */
        float s[TGRAD_OPTIM_NSCALARS];
    } optim;
} tg_node_params;
/* the norm kind's ops: the forward norms, and their input gradients (ops/norm_backward.c) */
enum { TG_NORM_RMS = 1, TG_NORM_LAYER = 2, TG_NORM_RMS_BACKWARD = 3, TG_NORM_LAYER_BACKWARD = 4 };

struct tg_buffer;
/* One operand of a node: the buffer (retained by the node) and how the op reads it. */
typedef struct tg_node_input {
    struct tg_buffer *buf;
    tg_view view;
} tg_node_input;

/* A pending computation: any number of inputs, held inline after the header (tg_node_new). The
 * node is immutable once its buffer exists; realizing the buffer frees it (and with it the
 * references to its inputs). */
typedef struct tg_node {
    tg_op op;
    tgrad_op ew;             /* TG_OP_ELEMENTWISE: the registry op (its arity is ninputs) */
    int32_t dtype;           /* the result's element type (TGRAD_DTYPE_*) */
    tg_node_params params;
    int32_t ninputs;
    tg_view out;             /* the result's compact row-major view */
    tg_node_input inputs[]; /* ninputs entries */
} tg_node;

/* A node for `ninputs` inputs, zeroed (inputs NULL); NULL when out of memory (nothing recorded). */
TG_HIDDEN tg_node *tg_node_new(tg_op op, int32_t ninputs);

typedef struct tg_buffer {
    atomic_int_fast64_t refs;
    pthread_mutex_t lock;    /* serializes realization */
    atomic_int realized;     /* 1 once data holds the values */
    int64_t numel;           /* elements of storage; the byte count fits in int64 */
    int32_t dtype;           /* element type of the storage (TGRAD_DTYPE_*) */
    uint16_t *data;          /* the storage (bf16 bits, or f32/i32 words for those dtypes); NULL
                              * while pending (or when numel == 0) */
    size_t capacity;         /* bytes of the block behind data (tg_storage_alloc) */
    tg_node *node;           /* pending computation; NULL once realized */
    uint64_t id;             /* unique for the library's lifetime (explain's buf#id) */
    int32_t device;          /* TGRAD_DEVICE_*; a GPU buffer keeps data NULL and uses dev_mem */
    void *dev_mem;           /* the backend's memory handle (device != CPU) */
    bool external;           /* data is memory libtgrad does not own (tgrad_tensor_from_external) */
    void (*deleter)(void *); /* called when an external buffer is freed */
    void *deleter_context;
    char route[48];          /* what computed it, once realized ("host" for host data) */
    /* Used once refs reached 0, by tg_buffer_release's walk down the node's inputs: the dead
     * buffer below this one and the next of its node's inputs to release. */
    struct tg_buffer *dying_next;
    int32_t dying_input;
    /* --- hgcore: gradients (grad/engine.c) --- */
    /* The value requires a gradient: a leaf marked by tgrad_tensor_set_requires_grad, or a node
     * made while gradients were enabled on this thread from an input that requires one (float
     * dtypes only). Such a buffer keeps its node as history once realized (released with it). */
    bool requires_grad;
    tg_node *history;
} tg_buffer;
/* The node that computed b or will (pending: node; realized with history: history; else NULL). */
static inline const tg_node *tg_buffer_recipe(const tg_buffer *b) { return b->node ? b->node : b->history; }
/* Whether nodes made on this thread record gradient history (tgrad_set_grad_enabled). */
TG_HIDDEN bool tg_grad_enabled(void);

/* Guards every buffer's node pointer against detaching while explain walks the graph. */
extern TG_HIDDEN pthread_mutex_t tg_graph_lock;

/* A buffer of numel bf16 elements (tg_buffer_new) or of another dtype (tg_buffer_new_typed). */
TG_HIDDEN tgrad_status tg_buffer_new(int64_t numel, tg_node *node, tg_buffer **out);
TG_HIDDEN tgrad_status tg_buffer_new_typed(int64_t numel, int32_t dtype, tg_node *node, tg_buffer **out);
/* TGRAD_OK when numel elements of dtype have a byte count that fits in int64 (the view rule checks
 * 2-byte elements only), else TGRAD_ERR_SIZE_OVERFLOW naming fn: wider elements (host f64 data, a
 * f32 or i32 result of a bf16 view) are checked with this before they are admitted. */
static inline tgrad_status tg_check_bytes(int64_t numel, int32_t dtype, const char *fn) {
    int64_t bytes;
    if (__builtin_mul_overflow(numel, (int64_t)tg_dtype_size(dtype), &bytes))
        return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "%s: %lld elements of %s overflow a 64-bit byte count", fn,
                       (long long)numel, tg_dtype_name(dtype));
    return TGRAD_OK;
}
static inline size_t tg_buffer_bytes(const tg_buffer *b) { return (size_t)b->numel * (size_t)tg_dtype_size(b->dtype); }
/* TGRAD_OK when a buffer of numel elements fits the memory limit (memory_limit.c), else
 * TGRAD_ERR_OUT_OF_MEMORY naming fn: checked wherever a tensor is made, before it is allocated. */
TG_HIDDEN tgrad_status tg_memory_admit(int64_t numel, const char *fn);
/* The same for elements of esize bytes (float32 and int32 tensors). */
TG_HIDDEN tgrad_status tg_memory_admit_typed(int64_t numel, int32_t esize, const char *fn);
TG_HIDDEN void tg_buffer_retain(tg_buffer *b);
TG_HIDDEN void tg_buffer_release(tg_buffer *b);
TG_HIDDEN tgrad_status tg_buffer_realize(tg_buffer *b);
/* Allocate b's storage (host or device memory, by b->device). */
TG_HIDDEN tgrad_status tg_buffer_storage(tg_buffer *b);

/* ---- handles (handles.c) ---- */
typedef struct tg_tensor {
    tg_buffer *buf; /* retained */
    tg_view view;
} tg_tensor;

enum { TG_KIND_TENSOR = 1 };
/* Register a tensor (takes over the buffer reference) and return its handle. */
TG_HIDDEN tgrad_status tg_handle_new_tensor(tg_buffer *buf, const tg_view *view, tgrad_tensor_t *out);
/* Look up a handle: on success *out holds a copy with its own buffer reference (release with
 * tg_tensor_unref). */
TG_HIDDEN tgrad_status tg_handle_get_tensor(tgrad_tensor_t h, tg_tensor *out);
/* Both operands of a binary call; on failure neither reference is held. */
TG_HIDDEN tgrad_status tg_handle_get_pair(tgrad_tensor_t a, tgrad_tensor_t b, tg_tensor *ta, tg_tensor *tb);
TG_HIDDEN tgrad_status tg_handle_release(tgrad_tensor_t h);
static inline void tg_tensor_unref(tg_tensor *t) { tg_buffer_release(t->buf); t->buf = NULL; }

/* ---- live counters (handles.c) ---- */
extern TG_HIDDEN atomic_int_fast64_t tg_live_tensors_, tg_live_buffers_, tg_live_bytes_;

/* ---- GPU devices (device.c; backends behind backend.h) ---- */
TG_HIDDEN tgrad_status tg_device_ready(int32_t device);      /* usable now? (reason recorded) */
TG_HIDDEN tgrad_status tg_device_alloc(int32_t device, size_t bytes, void **mem);
TG_HIDDEN void tg_device_free(int32_t device, void *mem, size_t bytes); /* bytes as allocated */
TG_HIDDEN tgrad_status tg_device_upload(int32_t device, void *mem, const void *src, size_t bytes);
TG_HIDDEN tgrad_status tg_device_download(int32_t device, const void *mem, void *dst, size_t bytes);
/* The kernel language (TGRAD_LANG_*) of device's backend; 0 for the CPU or a backend not built. */
TG_HIDDEN int32_t tg_device_lang(int32_t device);
/* tg_device_execute and tg_device_matmul_route: schedule.h */
TG_HIDDEN const char *tg_device_name(int32_t device);       /* "cpu", "metal", "opencl", "cuda" */

/* ---- CPU execution (cpu/) ---- */
/* A CPU matmul decided once (cpu/plan.c): variant, path and operand order from the views and the
 * selected variant at planning time. The scheduler makes it; explain names it and realize runs it,
 * so the route recorded is the route that ran. */
struct tg_ukernel;
typedef struct tg_cpu_matmul_plan {
    int32_t path;                /* cpu/plan.c's cpu_path */
    int32_t threads;
    bool swapped;                /* [M, 1] computed as its transpose: A and B trade places */
    bool t_out;                  /* computed as D = B^T A^T into scratch, out = D^T (cpu/plan.c, PATH_GEMM_T) */
    const struct tg_ukernel *uk; /* the variant that runs */
    int64_t M, N, K;             /* as computed (after the swap) */
    int64_t a_strides[2], b_strides[2];
    int32_t out_dtype;           /* TGRAD_DTYPE_BF16, or TGRAD_DTYPE_F32: the accumulators unrounded */
    int32_t order;               /* TGRAD_MATMUL_ORDER_*: uk computes it */
    /* A batched product (tgrad_matmul on operands of rank > 2): `batch` 2-D products, each
     * planned as above (the batches differ only in their operands' offsets), over the batch axes
     * bshape[0 .. bdims) with each operand's strides along them (0: broadcast); batch 1 for a
     * 2-D product. batch_tasks > 1: the batches are spread over the pool in that many tasks, each
     * product on one thread (small products, which alone would use one thread); else they run
     * one after another, each threaded over its tiles as a 2-D product is. */
    int32_t bdims;
    int64_t batch, batch_tasks;
    /* B shared by every batch and A's batches stepping through its rows: one product of batch x
     * M rows (M above counts them all), the same bytes (cpu/plan.c, merge_rows). */
    bool rows_merged;
    /* One-row products whose A every batch shares (its batch strides all 0): A packed once, the
     * batches as contiguous runs a thread (cpu/stream.c, tg_cpu_matmul_rowvec_shared) */
    bool a_shared;
    int64_t bshape[TGRAD_MAX_DIMS], a_bstrides[TGRAD_MAX_DIMS], b_bstrides[TGRAD_MAX_DIMS];
} tg_cpu_matmul_plan;
TG_HIDDEN void tg_cpu_matmul_plan_make(const tg_view *av, const tg_view *bv, int32_t out_dtype, int32_t order,
                                       tg_cpu_matmul_plan *plan);
/* The route's name: "cpu.<variant>.gemm", "cpu.<variant>.rowvec", "cpu.empty", ... */
TG_HIDDEN void tg_cpu_matmul_plan_name(const tg_cpu_matmul_plan *plan, char *dst, size_t cap);
/* out = A @ B as planned, with A [batch..., M,K] and B [batch..., K,N] read through views over a and
 * b (the views the plan was made from, of one rank >= 2 and the same batch extents); out is
 * [batch..., M,N] row-major, of the plan's out_dtype (bf16 bits or f32). ep
 * (NULL: none; bf16 results only) is the epilogue, applied by the frame to each finished block of
 * out (cpu/epilogue.h). */
struct tg_chain;
TG_HIDDEN tgrad_status tg_cpu_matmul_run(const tg_cpu_matmul_plan *plan, const uint16_t *a, const tg_view *av,
                                         const uint16_t *b, const tg_view *bv, void *out, const struct tg_chain *ep);
/* The variant the calling thread's last tg_cpu_matmul_run ran (NULL before any; tests check that
 * the route a step records names it). */
extern TG_HIDDEN _Thread_local const struct tg_ukernel *tg_cpu_matmul_ran;
/* Plan and run in one call, in the calling thread's order (tgrad_set_matmul_order; tests). */
TG_HIDDEN tgrad_status tg_cpu_matmul(const uint16_t *a, const tg_view *av, const uint16_t *b,
                                     const tg_view *bv, uint16_t *out);
/* Bit-preserving gather of a view into a compact row-major destination. */
TG_HIDDEN void tg_cpu_copy_view(const uint16_t *src, const tg_view *v, uint16_t *dst);
/* The same for 4-byte elements (f32, i32). */
TG_HIDDEN void tg_cpu_copy_view32(const uint32_t *src, const tg_view *v, uint32_t *dst);
/* The same for 1-byte elements (bool). */
TG_HIDDEN void tg_cpu_copy_view8(const uint8_t *src, const tg_view *v, uint8_t *dst);
/* Any of them, by element size (1, 2 or 4 bytes). */
static inline void tg_cpu_copy_view_sized(const void *src, const tg_view *v, void *dst, int32_t size) {
    if (size == 4) tg_cpu_copy_view32(src, v, dst);
    else if (size == 1) tg_cpu_copy_view8(src, v, dst);
    else tg_cpu_copy_view(src, v, dst);
}
/* The same over the pool for a large view (the copy kind's executor; cpu/copy_view.c). */
TG_HIDDEN void tg_cpu_copy_view_pool(const void *src, const tg_view *v, void *dst, int32_t size);
/* The CPU frame's choice to read A in place, as a function of the L1 data cache (tested in
 * tests/c/test_cpu_plan.c for caches this machine may not have): how many of `rows` rows
 * `stride_bytes` apart fall in one L1 set as a kernel walks them together (0: geometry unknown),
 * and whether that is within the cache's ways (an unknown geometry allows it). */
typedef struct { int32_t ways, sets, line; } tg_l1d_geometry;
TG_HIDDEN int32_t tg_cpu_rows_per_l1_set(int32_t rows, int64_t stride_bytes, const tg_l1d_geometry *g);
TG_HIDDEN bool tg_cpu_direct_a_fits_l1(int32_t mr, int64_t stride_bytes, const tg_l1d_geometry *g);
/* The rows of a block of A that the shared-chunk path keeps in a core's L2 while B's micro-panels
 * stream past it: as many rows of `row_bytes` (A's row over one K panel, as the kernels read it)
 * as fill half of `l2_bytes`, in whole panels of mr, at least mr and at most `most` (`most` where
 * the L2 size is unknown, 0). */
TG_HIDDEN int64_t tg_cpu_l2_block_rows(int64_t l2_bytes, int64_t row_bytes, int32_t mr, int64_t most);
/* The CPU's caches as the frame uses them (CPUID leaf 4 or 0x8000001D, else sysfs; zeros where
 * unknown), read once. */
typedef struct { tg_l1d_geometry l1d; int64_t l2_bytes; } tg_cpu_caches;
TG_HIDDEN const tg_cpu_caches *tg_cpu_cache_sizes(void);

/* Thread pool (cpu/pool.c): run fn(task, arg) for task in [0, ntasks) on the workers and wait. */
typedef void (*tg_task_fn)(int64_t task, int32_t worker, void *arg);
TG_HIDDEN void tg_pool_run(int64_t ntasks, tg_task_fn fn, void *arg);
/* Run exactly ntasks tasks, task i on its own thread i (threads are started as needed). */
TG_HIDDEN void tg_pool_run_exact(int32_t ntasks, tg_task_fn fn, void *arg);
TG_HIDDEN int32_t tg_pool_threads(void);
/* Jobs handed to the pool since the process started (each one wakes or releases the workers). */
TG_HIDDEN uint64_t tg_pool_jobs(void);

/* dst[*len...] = s, truncated so that dst (cap bytes) stays a terminated string; *len grows by
 * what was copied. The realize path names routes with it: snprintf's format parser cost ~0.1 us
 * of a 4 us 64^3 product. */
static inline void tg_str_append(char *dst, size_t cap, size_t *len, const char *s) {
    size_t n = strlen(s);
    if (*len + n >= cap) n = cap - 1 - *len;
    memcpy(dst + *len, s, n);
    *len += n;
    dst[*len] = '\0';
}

/* Checked arithmetic. */
static inline bool tg_mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }
static inline bool tg_add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline bool tg_sub_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_sub_overflow(a, b, r); }

#endif
