/* GPU devices, the portable side: which backend, device memory for buffers, route choice (asked
 * once per step by the scheduler), the kernel of each step (step_kernel.c, rendered by gen/), the
 * compiled-program cache keyed by the source's hash, the elementwise tables in device memory, and
 * launches of the steps it is given. The backends (backend.h) hold only
 * driver calls. Every call into one backend holds that backend's mutex. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "device_pool.h"
#include "kinds.h"
#include "gen/gen.h"
#include "routes.h"
#include "ops/elementwise.h"
#include "ops/elementwise_grad.h"
#include "step_kernel.h"

#if !defined(TGRAD_HAVE_OPENCL)
const tg_backend *const tg_backend_opencl = NULL;
#endif
#if !defined(TGRAD_HAVE_METAL)
const tg_backend *const tg_backend_metal = NULL;
#endif
#if !defined(TGRAD_HAVE_CUDA)
const tg_backend *const tg_backend_cuda = NULL;
TGRAD_API tgrad_status tgrad_debug_cuda_compile(const char *source, int32_t sm, int64_t *image_bytes) {
    (void)source, (void)sm, (void)image_bytes;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "cuda: not built into this library");
}
#endif

/* CACHE: compiled programs kept per device. A decoding step makes new kernel texts at every key
 * length (used once) beside the model's fixed ones (used every step): least-recently-used eviction
 * keeps the fixed ones compiled while the one-off texts stream through. */
enum { NDEVICES = 4, CACHE = 512 };
/* FEW_ROWS: products of at most this many rows take the naive route when no route is forced. */
enum { FEW_ROWS = 4 };
static const char *const device_names[NDEVICES] = { "cpu", "metal", "opencl", "cuda" };

typedef struct {
    uint64_t hash;
    void *program;
    uint64_t last_use; /* the device's use counter at its last launch: the least is evicted */
} cached_program;

typedef struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    tgrad_status init_status;
    char reason[512];
    cached_program cache[CACHE];
    uint64_t uses; /* counts program lookups, for last_use */
    void *tables[TGRAD_OP_END_]; /* device_table */
    tg_device_pool pool;         /* freed buffers kept for reuse (device_pool.h) */
} device_state;

#define STATE_INIT { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT } /* the rest zero */
static device_state states[NDEVICES] = { [1] = STATE_INIT, [2] = STATE_INIT, [3] = STATE_INIT };
#undef STATE_INIT
static _Atomic int32_t forced_route; /* 0: choose */
static _Atomic int32_t matmul_precision; /* TGRAD_MATMUL_PRECISION_EXACT */

const char *tg_device_name(int32_t device) {
    return device >= 0 && device < NDEVICES ? device_names[device] : "unknown";
}

/* A stand-in backend per device, for tests only (tests/c/test_device_stub.c, linked from
 * libtgrad's objects): the Metal path's portable side runs on Linux against it. */
static const tg_backend *stand_ins[NDEVICES];
TG_HIDDEN void tg_device_use_stand_in(int32_t device, const tg_backend *be);
void tg_device_use_stand_in(int32_t device, const tg_backend *be) {
    if (device > 0 && device < NDEVICES) stand_ins[device] = be;
}

/* tgrad_debug_use_backend: the caller's calls as a device's backend, before its first use. */
static tg_backend debug_backends[NDEVICES];
static _Atomic int32_t used[NDEVICES]; /* init_device ran: too late for a stand-in */
static tgrad_status debug_init(void) { return TGRAD_OK; }
static const char *debug_device_name(void) { return "a stand-in driver (tgrad_debug_use_backend)"; }

TGRAD_API tgrad_status tgrad_debug_use_backend(int32_t device, const tgrad_debug_backend *b) {
    static const int32_t langs[NDEVICES] = { 0, TGRAD_LANG_MSL, TGRAD_LANG_OPENCL, TGRAD_LANG_CUDA };
    if (device <= 0 || device >= NDEVICES) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "device %d is not a GPU device", device);
    if (!b || !b->alloc || !b->free || !b->copy_in || !b->copy_out || !b->compile || !b->release_program || !b->launch)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: a stand-in driver needs every call", device_names[device]);
    if (used[device])
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s is in use: a stand-in driver must come before its first use",
                       device_names[device]);
    debug_backends[device] = (tg_backend){
        .name = device_names[device], .lang = langs[device], .init = debug_init, .device_name = debug_device_name,
        .alloc = b->alloc, .free = b->free, .copy_in = b->copy_in, .copy_out = b->copy_out, .compile = b->compile,
        .release_program = b->release_program, .launch = b->launch, .has_matrix_route = b->has_matrix_route,
    };
    stand_ins[device] = &debug_backends[device];
    return TGRAD_OK;
}

static const tg_backend *backend_of(int32_t device) {
    if (device > 0 && device < NDEVICES && stand_ins[device]) return stand_ins[device];
    switch (device) {
    case TGRAD_DEVICE_METAL: return tg_backend_metal;
    case TGRAD_DEVICE_OPENCL: return tg_backend_opencl;
    case TGRAD_DEVICE_CUDA: return tg_backend_cuda;
    default: return NULL;
    }
}

static void init_device(int32_t device) {
    device_state *st = &states[device];
    used[device] = 1;
    const tg_backend *be = backend_of(device);
    if (!be) {
        st->init_status = TGRAD_ERR_BACKEND_UNAVAILABLE;
        snprintf(st->reason, sizeof st->reason, "not built %s",
                 device == TGRAD_DEVICE_OPENCL ? "into this library" : "on this platform");
        return;
    }
    tg_error_saved saved; /* the first use of a device may be any call, a listing too */
    tg_error_save(&saved);
    st->init_status = be->init();
    if (st->init_status) snprintf(st->reason, sizeof st->reason, "%s", tgrad_last_error());
    tg_error_restore(&saved);
}
static void init_metal(void) { init_device(TGRAD_DEVICE_METAL); }
static void init_opencl(void) { init_device(TGRAD_DEVICE_OPENCL); }
static void init_cuda(void) { init_device(TGRAD_DEVICE_CUDA); }
static void (*const init_fns[NDEVICES])(void) = { NULL, init_metal, init_opencl, init_cuda };

tgrad_status tg_device_ready(int32_t device) {
    if (device == TGRAD_DEVICE_CPU) return TGRAD_OK;
    if (device <= 0 || device >= NDEVICES)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "device %d does not exist", device);
    device_state *st = &states[device];
    pthread_once(&st->once, init_fns[device]);
    if (st->init_status) return tg_fail(st->init_status, "%s: %s", device_names[device], st->reason);
    return TGRAD_OK;
}

/* Run one backend call under the device's lock. */
#define LOCKED(device, expr)                                 \
    do {                                                     \
        pthread_mutex_lock(&states[device].lock);            \
        expr;                                                \
        pthread_mutex_unlock(&states[device].lock);          \
    } while (0)

/* Device memory from the pool when a buffer of the size's class is cached, else from the backend
 * (after emptying the pool into the driver and trying once more, if the driver is out of memory). */
tgrad_status tg_device_alloc(int32_t device, size_t bytes, void **mem) {
    tgrad_status s = tg_device_ready(device);
    if (s) return s;
    if (tg_fault()) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes on %s", bytes, device_names[device]);
    const tg_backend *be = backend_of(device);
    device_state *st = &states[device];
    size_t size = tg_pool_size(bytes);
    pthread_mutex_lock(&st->lock);
    *mem = tg_pool_take(&st->pool, size);
    s = *mem ? TGRAD_OK : be->alloc(size, mem);
    if (s == TGRAD_ERR_OUT_OF_MEMORY && st->pool.count > 0) {
        tg_pool_drain(&st->pool, be->free);
        s = be->alloc(size, mem);
    }
    pthread_mutex_unlock(&st->lock);
    return s;
}

/* `bytes` as given to tg_device_alloc: the buffer goes back to the pool, or to the backend when
 * the pool is full. */
void tg_device_free(int32_t device, void *mem, size_t bytes) {
    const tg_backend *be = backend_of(device);
    if (!mem || !be) return;
    device_state *st = &states[device];
    LOCKED(device, if (!tg_pool_keep(&st->pool, mem, tg_pool_size(bytes))) be->free(mem));
}

/* The pool's cached bytes and buffers on `device`, for tests. */
TG_HIDDEN void tg_device_pool_stats(int32_t device, size_t *cached, int32_t *count);
void tg_device_pool_stats(int32_t device, size_t *cached, int32_t *count) {
    *cached = 0, *count = 0;
    if (device <= 0 || device >= NDEVICES) return;
    LOCKED(device, (*cached = states[device].pool.cached, *count = states[device].pool.count));
}

tgrad_status tg_device_upload(int32_t device, void *mem, const void *src, size_t bytes) {
    tgrad_status s;
    LOCKED(device, s = backend_of(device)->copy_in(mem, 0, src, bytes));
    return s;
}

tgrad_status tg_device_download(int32_t device, const void *mem, void *dst, size_t bytes) {
    tgrad_status s;
    LOCKED(device, s = backend_of(device)->copy_out(mem, 0, dst, bytes));
    return s;
}

tgrad_status tg_device_stage_step(const tg_step *st, void *host[4], size_t bytes[4], const char *what) {
    const tg_buffer *bufs[4] = { NULL, NULL, NULL, st->buf };
    for (int32_t i = 0; i < st->ninputs && i < 3; i++) bufs[i] = st->inputs[i].buf;
    tgrad_status s = TGRAD_OK;
    for (int32_t i = 0; i < 4; i++) host[i] = NULL, bytes[i] = 0;
    for (int32_t i = 0; i < 4 && !s; i++) {
        if (!bufs[i]) continue;
        bytes[i] = (size_t)bufs[i]->numel * tg_dtype_size(bufs[i]->dtype);
        if (!(host[i] = tg_malloc(bytes[i] ? bytes[i] : 1)))
            s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s", what);
        else if (bytes[i]) s = tg_device_download(st->device, bufs[i]->dev_mem, host[i], bytes[i]);
    }
    if (s) tg_device_staged_free(host);
    return s;
}

void tg_device_staged_free(void *host[4]) {
    for (int32_t i = 0; i < 4; i++) free(host[i]), host[i] = NULL;
}


/* ---- routes ---- */
static bool has_matrices(const tg_backend *be) { return be && be->has_matrix_route && be->has_matrix_route(); }

/* The route a matmul takes on `device` under `precision` (the policy read once, when the step is
 * planned): the forced one (a forced tc under EXACT is refused when the step runs, by
 * tg_device_execute), or, under BOUNDED, tc where the device has matrices and the shape is
 * eligible, else naive for at most FEW_ROWS rows, else tiled (which takes every shape). Checks
 * record no error here. The scheduler asks once per step; the step runs what it was told. */
const tg_route *tg_device_matmul_route(const tg_view *a, const tg_view *b, int32_t device, int32_t precision) {
    int32_t forced = atomic_load(&forced_route);
    if (forced) return tg_route_find(forced);
    const tg_backend *be = backend_of(device);
    const tg_lang *l = be ? tg_lang_find(be->lang) : NULL;
    tg_gen_matmul p = tg_gen_matmul_of(a, b);
    const tg_route *tc = tg_route_find(TGRAD_ROUTE_TC);
    if (precision == TGRAD_MATMUL_PRECISION_BOUNDED && l && has_matrices(be)) {
        tg_error_saved saved;
        tg_error_save(&saved);
        bool ok = tg_gen_check_matmul(tc, l, &p) == TGRAD_OK;
        tg_error_restore(&saved); /* an ineligible tc is not an error of this call */
        if (ok) return tc;
    }
    /* A few rows (a decoding step's products, x @ W.T of one token): naive, one thread per output,
     * where tiled's 32-row tiles would be mostly empty; 2.5-3.2x faster on an H200 (docs/cuda.md).
     * Both compute the documented order: the same bytes. */
    if (p.m <= FEW_ROWS) return tg_route_find(TGRAD_ROUTE_NAIVE);
    return tg_route_find(TGRAD_ROUTE_TILED);
}

int32_t tg_device_forced_route(void) { return atomic_load(&forced_route); }

TGRAD_API tgrad_status tgrad_set_device_route(int32_t route) {
    if (route != 0 && (!tg_route_find(route) || tg_route_find(route)->kind != TG_ROUTE_MATMUL))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_device_route: %d is not a matmul route (0, naive, tiled, tc)", route);
    atomic_store(&forced_route, route);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_set_matmul_precision(int32_t precision) {
    if (precision != TGRAD_MATMUL_PRECISION_EXACT && precision != TGRAD_MATMUL_PRECISION_BOUNDED)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_matmul_precision: %d is not a precision (0 exact, 1 bounded)",
                       precision);
    atomic_store(&matmul_precision, precision);
    return TGRAD_OK;
}

TGRAD_API int32_t tgrad_matmul_precision(void) { return atomic_load(&matmul_precision); }

/* The error bound of the tc route in the device's language (docs/kernels.md, "Numerics of tc";
 * conformance/oracle.py tc_bound): |out - s| <= 2^-8 |s| + rel P + abs, with s the exact sum and
 * P the sum of |a_k b_k|; MSL: n = K, u = 2^-24; CUDA (aligning, truncating tensor cores): n = 2K,
 * u = 2^-23; rel = (1 + 2^-8) gamma_n, abs = n 2^-126 + 2^-134. */
static void tc_bound_terms(int32_t lang, int64_t k, double *rel, double *abs_term) {
    double n = (double)k, u = 0x1p-24;
    if (lang == TGRAD_LANG_CUDA) n = 2.0 * (double)k, u = 0x1p-23;
    double gamma = n * u < 1.0 ? n * u / (1.0 - n * u) : INFINITY;
    *rel = (1.0 + 0x1p-8) * gamma;
    *abs_term = n * 0x1p-126 + 0x1p-134;
}

void tg_device_matmul_detail(const tg_step *st, char *dst, size_t cap) {
    const tg_route *r = st->dev_route;
    const char *policy = st->precision == TGRAD_MATMUL_PRECISION_BOUNDED ? "bounded" : "exact";
    if (!r || r->id != TGRAD_ROUTE_TC) {
        snprintf(dst, cap, "precision %s: %s, the documented order's bytes", policy, r ? r->name : "unknown");
    } else if (st->precision != TGRAD_MATMUL_PRECISION_BOUNDED) {
        snprintf(dst, cap, "precision exact: tc refused (a bounded route; set_matmul_precision bounded allows it)");
    } else {
        const tg_backend *be = backend_of(st->device);
        double rel, abs_term;
        int64_t k = st->inputs[0].view.shape[st->inputs[0].view.ndim - 1];
        tc_bound_terms(be ? be->lang : TGRAD_LANG_MSL, k, &rel, &abs_term);
        snprintf(dst, cap, "precision bounded: tc, |out - s| <= 2^-8 |s| + %.3g P + %.3g (K = %lld; docs/kernels.md)",
                 rel, abs_term, (long long)k);
    }
}

/* ---- execution ---- */
/* Compile (or find in the cache) and launch. Caller holds the device's lock. */
static tgrad_status run_text(int32_t device, const tg_text *t, const struct tgrad_launch *launch, void *const *buffers) {
    const tg_backend *be = backend_of(device);
    device_state *st = &states[device];
    cached_program *hit = NULL, *victim = &st->cache[0];
    for (int32_t i = 0; i < CACHE && !hit; i++) {
        cached_program *c = &st->cache[i];
        if (c->program && c->hash == launch->source_hash) hit = c;
        else if (victim->program && (!c->program || c->last_use < victim->last_use)) victim = c; /* empty, or older */
    }
    if (!hit) {
        void *program = NULL;
        tgrad_status s = be->compile(t->data, t->len, launch->kernel_name, &program);
        if (s) return s;
        if (victim->program) be->release_program(victim->program);
        *victim = (cached_program){ launch->source_hash, program, 0 };
        hit = victim;
    }
    hit->last_use = ++st->uses;
    if (!launch->grid[0] || !launch->grid[1] || !launch->grid[2]) return TGRAD_OK; /* nothing to run */
    return be->launch(hit->program, launch, buffers, launch->buffer_count);
}

/* A table op's 65,536 results (a derivative op's table of f'(x), TG_EW_GRAD_ENTRY ushorts per x:
 * elementwise_grad.h) in device memory: uploaded on first use, kept for the process (at most one
 * per op and device; tables are read-only). Caller holds the device's lock. */
static tgrad_status device_table(int32_t device, tgrad_op op, void **mem) {
    device_state *st = &states[device];
    if (op <= 0 || op >= TGRAD_OP_END_) return tg_fail(TGRAD_ERR_INTERNAL, "table of op %d", (int)op);
    if (st->tables[op]) {
        *mem = st->tables[op];
        return TGRAD_OK;
    }
    const uint16_t *table = tg_ew_device_table(op);
    if (!table) return tg_fail(TGRAD_ERR_INTERNAL, "op %s has no table", tgrad_op_name(op));
    const tg_backend *be = backend_of(device);
    const size_t bytes = (size_t)tg_ew_device_table_len(op) * sizeof *table;
    if (tg_fault()) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate the %s table on %s", tgrad_op_name(op), device_names[device]);
    void *m = NULL;
    tgrad_status s = be->alloc(bytes, &m);
    if (!s) s = be->copy_in(m, 0, table, bytes);
    if (s) {
        be->free(m);
        return s;
    }
    *mem = st->tables[op] = m;
    return TGRAD_OK;
}

/* A matmul with K = 0 and M, N > 0 is +0 everywhere (docs/numerics.md), and its empty operands
 * have no device memory: Metal refuses to bind a missing buffer (metal.m), so without fused ops
 * no kernel runs here on any backend. The zeros go in through the backend's copy_in, after the
 * same route check a kernel would pass (a refusal stays a refusal). With fused ops the kernel
 * runs (the epilogue is applied to the zeros), its empty operands bound to the output's memory,
 * which it never reads through them (tg_device_execute). */
static bool is_empty_sum(const tg_step *st) {
    const tg_view *a = &st->inputs[0].view;
    return st->op == TG_OP_MATMUL && a->shape[a->ndim - 1] == 0 && st->buf->numel > 0 && st->nfused == 0;
}

static tgrad_status write_empty_sum(const tg_step *st, const tg_lang *l) {
    tg_gen_matmul p = tg_gen_matmul_of(&st->inputs[0].view, &st->inputs[1].view);
    p.order = st->base->params.matmul_order;
    p.out_f32 = st->buf->dtype == TGRAD_DTYPE_F32;
    tgrad_status s = tg_gen_check_matmul(st->dev_route, l, &p);
    if (s) return s;
    size_t bytes = (size_t)st->buf->numel * (size_t)tg_dtype_size(st->buf->dtype); /* +0: all zero bits */
    void *zeros = tg_calloc(bytes, 1);
    if (!zeros) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot stage %zu bytes of zeros", bytes);
    s = tg_device_upload(st->device, st->buf->dev_mem, zeros, bytes);
    free(zeros);
    return s;
}

/* Run a step the scheduler decided (route included, fused ops too) into its allocated buffer:
 * the kernel rendered from the step (step_kernel.c), its buffers bound as the renderer names
 * them. Caller holds step->buf->lock. */
tgrad_status tg_device_execute(const tg_step *step) {
    int32_t device = step->device;
    const tg_lang *l = tg_lang_find(backend_of(device)->lang);
    const tg_route *route = step->dev_route ? step->dev_route : tg_route_find(TGRAD_ROUTE_COPY);
    if (route->id == TGRAD_ROUTE_TC && step->precision != TGRAD_MATMUL_PRECISION_BOUNDED) /* a forced tc */
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "%s: route tc is bounded (docs/kernels.md) and the matmul precision is exact: "
                       "set_matmul_precision(\"bounded\") (TGRAD_MATMUL_PRECISION_BOUNDED) allows it",
                       device_names[device]);
    if (is_empty_sum(step)) return write_empty_sum(step, l);
    const tg_kind *kind = tg_kind_of(step->op);
    tg_step_kernel k;
    uint32_t *host_words = NULL;
    int64_t nhost = 0;
    tgrad_status s = kind->gpu_check ? kind->gpu_check(step) : TGRAD_OK; /* before anything is written */
    if (!s && kind->gpu_host_words) s = kind->gpu_host_words(step, &host_words, &nhost); /* from the inputs, as early */
    if (s) return s;
    s = tg_step_kernel_render(step, route, l, &k);
    if (!s && route == tg_route_find(TGRAD_ROUTE_TC) && !has_matrices(backend_of(device))) {
        tg_step_kernel_free(&k); /* the language has tc, this device lacks it (a CUDA GPU below sm_80) */
        free(host_words);
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "%s: route tc needs matrix instructions that %s lacks",
                       device_names[device], backend_of(device)->device_name());
    }
    const bool binds = !s && k.host_at >= 0;
    if (!s && (binds != (kind->gpu_host_words != NULL) || (binds && k.nhost != nhost))) { /* they disagree */
        s = tg_fail(TGRAD_ERR_INTERNAL, "%s: the kernel binds %lld host words, the kind made %lld", kind->name,
                    (long long)(binds ? k.nhost : 0), (long long)nhost);
        tg_step_kernel_free(&k);
    }
    if (s || step->buf->numel == 0) {
        if (!s) tg_step_kernel_free(&k);
        free(host_words);
        return s;
    }
    void *buffers[TGRAD_LAUNCH_MAX_BUFFERS] = { NULL }, *words = NULL, *flags_mem = NULL, *host_mem = NULL;
    uint32_t *flags = NULL;
    const size_t flag_bytes = sizeof *flags * (size_t)(k.nflags > 0 ? k.nflags : 1);
    if (!s && k.flags_at >= 0 && !(flags = tg_fault() ? NULL : malloc(flag_bytes)))
        s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a launch's %lld row flags", (long long)k.nflags);
    const tg_backend *be = backend_of(device);
    pthread_mutex_lock(&states[device].lock);
    for (uint32_t i = 0; i < k.launch.buffer_count && !s; i++) {
        if ((int32_t)i == k.flags_at) { /* the rows' flags, every one written by the kernel */
            s = tg_fault() ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a launch's row flags on %s", device_names[device])
                           : be->alloc(flag_bytes, &flags_mem);
            buffers[i] = flags_mem;
        } else if ((int32_t)i == k.words_at) { /* this launch's words (step_kernel.h) */
            const size_t bytes = sizeof k.words[0] * (size_t)k.nwords;
            s = tg_fault() ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a launch's words on %s", device_names[device])
                           : be->alloc(bytes, &words);
            if (!s) s = be->copy_in(words, 0, k.words, bytes);
            buffers[i] = words;
        } else if ((int32_t)i == k.host_at) { /* the host's words for this launch (kinds.h, gpu_host_words) */
            const size_t bytes = sizeof *host_words * (size_t)(k.nhost > 0 ? k.nhost : 1);
            s = tg_fault() ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a launch's host words on %s", device_names[device])
                           : be->alloc(bytes, &host_mem);
            if (!s) s = be->copy_in(host_mem, 0, host_words, sizeof *host_words * (size_t)k.nhost);
            buffers[i] = host_mem;
        } else if (!k.bufs[i]) s = device_table(device, k.table_op[i], &buffers[i]);
        else if (!(buffers[i] = k.bufs[i]->dev_mem)) buffers[i] = step->buf->dev_mem; /* empty: never read */
    }
    if (!s) s = run_text(device, &k.text, &k.launch, buffers);
    if (!s && flags_mem) s = be->copy_out(flags_mem, 0, flags, flag_bytes);
    if (words) be->free(words); /* the launch has finished (run_text synchronizes) */
    if (host_mem) be->free(host_mem);
    if (flags_mem) be->free(flags_mem);
    pthread_mutex_unlock(&states[device].lock);
    int64_t flagged = 0;
    for (int64_t r = 0; !s && flags && r < k.nflags; r++) flagged += flags[r] != 0;
    if (flagged && kind->gpu_finish) /* without the lock: it moves data */
        s = kind->gpu_finish(step, flags, k.nflags, flagged);
    free(flags);
    free(host_words);
    tg_step_kernel_free(&k);
    return s;
}

/* The kernel language of device's backend (0: none built). */
int32_t tg_device_lang(int32_t device) {
    const tg_backend *be = device > 0 && device < NDEVICES ? backend_of(device) : NULL;
    return be ? be->lang : 0;
}

/* ---- public ---- */
TGRAD_API tgrad_status tgrad_device_by_name(const char *name, int32_t *device) {
    if (!name || !device) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "device_by_name: NULL argument");
    for (int32_t i = 0; i < NDEVICES; i++)
        if (strcmp(name, device_names[i]) == 0) {
            *device = i;
            return TGRAD_OK;
        }
    return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "device_by_name: unknown device '%s' (cpu, metal, opencl, cuda)", name);
}

/* tgrad_backend() reports devices 1.. through these. */
TG_HIDDEN void tg_device_describe(int32_t device, int32_t *built, int32_t *available, const char **text);
void tg_device_describe(int32_t device, int32_t *built, int32_t *available, const char **text) {
    *built = backend_of(device) != NULL;
    tg_error_saved saved;
    tg_error_save(&saved);
    *available = tg_device_ready(device) == TGRAD_OK;
    tg_error_restore(&saved); /* listing an unavailable device is not an error of this call */
    *text = *available ? backend_of(device)->device_name() : states[device].reason;
}
