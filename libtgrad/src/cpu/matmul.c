/* The portable GEMM frame (BLIS-style): cache blocking, packing through views, threading. No ISA
 * code here: the micro-kernel comes from the selected variant (ukernel.h).
 *
 * Work split: the output is cut into blocks of mc x nc; each block is one pool task and owns an
 * fp32 accumulator tile that is carried across all K panels (so K blocking never changes the
 * order of additions), then rounded to bf16 once. Results do not depend on the split, the thread
 * count or which worker ran which block. */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "ukernel.h"

enum { KC = 256, MC_MAX = 192, NC_MAX = 1024 }; /* KC even: only the last panel has an odd tail */

/* ---- variant selection ---- */
static const tg_ukernel *const variants[] = {
#if defined(TGRAD_HAVE_AVX512BF16)
    &tg_ukernel_avx512bf16,
#endif
    &tg_ukernel_portable,
};
enum { NVARIANTS = (int)(sizeof variants / sizeof variants[0]) };

static _Atomic(const tg_ukernel *) selected;

static const tg_ukernel *find_variant(const char *name) {
    for (int i = 0; i < NVARIANTS; i++)
        if (strcmp(variants[i]->name, name) == 0) return variants[i];
    return NULL;
}

static const tg_ukernel *best_variant(void) {
    for (int i = 0; i < NVARIANTS; i++)
        if (variants[i]->available()) return variants[i];
    return &tg_ukernel_portable;
}

static const tg_ukernel *current(void) {
    const tg_ukernel *k = atomic_load(&selected);
    if (k) return k;
    k = best_variant();
    const char *env = getenv("TGRAD_CPU_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        const tg_ukernel *want = find_variant(env);
        if (want && want->available()) k = want; /* an unusable request falls back to the best */
    }
    const tg_ukernel *expected = NULL;
    atomic_compare_exchange_strong(&selected, &expected, k);
    return atomic_load(&selected);
}

TGRAD_API const char *tgrad_cpu_isa(void) { return current()->name; }

TGRAD_API tgrad_status tgrad_set_cpu_isa(const char *name) {
    if (!name) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_cpu_isa: name is NULL");
    if (strcmp(name, "auto") == 0) {
        atomic_store(&selected, best_variant());
        return TGRAD_OK;
    }
    const tg_ukernel *k = find_variant(name);
    if (!k) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_cpu_isa: unknown variant '%s'", name);
    if (!k->available())
        return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "set_cpu_isa: this CPU cannot run '%s'", name);
    atomic_store(&selected, k);
    return TGRAD_OK;
}

TGRAD_API const char *tgrad_cpu_isa_name(int32_t index, int32_t *available) {
    if (index < 0 || index >= NVARIANTS) return NULL;
    if (available) *available = variants[index]->available();
    return variants[index]->name;
}

/* ---- packing ---- */
static inline uint16_t daz(uint16_t h) { return (h & 0x7f80u) ? h : (uint16_t)(h & 0x8000u); }

typedef struct {
    const uint16_t *base; /* buffer start + view offset */
    int64_t s0, s1;       /* strides of the two axes, elements */
} operand;

/* A rows [m0, m0+mb) x k [k0, k0+kc) -> panels of MR rows: word (p, r) = pair p of row r. */
static void pack_a(const operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2;
    for (int64_t i0 = 0; i0 < mb; i0 += mr) {
        for (int64_t p = 0; p < kp; p++) {
            int64_t k = k0 + 2 * p;
            bool has_odd = 2 * p + 1 < kc;
            for (int32_t r = 0; r < mr; r++) {
                uint32_t w = 0;
                if (i0 + r < mb) {
                    const uint16_t *row = A->base + (m0 + i0 + r) * A->s0;
                    uint32_t lo = daz(row[k * A->s1]);
                    uint32_t hi = has_odd ? daz(row[(k + 1) * A->s1]) : 0;
                    w = lo | hi << 16;
                }
                *dst++ = w;
            }
        }
    }
}

/* B k [k0, k0+kc) x cols [n0, n0+nb) -> panels of NR columns: word (p, j) = pair p of column j. */
static void pack_b(const operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, int32_t nr, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += nr) {
        int64_t w = nb - j0 < nr ? nb - j0 : nr;
        for (int64_t p = 0; p < kp; p++) {
            int64_t k = k0 + 2 * p;
            const uint16_t *even = B->base + k * B->s0 + (n0 + j0) * B->s1;
            const uint16_t *odd = even + B->s0;
            bool has_odd = 2 * p + 1 < kc;
            int64_t j = 0;
            if (B->s1 == 1 && has_odd)
                for (; j < w; j++) dst[j] = daz(even[j]) | (uint32_t)daz(odd[j]) << 16;
            for (; j < w; j++)
                dst[j] = daz(even[j * B->s1]) | (has_odd ? (uint32_t)daz(odd[j * B->s1]) << 16 : 0u);
            for (; j < nr; j++) dst[j] = 0;
            dst += nr;
        }
    }
}

/* ---- the frame ---- */
typedef struct {
    const tg_ukernel *uk;
    operand A, B;
    int64_t M, N, K, mc, nc, tiles_n;
    uint16_t *out;
    float **acc;      /* per worker: mc x nc_pad fp32 */
    uint32_t **apack, **bpack;
    bool failed;
} job;

static void run_block(int64_t task, int32_t worker, void *arg) {
    job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t m0 = (task / J->tiles_n) * J->mc, n0 = (task % J->tiles_n) * J->nc;
    int64_t mb = J->M - m0 < J->mc ? J->M - m0 : J->mc;
    int64_t nb = J->N - n0 < J->nc ? J->N - n0 : J->nc;
    int64_t nb_pad = (nb + uk->nr - 1) / uk->nr * uk->nr;
    int64_t ldc = nb_pad;
    float *acc = J->acc[worker];
    uint32_t *ap = J->apack[worker], *bp = J->bpack[worker];
    for (int64_t k0 = 0; k0 < J->K; k0 += KC) {
        int64_t kc = J->K - k0 < KC ? J->K - k0 : KC, kp = (kc + 1) / 2;
        pack_b(&J->B, k0, kc, n0, nb, uk->nr, bp);
        pack_a(&J->A, m0, mb, k0, kc, uk->mr, ap);
        for (int64_t j0 = 0; j0 < nb; j0 += uk->nr)
            for (int64_t i0 = 0; i0 < mb; i0 += uk->mr)
                uk->fn(kp, ap + i0 * kp, bp + j0 * kp, acc + i0 * ldc + j0, ldc, k0 > 0);
    }
    for (int64_t i = 0; i < mb; i++) {
        uint16_t *o = J->out + (m0 + i) * J->N + n0;
        const float *a = acc + i * ldc;
        for (int64_t j = 0; j < nb; j++) o[j] = tg_acc_to_bf16(a[j]);
    }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

tgrad_status tg_cpu_matmul(const uint16_t *a, const tg_view *av, const uint16_t *b, const tg_view *bv, uint16_t *out) {
    int64_t M = av->shape[0], K = av->shape[1], N = bv->shape[1];
    if (M == 0 || N == 0) return TGRAD_OK;
    if (K == 0) {
        memset(out, 0, (size_t)(M * N) * 2u);
        return TGRAD_OK;
    }
    const tg_ukernel *uk = current();
    int32_t threads = tg_pool_threads();
    /* Block sizes: at most MC_MAX x NC_MAX, and small enough that every thread has work. */
    int64_t nc = N < NC_MAX ? round_up(N, uk->nr) : NC_MAX;
    int64_t tiles_n = (N + nc - 1) / nc;
    int64_t want_m = (threads * 2 + tiles_n - 1) / tiles_n; /* row blocks wanted */
    int64_t mc = round_up((M + want_m - 1) / want_m, uk->mr);
    if (mc > MC_MAX) mc = MC_MAX;
    int64_t tiles_m = (M + mc - 1) / mc;
    int64_t ntasks = tiles_m * tiles_n;
    int32_t workers = threads < ntasks ? threads : (int32_t)ntasks;

    job J = { .uk = uk, .M = M, .N = N, .K = K, .mc = mc, .nc = nc, .tiles_n = tiles_n, .out = out,
              .A = { a + av->offset, av->strides[0], av->strides[1] },
              .B = { b + bv->offset, bv->strides[0], bv->strides[1] } };
    size_t acc_bytes = sizeof(float) * (size_t)(mc * nc);
    size_t a_bytes = sizeof(uint32_t) * (size_t)(mc * (KC / 2));
    size_t b_bytes = sizeof(uint32_t) * (size_t)(nc * (KC / 2));
    void *slab = calloc((size_t)threads, 3 * sizeof(void *));
    tgrad_status s = TGRAD_OK;
    if (!slab) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate workspace table");
    J.acc = slab;
    J.apack = (uint32_t **)((void **)slab + threads);
    J.bpack = (uint32_t **)((void **)slab + 2 * threads);
    for (int32_t w = 0; w < threads && !s; w++) {
        J.acc[w] = aligned_alloc(64, round_up((int64_t)acc_bytes, 64));
        J.apack[w] = aligned_alloc(64, round_up((int64_t)a_bytes, 64));
        J.bpack[w] = aligned_alloc(64, round_up((int64_t)b_bytes, 64));
        if (!J.acc[w] || !J.apack[w] || !J.bpack[w])
            s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    }
    (void)workers;
    if (!s) tg_pool_run(ntasks, run_block, &J);
    for (int32_t w = 0; w < threads; w++) {
        free(J.acc[w]);
        free(J.apack[w]);
        free(J.bpack[w]);
    }
    free(slab);
    return s;
}

/* ---- bit-preserving view copy ---- */
void tg_cpu_copy_view(const uint16_t *src, const tg_view *v, uint16_t *dst) {
    int64_t idx[TGRAD_MAX_DIMS] = { 0 };
    int32_t nd = v->ndim;
    if (nd == 0) {
        dst[0] = src[v->offset];
        return;
    }
    for (int32_t d = 0; d < nd; d++)
        if (v->shape[d] == 0) return;
    int64_t inner = v->shape[nd - 1], inner_stride = v->strides[nd - 1];
    for (;;) {
        int64_t off = v->offset;
        for (int32_t d = 0; d < nd - 1; d++) off += idx[d] * v->strides[d];
        const uint16_t *s = src + off;
        if (inner_stride == 1) {
            memcpy(dst, s, (size_t)inner * 2u);
        } else {
            for (int64_t i = 0; i < inner; i++) dst[i] = s[i * inner_stride];
        }
        dst += inner;
        int32_t d = nd - 2;
        while (d >= 0 && ++idx[d] == v->shape[d]) idx[d--] = 0;
        if (d < 0) return;
    }
}
